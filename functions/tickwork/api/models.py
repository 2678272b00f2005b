"""Request and response bodies of the HTTP API (pydantic). Requests forbid unknown fields; each request model
turns itself into the service's input, and each response model is built from a domain object."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictFloat,
    StringConstraints,
)
from pydantic.config import JsonDict, JsonValue

from tickwork.domain.alert_rules import (
    DEFAULT_WINDOW_SECONDS,
    EMAIL_PATTERN,
    MAX_CHANNELS,
    MAX_EMAIL_CHARS,
    MAX_RULE_SECONDS,
    MAX_WINDOW_SECONDS,
    MIN_WINDOW_SECONDS,
    NO_ALERTS,
    AlertRules,
    ChannelKind,
    alerts_from_mapping,
    alerts_to_mapping,
)
from tickwork.domain.alerts import JobEvent
from tickwork.domain.bulk import DEFAULT_GROUP, GROUP_NAME
from tickwork.domain.calendars import CALENDAR_NAME, MAX_CALENDARS_PER_JOB, check_calendar_names
from tickwork.domain.errors import ValidationError
from tickwork.domain.jobs import (
    MAX_CALLBACK_TIMEOUT_SECONDS,
    MAX_HEARTBEAT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    MIN_HEARTBEAT_SECONDS,
    UNSET,
    JobPatch,
    JobSpec,
    PoliciesPatch,
    RetryPatch,
    SchedulePatch,
    check_retry,
)
from tickwork.domain.models import (
    CONCURRENCY_KEY_PATTERN,
    MAX_CONCURRENCY_KEY_CHARS,
    MAX_CONCURRENCY_LIMIT,
    Completion,
    Concurrency,
    Job,
    JobState,
    MissedFirePolicy,
    OverlapPolicy,
    Policies,
    RetryPolicy,
    Run,
    RunState,
    Target,
    Trigger,
)
from tickwork.domain.notify import ChannelHealth
from tickwork.domain.requests import (
    DEFAULT_BACKFILL_RATE,
    MAX_BACKFILL_RATE,
    MIN_BACKFILL_RATE,
    BackfillWindow,
)
from tickwork.domain.revisions import MAX_NOTE_CHARS, FieldChange, Revision
from tickwork.domain.schedule import (
    MAX_JITTER_SECONDS,
    MAX_PREVIEW_COUNT,
    DstGapPolicy,
    DstRepeatPolicy,
    FireTime,
    Schedule,
    describe_schedule,
    expression_pattern,
    parse_schedule,
)
from tickwork.domain.secrets import REDACTED, SECRET_HEADERS, SECRET_REFS, is_credential_header
from tickwork.domain.targets import (
    TARGET_KINDS,
    TRACKED_KINDS,
    config_json_schemas,
    default_completion,
    validate_target,
)
from tickwork.domain.text import forbidden_characters, text_pattern
from tickwork.services.jobs import PausedFires, SchedulePreview
from tickwork.services.requests import BackfillResult

# The timeout limits (MAX_TIMEOUT_SECONDS, MAX_CALLBACK_TIMEOUT_SECONDS) are the domain's: domain/jobs.py.
MAX_RETENTION_DAYS = 365
MAX_TAGS = 50
MAX_ATTEMPTS = 10
MAX_BACKOFF_SECONDS = 900.0  # a retry is a delayed queue message; SQS delays at most 900 s
MIN_YEAR, MAX_YEAR = 1970, 9000  # instants the API accepts, in bodies and queries
_MIN_YEAR, _MAX_YEAR = MIN_YEAR, MAX_YEAR

TAG_KEY_PATTERN = r"^[A-Za-z0-9_.:/+\-@]+$"
TagKey = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=TAG_KEY_PATTERN)]
# The document states the key rule for every key (pydantic's patternProperties alone would leave other keys
# open, and generated clients would send them).
_TAGS_SCHEMA: JsonDict = {
    "additionalProperties": False,
    "propertyNames": {"minLength": 1, "maxLength": 128, "pattern": TAG_KEY_PATTERN},
}


def _single_line_text(value: str) -> str:
    return _checked_text(value, allow_line_breaks=False)


def _multi_line_text(value: str) -> str:
    return _checked_text(value, allow_line_breaks=True)


def _checked_text(value: str, *, allow_line_breaks: bool) -> str:
    bad = forbidden_characters(value, allow_line_breaks=allow_line_breaks)
    if bad:
        raise ValueError(f"control characters are not allowed ({', '.join(bad[:5])})")
    return value


# The text rules go into the document as patterns; the validators keep their clearer message.
_SINGLE_LINE = Field(json_schema_extra={"pattern": text_pattern()})
_MULTI_LINE = Field(json_schema_extra={"pattern": text_pattern(allow_line_breaks=True)})
TagValue = Annotated[str, StringConstraints(max_length=256), AfterValidator(_single_line_text), _SINGLE_LINE]
Name = Annotated[
    str, StringConstraints(min_length=1, max_length=200), AfterValidator(_single_line_text), _SINGLE_LINE
]
Description = Annotated[
    str, StringConstraints(max_length=2000), AfterValidator(_multi_line_text), _MULTI_LINE
]
TargetKind = Literal["http", "sqs", "sns", "eventbridge", "lambda", "stepfunctions", "ecs"]


def _integral(value: Any) -> Any:
    """JSON has one number type: 60.0 is the integer 60 (as JSON Schema says). Booleans and strings stay
    refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


_INTEGRAL = BeforeValidator(_integral)
JsonInt = Annotated[int, Strict(), _INTEGRAL]
CalendarName = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=CALENDAR_NAME.pattern)]
_UNIQUE: JsonDict = {"uniqueItems": True}  # a job names each calendar once
GroupName = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=GROUP_NAME.pattern)]
GROUP_RULE = "The one group the job belongs to (default `default`): what bulk actions and GET /groups select."
CALENDARS_RULE = (
    f"Your exclusion calendars (PUT /calendars/{{name}}), at most {MAX_CALENDARS_PER_JOB}: a scheduled fire "
    "inside one of their dates or windows is recorded `excluded`, not run. Read at each run's claim: a "
    "calendar's edit counts from then. Runs on request (run now, retry, backfill) are never excluded."
)
# An optional bounded one is spelled out, `Annotated[int, Strict(), Field(...), _INTEGRAL] | None`: bounds
# put on `JsonInt | None` reach the document as pydantic's own `ge`/`le` keys, not minimum/maximum.

# Instants in 1970-9000 (the key format's range); RFC 3339 with an offset.
INSTANT_PATTERN = r"^(?:19[7-9][0-9]|[2-8][0-9]{3}|9000)-"
# The shape of an IANA name; whether the zone exists is up to the tz database (an unknown one is a 422).
TIMEZONE_PATTERN = r"^(?:UTC|[A-Z][A-Za-z_-]*(?:/[A-Za-z0-9_+-]+){0,2})$"


