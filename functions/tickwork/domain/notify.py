"""How an event becomes messages (issue 32): one per channel, a storm folded into a digest, retried, then
the channel marked unhealthy. Pure: the watcher (services/watching.py) reads and writes what this decides.

A window is per owner, channel, kind of event and window length: the first event of a kind a channel gets
opens a window of the job's `window_seconds` and is sent at once; the events of that kind that follow
inside it, from any of the owner's jobs with that window length, are counted into the window, and one
digest with the count (and which jobs) is sent when it ends: at most one message per rule per job per
window, as the issue asks, and across the owner's jobs too. So 1,000 jobs failing at once are two messages
per channel, not 1,000, and nothing is dropped without being counted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from tickwork.domain.alert_rules import Channel, ChannelKind
from tickwork.domain.alerts import EventKind, JobEvent
from tickwork.domain.models import Target
from tickwork.domain.timekeys import format_instant, format_instant_ms

MAX_SEND_ATTEMPTS = 6  # then the channel is recorded unhealthy and the message dropped (the event stays)
RETRY_BASE = timedelta(seconds=30)
RETRY_CAP = timedelta(minutes=15)
DIGEST_JOBS = 50  # jobs a digest names with their count; the rest are counted as "others"
OTHERS = "*others*"


@dataclass(frozen=True, slots=True)
class Window:
    """What a channel has been sent of one kind lately: the window's end, and what was folded into it."""

    owner: str
    channel: Channel
    kind: EventKind
    opened_at: datetime
    ends_at: datetime
    length_seconds: int  # part of its key: jobs with another window length have windows of their own
    folded: int = 0
    jobs: Mapping[str, int] = field(default_factory=dict)
    version: int = 1  # every write moves it; a write is conditional on the version it read

    @property
    def digest_owed(self) -> bool:
        return self.folded > 0


@dataclass(frozen=True, slots=True)
class Message:
    """One message owed to one channel: an event's, or a window's digest."""

    owner: str
    channel: Channel
    message_id: str  # the event's dedupe key (or the digest's): the same on every attempt
    kind: EventKind
    at: datetime
    payload: Mapping[str, Any]
    job_id: str | None = None
    send_at: datetime | None = None  # None: at once
    attempts: int = 0
    last_error: str | None = None


@dataclass(frozen=True, slots=True)
class DeadlineTimer:
    """A run whose job has a deadline: looked at once, when the deadline passes (no scan of jobs)."""

    job_id: str
    owner: str
    scheduled_for: datetime
    fire_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ChannelHealth:
    owner: str
    channel: Channel
    healthy: bool
    since: datetime
    detail: str = ""


def event_payload(event: JobEvent) -> dict[str, Any]:
    return {
        "type": "tickwork.event",
        "id": event.dedupe_key,
        "kind": str(event.kind),
        "job_id": event.job_id,
        "run_id": event.run_id,
        "at": format_instant_ms(event.at),
        "detail": event.detail,
    }


def admit(
    event: JobEvent, channel: Channel, window: Window | None, length: timedelta
) -> tuple[Window, Message | None]:
    """The channel's window after this event, and the message to send now (None: folded into the digest)."""
    if window is None or window.ends_at <= event.at:
        opened = Window(
            event.owner,
            channel,
            event.kind,
            opened_at=event.at,
            ends_at=event.at + length,
            length_seconds=int(length.total_seconds()),
            version=1 if window is None else window.version + 1,
        )
        if window is not None and window.digest_owed:
            # A digest still owed from the last window stays owed (the outbox sends it at its end).
            opened = replace(opened, folded=window.folded, jobs=window.jobs, opened_at=window.opened_at)
        message = Message(
            event.owner, channel, event.dedupe_key, event.kind, event.at, event_payload(event), event.job_id
        )
        return opened, message
    jobs = dict(window.jobs)
    key = event.job_id if event.job_id in jobs or len(jobs) < DIGEST_JOBS else OTHERS
    jobs[key] = jobs.get(key, 0) + 1
    return replace(window, folded=window.folded + 1, jobs=jobs, version=window.version + 1), None


def digest_of(window: Window) -> tuple[Message, Window]:
    """The digest a window owes, and the window with nothing owed any more."""
    payload = {
        "type": "tickwork.digest",
        "id": digest_id(window),
        "kind": str(window.kind),
        "count": window.folded,
        "from": format_instant_ms(window.opened_at),
        "to": format_instant_ms(window.ends_at),
        "jobs": dict(window.jobs),
    }
    message = Message(
        window.owner,
        window.channel,
        digest_id(window),
        window.kind,
        window.ends_at,
        payload,
        send_at=window.ends_at,
    )
    return message, replace(window, folded=0, jobs={}, version=window.version + 1)


def digest_id(window: Window) -> str:
    return f"digest|{window.channel.channel_id}|{window.kind}|{format_instant(window.ends_at)}"


def after_failure(message: Message, error: str, now: datetime) -> Message | None:
    """The message to try again later, or None once its attempts are spent (the channel is unhealthy)."""
    attempts = message.attempts + 1
    if attempts >= MAX_SEND_ATTEMPTS:
        return None
    delay = min(RETRY_CAP, RETRY_BASE * (2 ** (attempts - 1)))
    return replace(message, attempts=attempts, send_at=now + delay, last_error=error[:500])


def text_of(message: Message) -> str:
    """One line a person reads (Slack, an e-mail's subject line)."""
    payload = message.payload
    if payload.get("type") == "tickwork.digest":
        jobs = payload.get("jobs") or {}
        return (
            f"Tickwork: {payload['count']} more {message.kind} event(s) across {len(jobs)} job(s) "
            f"from {payload['from']} to {payload['to']}"
        )
    text = f"Tickwork: {message.kind} of job {payload.get('job_id')}: {payload.get('detail', '')}"
    return " ".join(text.split())  # one line: an SNS subject refuses line breaks


def email_of(message: Message) -> tuple[str, str]:
    """An e-mail's subject and body: the line a person reads, then the event as the webhook gets it."""
    body = json.dumps(dict(message.payload), indent=2, sort_keys=True)
    return text_of(message), f"{text_of(message)}\n\n{body}\n"


def message_target(message: Message) -> Target:
    """The target call that delivers the message: a signed JSON POST, a Slack text, or an SNS publish."""
    channel = message.channel
    body = json.dumps(dict(message.payload), separators=(",", ":"), sort_keys=True)
    config = channel.target_config()
    if channel.kind is ChannelKind.SNS:
        return Target("sns", {**config, "message": body, "subject": text_of(message)[:100]})
    if channel.kind is ChannelKind.SLACK:
        body = json.dumps({"text": text_of(message)})
    return Target("http", {**config, "body": body})
