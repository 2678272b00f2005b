"""Targets: what a run calls, validated at write time, and the result of calling it.

Pure: no boto3, no sockets. Adapters in `tickwork.adapters.targets` do the calls; this module owns the rules
(which configs are valid, which failures are worth a retry, what every call carries to identify the run).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, Protocol
from urllib.parse import urlsplit

from tickwork.domain.errors import ValidationError
from tickwork.domain.models import Completion, Target
from tickwork.domain.secrets import REDACTED, SECRET_HEADERS, SECRET_REFS, is_credential_header
from tickwork.domain.templates import (
    LONGEST,
    NAMES,
    TEMPLATED_FIELDS,
    TEMPLATED_KEY,
    WITHOUT_SLOTS,
    RunContext,
    check_templates,
    render,
)
from tickwork.domain.timekeys import format_instant

TARGET_KINDS = ("http", "sqs", "sns", "eventbridge", "lambda", "stepfunctions", "ecs")
AWS_TARGET_KINDS = frozenset(TARGET_KINDS) - {"http"}
# Kinds whose start Tickwork can follow to its end (completion tracked): a Step Functions execution, an ECS
# task.
TRACKED_KINDS = frozenset({"stepfunctions", "ecs"})

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
LAMBDA_INVOCATION_TYPES = ("RequestResponse", "Event")
ECS_LAUNCH_TYPES = ("FARGATE", "EC2")

# One limit for every user payload (HTTP body, message, detail, payload, input): it keeps job items far below
# DynamoDB's 400 KB and every AWS target's own limit (SQS/SNS/EventBridge 256 KB with attributes).
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_DETAIL_BYTES = 1024
MAX_URL_LENGTH = 2048
MAX_HEADERS = 50
MAX_HEADER_VALUE_BYTES = 8 * 1024

# Headers Tickwork sets itself, or that belong to the connection rather than the request: a job may not set
# them, so a receiver can trust X-Tickwork-* and Idempotency-Key to come from Tickwork.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "idempotency-key",
    }
)
RESERVED_HEADER_PREFIX = "x-tickwork-"

# The key under which Tickwork adds run identity to JSON payloads (EventBridge detail, Lambda payload, SFN
# input).
CONTEXT_KEY = "tickwork"

# What a header may be: checked when a job is written, and again as a call writes it (adapters/targets).
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110; fullmatch ($ lets "\n" by)
HEADER_VALUE_BREAK = re.compile(r"[\r\n\x00]")
# Whitespace (str.isspace: `\s` matches the same code points) or a control character. One scan in C: the
# executor checks its target's URL before every call.
_URL_BREAK = re.compile(r"[\s\x00-\x1f\x7f]")
_PARTITION = r"aws(?:-[a-z]+)*"
_REGION = r"[a-z]{2}(?:-[a-z]+)+-\d{1,2}"
_ACCOUNT = r"\d{12}"
_SNS_TOPIC_ARN = re.compile(
    rf"^arn:{_PARTITION}:sns:{_REGION}:{_ACCOUNT}:([A-Za-z0-9_-]{{1,251}}(?:\.fifo)?)$"
)
# Step Functions' rule: no whitespace, brackets, wildcards, these specials, or control characters.
_SFN_NAME = r"[^\s\x00-\x1f\x7f-\x9f<>{}\[\]?*\"#%\\^|~`$&,;:/]{1,80}"
_SFN_ARN = re.compile(
    rf"^arn:{_PARTITION}:states:{_REGION}:{_ACCOUNT}:stateMachine:{_SFN_NAME}(?::{_SFN_NAME})?$"
)
# The pattern of Lambda's own API: a name, name:qualifier, a partial ARN or a full ARN.
_LAMBDA_FUNCTION = re.compile(
    rf"^(?:arn:{_PARTITION}:lambda:{_REGION}:{_ACCOUNT}:function:|{_ACCOUNT}:function:)?"
    r"[A-Za-z0-9_-]{1,64}(?::(?:\$LATEST|[A-Za-z0-9_-]{1,128}))?$"
)
_SQS_QUEUE_PATH = re.compile(r"^/\d{12}/([A-Za-z0-9_-]{1,80}(?:\.fifo)?)$")
_EVENT_BUS = re.compile(
    rf"^(?:[/.\-_A-Za-z0-9]{{1,256}}|arn:{_PARTITION}:events:{_REGION}:{_ACCOUNT}:event-bus/[/.\-_A-Za-z0-9]{{1,256}})$"
)
# Characters SQS and SNS accept in a message (XML 1.0 chars); anything else is refused by the service.
_BAD_MESSAGE_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_FIFO_ID = re.compile(r"^[!-~]{1,128}$")  # SQS/SNS group and dedup ids: 1-128 printable ASCII

# Execution names: SFN allows more, but CloudWatch Logs only copes with these, so they are what we emit.
_SFN_EXECUTION_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
SFN_EXECUTION_NAME_MAX = 80

# ECS: cluster, task definition family and container names are 1-255 letters, digits, hyphens, underscores.
_ECS_NAME = r"[A-Za-z0-9_-]{1,255}"
_ECS_CLUSTER = re.compile(rf"^(?:{_ECS_NAME}|arn:{_PARTITION}:ecs:{_REGION}:{_ACCOUNT}:cluster/{_ECS_NAME})$")
_ECS_TASK_DEFINITION = re.compile(
    rf"^(?:arn:{_PARTITION}:ecs:{_REGION}:{_ACCOUNT}:task-definition/)?{_ECS_NAME}(?::[1-9][0-9]{{0,9}})?$"
)
_ECS_CONTAINER = re.compile(rf"^{_ECS_NAME}$")
_SUBNET = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_SECURITY_GROUP = re.compile(r"^sg-[0-9a-f]{8,17}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
# The variables Tickwork sets in the container (the run's identity); a job may not set them.
ECS_ENV_PREFIX = "TICKWORK_"
ECS_MAX_SUBNETS = 16
ECS_MAX_SECURITY_GROUPS = 5
ECS_MAX_COMMAND_ITEMS = 64
ECS_MAX_ENVIRONMENT = 64
# ECS refuses a RunTask whose overrides exceed 8,192 characters as JSON: the container's name, the job's
# command and environment and the run's identity (at its longest) must fit.
ECS_MAX_OVERRIDES_CHARS = 8 * 1024
# startedBy: up to 36 letters, digits, hyphens, underscores and slashes. clientToken: up to 64 characters in
# the ASCII range 33-126.
ECS_STARTED_BY_MAX = 36
ECS_CLIENT_TOKEN_MAX = 64


# ----------------------------------------------------------------------------------------------------------
# Invocation and result
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Invocation:
    """One attempt of one run, as the target sees it. `run_id` is the idempotency key."""

    run_id: str
    job_id: str
    scheduled_for: datetime  # the nominal fire time, tz-aware
    attempt: int
    timeout_seconds: float
    # Callback runs: where the target reports this attempt's outcome and its heartbeats (signed for this
    # run and attempt; docs/design.md, "How a run ends"). None: the answer is the outcome.
    callback: CallbackUrls | None = None
    # The job follows what this start begins (completion tracked): a Step Functions or ECS start then
    # returns accepted=True with the execution's or task's ARN as its `handle`. False: the start is the
    # outcome (delivered).
    track: bool = False
    # Whose run it is: an HTTP call is signed with this owner's own key (tickwork/signing.py).
    owner: str = ""
    # The rest of the run's context (domain/templates.py): why the run exists, the job's revision that
    # planned it, and the schedule's slots either side of `scheduled_for`. None (trigger, revision): not a
    # run's call (an alert's notification), which carries neither.
    trigger: str | None = None
    revision: int | None = None
    previous_slot: datetime | None = None
    next_slot: datetime | None = None

    @property
    def context(self) -> RunContext:
        return RunContext(
            run_id=self.run_id,
            job_id=self.job_id,
            scheduled_for=self.scheduled_for,
            attempt=self.attempt,
            revision=self.revision or 0,
            trigger=self.trigger or "",
            previous_slot=self.previous_slot,
            next_slot=self.next_slot,
        )


@dataclass(frozen=True, slots=True)
class CallbackUrls:
    complete: str
    heartbeat: str


@dataclass(frozen=True, slots=True)
class TargetResult:
    """How a call went. A target call never raises for an ordinary failure: it returns one of these.

    `status` is short and machine-friendly: an HTTP status code ("200"), an AWS error code
    ("ThrottlingException") or an exception class name ("TimeoutError"). `detail` is the response body or
    error text, cut to 1 KiB.
    """

    ok: bool
    retryable: bool
    status: str
    latency_ms: int
    detail: str = ""
    # The target took the work and will report its outcome later (HTTP 202 to a callback run's call), or
    # started work Tickwork follows (`handle`: what to follow, e.g. a Step Functions execution ARN).
    accepted: bool = False
    handle: str | None = None

    def __post_init__(self) -> None:
        if self.ok and self.retryable:
            raise ValueError("a successful result cannot be retryable")
        if self.accepted and not self.ok:
            raise ValueError("an accepted call is not a failure")
        truncated = truncate_detail(self.detail)
        if truncated is not self.detail:
            object.__setattr__(self, "detail", truncated)


class TargetTracker(Protocol):
    def track(self, target: Target, handle: str) -> TargetResult | None:
        """Where the work a tracked start began (`handle`) is: None while it runs; its end otherwise (a
        failure retryable or not by the same rules as a call's). Raises only on programming errors; a
        look that fails (throttled, unreachable) is None: the next look tries again."""
        ...


class TargetInvoker(Protocol):
    def invoke(self, target: Target, invocation: Invocation) -> TargetResult:
        """Call the target once. Returns a result for every ordinary failure; raises only on programming
        errors."""
        ...


_TRUNCATION_MARK = "…[truncated]"


def truncate_detail(text: str, limit: int = MAX_DETAIL_BYTES) -> str:
    """`text` cut to at most `limit` UTF-8 bytes (marked), never splitting a character."""
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= limit:
        return text
    room = limit - len(_TRUNCATION_MARK.encode())
    return encoded[:room].decode("utf-8", errors="ignore") + _TRUNCATION_MARK


def http_status_retryable(code: int) -> bool:
    """5xx, 408 (request timeout) and 429 (too many requests) are worth another attempt; other codes are not.

    3xx counts as a non-retryable failure: redirects are not followed (a redirect could point anywhere,
    including at an internal address), so a job whose URL moved must be updated.
    """
    return code >= 500 or code in (408, 429)


def invocation_context(invocation: Invocation) -> dict[str, Any]:
    """The run identity every target receives. Deterministic for a given run + attempt (no wall-clock time),
    so a repeated call of one attempt sends identical input: Step Functions answers a repeated start of the
    same name and input with the running execution instead of refusing it."""
    return {
        "run_id": invocation.run_id,
        "job_id": invocation.job_id,
        "scheduled_for": format_instant(invocation.scheduled_for),
        "attempt": invocation.attempt,
    } | run_context(invocation)


def run_context(invocation: Invocation) -> dict[str, Any]:
    """The rest of a run's context (none for a call that is not a run's: an alert's notification)."""
    if invocation.trigger is None:
        return {}
    return {
        "revision": invocation.revision,
        "trigger": invocation.trigger,
        "previous_slot": _opt_instant(invocation.previous_slot),
        "next_slot": _opt_instant(invocation.next_slot),
    }


def _opt_instant(moment: datetime | None) -> str | None:
    return None if moment is None else format_instant(moment)


def rendered(target: Target, invocation: Invocation) -> Target:
    """The target as this attempt calls it: a templated one's placeholders filled with the run's context."""
    if not target.config.get(TEMPLATED_KEY):
        return target
    try:
        check_templates(target.kind, target.config)
    except ValidationError:
        return target  # stored under other rules: the adapter's own check refuses it (a failed run, no crash)
    return Target(target.kind, render(target.kind, target.config, invocation.context))


def invocation_headers(invocation: Invocation) -> dict[str, str]:
    """HTTP headers that identify the call; `Idempotency-Key` follows the IETF draft of that name."""
    return (
        {
            "Idempotency-Key": invocation.run_id,
            "X-Tickwork-Run-Id": invocation.run_id,
            "X-Tickwork-Job-Id": invocation.job_id,
            "X-Tickwork-Scheduled-For": format_instant(invocation.scheduled_for),
            "X-Tickwork-Attempt": str(invocation.attempt),
        }
        | run_context_headers(invocation)
        | callback_headers(invocation)
    )


def run_context_headers(invocation: Invocation) -> dict[str, str]:
    """The rest of a run's context as headers, each only when there is one (an empty header says nothing)."""
    names = {
        "revision": "X-Tickwork-Revision",
        "trigger": "X-Tickwork-Trigger",
        "previous_slot": "X-Tickwork-Previous-Slot",
        "next_slot": "X-Tickwork-Next-Slot",
    }
    return {names[key]: str(value) for key, value in run_context(invocation).items() if value is not None}


def callback_headers(invocation: Invocation) -> dict[str, str]:
    """A callback run's URLs, for the target to report to (none for other runs)."""
    if invocation.callback is None:
        return {}
    return {
        "X-Tickwork-Completion-Url": invocation.callback.complete,
        "X-Tickwork-Heartbeat-Url": invocation.callback.heartbeat,
    }


def fifo_id(value: str) -> str:
    """`value` as an SQS/SNS FIFO group or deduplication id: itself when it fits (1-128 printable ASCII),
    otherwise a stable hash of it, so the same run always maps to the same id."""
    if _FIFO_ID.match(value):
        return value
    return hashlib.sha256(value.encode()).hexdigest()


def sfn_execution_name(run_id: str) -> str:
    """The Step Functions execution name of a run: one per run, the same on every attempt.

    The run id is sanitised to [A-Za-z0-9_-] and shortened to fit 80 characters; a hash of the exact run id
    keeps two runs whose ids sanitise alike (job "a.b" vs "a_b") from sharing a name. The attempt is not in
    the name (it is in the input): a Standard workflow keeps a name for 90 days after its execution closes,
    so the name is the lock against starting the same run twice, whichever attempt tries.
    """
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:10]
    suffix = f"-{digest}"
    readable = _SFN_EXECUTION_UNSAFE.sub("-", run_id)[: SFN_EXECUTION_NAME_MAX - len(suffix)]
    return readable + suffix