def _bounded_utc(value: datetime) -> datetime:
    if not _MIN_YEAR <= value.year <= _MAX_YEAR:
        raise ValueError(f"year must be {_MIN_YEAR}-{_MAX_YEAR}")
    return value.astimezone(UTC)


Instant = Annotated[
    AwareDatetime, AfterValidator(_bounded_utc), Field(json_schema_extra={"pattern": INSTANT_PATTERN})
]


class RequestModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# --- requests --------------------------------------------------------------------------------------------


class ScheduleIn(RequestModel):
    expression: str = Field(
        min_length=1,
        max_length=256,
        description="Cron: 5 fields (minute first), 6 fields (seconds first), or a macro such as @daily. "
        "The pattern is the shape always accepted; names in any case and other second lists are accepted "
        "too (see docs/schedules.md), and an expression that can never fire (`0 0 31 2 *`) is a 422.",
        examples=["*/5 * * * *", "0 30 9 * * MON-FRI", "@daily"],
        json_schema_extra={"pattern": expression_pattern()},
    )
    timezone: str = Field(
        default="UTC",
        min_length=1,
        max_length=64,
        description="IANA time zone name; an unknown name is a 422.",
        examples=["UTC", "Europe/Berlin", "America/New_York"],
        json_schema_extra={"pattern": TIMEZONE_PATTERN},
    )
    start_at: Instant | None = Field(default=None, description="No fire before this instant.")
    end_at: Instant | None = Field(default=None, description="No fire after this instant.")
    jitter_seconds: JsonInt = Field(
        default=0,
        ge=0,
        le=MAX_JITTER_SECONDS,
        description="Deterministic delay in [0, jitter) added to each fire.",
    )
    dst_gap: DstGapPolicy = Field(
        default=DstGapPolicy.SHIFT,
        description="A fixed time skipped by spring-forward: shift (run once) or skip.",
    )
    dst_repeat: DstRepeatPolicy = Field(
        default=DstRepeatPolicy.FIRST, description="A fixed time repeated by fall-back: first, last or both."
    )

    def to_schedule(self) -> Schedule:
        return parse_schedule(
            self.expression,
            self.timezone,
            start_at=self.start_at,
            end_at=self.end_at,
            jitter_seconds=self.jitter_seconds,
            dst_gap=self.dst_gap,
            dst_repeat=self.dst_repeat,
        )


def _target_json_schema(schema: dict[str, Any]) -> None:
    """One branch per kind in the document, each with that kind's config (the domain's rules as JSON
    Schema), so a client sees which keys each kind takes."""
    schema["required"] = ["kind", "config"]
    schema["oneOf"] = [
        {"properties": {"kind": {"const": kind}, "config": configs[kind]}}
        for configs in (config_json_schemas(),)
        for kind in TARGET_KINDS
    ]


# Each kind's config as a named schema of its own in the document: client generators name an inline
# schema by its path, and the kinds' inline configs gave them colliding names (openapi-python-client:
# "duplicate models with name TargetInType0ConfigHeaders"), so a generated client could not build a target.
TARGET_CONFIG_NAMES = {
    "http": "HttpTargetConfig",
    "sqs": "SqsTargetConfig",
    "sns": "SnsTargetConfig",
    "eventbridge": "EventBridgeTargetConfig",
    "lambda": "LambdaTargetConfig",
    "stepfunctions": "StepFunctionsTargetConfig",
    "ecs": "EcsTargetConfig",
}


def named_target_configs(document: dict[str, Any]) -> dict[str, Any]:
    """The document with each target kind's config under `components/schemas/<Kind>TargetConfig`, and
    each kind's branch of `TargetIn` titled `<Kind>Target`, referring to it."""
    schemas = document["components"]["schemas"]
    for branch in schemas["TargetIn"]["oneOf"]:
        kind = branch["properties"]["kind"]["const"]
        name = TARGET_CONFIG_NAMES[kind]
        schemas[name] = branch["properties"]["config"]
        branch["properties"]["config"] = {"$ref": f"#/components/schemas/{name}"}
        branch["title"] = name.removesuffix("Config")
    return document


class TargetIn(RequestModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, json_schema_extra=_target_json_schema)

    kind: TargetKind = Field(description="Which adapter calls the target.")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Kind-specific settings, e.g. http: {url, method, headers, body}. An http URL is checked "
        "for syntax here; whether its address is allowed (SSRF rule) is decided when a run calls it, "
        "after DNS resolution.",
    )

    def to_target(self) -> Target:
        _check_storable(self.config, "target.config", 0)
        return validate_target(self.kind, self.config)


# What DynamoDB stores: maps and lists nested at most 32 deep, numbers of 38 digits within 1e-130..1e126.
MAX_CONFIG_DEPTH = 16
_MAX_INT = 10**38
_MAX_FLOAT = 9.9e125
_MIN_FLOAT = 1e-130


