"""What a job's owner wants to hear about, and where (issue 32): the rules a job sets and its channels.

A job carries these as its `alerts` field, written and edited like any other field. A channel is told through
a target Tickwork already knows how to call: a webhook or a Slack-compatible incoming webhook is an `http`
POST (signed with the owner's key, like a run's call), an SNS topic an `sns` publish. So a channel is checked
like a target (the URL's form here, its address at call time; the topic against the owner's grants).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from tickwork.domain.errors import ValidationError

MAX_RULE_SECONDS = 7 * 24 * 3600
MAX_CHANNELS = 5
MIN_WINDOW_SECONDS = 60
MAX_WINDOW_SECONDS = 24 * 3600
DEFAULT_WINDOW_SECONDS = 300


class ChannelKind(StrEnum):
    WEBHOOK = "webhook"  # JSON POST, signed like a target call
    SLACK = "slack"  # a Slack-compatible incoming webhook: {"text": ...}
    SNS = "sns"  # a topic the owner may publish to (grants)
    EMAIL = "email"  # an address, by the stack's notifications topic (subscribed; its owner confirms)


_ADDRESS_KEY = {ChannelKind.SNS: "topic_arn", ChannelKind.EMAIL: "address"}
# No control character (C0 or C1) in the local part: `\s` alone differs between Python (it takes U+0085)
# and the JSON Schema readers of the document (ECMA regexes do not), so the controls are spelled out.
EMAIL_PATTERN = (
    r"^[^@\s\x00-\x1f\x7f-\x9f]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?\.[A-Za-z]{2,63}$"
)
_EMAIL = re.compile(EMAIL_PATTERN)
MAX_EMAIL_CHARS = 254


def address_key(kind: ChannelKind) -> str:
    """The field a channel of this kind names its address with."""
    return _ADDRESS_KEY.get(kind, "url")


@dataclass(frozen=True, slots=True)
class Channel:
    kind: ChannelKind
    address: str  # the webhook's URL, or the topic's ARN

    @property
    def channel_id(self) -> str:
        """How the channel is named in keys, logs and other channels' messages: its kind and a hash of its
        address (a Slack webhook's URL works as its password: it is shown only to its owner, in the job)."""
        digest = hashlib.sha256(self.address.encode()).hexdigest()[:16]
        return f"{self.kind}:{digest}"

    @property
    def label(self) -> str:
        """The channel for a person: its kind and host (or topic name), nothing that grants access."""
        if self.kind is ChannelKind.SNS:
            return f"sns topic {self.address.rsplit(':', 1)[-1]}"
        if self.kind is ChannelKind.EMAIL:
            return f"email to {self.address}"
        return f"{self.kind} to {urlsplit(self.address).hostname or '?'} ({self.channel_id})"

    def target_config(self) -> dict[str, Any]:
        """The target config a message to this channel is sent with (its payload added by the caller)."""
        if self.kind is ChannelKind.SNS:
            return {"topic_arn": self.address}
        return {"url": self.address, "method": "POST", "headers": {"Content-Type": "application/json"}}

    @property
    def target_kind(self) -> str:
        """The target kind a message to it is sent as ("email": the stack's own topic, no target)."""
        return {ChannelKind.SNS: "sns", ChannelKind.EMAIL: "email"}.get(self.kind, "http")


def parse_channel(value: Mapping[str, Any], index: int) -> Channel:
    """A channel from its input form, `{"kind": ..., "url": ...}` or `{"kind": "sns", "topic_arn": ...}`;
    the address is checked by the target validation the same kind of target gets (`validate`)."""
    where = f"alerts.channels[{index}]"
    try:
        kind = ChannelKind(str(value.get("kind")))
    except ValueError:
        kinds = ", ".join(k.value for k in ChannelKind)
        raise ValidationError(f"{where}.kind", f"must be one of {kinds}") from None
    key = address_key(kind)
    address = value.get(key)
    if not isinstance(address, str) or not address:
        raise ValidationError(f"{where}.{key}", f"a {kind} channel needs its {key}")
    extra = set(value) - {"kind", key}
    if extra:
        raise ValidationError(f"{where}.{sorted(extra)[0]}", f"not a field of a {kind} channel")
    if kind is ChannelKind.EMAIL and (len(address) > MAX_EMAIL_CHARS or not _EMAIL.match(address)):
        raise ValidationError(f"{where}.{key}", "must be an e-mail address (name@example.com)")
    return Channel(kind, address)


def channel_to_input(channel: Channel) -> dict[str, str]:
    return {"kind": str(channel.kind), address_key(channel.kind): channel.address}


@dataclass(frozen=True, slots=True)
class AlertRules:
    """A job's rules; each off unless set (failures and dead letters are on: the least an owner needs).
    Nothing is sent unless the job names a channel; the events are recorded either way."""

    on_failure: bool = True
    on_dead_letter: bool = True
    on_skip: bool = False  # a slot recorded skipped or missed
    late_after_seconds: int | None = None  # started later than this after its due time
    deadline_seconds: int | None = None  # not finished this long after its scheduled time
    duration_min_seconds: float | None = None
    duration_max_seconds: float | None = None
    anomaly_factor: float | None = None  # a duration this many times above or below the job's median
    failures_in_a_row: int | None = None
    auto_pause_after: int | None = None  # failures in a row that pause the job
    channels: tuple[Channel, ...] = ()
    # At most one message per rule per job per window: what else happens in it is counted into one digest.
    window_seconds: int = DEFAULT_WINDOW_SECONDS

    def __post_init__(self) -> None:
        for name in (
            "late_after_seconds",
            "deadline_seconds",
            "duration_min_seconds",
            "duration_max_seconds",
        ):
            value = getattr(self, name)
            if value is not None and not 0 < value <= MAX_RULE_SECONDS:
                raise ValidationError(f"alerts.{name}", f"must be above 0 and at most {MAX_RULE_SECONDS}")
        low, high = self.duration_min_seconds, self.duration_max_seconds
        if low is not None and high is not None and low >= high:
            raise ValidationError("alerts.duration_min_seconds", "must be below duration_max_seconds")
        if self.anomaly_factor is not None and not 1.5 <= self.anomaly_factor <= 100:
            raise ValidationError("alerts.anomaly_factor", "must be between 1.5 and 100")
        for name in ("failures_in_a_row", "auto_pause_after"):
            value = getattr(self, name)
            if value is not None and not 1 <= value <= 100:
                raise ValidationError(f"alerts.{name}", "must be between 1 and 100")
        if len(self.channels) > MAX_CHANNELS:
            raise ValidationError("alerts.channels", f"at most {MAX_CHANNELS} channels")
        if len({c.channel_id for c in self.channels}) != len(self.channels):
            raise ValidationError("alerts.channels", "names the same channel twice")
        if not MIN_WINDOW_SECONDS <= self.window_seconds <= MAX_WINDOW_SECONDS:
            raise ValidationError(
                "alerts.window_seconds", f"must be {MIN_WINDOW_SECONDS}-{MAX_WINDOW_SECONDS} seconds"
            )

    @property
    def needs_history(self) -> bool:
        """Whether a run's end needs the job's recent runs (a streak or a baseline) to be judged."""
        counted = (self.failures_in_a_row, self.auto_pause_after, self.anomaly_factor)
        return any(rule is not None for rule in counted)


NO_ALERTS = AlertRules()

_NUMBER_FIELDS = (
    "late_after_seconds",
    "deadline_seconds",
    "duration_min_seconds",
    "duration_max_seconds",
    "anomaly_factor",
    "failures_in_a_row",
    "auto_pause_after",
)
_FLAGS = ("on_failure", "on_dead_letter", "on_skip")


def alerts_to_mapping(rules: AlertRules) -> dict[str, Any]:
    """The rules as the API shows them and the records store them (every field, unset ones as null)."""
    out: dict[str, Any] = {name: getattr(rules, name) for name in (*_FLAGS, *_NUMBER_FIELDS)}
    out["window_seconds"] = rules.window_seconds
    out["channels"] = [channel_to_input(c) for c in rules.channels]
    return out


def alerts_from_mapping(value: Mapping[str, Any]) -> AlertRules:
    """Rules from their mapping (the API's input after its schema check, or a stored record): validated."""
    channels = tuple(parse_channel(c, i) for i, c in enumerate(value.get("channels") or ()))
    numbers: dict[str, Any] = {}
    for name in _NUMBER_FIELDS:
        raw = value.get(name)
        if raw is None:
            continue
        if name in ("failures_in_a_row", "auto_pause_after", "late_after_seconds", "deadline_seconds"):
            numbers[name] = int(raw)
        else:
            numbers[name] = float(raw)
    flags = {name: bool(value[name]) for name in _FLAGS if value.get(name) is not None}
    window = int(value.get("window_seconds") or DEFAULT_WINDOW_SECONDS)
    return AlertRules(**flags, **numbers, channels=channels, window_seconds=window)
