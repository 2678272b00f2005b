"""Records of the events table (`tickwork.resources.EVENTS`), the same in every engine: a job's events, the
owner's channel windows, messages owed and channel health, and deadline timers. What is owed later carries
`outbox_key` and `send_at` (the sparse `outbox` index)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from tickwork.adapters.conditions import REQUEST_FINGERPRINT
from tickwork.adapters.records import job_from_item
from tickwork.domain.alert_rules import (
    AlertRules,
    Channel,
    ChannelKind,
    alerts_from_mapping,
    alerts_to_mapping,
)
from tickwork.domain.alerts import EventKind, JobEvent
from tickwork.domain.models import Job
from tickwork.domain.notify import ChannelHealth, DeadlineTimer, Message, Window
from tickwork.domain.revisions import Action, Authored, Revision
from tickwork.domain.secrets import REDACTED, is_credential_header
from tickwork.domain.timekeys import epoch_seconds, format_instant, format_instant_ms, parse_instant

OUTBOX_PARTITIONS = 8  # the outbox index's partitions: a pass reads each, so writes spread over them
# How long a window or a message is kept once written (TTL): long past any window or retry.
KEEP = timedelta(days=14)

Item = dict[str, Any]
T = TypeVar("T")


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


def page_of(
    items: list[Item], order: str, limit: int, decode: Callable[[Mapping[str, Any]], T]
) -> tuple[list[T], str | None]:
    """A page from the items a listing read (up to `limit` + 1, in its order), each decoded: the first
    `limit`, and the cursor after them (the last one's `order` attribute) if there was one more. Events,
    revisions and audit entries alike."""
    cursor = str(items[limit - 1][order]) if len(items) > limit else None
    return [decode(item) for item in items[:limit]], cursor


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


# --- revisions and the audit log (domain/revisions.py) ---------------------------------------------------

# What the ticker, the executors and the store move on a job item: not part of what a person wrote.
_NOT_DEFINITION = frozenset(
    {"job_id", "owner", "shard", "version", "next_fire_at", "due_key", "resumed_at", "due_floor",
     "run_requests", "created_at", "updated_at", "paused_at"}
)  # fmt: skip


def job_definition(job_item: Mapping[str, Any]) -> dict[str, Any]:
    """The job as a person wrote it, from its stored item: what a revision keeps and a diff compares. A
    credential-like header a job written before secret references still holds in plain text is kept as
    REDACTED: no revision copies a secret value (secret headers are references already)."""
    definition = {key: value for key, value in job_item.items() if key not in _NOT_DEFINITION}
    if "target" in definition:
        definition["target"] = _without_plain_credentials(definition["target"])
    return definition


def _without_plain_credentials(target: Any) -> Any:
    if not isinstance(target, Mapping) or not isinstance(target.get("config"), Mapping):
        return target
    config = target["config"]
    headers = config.get("headers")
    if not isinstance(headers, Mapping) or not any(is_credential_header(str(n)) for n in headers):
        return target
    hidden = {name: REDACTED if is_credential_header(str(name)) else value for name, value in headers.items()}
    return {**target, "config": {**config, "headers": hidden}}


def revision_key(revision: int) -> str:
    return f"r#{revision:010d}"


def audit_key(revision: Revision) -> str:
    return f"a#{format_instant_ms(revision.at)}#{revision.job_id}#{revision.revision:010d}"


def revision_to_items(revision: Revision) -> tuple[Item, Item]:
    """The revision in its job's history (`scope` the job id, with the definition; no TTL), and its entry
    in the owner's audit log (`scope` the owner's, without it; kept AUDIT_RETENTION)."""
    entry: Item = {
        "job_id": revision.job_id,
        "revision": revision.revision,
        "owner": revision.owner,
        "actor": revision.actor,
        "at": format_instant_ms(revision.at),
        "action": str(revision.action),
        "note": revision.note,
        "changed": list(revision.changed),
        "expires_at": epoch_seconds(revision.expires_at),
    }
    entry = {key: value for key, value in entry.items() if value is not None}
    # A job's revisions are kept as long as the job's history is (no TTL): the revision a job is at, or
    # that planned a run still kept, stays readable however long ago it was written.
    kept = {key: value for key, value in entry.items() if key != "expires_at"}
    kept.update(
        scope=revision.job_id, key=revision_key(revision.revision), definition=dict(revision.definition)
    )
    return kept, {**entry, "scope": owner_scope(revision.owner), "key": audit_key(revision)}


def revision_from_item(item: Mapping[str, Any]) -> Revision:
    return Revision(
        job_id=str(item["job_id"]),
        revision=int(item["revision"]),
        owner=str(item["owner"]),
        actor=str(item["actor"]),
        at=parse_instant(str(item["at"])),
        action=Action(item["action"]),
        note=None if item.get("note") is None else str(item["note"]),
        definition=dict(item.get("definition") or {}),
        changed=tuple(str(field) for field in item.get("changed") or ()),
    )


def written_revision(
    authored: Authored, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> tuple[Item, Item]:
    """The items of a job write's revision, from the job's stored item before the write and the one it
    writes (None: no job, a create's before or a delete's after): numbered by the version written (a
    delete: the one after the last)."""
    job = after if after is not None else before
    if job is None:
        raise ValueError("a revision of no job")
    number = int(job["version"]) + (1 if after is None else 0)
    revision = authored.revision(
        str(job["job_id"]),
        str(job["owner"]),
        number,
        job_definition(before) if before is not None else {},
        job_definition(after) if after is not None else {},
    )
    return revision_to_items(revision)


def without_fingerprint(job_item: Mapping[str, Any]) -> dict[str, Any]:
    """A created job's item without the idempotent create's fingerprint (not part of the job)."""
    return {key: value for key, value in job_item.items() if key != REQUEST_FINGERPRINT}


REVISIONS_FROM, REVISIONS_TO = "r#", "r#~"  # a job scope's revisions: keys r#<number>
AUDIT_FROM, AUDIT_TO = "a#", "a#~"  # an owner scope's audit entries: keys a#<at>#<job>#<number>


def job_at_revision(revision: Revision) -> Job:
    """The job as a revision kept it (its definition; what the ticker moves is not kept: no next fire)."""
    if not revision.definition:
        raise ValueError(f"revision {revision.revision} of job {revision.job_id} keeps no job (a delete)")
    at = format_instant_ms(revision.at)
    return job_from_item(
        {
            **revision.definition,
            "job_id": revision.job_id,
            "owner": revision.owner,
            "shard": 0,
            "version": revision.revision,
            "created_at": at,
            "updated_at": at,
        }
    )