def _check_storable(value: Any, field: str, depth: int) -> None:
    """Refuse JSON the job store cannot hold, naming the field (instead of failing at the write)."""
    if depth > MAX_CONFIG_DEPTH:
        raise ValidationError(field, f"is nested deeper than {MAX_CONFIG_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "":
                # DynamoDB map keys are at least one character (moto fails on reading one back).
                raise ValidationError(field, "has an empty key; object keys must be at least one character")
            _check_storable(item, f"{field}.{key}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_storable(item, f"{field}[{index}]", depth + 1)
    elif isinstance(value, bool) or value is None or isinstance(value, str):
        return
    elif isinstance(value, int):
        if abs(value) >= _MAX_INT:
            raise ValidationError(field, "is a number with more than 38 digits")
    elif isinstance(value, float) and value != 0.0 and not _MIN_FLOAT <= abs(value) <= _MAX_FLOAT:
        raise ValidationError(field, "is a number outside 1e-130..9.9e125 (or not finite)")


class RetryIn(RequestModel):
    max_attempts: JsonInt = Field(default=3, ge=1, le=MAX_ATTEMPTS)
    backoff_base_seconds: StrictFloat = Field(default=10.0, ge=0.1, le=MAX_BACKOFF_SECONDS)
    backoff_max_seconds: StrictFloat = Field(default=600.0, ge=0.1, le=MAX_BACKOFF_SECONDS)

    def to_policy(self) -> RetryPolicy:
        policy = RetryPolicy(self.max_attempts, self.backoff_base_seconds, self.backoff_max_seconds)
        check_retry(policy, "policies.retry")
        return policy


_CONCURRENCY_RULE = (
    "A bound of the job's own: at most `limit` runs at once of this owner's jobs that name the same `key` "
    "with the same `limit` (for example one target host), on top of the instance's bound; a run that finds "
    "it full waits in the queue. Another owner's runs never count against it. null: no bound of its own."
)


class ConcurrencyIn(RequestModel):
    key: str = Field(
        min_length=1,
        max_length=MAX_CONCURRENCY_KEY_CHARS,
        pattern=CONCURRENCY_KEY_PATTERN,
        description="What the runs share, e.g. a host name: letters, digits and . _ : / -",
        examples=["api.example.com", "db/orders"],
    )
    limit: JsonInt = Field(ge=1, le=MAX_CONCURRENCY_LIMIT, description="Runs of the key at once.")

    def to_concurrency(self) -> Concurrency:
        return Concurrency(self.key, self.limit)


class ConcurrencyOut(BaseModel):
    key: str
    limit: int


class PoliciesIn(RequestModel):
    overlap: OverlapPolicy = Field(
        default=OverlapPolicy.ALLOW,
        description="A fire while the previous run still runs: allow, skip or queue.",
    )
    missed_fire: MissedFirePolicy = Field(
        default=MissedFirePolicy.RUN_ALL,
        description="Fires that passed unplanned (outage, pause): run_all, coalesce (latest only) or skip.",
    )
    retry: RetryIn = Field(default_factory=lambda: RetryIn())
    concurrency: ConcurrencyIn | None = Field(default=None, description=_CONCURRENCY_RULE)

    def to_policies(self) -> Policies:
        return Policies(
            overlap=self.overlap,
            missed_fire=self.missed_fire,
            retry=self.retry.to_policy(),
            concurrency=None if self.concurrency is None else self.concurrency.to_concurrency(),
        )


# --- alerts (domain/alert_rules.py) ------------------------------------------------------------------------

# The domain's bounds (AlertRules.__post_init__), stated in the document; the domain checks them again.
MAX_STREAK = 100  # failures_in_a_row, auto_pause_after: 1-100
MIN_ANOMALY_FACTOR, MAX_ANOMALY_FACTOR = 1.5, 100.0
RuleSeconds = Annotated[int, Strict(), Field(ge=1, le=MAX_RULE_SECONDS), _INTEGRAL]
RuleDuration = Annotated[float, Strict(), Field(gt=0, le=MAX_RULE_SECONDS)]
Streak = Annotated[int, Strict(), Field(ge=1, le=MAX_STREAK), _INTEGRAL]
AnomalyFactor = Annotated[float, Strict(), Field(ge=MIN_ANOMALY_FACTOR, le=MAX_ANOMALY_FACTOR)]
_RULE_SECONDS = f"above 0, at most {MAX_RULE_SECONDS:,} s (7 days); null: off."


def _channel_schemas(*, checked: bool) -> list[JsonValue]:
    """A channel's two shapes, as domain.alert_rules.parse_channel reads them. `checked` (a request): the
    address as a target of the same kind states it (an http target's url, an sns target's topic_arn); an
    answer's is a string (as a target's config in an answer is unconstrained)."""
    configs = config_json_schemas()
    text: JsonDict = {"type": "string"}
    url = configs["http"]["properties"]["url"] if checked else text
    topic_arn = configs["sns"]["properties"]["topic_arn"] if checked else text
    return [
        {
            "type": "object",
            "description": "webhook: a JSON POST of the event, signed with the owner's key like a run's "
            'call; slack: a Slack-compatible incoming webhook (`{"text": ...}`). The URL is checked '
            "as an http target's is (its address when a message is sent).",
            "additionalProperties": False,
            "required": ["kind", "url"],
            "properties": {
                "kind": {"type": "string", "enum": [str(ChannelKind.WEBHOOK), str(ChannelKind.SLACK)]},
                "url": url,
            },
        },
        {
            "type": "object",
            "description": "An SNS topic the event is published to (e.g. one with e-mail subscriptions); "
            "with target grants configured, the topic must be granted to the owner (a 403 otherwise).",
            "additionalProperties": False,
            "required": ["kind", "topic_arn"],
            "properties": {
                "kind": {"type": "string", "const": str(ChannelKind.SNS)},
                "topic_arn": topic_arn,
            },
        },
        {
            "type": "object",
            "description": "An e-mail address, through the stack's notifications topic: subscribed when the "
            "job is written, it gets a confirmation mail first and nothing before it is confirmed. Not in "
            "`tickwork local` (a 422 there).",
            "additionalProperties": False,
            "required": ["kind", "address"],
            "properties": {
                "kind": {"type": "string", "const": str(ChannelKind.EMAIL)},
                "address": {"type": "string", "maxLength": MAX_EMAIL_CHARS, "pattern": EMAIL_PATTERN}
                if checked
                else text,
            },
        },
    ]


_CHANNELS_RULE = (
    f'Where the events are sent, at most {MAX_CHANNELS}, none twice: `{{"kind": "webhook" or "slack", '
    f'"url": ...}}`, `{{"kind": "sns", "topic_arn": ...}}` or `{{"kind": "email", "address": ...}}`. No '
    "channel: the events are recorded, nothing is sent."
)


class AlertsIn(RequestModel):
    """What the job's owner is told about, and where. Every rule is off unless set, except failures and dead
    letters; nothing is sent unless a channel is named."""

    on_failure: StrictBool = Field(default=True, description="Tell when a run fails.")
    on_dead_letter: StrictBool = Field(
        default=True, description="Tell when a run fails from the dead-letter queue (its message was lost)."
    )
    on_skip: StrictBool = Field(
        default=False,
        description="Tell when a slot is recorded skipped (overlap policy) or missed (missed-fire policy).",
    )
    late_after_seconds: RuleSeconds | None = Field(
        default=None,
        description=f"Tell when a run starts later than this after its due time: {_RULE_SECONDS}",
    )
    deadline_seconds: RuleSeconds | None = Field(
        default=None,
        description="Tell when a run has not finished this long after its scheduled time (a dead-man's "
        f"switch; a run cancelled or skipped is not late): {_RULE_SECONDS}",
    )
    duration_min_seconds: RuleDuration | None = Field(
        default=None,
        description="Tell when a finished run took less than this; below duration_max_seconds when both are "
        f"set: {_RULE_SECONDS}",
    )
    duration_max_seconds: RuleDuration | None = Field(
        default=None, description=f"Tell when a finished run took more than this: {_RULE_SECONDS}"
    )
    anomaly_factor: AnomalyFactor | None = Field(
        default=None,
        description=f"Tell when a finished run took this many times more (or less) than the median of the "
        f"job's recent succeeded runs (once it has a few): {MIN_ANOMALY_FACTOR}-{MAX_ANOMALY_FACTOR:g}; "
        "null: off.",
    )
    failures_in_a_row: Streak | None = Field(
        default=None,
        description=f"Tell when this many runs in a row have failed (once, at that count): 1-{MAX_STREAK}; "
        "null: off.",
    )
    auto_pause_after: Streak | None = Field(
        default=None,
        description=f"Pause the job when this many runs in a row have failed, and tell: 1-{MAX_STREAK}; the "
        "job's `paused_reason` says why, and the resume that clears it answers `cleared_auto_pause`. "
        "null: off.",
    )
    window_seconds: Annotated[int, Strict(), _INTEGRAL] = Field(
        default=DEFAULT_WINDOW_SECONDS,
        ge=MIN_WINDOW_SECONDS,
        le=MAX_WINDOW_SECONDS,
        description="At most one message per rule per job in this window; what else happens in it is "
        "counted into one digest.",
    )
    channels: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=MAX_CHANNELS,
        description=_CHANNELS_RULE,
        json_schema_extra={"items": {"oneOf": _channel_schemas(checked=True)}, "uniqueItems": True},
    )

    def to_rules(self) -> AlertRules:
        """The domain's rules (its checks, with fields named `alerts.<field>`, `alerts.channels[i].<key>`);
        whether a channel's address may be called is the service's to decide."""
        value = self.model_dump(mode="json")
        _check_storable(value, "alerts", 0)  # a duration DynamoDB cannot hold (below 1e-130)
        return alerts_from_mapping(value)


class AlertsOut(BaseModel):
    """The job's rules as they are: every field, unset rules null."""

    on_failure: bool
    on_dead_letter: bool
    on_skip: bool
    late_after_seconds: int | None
    deadline_seconds: int | None
    duration_min_seconds: float | None
    duration_max_seconds: float | None
    anomaly_factor: float | None
    failures_in_a_row: int | None
    auto_pause_after: int | None
    window_seconds: int
    channels: list[dict[str, str]] = Field(
        description="`{kind, url}` (webhook, slack) or `{kind, topic_arn}` (sns), as written.",
        json_schema_extra={"items": {"oneOf": _channel_schemas(checked=False)}},
    )

    @classmethod
    def of(cls, rules: AlertRules) -> AlertsOut:
        return cls.model_validate(alerts_to_mapping(rules))


_ALERTS_RULE = (
    "What the job's owner is told about, and where: rules for failures, dead letters, skipped or "
    "missed slots, late starts, deadlines, durations, failures in a row (and an auto-pause), and up to "
    f"{MAX_CHANNELS} channels."
)


_TIMEOUT_RULE = (
    f"1-{MAX_TIMEOUT_SECONDS} s for completion response and delivery (an executor holds the call); up to "
    f"{MAX_CALLBACK_TIMEOUT_SECONDS:,} s (24 h) for completion callback and tracked, whose attempt outlives "
    "its call."
)
_COMPLETION_RULE = (
    "How a run ends. `response`: the target's answer is the outcome (http, lambda RequestResponse). "
    "`callback` (http only): the call carries a completion URL and a heartbeat URL "
    "(X-Tickwork-Completion-Url, X-Tickwork-Heartbeat-Url); the target may answer 202 and report the "
    "outcome later, and the run stays running under a lease its heartbeats extend. `tracked` "
    "(stepfunctions, ecs): Tickwork follows the execution or task it started to its end, which is the "
    "outcome (a Step Functions execution's status, the named container's exit code; an Express workflow's "
    "execution cannot be followed and ends delivered). `delivery`: the run ends when the message or "
    "invocation is accepted (sqs, sns, eventbridge, lambda Event, and stepfunctions and ecs when chosen: "
    "the execution or task started): a succeeded run says `delivered`, not that the work succeeded. Each "
    "target allows its default; http also callback, stepfunctions and ecs also delivery."
)
_HEARTBEAT_RULE = (
    f"Callback only: the longest silence ({MIN_HEARTBEAT_SECONDS}-{MAX_HEARTBEAT_SECONDS:,} s, at most "
    "timeout_seconds) before an accepted attempt counts as dead and is retried or failed. null: the attempt "
    "may stay silent until its timeout."
)
Heartbeat = Annotated[int, Strict(), Field(ge=MIN_HEARTBEAT_SECONDS, le=MAX_HEARTBEAT_SECONDS), _INTEGRAL]

_HTTP: dict[str, Any] = {"properties": {"kind": {"const": "http"}}}
_LAMBDA_EVENT: dict[str, Any] = {
    "properties": {"invocation_type": {"const": "Event"}},
    "required": ["invocation_type"],
}
_LAMBDA_SYNC: dict[str, Any] = {"properties": {"kind": {"const": "lambda"}, "config": {"not": _LAMBDA_EVENT}}}
_DELIVERED: dict[str, Any] = {
    "anyOf": [
        {"properties": {"kind": {"enum": [k for k in TARGET_KINDS if k not in ("http", "lambda")]}}},
        {"properties": {"kind": {"const": "lambda"}, "config": _LAMBDA_EVENT}},
    ]
}
_TRACKED: dict[str, Any] = {"properties": {"kind": {"enum": [k for k in TARGET_KINDS if k in TRACKED_KINDS]}}}
# The completions whose timeout may be over 840 s, named or (null) the target's default.
_LONG_COMPLETION: dict[str, Any] = {
    "anyOf": [
        {"properties": {"completion": {"enum": ["callback", "tracked"]}}, "required": ["completion"]},
        {"properties": {"completion": {"type": "null"}, "target": _TRACKED}},
    ]
}


def _when(condition: dict[str, Any], required: str, then: dict[str, Any]) -> dict[str, Any]:
    return {
        "if": {"properties": {required: condition}, "required": [required]},
        "then": then,
    }


def _callback_only(field: str, condition: dict[str, Any]) -> dict[str, Any]:
    return _when(
        condition, field, {"properties": {"completion": {"const": "callback"}}, "required": ["completion"]}
    )


def _completion_json_schema(schema: dict[str, Any]) -> None:
    """The completion rules (domain.jobs.check_completion) as the document states them for a create: which
    targets each completion takes, the heartbeat for callback only, and a timeout over 840 s for callback
    and tracked only (named, or the default of a stepfunctions or ecs target). One rule stays in words (the
    field descriptions): a heartbeat no longer than the timeout."""
    schema["allOf"] = [
        _when({"const": "callback"}, "completion", {"properties": {"target": _HTTP}}),
        _when(
            {"const": "response"}, "completion", {"properties": {"target": {"anyOf": [_HTTP, _LAMBDA_SYNC]}}}
        ),
        _when({"const": "delivery"}, "completion", {"properties": {"target": _DELIVERED}}),
        _when({"const": "tracked"}, "completion", {"properties": {"target": _TRACKED}}),
        _callback_only("heartbeat_seconds", {"type": "integer"}),
        _when({"exclusiveMinimum": MAX_TIMEOUT_SECONDS}, "timeout_seconds", _LONG_COMPLETION),
    ]


class JobCreate(RequestModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, json_schema_extra=_completion_json_schema)

    name: Name
    description: Description = ""
    tags: dict[TagKey, TagValue] = Field(
        default_factory=dict, max_length=MAX_TAGS, json_schema_extra=_TAGS_SCHEMA
    )
    schedule: ScheduleIn
    target: TargetIn
    policies: PoliciesIn = Field(default_factory=lambda: PoliciesIn())
    timeout_seconds: JsonInt = Field(
        default=60, ge=1, le=MAX_CALLBACK_TIMEOUT_SECONDS, description=_TIMEOUT_RULE
    )
    retention_days: JsonInt = Field(
        default=30, ge=1, le=MAX_RETENTION_DAYS, description="How long run history is kept."
    )
    completion: Completion | None = Field(
        default=None,
        description=f"{_COMPLETION_RULE} Default (null): the target's own: response for http and lambda "
        "RequestResponse, tracked for stepfunctions and ecs, delivery for the rest.",
    )
    heartbeat_seconds: Heartbeat | None = Field(default=None, description=_HEARTBEAT_RULE)
    alerts: AlertsIn | None = Field(
        default=None,
        description=f"{_ALERTS_RULE} Omitted (or null): the defaults (failures and dead letters on, no "
        "channel: recorded, not sent).",
    )
    calendars: list[CalendarName] = Field(
        default_factory=list,
        max_length=MAX_CALENDARS_PER_JOB,
        description=CALENDARS_RULE,
        json_schema_extra=_UNIQUE,
    )
    group: GroupName = Field(default=DEFAULT_GROUP, description=GROUP_RULE)

    def to_spec(self) -> JobSpec:
        return JobSpec(
            name=self.name,
            description=self.description,
            tags=dict(self.tags),
            schedule=self.schedule.to_schedule(),
            target=self.target.to_target(),
            policies=self.policies.to_policies(),
            timeout_seconds=self.timeout_seconds,
            retention_days=self.retention_days,
            completion=self.completion,
            heartbeat_seconds=self.heartbeat_seconds,
            alerts=None if self.alerts is None else self.alerts.to_rules(),
            calendars=check_calendar_names(self.calendars),
            group=self.group,
        )

    def fingerprint(self, secret_refs: Mapping[str, str] | None = None) -> str:
        """sha256 of the request with defaults filled in: equal requests give equal fingerprints. The
        completion is left out when it is the target's default and the heartbeat and alerts when they are
        not given, so a
        request that does not name them has the fingerprint it had before they existed (so is a concurrency
        key left out when there is none). Secret header values are replaced by `secret_refs`, the references
        the store gave them (equal for equal values): the fingerprint is stored, the values never are."""
        body = self.model_dump(mode="json")
        if secret_refs:
            config = body["target"]["config"]
            config.pop(SECRET_HEADERS, None)
            headers = config.get("headers")
            if isinstance(headers, dict):
                config["headers"] = {n: v for n, v in headers.items() if n not in secret_refs}
            config[SECRET_REFS] = dict(secret_refs)
        default = default_completion(Target(self.target.kind, self.target.config))
        if self.completion is None or self.completion is default:
            del body["completion"]
        if self.heartbeat_seconds is None:
            del body["heartbeat_seconds"]
        if self.alerts is None:
            del body["alerts"]
        if self.policies.concurrency is None:
            del body["policies"]["concurrency"]
        if not self.calendars:
            del body["calendars"]
        if self.group == DEFAULT_GROUP:
            del body["group"]
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


class SchedulePatchIn(RequestModel):
    expression: str | None = Field(
        default=None, min_length=1, max_length=256, json_schema_extra={"pattern": expression_pattern()}
    )
    timezone: str | None = Field(
        default=None, min_length=1, max_length=64, json_schema_extra={"pattern": TIMEZONE_PATTERN}
    )
    start_at: Instant | None = Field(default=None, description="null removes the bound.")
    end_at: Instant | None = Field(default=None, description="null removes the bound.")
    jitter_seconds: Annotated[int, Strict(), Field(ge=0, le=MAX_JITTER_SECONDS), _INTEGRAL] | None = None
    dst_gap: DstGapPolicy | None = None
    dst_repeat: DstRepeatPolicy | None = None

    def to_patch(self) -> SchedulePatch:
        given = self.model_fields_set
        return SchedulePatch(
            expression=_given(self.expression),
            timezone=_given(self.timezone),
            start_at=self.start_at if "start_at" in given else UNSET,
            end_at=self.end_at if "end_at" in given else UNSET,
            jitter_seconds=_given(self.jitter_seconds),
            dst_gap=_given(self.dst_gap),
            dst_repeat=_given(self.dst_repeat),
        )


class RetryPatchIn(RequestModel):
    max_attempts: Annotated[int, Strict(), Field(ge=1, le=MAX_ATTEMPTS), _INTEGRAL] | None = None
    backoff_base_seconds: StrictFloat | None = Field(default=None, ge=0.1, le=MAX_BACKOFF_SECONDS)
    backoff_max_seconds: StrictFloat | None = Field(default=None, ge=0.1, le=MAX_BACKOFF_SECONDS)


class PoliciesPatchIn(RequestModel):
    overlap: OverlapPolicy | None = None
    missed_fire: MissedFirePolicy | None = None
    retry: RetryPatchIn | None = None
    concurrency: ConcurrencyIn | None = Field(
        default=None,
        description="Replaces the key and limit together. Here null removes them; omitted, they stay.",
    )

    def to_patch(self) -> PoliciesPatch:
        retry, concurrency = self.retry, self.concurrency
        return PoliciesPatch(
            overlap=_given(self.overlap),
            missed_fire=_given(self.missed_fire),
            # null removes the key; omitted, it stays.
            concurrency=(None if concurrency is None else concurrency.to_concurrency())
            if "concurrency" in self.model_fields_set
            else UNSET,
            retry=None
            if retry is None
            else RetryPatch(
                max_attempts=_given(retry.max_attempts),
                backoff_base_seconds=_given(retry.backoff_base_seconds),
                backoff_max_seconds=_given(retry.backoff_max_seconds),
            ),
        )


class JobPatchIn(RequestModel):
    """Fields to change; omitted (or null) fields keep their value, except schedule.start_at / end_at where
    null removes the bound, heartbeat_seconds where null removes the heartbeat, and alerts where null sets
    the default rules back. `target` and `alerts` are replaced whole."""

    name: Name | None = None
    description: Description | None = None
    tags: dict[TagKey, TagValue] | None = Field(
        default=None, max_length=MAX_TAGS, description="Replaces all tags.", json_schema_extra=_TAGS_SCHEMA
    )
    schedule: SchedulePatchIn | None = None
    target: TargetIn | None = None
    policies: PoliciesPatchIn | None = None
    timeout_seconds: (
        Annotated[int, Strict(), Field(ge=1, le=MAX_CALLBACK_TIMEOUT_SECONDS), _INTEGRAL] | None
    ) = Field(default=None, description=_TIMEOUT_RULE)
    retention_days: Annotated[int, Strict(), Field(ge=1, le=MAX_RETENTION_DAYS), _INTEGRAL] | None = None
    completion: Completion | None = Field(
        default=None,
        description=f"{_COMPLETION_RULE} Omitted, it stays as it is unless a new `target` does not allow it: "
        "then it becomes the new target's default (leaving callback also removes the heartbeat).",
    )
    heartbeat_seconds: Heartbeat | None = Field(
        default=None, description=f"{_HEARTBEAT_RULE} Here null removes it; omitted, it stays."
    )
    alerts: AlertsIn | None = Field(
        default=None,
        description=f"{_ALERTS_RULE} Replaces the rules and channels whole (a field not given takes its "
        "default). Here null sets the defaults back (failures and dead letters on, no channel); omitted, "
        "they stay.",
    )
    calendars: list[CalendarName] | None = Field(
        default=None,
        max_length=MAX_CALENDARS_PER_JOB,
        description=f"{CALENDARS_RULE} Replaces the list whole ([] names none); omitted, it stays.",
        json_schema_extra=_UNIQUE,
    )
    group: GroupName | None = Field(default=None, description=f"{GROUP_RULE} Omitted, it stays.")

    def to_patch(self) -> JobPatch:
        alerts = self.alerts
        return JobPatch(
            name=_given(self.name),
            description=_given(self.description),
            tags=_given(self.tags),
            schedule=None if self.schedule is None else self.schedule.to_patch(),
            target=UNSET if self.target is None else self.target.to_target(),
            policies=None if self.policies is None else self.policies.to_patch(),
            timeout_seconds=_given(self.timeout_seconds),
            retention_days=_given(self.retention_days),
            completion=_given(self.completion),
            heartbeat_seconds=self.heartbeat_seconds
            if "heartbeat_seconds" in self.model_fields_set
            else UNSET,
            alerts=(NO_ALERTS if alerts is None else alerts.to_rules())
            if "alerts" in self.model_fields_set
            else UNSET,
            calendars=UNSET if self.calendars is None else check_calendar_names(self.calendars),
            group=_given(self.group),
        )


def _given(value: Any) -> Any:
    return UNSET if value is None else value


class BackfillIn(RequestModel):
    start: Instant = Field(alias="from", description="The window's first instant (inclusive).")
    end: Instant = Field(alias="to", description="The window's last instant (inclusive); not in the future.")
    rerun: bool = Field(
        default=False, description="Also run the slots that already have a run (a second run of each)."
    )
    rate_per_second: float = Field(
        default=DEFAULT_BACKFILL_RATE,
        ge=MIN_BACKFILL_RATE,
        le=MAX_BACKFILL_RATE,
        description="How many of the created runs start per second (they start gradually, oldest first).",
    )

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)

    def to_window(self) -> BackfillWindow:
        return BackfillWindow(self.start, self.end, rerun=self.rerun, rate_per_second=self.rate_per_second)