def ecs_started_by(run_id: str) -> str:
    """The `startedBy` of a run's ECS tasks (ListTasks can filter by it): `tickwork-` and a hash of the run
    id, the same on every attempt, within ECS's 36 characters. The readable run id is in the container's
    environment (`ecs_environment`)."""
    prefix = "tickwork-"
    return prefix + hashlib.sha256(run_id.encode()).hexdigest()[: ECS_STARTED_BY_MAX - len(prefix)]


def ecs_client_token(run_id: str, attempt: int) -> str:
    """RunTask's idempotency token for one attempt of one run: a repeated start within the attempt (a lost
    answer, botocore's retry) gets the task it started back instead of a second task; the next attempt is
    a new start. `<run id>#<attempt>` when it fits ECS's rule (64 characters, ASCII 33-126), otherwise a
    hash of it."""
    token = f"{run_id}#{attempt}"
    if len(token) <= ECS_CLIENT_TOKEN_MAX and all(33 <= ord(ch) <= 126 for ch in token):
        return token
    return hashlib.sha256(token.encode()).hexdigest()  # 64 hex characters


def ecs_environment(invocation: Invocation) -> dict[str, str]:
    """The run's identity as the container's environment variables (`TICKWORK_RUN_ID` is the idempotency
    key)."""
    context = invocation_context(invocation)
    return {
        f"{ECS_ENV_PREFIX}RUN_ID": context["run_id"],
        f"{ECS_ENV_PREFIX}JOB_ID": context["job_id"],
        f"{ECS_ENV_PREFIX}SCHEDULED_FOR": context["scheduled_for"],
        f"{ECS_ENV_PREFIX}ATTEMPT": str(context["attempt"]),
    } | {f"{ECS_ENV_PREFIX}{key.upper()}": str(value or "") for key, value in run_context(invocation).items()}


