"""Records of the events table (`tickwork.resources.EVENTS`), the same in every engine: a job's events, the
owner's channel windows, messages owed and channel health, and deadline timers. What is owed later carries
`outbox_key` and `send_at` (the sparse `outbox` index)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from tickwork.domain.alert_rules import (
    AlertRules,
    Channel,
    ChannelKind,
    alerts_from_mapping,
    alerts_to_mapping,
)
from tickwork.domain.alerts import EventKind, JobEvent
from tickwork.domain.notify import ChannelHealth, DeadlineTimer, Message, Window
from tickwork.domain.timekeys import epoch_seconds, format_instant, format_instant_ms, parse_instant

OUTBOX_PARTITIONS = 8  # the outbox index's partitions: a pass reads each, so writes spread over them
# How long a window or a message is kept once written (TTL): long past any window or retry.
KEEP = timedelta(days=14)

Item = dict[str, Any]


def outbox_key(scope: str) -> str:
    digest = hashlib.sha256(scope.encode()).digest()
    return f"outbox#{digest[0] % OUTBOX_PARTITIONS}"


def outbox_keys() -> list[str]:
    return [f"outbox#{n}" for n in range(OUTBOX_PARTITIONS)]


def owner_scope(owner: str) -> str:
    return f"owner#{owner}"


def event_key(event: JobEvent) -> str:
    return f"e#{format_instant_ms(event.at)}#{event.kind}#{event.run_id or ''}"


def event_to_item(event: JobEvent, expires_at: int) -> Item:
    return {
        "scope": event.job_id,
        "key": event_key(event),
        "event_owner": event.owner,
        "owner_order": f"{format_instant_ms(event.at)}#{event.job_id}#{event.kind}#{event.run_id or ''}",
        "kind": str(event.kind),
        "at": format_instant_ms(event.at),
        "job_id": event.job_id,
        "owner": event.owner,
        "run_id": event.run_id,
        "detail": event.detail,
        "expires_at": int(expires_at),
    }


def event_from_item(item: Mapping[str, Any]) -> JobEvent:
    return JobEvent(
        job_id=str(item["job_id"]),
        owner=str(item["owner"]),
        kind=EventKind(item["kind"]),
        at=parse_instant(str(item["at"])),
        run_id=item.get("run_id"),
        detail=str(item.get("detail", "")),
    )


def events_page(items: list[Item], order: str, limit: int) -> tuple[list[JobEvent], str | None]:
    """A page of events from the items a listing read (up to `limit` + 1, in its order): the first `limit`,
    and the cursor after them (the last one's `order` attribute) if there was one more."""
    events = [event_from_item(item) for item in items[:limit]]
    cursor = str(items[limit - 1][order]) if len(items) > limit else None
    return events, cursor


def _channel_to_item(channel: Channel) -> Item:
    return {"kind": str(channel.kind), "address": channel.address}


def _channel_from_item(item: Mapping[str, Any]) -> Channel:
    return Channel(ChannelKind(item["kind"]), str(item["address"]))


def window_key(channel: Channel, kind: EventKind, length_seconds: int) -> str:
    return f"w#{channel.channel_id}#{kind}#{length_seconds}"


def window_to_item(window: Window) -> Item:
    scope = owner_scope(window.owner)
    item: Item = {
        "scope": scope,
        "key": window_key(window.channel, window.kind, window.length_seconds),
        "owner": window.owner,
        "channel": _channel_to_item(window.channel),
        "kind": str(window.kind),
        "opened_at": format_instant_ms(window.opened_at),
        "ends_at": format_instant_ms(window.ends_at),
        "length_seconds": window.length_seconds,
        "folded": window.folded,
        "jobs": dict(window.jobs),
        "version": window.version,
        "expires_at": epoch_seconds(window.ends_at + KEEP),
    }
    if window.digest_owed:  # in the outbox until its digest is sent
        item["outbox_key"] = outbox_key(scope)
        item["send_at"] = format_instant_ms(window.ends_at)
    return item


def window_from_item(item: Mapping[str, Any]) -> Window:
    return Window(
        owner=str(item["owner"]),
        channel=_channel_from_item(item["channel"]),
        kind=EventKind(item["kind"]),
        opened_at=parse_instant(str(item["opened_at"])),
        ends_at=parse_instant(str(item["ends_at"])),
        length_seconds=int(item["length_seconds"]),
        folded=int(item.get("folded", 0)),
        jobs={str(k): int(v) for k, v in (item.get("jobs") or {}).items()},
        version=int(item["version"]),
    )


def message_key(message: Message) -> str:
    return f"m#{message.channel.channel_id}#{message.message_id}"


def message_to_item(message: Message) -> Item:
    scope = owner_scope(message.owner)
    return {
        "scope": scope,
        "key": message_key(message),
        "outbox_key": outbox_key(scope),
        "send_at": format_instant_ms(message.send_at or message.at),
        "owner": message.owner,
        "channel": _channel_to_item(message.channel),
        "message_id": message.message_id,
        "kind": str(message.kind),
        "at": format_instant_ms(message.at),
        "payload": dict(message.payload),
        "job_id": message.job_id,
        "attempts": message.attempts,
        "last_error": message.last_error,
        "expires_at": epoch_seconds(message.at + KEEP),
    }


def message_from_item(item: Mapping[str, Any]) -> Message:
    return Message(
        owner=str(item["owner"]),
        channel=_channel_from_item(item["channel"]),
        message_id=str(item["message_id"]),
        kind=EventKind(item["kind"]),
        at=parse_instant(str(item["at"])),
        payload=_plain(item.get("payload") or {}),
        job_id=item.get("job_id"),
        send_at=parse_instant(str(item["send_at"])),
        attempts=int(item.get("attempts", 0)),
        last_error=item.get("last_error"),
    )


def timer_key(timer: DeadlineTimer) -> str:
    return f"t#{format_instant(timer.scheduled_for)}"


def timer_to_item(timer: DeadlineTimer) -> Item:
    return {
        "scope": timer.job_id,
        "key": timer_key(timer),
        "outbox_key": outbox_key(timer.job_id),
        "send_at": format_instant_ms(timer.fire_at),
        "job_id": timer.job_id,
        "owner": timer.owner,
        "scheduled_for": format_instant(timer.scheduled_for),
        "expires_at": epoch_seconds(timer.expires_at),
    }


def timer_from_item(item: Mapping[str, Any]) -> DeadlineTimer:
    fire_at = parse_instant(str(item["send_at"]))
    return DeadlineTimer(
        job_id=str(item["job_id"]),
        owner=str(item["owner"]),
        scheduled_for=parse_instant(str(item["scheduled_for"])),
        fire_at=fire_at,
        expires_at=fire_at,
    )


def health_key(channel: Channel) -> str:
    return f"h#{channel.channel_id}"


def health_to_item(health: ChannelHealth) -> Item:
    return {
        "scope": owner_scope(health.owner),
        "key": health_key(health.channel),
        "owner": health.owner,
        "channel": _channel_to_item(health.channel),
        "healthy": health.healthy,
        "since": format_instant_ms(health.since),
        "detail": health.detail,
    }


def health_from_item(item: Mapping[str, Any]) -> ChannelHealth:
    return ChannelHealth(
        owner=str(item["owner"]),
        channel=_channel_from_item(item["channel"]),
        healthy=bool(item["healthy"]),
        since=parse_instant(str(item["since"])),
        detail=str(item.get("detail", "")),
    )


DEFAULTS_KEY = "defaults"


def defaults_to_item(owner: str, rules: AlertRules) -> Item:
    scope = owner_scope(owner)
    return {"scope": scope, "key": DEFAULTS_KEY, "owner": owner, "alerts": alerts_to_mapping(rules)}


def defaults_from_item(item: Mapping[str, Any]) -> AlertRules:
    return alerts_from_mapping(_plain(item["alerts"]))


OutboxEntry = Message | Window | DeadlineTimer


def outbox_entry(item: Mapping[str, Any]) -> OutboxEntry:
    """What an outbox item is, by its key's prefix."""
    key = str(item["key"])
    if key.startswith("m#"):
        return message_from_item(item)
    if key.startswith("w#"):
        return window_from_item(item)
    return timer_from_item(item)


def _plain(value: Any) -> Any:
    """A stored mapping back as plain JSON values (DynamoDB hands numbers back as Decimal)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "as_integer_ratio") and not isinstance(value, (int, float, bool)):
        return int(value) if value == int(value) else float(value)
    return value