class SchedulePreviewIn(ScheduleIn):
    count: JsonInt = Field(default=10, ge=1, le=MAX_PREVIEW_COUNT, description="How many fires to list.")
    after: Instant | None = Field(default=None, description="List fires after this instant (default: now).")
    calendars: list[CalendarName] = Field(
        default_factory=list,
        max_length=MAX_CALENDARS_PER_JOB,
        description="Your calendars to mark the fires they exclude with (a name you have none of: 422).",
        json_schema_extra=_UNIQUE,
    )


# --- responses -------------------------------------------------------------------------------------------


class ScheduleOut(BaseModel):
    expression: str
    timezone: str
    start_at: datetime | None
    end_at: datetime | None
    jitter_seconds: int
    dst_gap: DstGapPolicy
    dst_repeat: DstRepeatPolicy
    description: str = Field(description="The expression in words.")

    @classmethod
    def of(cls, schedule: Schedule) -> ScheduleOut:
        return cls(
            expression=schedule.expression,
            timezone=schedule.timezone,
            start_at=schedule.start_at,
            end_at=schedule.end_at,
            jitter_seconds=schedule.jitter_seconds,
            dst_gap=schedule.dst_gap,
            dst_repeat=schedule.dst_repeat,
            description=describe_schedule(schedule),
        )