def ecs_container_override(config: Mapping[str, Any], identity: Mapping[str, str]) -> dict[str, Any]:
    """The named container's override as RunTask gets it: the job's environment and the run's identity (as
    ECS's name/value list), and the job's command."""
    container: dict[str, Any] = {
        "name": config["container"],
        "environment": [
            {"name": name, "value": value} for name, value in {**config["environment"], **identity}.items()
        ],
    }
    if "command" in config:
        container["command"] = list(config["command"])
    return container


@cache
def _longest_identity() -> dict[str, str]:
    """The run's identity in a container's environment at its longest (what the overrides' size is checked
    with; the same for every check, so built once, at the first)."""
    longest = LONGEST
    return ecs_environment(
        Invocation(
            run_id=longest.run_id,
            job_id=longest.job_id,
            scheduled_for=longest.scheduled_for,
            attempt=longest.attempt,
            timeout_seconds=0.0,
            trigger=longest.trigger,
            revision=longest.revision,
            previous_slot=longest.previous_slot,
            next_slot=longest.next_slot,
        )
    )


def is_fifo_queue_url(queue_url: str) -> bool:
    return queue_url.endswith(".fifo")


def is_fifo_topic_arn(topic_arn: str) -> bool:
    return topic_arn.endswith(".fifo")


# ----------------------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------------------


def validate_target(kind: str, config: Mapping[str, Any], *, stored: bool = False) -> Target:
    """A valid, normalised target (defaults filled in, JSON values copied) or ValidationError naming the
    field. `stored`: the config of a job as stored, whose secret headers are references (`secret_refs`,
    which only Tickwork writes); a request's config may not name them.

    Only what can be checked without the network is checked here; whether an HTTP target's address is allowed
    is decided at call time, after DNS resolution (see the SSRF guard), because DNS can change after
    validation.
    """
    if not isinstance(kind, str) or kind not in TARGET_KINDS:
        raise ValidationError(
            "target.kind", f"unknown target kind {kind!r}; expected one of {', '.join(TARGET_KINDS)}"
        )
    if not isinstance(config, Mapping):
        raise ValidationError("target.config", "must be an object")
    for key in config:
        if not isinstance(key, str):
            raise ValidationError("target.config", f"keys must be strings, got {key!r}")
    templated = config.get(TEMPLATED_KEY)
    if templated is not None and not isinstance(templated, bool):
        raise ValidationError(_field(TEMPLATED_KEY), "must be true or false")
    raw = {key: value for key, value in config.items() if key != TEMPLATED_KEY}
    normalised = _VALIDATORS[kind](_Config(raw, stored=stored))
    if templated:
        _check_templated(kind, raw, normalised, stored=stored)
        normalised[TEMPLATED_KEY] = True
    return Target(kind=kind, config=normalised)