def _redacted_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Secret header values are never answered: a stored one is a reference (domain/secrets.py), shown as
    REDACTED among the headers where it was given; a credential-like header stored in plain text before
    secrets were references reads REDACTED too."""
    shown = {key: value for key, value in config.items() if key not in (SECRET_HEADERS, SECRET_REFS)}
    headers = shown.get("headers")
    if isinstance(headers, Mapping):
        secret = (*(config.get(SECRET_REFS) or {}), *(config.get(SECRET_HEADERS) or {}))
        shown["headers"] = {
            **{
                name: REDACTED if is_credential_header(str(name)) else value
                for name, value in headers.items()
            },
            **dict.fromkeys(secret, REDACTED),
        }
    return shown


class TargetOut(BaseModel):
    kind: str
    config: dict[str, Any] = Field(
        description=f"Secret header values (`secret_headers`, and credential-like names in `headers`) are "
        f"stored as references and read {REDACTED!r} among the headers."
    )


class RetryOut(BaseModel):
    max_attempts: int
    backoff_base_seconds: float
    backoff_max_seconds: float


class PoliciesOut(BaseModel):
    overlap: OverlapPolicy
    missed_fire: MissedFirePolicy
    retry: RetryOut
    concurrency: ConcurrencyOut | None = Field(
        description="The job's own bound on the runs of its key (null: none)."
    )

    @classmethod
    def of(cls, policies: Policies) -> PoliciesOut:
        retry, concurrency = policies.retry, policies.concurrency
        return cls(
            overlap=policies.overlap,
            missed_fire=policies.missed_fire,
            retry=RetryOut(
                max_attempts=retry.max_attempts,
                backoff_base_seconds=retry.backoff_base_seconds,
                backoff_max_seconds=retry.backoff_max_seconds,
            ),
            concurrency=None
            if concurrency is None
            else ConcurrencyOut(key=concurrency.key, limit=concurrency.limit),
        )


class JobOut(BaseModel):
    id: str
    name: str
    description: str
    tags: dict[str, str]
    state: JobState
    version: int = Field(description="Bumped by every write; the ETag is the quoted version.")
    schedule: ScheduleOut
    target: TargetOut
    policies: PoliciesOut
    timeout_seconds: int
    completion: Completion = Field(
        description="How its runs end: response (the target's answer), callback (the target reports through "
        "its completion URL), tracked (Tickwork follows the execution or task it started to its end) or "
        "delivery (the message or invocation was accepted)."
    )
    heartbeat_seconds: int | None = Field(
        description="Callback only: the longest silence before an accepted attempt counts as dead "
        "(null: none)."
    )
    retention_days: int
    alerts: AlertsOut = Field(description=_ALERTS_RULE)
    next_fire_at: datetime | None = Field(description="Next fire not yet planned (UTC, before jitter).")
    paused_at: datetime | None
    paused_reason: str | None = Field(
        description="Why Tickwork paused the job itself (alerts.auto_pause_after: failures in a row); null "
        "when it is not paused or its owner paused it."
    )
    resumed_at: datetime | None
    calendars: list[str] = Field(description=CALENDARS_RULE)
    group: str = Field(description=GROUP_RULE)
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, job: Job) -> JobOut:
        return cls(**job_fields(job))


def job_fields(job: Job) -> dict[str, Any]:
    return {
        "id": job.job_id,
        "name": job.name,
        "description": job.description,
        "tags": dict(job.tags),
        "state": job.state,
        "version": job.version,
        "schedule": ScheduleOut.of(job.schedule),
        "target": TargetOut(kind=job.target.kind, config=_redacted_config(job.target.config)),
        "policies": PoliciesOut.of(job.policies),
        "timeout_seconds": job.timeout_seconds,
        "completion": job.completion,
        "heartbeat_seconds": job.heartbeat_seconds,
        "retention_days": job.retention_days,
        "alerts": AlertsOut.of(job.alerts),
        "next_fire_at": job.next_fire_at,
        "paused_at": job.paused_at,
        "paused_reason": job.paused_reason,
        "resumed_at": job.resumed_at,
        "calendars": list(job.calendars),
        "group": job.group,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
    }


class PausedFiresOut(BaseModel):
    count: int = Field(description="Fires that fell between the pause and the resume.")
    count_capped: bool = Field(description="True: counting stopped at the cap; there were at least `count`.")
    policy: MissedFirePolicy
    effect: str = Field(description="What happens to those fires, in words.")
    catch_up: int = Field(description="Of them: planned now and run late, as catch-up runs.")
    missed: int = Field(description="Of them: recorded `missed`, not run (the missed-fire policy).")
    cancelled: int = Field(
        description="Of them: planned before the pause and cancelled when they came due; they do not run."
    )
    pending: int = Field(description="Of them: planned before the pause and not started yet; they run, late.")


class ResumedJobOut(JobOut):
    paused_fires: PausedFiresOut
    cleared_auto_pause: str | None = Field(
        description="The auto-pause this resume cleared (the reason Tickwork paused the job for); null when "
        "the owner had paused it, or the job was not paused."
    )

    @classmethod
    def of_resume(cls, job: Job, paused: PausedFires, cleared_auto_pause: str | None = None) -> ResumedJobOut:
        return cls(
            **job_fields(job),
            cleared_auto_pause=cleared_auto_pause,
            paused_fires=PausedFiresOut(
                count=paused.count,
                count_capped=paused.count_capped,
                policy=paused.policy,
                effect=paused.effect,
                catch_up=paused.outcomes.catch_up,
                missed=paused.outcomes.missed,
                cancelled=paused.outcomes.cancelled,
                pending=paused.outcomes.pending,
            ),
        )


class JobListOut(BaseModel):
    items: list[JobOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last.")


class AttemptOut(BaseModel):
    attempt: int | None = None
    worker: str | None = None
    finished_at: str | None = None
    ok: bool | None = None
    status: str | int | None = Field(
        default=None, description="HTTP status, AWS error code or exception name."
    )
    latency_ms: float | None = None
    detail: str | None = None


class TimingsOut(BaseModel):
    scheduled_for: datetime = Field(description="The nominal fire time.")
    due_at: datetime = Field(description="scheduled_for + the job's deterministic jitter.")
    planned_at: datetime
    dispatched_at: datetime | None = Field(
        description="When the queue accepted the message of the first attempt (recorded at its start)."
    )
    started_at: datetime | None
    finished_at: datetime | None
    start_delay_ms: int | None = Field(description="First start minus due_at.")


class LeaseOut(BaseModel):
    owner: str = Field(description="The delivery (worker) holding the run.")
    expires_at: datetime = Field(description="When a silent holder counts as dead and the run is retried.")


RunResult = Literal["completed", "delivered"]


def run_completion(run: Run) -> Completion:
    """How the run ends: its job view's completion (response for a run stored without a view)."""
    return Completion.RESPONSE if run.job_view is None else run.job_view.completion


def run_result(run: Run) -> RunResult | None:
    """What a succeeded run's success means: `delivered` in delivery mode (the message or invocation was
    accepted; the work itself is not followed), `completed` otherwise (the target answered, or reported
    through its completion URL, that the work is done). None for a run that has not succeeded."""
    if run.state is not RunState.SUCCEEDED:
        return None
    return "delivered" if run_completion(run) is Completion.DELIVERY else "completed"


class RunOut(BaseModel):
    id: str
    job_id: str
    state: RunState
    trigger: Trigger
    job_version: int = Field(description="The job's version when the run was planned.")
    attempt: int = Field(description="Attempts started so far.")
    completion: Completion = Field(
        description="How the run ends (its job's completion as the run was planned or last edited): "
        "response, callback, tracked or delivery."
    )
    result: RunResult | None = Field(
        description="What a succeeded run's success means: `delivered` (completion delivery: the message or "
        "invocation was accepted; whether the work then succeeded is not followed) or `completed` (the "
        "target answered, or reported through its completion URL, that the work is done). null unless "
        "the run succeeded."
    )
    timings: TimingsOut
    outcome: str | None
    reason: str | None
    attempts: list[AttemptOut]
    lease: LeaseOut | None = Field(
        default=None,
        description="While running: who holds the run, and until when (a callback run's heartbeats "
        "extend it).",
    )
    heartbeat_at: datetime | None = Field(
        default=None,
        description="Callback runs: the current (or last) attempt's latest heartbeat from the target; null "
        "before the first.",
    )
    retry_at: datetime | None = Field(default=None, description="While waiting to retry: when.")
    previous_slot: datetime | None = Field(
        default=None,
        description="The schedule's fire before this run's slot (`timings.scheduled_for`) when it was "
        "planned; null when there was none. Part of the run's context (templated payloads: docs/targets.md).",
    )
    next_slot: datetime | None = Field(
        default=None, description="The schedule's fire after this run's slot; null once the schedule ended."
    )

    @classmethod
    def of(cls, run: Run) -> RunOut:
        return cls(
            id=run.run_id,
            job_id=run.job_id,
            state=run.state,
            trigger=run.trigger,
            job_version=run.job_version,
            attempt=run.attempt,
            completion=run_completion(run),
            result=run_result(run),
            timings=TimingsOut(
                scheduled_for=run.scheduled_for,
                due_at=run.due_at,
                planned_at=run.planned_at,
                dispatched_at=run.dispatched_at,
                started_at=run.started_at,
                finished_at=run.finished_at,
                start_delay_ms=run.start_delay_ms,
            ),
            outcome=run.outcome,
            reason=run.reason,
            attempts=[AttemptOut.model_validate(dict(a)) for a in run.attempts],
            lease=None
            if run.lease_owner is None or run.lease_expires_at is None
            else LeaseOut(owner=run.lease_owner, expires_at=run.lease_expires_at),
            heartbeat_at=run.heartbeat_at,
            retry_at=run.retry_at,
            previous_slot=run.previous_slot,
            next_slot=run.next_slot,
        )