def _check_templated(
    kind: str, raw: Mapping[str, Any], normalised: Mapping[str, Any], *, stored: bool
) -> None:
    """A templated config's placeholders are known names, none is in a secret header (sent as stored, never
    filled in), and filled in at their longest, or with no slots, the config still keeps its kind's rules."""
    check_templates(kind, normalised)
    for name, value in dict(normalised.get(SECRET_HEADERS) or {}).items():
        if "{{" in str(value):
            where = "headers" if name in (raw.get("headers") or {}) else SECRET_HEADERS
            raise ValidationError(
                _field(f"{where}.{name}"), "is a secret header, sent as stored: it cannot hold a placeholder"
            )
    for context, words in ((LONGEST, "at their longest"), (WITHOUT_SLOTS, "with no previous or next slot")):
        try:
            _VALIDATORS[kind](_Config(render(kind, raw, context), stored=stored))
        except ValidationError as error:
            raise ValidationError(
                error.field, f"{error.message}, once its placeholders are filled in {words}"
            ) from error


def default_completion(target: Target) -> Completion:
    """How a run of `target` ends unless its job says otherwise (docs/api.md, "How a run ends"): an HTTP call
    and a synchronous Lambda invocation with their answer (response); a Step Functions execution and an ECS
    task when they end, followed by Tickwork (tracked); SQS, SNS and EventBridge when the message is
    accepted, and an asynchronous Lambda invocation (Event) when Lambda queues it (delivery: "delivered", not
    that the work succeeded).

    Step Functions: an Express workflow's executions cannot be followed (DescribeExecution does not serve
    them), and an ARN does not say which kind a state machine is: a tracked start that turns out to be
    Express ends delivered, and its result says so."""
    if target.kind == "http":
        return Completion.RESPONSE
    if target.kind == "lambda":
        asynchronous = (target.config.get("invocation_type") or "RequestResponse") == "Event"
        return Completion.DELIVERY if asynchronous else Completion.RESPONSE
    if target.kind in TRACKED_KINDS:
        return Completion.TRACKED
    return Completion.DELIVERY


def allowed_completions(target: Target) -> tuple[Completion, ...]:
    """The completions a job with `target` may choose: the target's default; for HTTP also callback (the
    call carries the run's completion and heartbeat URLs, and the target may answer 202); for Step
    Functions and ECS also delivery (the run ends when the execution or task has started). Other AWS
    targets cannot end any other way than their own: a message is delivered or not, and a Lambda
    invocation's type decides whether there is an answer to wait for."""
    default = default_completion(target)
    if target.kind == "http":
        return (default, Completion.CALLBACK)
    if target.kind in TRACKED_KINDS:
        return (default, Completion.DELIVERY)
    return (default,)


def describe_target(target: Target) -> str:
    """The target's kind as an error message names it: 'an http target', 'a lambda target invoked with
    invocation_type Event'."""
    article = "an" if target.kind in ("http", "sqs", "sns", "eventbridge", "ecs") else "a"
    if target.kind == "lambda":
        invocation_type = target.config.get("invocation_type") or "RequestResponse"
        return f"a lambda target invoked with invocation_type {invocation_type}"
    return f"{article} {target.kind} target"


class _Config:
    """Reads a config mapping, tracking which keys were consumed so unknown keys can be reported."""

    def __init__(self, raw: Mapping[str, Any], *, stored: bool = False) -> None:
        self._raw = raw
        self._seen: set[str] = set()
        self.stored = stored

    def get(self, key: str, default: Any = None, *, required: bool = False) -> Any:
        self._seen.add(key)
        if key not in self._raw or self._raw[key] is None:
            if required:
                raise ValidationError(_field(key), "is required")
            return default
        return self._raw[key]

    def string(self, key: str, default: str | None = None, *, required: bool = False) -> str:
        value = self.get(key, default, required=required)
        if not isinstance(value, str):
            raise ValidationError(_field(key), f"must be a string, got {type(value).__name__}")
        return value

    def finish(self, normalised: dict[str, Any]) -> dict[str, Any]:
        extra = sorted(set(self._raw) - self._seen)
        if extra:
            allowed = ", ".join(sorted(self._seen))
            raise ValidationError(_field(extra[0]), f"unknown key for this target kind (allowed: {allowed})")
        return normalised


def _field(key: str) -> str:
    return f"target.config.{key}"


def _validate_http(cfg: _Config) -> dict[str, Any]:
    url = _http_url(cfg.string("url", required=True))
    method = cfg.string("method", "POST").upper()
    if method not in HTTP_METHODS:
        raise ValidationError(_field("method"), f"must be one of {', '.join(HTTP_METHODS)}")
    given = _http_headers(cfg.get("headers", {}), "headers")
    marked = _http_headers(cfg.get(SECRET_HEADERS, {}), SECRET_HEADERS)
    refs = _secret_refs(cfg)
    _check_header_set(given, marked, refs)
    body = cfg.string("body", "")
    _check_size("body", body)
    if method == "GET" and body:
        raise ValidationError(_field("body"), "a GET request carries no body; use POST or PUT")
    if cfg.stored:  # as written: its credential-like headers were moved when it was
        if REDACTED in (*given.values(), *marked.values()):
            raise ValidationError(_field("headers"), f"holds {REDACTED!r} as a stored value")
        plain, secret = given, marked
    else:
        # A REDACTED value is an answer's placeholder sent back: keep the stored secret (a secret header).
        kept = {name for name, value in given.items() if value == REDACTED or is_credential_header(name)}
        plain = {name: value for name, value in given.items() if name not in kept}
        secret = {**{name: given[name] for name in kept}, **marked}
    normalised: dict[str, Any] = {"method": method, "url": url, "headers": plain, "body": body}
    if secret:
        normalised[SECRET_HEADERS] = secret
    if refs:
        normalised[SECRET_REFS] = refs
    return cfg.finish(normalised)