class RunListOut(BaseModel):
    items: list[RunOut]
    next_cursor: str | None


class EventOut(BaseModel):
    """Something that happened to a job that its owner is told about (docs/alerts.md)."""

    id: str = Field(description="The event's dedupe key: a channel's message carries it as Idempotency-Key.")
    kind: str = Field(
        description="run_failed, run_dead_lettered, slot_skipped, slot_missed, run_late, deadline_missed, "
        "duration_out_of_bounds, duration_anomaly, failures_in_a_row, auto_paused, resumed, "
        "channel_unhealthy."
    )
    job_id: str
    run_id: str | None = Field(description="The run it is about, if any.")
    at: datetime = Field(description="When it happened (UTC).")
    detail: str

    @classmethod
    def of(cls, event: JobEvent) -> EventOut:
        return cls(
            id=event.dedupe_key,
            kind=str(event.kind),
            job_id=event.job_id,
            run_id=event.run_id,
            at=event.at,
            detail=event.detail,
        )


class ChannelHealthOut(BaseModel):
    channel: str = Field(description="The channel: `<kind>:<url or topic ARN>`.")
    healthy: bool
    since: datetime = Field(description="When it became so (UTC).")
    detail: str = Field(description="Why it is unhealthy: the last failure.")

    @classmethod
    def of(cls, health: ChannelHealth) -> ChannelHealthOut:
        channel = f"{health.channel.kind}:{health.channel.address}"  # the owner's own: the address itself
        return cls(channel=channel, healthy=health.healthy, since=health.since, detail=health.detail)