def _secret_refs(cfg: _Config) -> dict[str, str]:
    raw = cfg.get(SECRET_REFS, {})
    if not raw:
        return {}
    if not cfg.stored:
        raise ValidationError(
            _field(SECRET_REFS), f"is written by Tickwork; give secret values in {SECRET_HEADERS}"
        )
    if not isinstance(raw, Mapping) or not all(
        isinstance(name, str) and isinstance(ref, str) and ref for name, ref in raw.items()
    ):
        raise ValidationError(_field(SECRET_REFS), "must map header names to references")
    for name in raw:  # written by Tickwork from checked names: one that is not was written around it
        if not HEADER_NAME.fullmatch(name) or _reserved(name.lower()):
            raise ValidationError(_field(f"{SECRET_REFS}.{name}"), "is not a header a job may set")
    return dict(raw)


def _reserved(lowered: str) -> bool:
    """A header name (lower-cased) Tickwork or the connection sets: no job may."""
    return lowered in RESERVED_HEADERS or lowered.startswith(RESERVED_HEADER_PREFIX)


def _check_header_set(*groups: Mapping[str, str]) -> None:
    """All the call's headers together: at most MAX_HEADERS, and no name twice in any case."""
    seen: set[str] = set()
    for name in (name for group in groups for name in group):
        if name.lower() in seen:
            raise ValidationError(
                _field(f"headers.{name}"), "appears twice (header names are case-insensitive)"
            )
        seen.add(name.lower())
    if len(seen) > MAX_HEADERS:
        raise ValidationError(_field("headers"), f"at most {MAX_HEADERS} headers, secret ones included")


def _http_url(url: str) -> str:
    if len(url) > MAX_URL_LENGTH:
        raise ValidationError(_field("url"), f"longer than {MAX_URL_LENGTH} characters")
    if _URL_BREAK.search(url):
        raise ValidationError(_field("url"), "contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError when out of range or not a number
    except ValueError as error:
        raise ValidationError(_field("url"), f"not a valid URL: {error}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ValidationError(_field("url"), "must be an http:// or https:// URL")
    if not parts.hostname:
        raise ValidationError(_field("url"), "has no host")
    if parts.username is not None or parts.password is not None:
        # Credentials in a URL end up in logs and the job listing; a header can be redacted.
        raise ValidationError(
            _field("url"), "must not contain credentials; send them in an Authorization header"
        )
    if port == 0:
        raise ValidationError(_field("url"), "port 0 is not a valid destination")
    return url


def _http_headers(raw: Any, key: str) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        raise ValidationError(_field(key), "must be an object of header name to string value")
    if len(raw) > MAX_HEADERS:
        raise ValidationError(_field(key), f"at most {MAX_HEADERS} headers")
    headers: dict[str, str] = {}
    seen: set[str] = set()
    for name, value in raw.items():
        field = _field(f"{key}.{name}")
        if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
            raise ValidationError(field, "is not a valid header name (RFC 9110 token characters only)")
        lowered = name.lower()
        if _reserved(lowered):
            raise ValidationError(field, "is set by Tickwork or the connection and cannot be overridden")
        if lowered in seen:
            raise ValidationError(field, "appears twice (header names are case-insensitive)")
        seen.add(lowered)
        if not isinstance(value, str):
            raise ValidationError(field, f"value must be a string, got {type(value).__name__}")
        if HEADER_VALUE_BREAK.search(value):
            raise ValidationError(field, "value must not contain CR, LF or NUL")
        if len(value.encode()) > MAX_HEADER_VALUE_BYTES:
            raise ValidationError(field, f"value larger than {MAX_HEADER_VALUE_BYTES} bytes")
        headers[name] = value
    return headers


def _validate_sqs(cfg: _Config) -> dict[str, Any]:
    queue_url = cfg.string("queue_url", required=True)
    parts = urlsplit(queue_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or not _SQS_QUEUE_PATH.match(parts.path):
        raise ValidationError(
            _field("queue_url"),
            "must be a queue URL like https://sqs.<region>.amazonaws.com/<account>/<queue>",
        )
    if parts.query or parts.fragment:
        raise ValidationError(_field("queue_url"), "must not have a query or fragment")
    message = _message(cfg, "message")
    normalised: dict[str, Any] = {"queue_url": queue_url, "message": message}
    group = _fifo_group(cfg, fifo=is_fifo_queue_url(queue_url), what="queue")
    if group is not None:
        normalised["message_group_id"] = group
    return cfg.finish(normalised)


def _validate_sns(cfg: _Config) -> dict[str, Any]:
    topic_arn = cfg.string("topic_arn", required=True)
    if not _SNS_TOPIC_ARN.match(topic_arn):
        raise ValidationError(
            _field("topic_arn"), "must be an SNS topic ARN (arn:aws:sns:<region>:<account>:<name>)"
        )
    normalised: dict[str, Any] = {"topic_arn": topic_arn, "message": _message(cfg, "message")}
    subject = cfg.get("subject")
    if subject is not None:
        if not isinstance(subject, str) or not 1 <= len(subject) <= 100 or not subject.isprintable():
            raise ValidationError(_field("subject"), "must be 1-100 printable characters without line breaks")
        normalised["subject"] = subject
    group = _fifo_group(cfg, fifo=is_fifo_topic_arn(topic_arn), what="topic")
    if group is not None:
        normalised["message_group_id"] = group
    return cfg.finish(normalised)


def _message(cfg: _Config, key: str) -> str:
    message = cfg.string(key, required=True)
    if not message:
        raise ValidationError(_field(key), "must not be empty")
    if _BAD_MESSAGE_CHAR.search(message):
        raise ValidationError(_field(key), "contains characters SQS/SNS do not accept (control characters)")
    _check_size(key, message)
    return message


def _fifo_group(cfg: _Config, *, fifo: bool, what: str) -> str | None:
    """FIFO only: the message group; by default the job id (set at call time), so one job's runs stay
    ordered."""
    group = cfg.get("message_group_id")
    if group is None:
        return None
    if not fifo:
        raise ValidationError(
            _field("message_group_id"), f"only applies to a FIFO {what} (name ending in .fifo)"
        )
    if not isinstance(group, str) or not _FIFO_ID.match(group):
        raise ValidationError(_field("message_group_id"), "must be 1-128 printable ASCII characters")
    return group


def _validate_eventbridge(cfg: _Config) -> dict[str, Any]:
    bus = cfg.string("event_bus_name", "default")
    if not _EVENT_BUS.match(bus):
        raise ValidationError(_field("event_bus_name"), "must be an event bus name or ARN")
    source = cfg.string("source", required=True)
    if not 1 <= len(source) <= 256:
        raise ValidationError(_field("source"), "must be 1-256 characters")
    if source.lower().startswith("aws."):
        raise ValidationError(_field("source"), "sources starting with 'aws.' are reserved for AWS services")
    detail_type = cfg.string("detail_type", required=True)
    if not 1 <= len(detail_type) <= 128:
        raise ValidationError(_field("detail_type"), "must be 1-128 characters")
    detail = _json_value(cfg, "detail", {})
    if not isinstance(detail, dict):
        raise ValidationError(_field("detail"), "must be a JSON object")
    if CONTEXT_KEY in detail:
        raise ValidationError(
            _field(f"detail.{CONTEXT_KEY}"), "is reserved: Tickwork adds the run identity there"
        )
    return cfg.finish({"event_bus_name": bus, "source": source, "detail_type": detail_type, "detail": detail})


def _validate_lambda(cfg: _Config) -> dict[str, Any]:
    function_name = cfg.string("function_name", required=True)
    if len(function_name) > 170 or not _LAMBDA_FUNCTION.match(function_name):
        raise ValidationError(
            _field("function_name"), "must be a function name, name:qualifier, or a (partial) function ARN"
        )
    invocation_type = cfg.string("invocation_type", "RequestResponse")
    if invocation_type not in LAMBDA_INVOCATION_TYPES:
        raise ValidationError(
            _field("invocation_type"), f"must be one of {', '.join(LAMBDA_INVOCATION_TYPES)}"
        )
    payload = _json_value(cfg, "payload", {})
    return cfg.finish(
        {"function_name": function_name, "invocation_type": invocation_type, "payload": payload}
    )


def _validate_stepfunctions(cfg: _Config) -> dict[str, Any]:
    arn = cfg.string("state_machine_arn", required=True)
    if not _SFN_ARN.match(arn):
        raise ValidationError(
            _field("state_machine_arn"),
            "must be a state machine ARN (arn:aws:states:<region>:<account>:stateMachine:<name>)",
        )
    return cfg.finish({"state_machine_arn": arn, "input": _json_value(cfg, "input", {})})


def _validate_ecs(cfg: _Config) -> dict[str, Any]:
    """One ECS task (RunTask, count 1) of `task_definition` in `cluster`. `container` names the container
    that receives the run's identity (TICKWORK_* environment variables) and the job's `command` and
    `environment`, and whose exit code is the run's outcome when the run is tracked. Fargate tasks run in
    `subnets` (awsvpc networking); an EC2 task does when subnets are given."""
    cluster = cfg.string("cluster", required=True)
    if not _ECS_CLUSTER.match(cluster):
        raise ValidationError(
            _field("cluster"),
            "must be a cluster name or ARN (arn:aws:ecs:<region>:<account>:cluster/<name>)",
        )
    task_definition = cfg.string("task_definition", required=True)
    if not _ECS_TASK_DEFINITION.match(task_definition):
        raise ValidationError(
            _field("task_definition"),
            "must be family, family:revision, or a task definition ARN "
            "(arn:aws:ecs:<region>:<account>:task-definition/<family>:<revision>)",
        )
    launch_type = cfg.string("launch_type", "FARGATE")
    if launch_type not in ECS_LAUNCH_TYPES:
        raise ValidationError(_field("launch_type"), f"must be one of {', '.join(ECS_LAUNCH_TYPES)}")
    container = cfg.string("container", required=True)
    if not _ECS_CONTAINER.match(container):
        raise ValidationError(
            _field("container"), "must be a container name of the task definition (1-255 of A-Z a-z 0-9 _ -)"
        )
    subnets = _id_list(cfg, "subnets", _SUBNET, "subnet-", ECS_MAX_SUBNETS)
    security_groups = _id_list(cfg, "security_groups", _SECURITY_GROUP, "sg-", ECS_MAX_SECURITY_GROUPS)
    assign_public_ip = cfg.get("assign_public_ip", False)
    if not isinstance(assign_public_ip, bool):
        raise ValidationError(_field("assign_public_ip"), "must be true or false")
    if launch_type == "FARGATE" and not subnets:
        raise ValidationError(_field("subnets"), "is required for launch_type FARGATE (awsvpc networking)")
    if security_groups and not subnets:
        raise ValidationError(_field("security_groups"), "apply only with subnets (awsvpc networking)")
    if assign_public_ip and launch_type != "FARGATE":
        raise ValidationError(_field("assign_public_ip"), "applies to launch_type FARGATE only")
    normalised: dict[str, Any] = {
        "cluster": cluster,
        "task_definition": task_definition,
        "launch_type": launch_type,
        "container": container,
        "subnets": subnets,
        "security_groups": security_groups,
        "assign_public_ip": assign_public_ip,
    }
    command = cfg.get("command")
    if command is not None:
        if not isinstance(command, list) or not 1 <= len(command) <= ECS_MAX_COMMAND_ITEMS:
            raise ValidationError(_field("command"), f"must be a list of 1-{ECS_MAX_COMMAND_ITEMS} strings")
        for index, item in enumerate(command):
            if not isinstance(item, str):
                raise ValidationError(_field(f"command[{index}]"), "must be a string")
            _check_unicode(f"command[{index}]", item)
        normalised["command"] = list(command)
    environment = cfg.get("environment", {})
    if not isinstance(environment, Mapping) or len(environment) > ECS_MAX_ENVIRONMENT:
        raise ValidationError(
            _field("environment"), f"must be an object of at most {ECS_MAX_ENVIRONMENT} name: string value"
        )
    for name, value in environment.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ValidationError(
                _field(f"environment.{name}"), "is not a variable name ([A-Za-z_][A-Za-z0-9_]*, 1-255)"
            )
        if name.upper().startswith(ECS_ENV_PREFIX):
            raise ValidationError(
                _field(f"environment.{name}"), f"{ECS_ENV_PREFIX}* is set by Tickwork (the run's identity)"
            )
        if not isinstance(value, str):
            raise ValidationError(_field(f"environment.{name}"), "value must be a string")
        _check_unicode(f"environment.{name}", value)
    normalised["environment"] = dict(environment)
    # As botocore sends it (JSON, non-ASCII escaped), with the run's identity at its longest.
    override = ecs_container_override({**normalised, "environment": environment}, _longest_identity())
    overrides = json_dumps({"containerOverrides": [override]})
    if len(overrides) > ECS_MAX_OVERRIDES_CHARS:
        raise ValidationError(
            _field("environment" if environment else "command"),
            f"command and environment are {len(overrides)} characters as JSON with the container's name and "
            f"the run's identity; ECS takes {ECS_MAX_OVERRIDES_CHARS} (8 KiB) of a task's overrides",
        )
    return cfg.finish(normalised)


def _id_list(cfg: _Config, key: str, pattern: re.Pattern[str], prefix: str, most: int) -> list[str]:
    value = cfg.get(key, [])
    if not isinstance(value, list) or len(value) > most:
        raise ValidationError(_field(key), f"must be a list of at most {most} ids")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not pattern.match(item):
            raise ValidationError(_field(f"{key}[{index}]"), f"must be an id like {prefix}0123abcd")
    if len(set(value)) != len(value):
        raise ValidationError(_field(key), "names an id twice")
    return list(value)


def _check_unicode(key: str, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(_field(key), "is not valid Unicode (lone surrogate)") from None


def _json_value(cfg: _Config, key: str, default: Any) -> Any:
    """A deep copy of a JSON value, refused if it is not plain JSON (NaN, sets, objects) or too large."""
    value = cfg.get(key, default)
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise ValidationError(_field(key), f"must be plain JSON: {error}") from None
    _check_size(key, text)
    return json.loads(text)


def _check_size(key: str, text: str) -> None:
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(_field(key), "is not valid Unicode (lone surrogate)") from None
    if size > MAX_PAYLOAD_BYTES:
        raise ValidationError(
            _field(key), f"is {size} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes (64 KiB)"
        )


def json_dumps(value: Any) -> str:
    """The compact JSON used for every payload Tickwork sends (stable, so repeated calls send identical
    bytes)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)


_VALIDATORS: Mapping[str, Callable[[_Config], dict[str, Any]]] = {
    "http": _validate_http,
    "sqs": _validate_sqs,
    "sns": _validate_sns,
    "eventbridge": _validate_eventbridge,
    "lambda": _validate_lambda,
    "stepfunctions": _validate_stepfunctions,
    "ecs": _validate_ecs,
}


# ----------------------------------------------------------------------------------------------------------
# The same rules as JSON Schema, for the API document
# ----------------------------------------------------------------------------------------------------------

# A JSON value the job store holds (numbers DynamoDB can store, nesting it allows), as the document states it:
# integers within 37 digits, strings, booleans, null, and objects / lists of them. The validators also take
# floats within 1e-130..9.9e125; the document states the simpler rule.
_JSON_SCALAR: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "maxLength": 1024},
        # The store takes 38 digits; the document says 37, because generators read these bounds as floats
        # (10**38 - 1 becomes 1e38, and 10**38 itself is refused).
        {"type": "integer", "minimum": -(10**37), "maximum": 10**37},
        {"type": "boolean"},
        {"type": "null"},
    ]
}
_JSON_OBJECT: dict[str, Any] = {
    "type": "object",
    "maxProperties": 64,
    "propertyNames": {"minLength": 1},
    "additionalProperties": {
        "anyOf": [_JSON_SCALAR, {"type": "array", "maxItems": 64, "items": _JSON_SCALAR}]
    },
}
# A message of up to 16,384 characters is at most 64 KiB in UTF-8 whatever it holds.
_MAX_PAYLOAD_CHARS = MAX_PAYLOAD_BYTES // 4


def _either_case(word: str) -> str:
    return "".join(f"[{ch.lower()}{ch.upper()}]" if ch.isalpha() else re.escape(ch) for ch in word)


def _fifo_rule(url_key: str, fifo_suffix: str) -> dict[str, Any]:
    """`message_group_id` only where the queue or topic is FIFO."""
    return {
        "if": {"properties": {url_key: {"pattern": fifo_suffix}}, "required": [url_key]},
        "then": {},
        "else": {"not": {"required": ["message_group_id"]}},
    }


def config_json_schemas() -> dict[str, dict[str, Any]]:
    """For each target kind, the JSON Schema of its `config`: the keys `validate_target` takes, which are
    required, and the patterns it checks, built from the same constants and expressions. What a schema
    cannot say (a header name given twice in different case) is still refused by the validators."""
    message = {
        "type": "string",
        "minLength": 1,
        "maxLength": _MAX_PAYLOAD_CHARS,
        # (lone surrogates are refused too; a regular expression cannot name them)
        "pattern": r"^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]+$",
    }
    fifo_group = {"type": "string", "pattern": _FIFO_ID.pattern}
    reserved = "|".join(_either_case(name) for name in sorted(RESERVED_HEADERS))
    header_names = {
        "pattern": HEADER_NAME.pattern,
        "not": {"pattern": rf"^(?:{reserved})$|^{_either_case(RESERVED_HEADER_PREFIX)}"},
    }
    headers = {
        "type": "object",
        "maxProperties": MAX_HEADERS,
        "propertyNames": header_names,
        "additionalProperties": {
            "type": "string",
            "maxLength": MAX_HEADER_VALUE_BYTES // 4,
            "pattern": r"^[^\r\n\u0000]*$",
        },
    }
    together = (
        f"A header name appears once across `headers` and `secret_headers`, in any case; together they hold "
        f"at most {MAX_HEADERS} headers. A value of {REDACTED!r} (as answers show secret values) keeps the "
        f"value the job stores for that header, at the same scheme, host and port only; a job that keeps "
        f"none refuses it."
    )
    schemas: dict[str, dict[str, Any]] = {
        "http": {
            "type": "object",
            "additionalProperties": False,
            "required": ["url"],
            "properties": {
                "url": {
                    "type": "string",
                    "maxLength": MAX_URL_LENGTH,
                    # scheme, host, an optional port 1-65535, a path without spaces: no credentials
                    "pattern": r"^[hH][tT][tT][pP][sS]?://[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
                    r"(?::(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?"
                    r"(?:/[A-Za-z0-9._~%!$&'()*+,;=:@/-]*)?$",
                },
                "method": {"type": "string", "enum": list(HTTP_METHODS), "default": "POST"},
                "headers": {**headers, "description": f"Credential-like names are kept secret. {together}"},
                # Stored as references, never as values; credential-like names in `headers` are too.
                SECRET_HEADERS: {
                    **headers,
                    "description": f"Stored as references, never answered (docs/targets.md). {together}",
                },
                "body": {"type": "string", "maxLength": _MAX_PAYLOAD_CHARS},
            },
            # A GET carries no body.
            "if": {"properties": {"method": {"const": "GET"}}, "required": ["method"]},
            "then": {"properties": {"body": {"maxLength": 0}}},
        },
        "sqs": {
            "type": "object",
            "additionalProperties": False,
            "required": ["queue_url", "message"],
            "properties": {
                "queue_url": {
                    "type": "string",
                    "pattern": r"^https?://[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*(?::[1-9][0-9]{0,3})?"
                    + _SQS_QUEUE_PATH.pattern[1:],
                },
                "message": message,
                "message_group_id": fifo_group,
            },
            **_fifo_rule("queue_url", r"\.fifo$"),
        },
        "sns": {
            "type": "object",
            "additionalProperties": False,
            "required": ["topic_arn", "message"],
            "properties": {
                "topic_arn": {"type": "string", "pattern": _SNS_TOPIC_ARN.pattern},
                "message": message,
                "subject": {"type": "string", "pattern": r"^[ -~]{1,100}$"},
                "message_group_id": fifo_group,
            },
            **_fifo_rule("topic_arn", r"\.fifo$"),
        },
        "eventbridge": {
            "type": "object",
            "additionalProperties": False,
            "required": ["source", "detail_type"],
            "properties": {
                "event_bus_name": {"type": "string", "pattern": _EVENT_BUS.pattern, "default": "default"},
                "source": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 256,
                    "not": {"pattern": rf"^{_either_case('aws.')}"},
                },
                "detail_type": {"type": "string", "minLength": 1, "maxLength": 128},
                "detail": {**_JSON_OBJECT, "not": {"required": [CONTEXT_KEY]}},
            },
        },
        "lambda": {
            "type": "object",
            "additionalProperties": False,
            "required": ["function_name"],
            "properties": {
                "function_name": {"type": "string", "maxLength": 170, "pattern": _LAMBDA_FUNCTION.pattern},
                "invocation_type": {
                    "type": "string",
                    "enum": list(LAMBDA_INVOCATION_TYPES),
                    "default": "RequestResponse",
                },
                "payload": _JSON_OBJECT,
            },
        },
        "stepfunctions": {
            "type": "object",
            "additionalProperties": False,
            "required": ["state_machine_arn"],
            "properties": {
                "state_machine_arn": {"type": "string", "pattern": _SFN_ARN.pattern},
                "input": _JSON_OBJECT,
            },
        },
        "ecs": _ecs_schema(),
    }
    for kind, schema in schemas.items():
        schema["properties"][TEMPLATED_KEY] = {
            "type": "boolean",
            "default": False,
            "description": f"Fill `{{{{ name }}}}` placeholders in {', '.join(TEMPLATED_FIELDS[kind])} with "
            f"the run's context at each attempt (names: {', '.join(NAMES)}; a time name takes .epoch or "
            ".date). An unknown placeholder is refused when the job is written, as is a field that would "
            "break its kind's rules once filled in (docs/targets.md).",
        }
    return schemas


def _ecs_schema() -> dict[str, Any]:
    with_subnets = {"required": ["subnets"], "properties": {"subnets": {"minItems": 1}}}
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["cluster", "task_definition", "container"],
        "description": f"command and environment, with the container's name and the run's identity "
        f"(TICKWORK_* variables, about 400 characters), as ECS counts a task's overrides: at most "
        f"{ECS_MAX_OVERRIDES_CHARS} characters as JSON (non-ASCII characters escaped).",
        "properties": {
            "cluster": {"type": "string", "pattern": _ECS_CLUSTER.pattern},
            "task_definition": {"type": "string", "pattern": _ECS_TASK_DEFINITION.pattern},
            "launch_type": {"type": "string", "enum": list(ECS_LAUNCH_TYPES), "default": "FARGATE"},
            "container": {"type": "string", "pattern": _ECS_CONTAINER.pattern},
            "subnets": {
                "type": "array",
                "maxItems": ECS_MAX_SUBNETS,
                "uniqueItems": True,
                "items": {"type": "string", "pattern": _SUBNET.pattern},
            },
            "security_groups": {
                "type": "array",
                "maxItems": ECS_MAX_SECURITY_GROUPS,
                "uniqueItems": True,
                "items": {"type": "string", "pattern": _SECURITY_GROUP.pattern},
            },
            "assign_public_ip": {"type": "boolean", "default": False},
            "command": {
                "type": "array",
                "minItems": 1,
                "maxItems": ECS_MAX_COMMAND_ITEMS,
                "items": {"type": "string", "maxLength": ECS_MAX_OVERRIDES_CHARS},
            },
            "environment": {
                "type": "object",
                "maxProperties": ECS_MAX_ENVIRONMENT,
                "propertyNames": {
                    "pattern": _ENV_NAME.pattern,
                    "not": {"pattern": f"^{_either_case(ECS_ENV_PREFIX)}"},
                },
                "additionalProperties": {"type": "string", "maxLength": ECS_MAX_OVERRIDES_CHARS},
            },
        },
        "allOf": [
            # Fargate (the default) runs in subnets; security groups come with them.
            {
                "if": {"properties": {"launch_type": {"const": "EC2"}}, "required": ["launch_type"]},
                "then": {"properties": {"assign_public_ip": {"const": False}}},
                "else": with_subnets,
            },
            {
                "if": {"properties": {"security_groups": {"minItems": 1}}, "required": ["security_groups"]},
                "then": with_subnets,
            },
        ],
    }