class EventListOut(BaseModel):
    items: list[EventOut]
    next_cursor: str | None
    channel_health: list[ChannelHealthOut] = Field(
        default_factory=list,
        description="With `job_id`: the job's channels that ever failed every retry of a message, and "
        "whether they have recovered since (a channel not listed never failed).",
    )


class BackfillOut(BaseModel):
    created: int = Field(description="Runs created.")
    skipped: int = Field(description="Slots left alone: they already had a run (rerun not set).")
    first_due_at: datetime | None = Field(description="When the first created run starts.")
    last_due_at: datetime | None = Field(description="When the last created run starts.")

    @classmethod
    def of(cls, result: BackfillResult) -> BackfillOut:
        return cls(
            created=result.created,
            skipped=result.skipped,
            first_due_at=result.first_due_at,
            last_due_at=result.last_due_at,
        )


class FireOut(BaseModel):
    at: datetime = Field(description="UTC.")
    local: datetime = Field(description="The same instant in the schedule's time zone.")
    dst: Literal["shifted", "repeated"] | None = Field(
        description="shifted: moved out of a spring-forward gap; repeated: inside a fall-back repeated hour."
    )
    excluded: str | None = Field(
        default=None,
        description="Why one of the job's calendars excludes this fire (it is recorded `excluded`, not run); "
        "null: it runs.",
    )

    @classmethod
    def of(cls, fire: FireTime, excluded: str | None = None) -> FireOut:
        return cls(at=fire.at, local=fire.local, dst=fire.dst, excluded=excluded)


class SkippedFireOut(BaseModel):
    would_fire_at: datetime = Field(description="Where dst_gap=shift would have fired (UTC).")
    local: datetime


class PreviewOut(BaseModel):
    expression: str
    timezone: str
    description: str
    fires: list[FireOut]
    skipped: list[SkippedFireOut] = Field(
        description="dst_gap=skip only: fires a spring-forward gap swallowed inside the listed window."
    )

    @classmethod
    def of(cls, result: SchedulePreview) -> PreviewOut:
        return cls(
            expression=result.schedule.expression,
            timezone=result.schedule.timezone,
            description=result.description,
            fires=[FireOut.of(f, result.excluded.get(f.at)) for f in result.fires],
            skipped=[SkippedFireOut(would_fire_at=f.at, local=f.local) for f in result.skipped],
        )


class HealthOut(BaseModel):
    status: Literal["ok"] = "ok"


class OperatorNoteIn(BaseModel):
    """Why an operator acts on another owner's job: recorded with who and when."""

    model_config = ConfigDict(extra="forbid")
    note: str = Field(min_length=1, max_length=500, description="Why: recorded with the action.")


class SigningKeyOut(BaseModel):
    key_id: str = Field(description="Names the key in the signature header's `kid`.")
    key: str = Field(description="The key, hex: HMAC-SHA256 over the signed string (docs/targets.md).")
    current: bool = Field(description="False: the previous key, still signing during a rotation's overlap.")


class SigningKeysOut(BaseModel):
    """The keys that sign the caller's HTTP calls: only the caller's (another owner's calls never verify
    with them)."""

    items: list[SigningKeyOut]


class RevisionOut(BaseModel):
    """One write of a job's definition (docs/api.md, "Revisions and the audit log")."""

    job_id: str
    revision: int = Field(description="The job's version after the write (a delete: the one after the last).")
    action: str = Field(description="create, update, pause, resume, delete, rollback or auto_pause.")
    actor: str = Field(description="Who wrote it: the caller's identity, or `tickwork` (an auto-pause).")
    at: datetime = Field(description="When (UTC).")
    note: str | None = Field(description="Why, as the writer said (the reason, for an auto-pause).")
    changed: list[str] = Field(description="The definition's fields that differ from the revision before.")
    definition: dict[str, Any] | None = Field(
        default=None,
        description="The job as written, as stored, with secret header values shown `<redacted>` as a job's "
        "are; in a job's history and a single revision, not in the audit log. {} for a delete.",
    )

    @classmethod
    def of(cls, revision: Revision, *, with_definition: bool = True) -> RevisionOut:
        return cls(
            job_id=revision.job_id,
            revision=revision.revision,
            action=str(revision.action),
            actor=revision.actor,
            at=revision.at,
            note=revision.note,
            changed=list(revision.changed),
            definition=_shown_definition(revision.definition) if with_definition else None,
        )


def _shown_definition(definition: Mapping[str, Any]) -> dict[str, Any]:
    """A revision's definition as answers show a job: secret header values never (`_redacted_config`)."""
    shown = dict(definition)
    target = shown.get("target")
    if isinstance(target, Mapping) and isinstance(target.get("config"), Mapping):
        shown["target"] = {**target, "config": _redacted_config(target["config"])}
    return shown


class RevisionListOut(BaseModel):
    items: list[RevisionOut]
    next_cursor: str | None


class FieldChangeOut(BaseModel):
    field: str = Field(description="`name`, or `parent.field` one level down (`schedule.expression`).")
    before: Any = Field(description="Its value in the earlier revision (null: not set).")
    after: Any = Field(description="Its value in the later revision (null: not set).")


class RevisionDiffOut(BaseModel):
    job_id: str
    before: int = Field(description="The revision compared from.")
    after: int = Field(description="The revision compared to.")
    changes: list[FieldChangeOut]

    @classmethod
    def of(cls, old: Revision, new: Revision, changes: list[FieldChange]) -> RevisionDiffOut:
        return cls(
            job_id=old.job_id,
            before=old.revision,
            after=new.revision,
            changes=[
                FieldChangeOut(
                    field=c.field,
                    before=_shown_value(c.field, c.before),
                    after=_shown_value(c.field, c.after),
                )
                for c in changes
            ],
        )


def _shown_value(field: str, value: Any) -> Any:
    """A diffed value as answers show it: a target's config without secret values."""
    if field == "target.config" and isinstance(value, Mapping):
        return _redacted_config(value)
    if field == "target" and isinstance(value, Mapping):
        return _shown_definition({"target": value})["target"]
    return value


class RollbackIn(RequestModel):
    model_config = ConfigDict(extra="forbid")
    revision: Annotated[
        int, Strict(), Field(ge=1, description="The revision whose definition to write back."), _INTEGRAL
    ]
    note: str = Field(
        min_length=1, max_length=MAX_NOTE_CHARS, description="Why: required, recorded with the new revision."
    )
