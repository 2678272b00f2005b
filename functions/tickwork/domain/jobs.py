"""Job rules with no I/O: what a create asks for (JobSpec), what an edit changes (JobPatch and apply_patch),
how a job's runs end (completion, heartbeat and the timeout they allow), where a resume starts owing fires,
the fires between two instants, and the sentences a resume answers with. The job service (services/jobs.py)
applies them against the store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import Final, TypeVar

from tickwork.domain.alert_rules import AlertRules
from tickwork.domain.errors import ValidationError
from tickwork.domain.models import (
    Completion,
    Concurrency,
    Job,
    MissedFirePolicy,
    OverlapPolicy,
    Policies,
    RetryPolicy,
    Target,
)
from tickwork.domain.planning import PausedFireOutcomes
from tickwork.domain.schedule import DstGapPolicy, DstRepeatPolicy, Schedule, next_fire_after, parse_schedule
from tickwork.domain.targets import allowed_completions, default_completion, describe_target
from tickwork.domain.timekeys import format_instant

T = TypeVar("T")

# The executor Lambda stops at 900 s: a call must end, and its outcome be written, well inside that, or the
# run is retried after its lease as if the worker had died (a second call of the target). The limit of
# response and delivery runs, which an executor holds for their whole call.
MAX_TIMEOUT_SECONDS = 840
# A callback run's attempt outlives its call. Its message keeps watching the lease, re-sent at most every
# 900 s (SQS's longest delay), so a 24 h attempt costs 97 hops and 10 attempts (the API's most) stay under
# domain.dispatch.MAX_HOPS = 1000.
MAX_CALLBACK_TIMEOUT_SECONDS = 24 * 3600
# A callback run's heartbeat: the longest silence before its attempt counts as dead.
MIN_HEARTBEAT_SECONDS = 10
MAX_HEARTBEAT_SECONDS = MAX_CALLBACK_TIMEOUT_SECONDS


# The completions whose attempt outlives its call (the target reports, or Tickwork follows what it started):
# their timeout is the work's, up to a day; the call itself still gets at most 840 s.
LONG_COMPLETIONS = frozenset({Completion.CALLBACK, Completion.TRACKED})


def max_timeout_seconds(completion: Completion) -> int:
    """The longest timeout a job of this completion may have."""
    return MAX_CALLBACK_TIMEOUT_SECONDS if completion in LONG_COMPLETIONS else MAX_TIMEOUT_SECONDS


def check_completion(
    target: Target, completion: Completion, heartbeat_seconds: int | None, timeout_seconds: int
) -> None:
    """How a job's runs end, checked against its target and timeout: ValidationError naming `completion`,
    `heartbeat_seconds` or `timeout_seconds` otherwise.

    - completion: one of the target's (targets.allowed_completions): callback for http targets only;
    - heartbeat_seconds: callback only, 10-86,400 s, and not longer than the timeout (the attempt would end
      at its timeout before a missed heartbeat could be noticed);
    - timeout_seconds: 1-840 s, or up to 86,400 s (24 h) for callback and tracked runs.
    """
    allowed = allowed_completions(target)
    if completion not in allowed:
        if completion is Completion.CALLBACK:
            why = "callback is for http targets only (the call carries the completion and heartbeat URLs)"
        else:
            why = f"{completion} is not how {describe_target(target)} ends"
        raise ValidationError("completion", f"{why}; {describe_target(target)} allows {' or '.join(allowed)}")
    if heartbeat_seconds is not None:
        if completion is not Completion.CALLBACK:
            raise ValidationError(
                "heartbeat_seconds",
                f"applies to completion callback only (this job's completion is {completion})",
            )
        if not MIN_HEARTBEAT_SECONDS <= heartbeat_seconds <= MAX_HEARTBEAT_SECONDS:
            raise ValidationError(
                "heartbeat_seconds", f"must be {MIN_HEARTBEAT_SECONDS}-{MAX_HEARTBEAT_SECONDS:,} seconds"
            )
        if heartbeat_seconds > timeout_seconds:
            raise ValidationError(
                "heartbeat_seconds",
                f"{heartbeat_seconds} s is longer than timeout_seconds {timeout_seconds} s: the attempt "
                "ends at its timeout first",
            )
    limit = max_timeout_seconds(completion)
    if not 1 <= timeout_seconds <= limit:
        longer = (
            ""
            if completion in LONG_COMPLETIONS
            else f"; only completion callback (http targets) and tracked (stepfunctions, ecs) allow up to "
            f"{MAX_CALLBACK_TIMEOUT_SECONDS:,} s"
        )
        raise ValidationError(
            "timeout_seconds", f"must be 1-{limit} seconds for completion {completion}{longer}"
        )


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A validated request to create a job (the API turns its input into this). How its runs end is checked
    at construction (`check_completion`)."""

    name: str
    schedule: Schedule
    target: Target
    policies: Policies = field(default_factory=Policies)
    timeout_seconds: int = 60
    retention_days: int = 30
    description: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    completion: Completion | None = None  # None: the target's default (targets.default_completion)
    heartbeat_seconds: int | None = None
    alerts: AlertRules | None = None  # None: the owner's default rules (none set: NO_ALERTS)
    calendars: tuple[str, ...] = ()  # the owner's exclusion calendars (checked to exist by the service)
    group: str = "default"

    def __post_init__(self) -> None:
        check_completion(self.target, self.resolved_completion, self.heartbeat_seconds, self.timeout_seconds)

    @property
    def resolved_completion(self) -> Completion:
        """The completion the job gets: the one asked for, or the target's default."""
        return default_completion(self.target) if self.completion is None else self.completion


class _Unset(Enum):
    """Marks a PATCH field the request did not mention (None may be a real value: `end_at: null`)."""

    UNSET = "unset"


UNSET: Final = _Unset.UNSET


def _pick(value: T | _Unset, current: T) -> T:
    return current if isinstance(value, _Unset) else value


@dataclass(frozen=True, slots=True)
class SchedulePatch:
    """Schedule fields to change; the rest keep their value. The merged schedule is validated as a whole."""

    expression: str | _Unset = UNSET
    timezone: str | _Unset = UNSET
    start_at: datetime | _Unset | None = UNSET
    end_at: datetime | _Unset | None = UNSET
    jitter_seconds: int | _Unset = UNSET
    dst_gap: DstGapPolicy | _Unset = UNSET
    dst_repeat: DstRepeatPolicy | _Unset = UNSET


@dataclass(frozen=True, slots=True)
class RetryPatch:
    max_attempts: int | _Unset = UNSET
    backoff_base_seconds: float | _Unset = UNSET
    backoff_max_seconds: float | _Unset = UNSET


@dataclass(frozen=True, slots=True)
class PoliciesPatch:
    overlap: OverlapPolicy | _Unset = UNSET
    missed_fire: MissedFirePolicy | _Unset = UNSET
    retry: RetryPatch | None = None
    concurrency: Concurrency | _Unset | None = UNSET  # replaces the key and limit whole; None removes them


@dataclass(frozen=True, slots=True)
class JobPatch:
    """A partial update; every field left UNSET keeps its value. `target` replaces the whole target."""

    name: str | _Unset = UNSET
    description: str | _Unset = UNSET
    tags: Mapping[str, str] | _Unset = UNSET
    schedule: SchedulePatch | None = None
    target: Target | _Unset = UNSET
    policies: PoliciesPatch | None = None
    timeout_seconds: int | _Unset = UNSET
    retention_days: int | _Unset = UNSET
    completion: Completion | _Unset = UNSET
    heartbeat_seconds: int | _Unset | None = UNSET  # None removes it
    alerts: AlertRules | _Unset = UNSET  # replaces the rules and channels whole
    calendars: tuple[str, ...] | _Unset = UNSET  # replaces the list whole
    group: str | _Unset = UNSET


def _patched_schedule(current: Schedule, patch: SchedulePatch | None) -> Schedule:
    if patch is None:
        return current
    return parse_schedule(
        _pick(patch.expression, current.expression),
        _pick(patch.timezone, current.timezone),
        start_at=_pick(patch.start_at, current.start_at),
        end_at=_pick(patch.end_at, current.end_at),
        jitter_seconds=_pick(patch.jitter_seconds, current.jitter_seconds),
        dst_gap=_pick(patch.dst_gap, current.dst_gap),
        dst_repeat=_pick(patch.dst_repeat, current.dst_repeat),
    )


def _patched_retry(current: RetryPolicy, patch: RetryPatch | None) -> RetryPolicy:
    if patch is None:
        return current
    retry = RetryPolicy(
        max_attempts=_pick(patch.max_attempts, current.max_attempts),
        backoff_base_seconds=_pick(patch.backoff_base_seconds, current.backoff_base_seconds),
        backoff_max_seconds=_pick(patch.backoff_max_seconds, current.backoff_max_seconds),
    )
    check_retry(retry, "policies.retry")
    return retry


def _patched_policies(current: Policies, patch: PoliciesPatch | None) -> Policies:
    if patch is None:
        return current
    return Policies(
        overlap=_pick(patch.overlap, current.overlap),
        missed_fire=_pick(patch.missed_fire, current.missed_fire),
        retry=_patched_retry(current.retry, patch.retry),
        concurrency=_pick(patch.concurrency, current.concurrency),
    )


def check_retry(retry: RetryPolicy, field_prefix: str) -> None:
    if retry.backoff_max_seconds < retry.backoff_base_seconds:
        raise ValidationError(
            f"{field_prefix}.backoff_max_seconds",
            f"{retry.backoff_max_seconds} is below backoff_base_seconds {retry.backoff_base_seconds}",
        )


_INSTANT = timedelta(microseconds=1)


def resume_from(job: Job, now: datetime) -> datetime:
    """Fires owed from before the pause (the job was behind) come first, then those inside the pause."""
    start = job.paused_at or now
    if job.next_fire_at is not None:
        start = min(start, job.next_fire_at - _INSTANT)
    return start


def _patched_completion(job: Job, target: Target, patch: JobPatch) -> tuple[Completion, int | None]:
    """The completion and heartbeat after an edit. Not given, the completion stays what it was if the (new)
    target allows it, and otherwise becomes the target's default: a target changed from http to sqs moves
    a response job to delivery, and from sqs to http a delivery job to response. Not given, the heartbeat
    stays while the completion stays callback and goes with it."""
    if isinstance(patch.completion, _Unset):
        kept = job.completion in allowed_completions(target)
        completion = job.completion if kept else default_completion(target)
    else:
        completion = patch.completion
    kept_heartbeat = job.heartbeat_seconds if completion is Completion.CALLBACK else None
    return completion, _pick(patch.heartbeat_seconds, kept_heartbeat)


def apply_patch(job: Job, patch: JobPatch, now: datetime) -> Job:
    """The job after a user's edit: version + 1; a changed schedule fires next from `now`. The completion
    follows a changed target when it does not suit it any more (`_patched_completion`), and the result is
    checked like a create (`check_completion`)."""
    schedule = _patched_schedule(job.schedule, patch.schedule)
    target = _pick(patch.target, job.target)
    completion, heartbeat_seconds = _patched_completion(job, target, patch)
    timeout_seconds = _pick(patch.timeout_seconds, job.timeout_seconds)
    check_completion(target, completion, heartbeat_seconds, timeout_seconds)
    edited = replace(
        job,
        name=_pick(patch.name, job.name),
        description=_pick(patch.description, job.description),
        tags=dict(_pick(patch.tags, job.tags)),
        schedule=schedule,
        target=target,
        policies=_patched_policies(job.policies, patch.policies),
        timeout_seconds=timeout_seconds,
        completion=completion,
        heartbeat_seconds=heartbeat_seconds,
        retention_days=_pick(patch.retention_days, job.retention_days),
        alerts=_pick(patch.alerts, job.alerts),
        calendars=tuple(_pick(patch.calendars, job.calendars)),
        group=_pick(patch.group, job.group),
        version=job.version + 1,
        updated_at=now,
    )
    if schedule != job.schedule:
        # Fires of the old schedule already planned are cancelled by the executor at claim time. A job that
        # was behind (its next fire already past) still owes the new schedule's fires since then: they
        # follow the missed-fire policy instead of vanishing.
        start = now if job.next_fire_at is None else min(now, job.next_fire_at - _INSTANT)
        edited = replace(edited, next_fire_at=next_fire_after(schedule, start))
    return edited


def fires_between(
    schedule: Schedule, after: datetime, before: datetime, cap: int
) -> tuple[list[datetime], bool]:
    """Fires f with after < f < before, at most `cap` of them: (fires, capped)."""
    fires: list[datetime] = []
    fire = next_fire_after(schedule, after)
    while fire is not None and fire < before:
        fires.append(fire)
        if len(fires) >= cap:
            return fires, True
        fire = next_fire_after(schedule, fire)
    return fires, False


def describe_outcomes(
    policy: MissedFirePolicy, count: int, capped: bool, outcomes: PausedFireOutcomes
) -> str:
    """The resume's sentence when some fires inside the pause already had runs (planned before it): the
    plain policy sentence would promise runs for fires that were cancelled while the job was paused."""
    many = f"at least {count}" if capped else str(count)
    parts = []
    if outcomes.catch_up:
        parts.append(f"{outcomes.catch_up} run now, late, as catch-up runs")
    if outcomes.missed:
        parts.append(f"{outcomes.missed} are recorded as missed")
    if outcomes.pending:
        parts.append(f"{outcomes.pending} planned before the pause run now, late")
    if outcomes.cancelled:
        parts.append(
            f"{outcomes.cancelled} planned before the pause were cancelled when they came due and do not run"
        )
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"Of the {many} fires missed during the pause, {listed} (missed_fire={policy})."


def describe_paused_fires(policy: MissedFirePolicy, count: int, capped: bool, latest: datetime | None) -> str:
    """The sentence a resume answers with: what happens to the fires that fell inside the pause."""
    if count == 0:
        return "No fire fell inside the pause; the job continues with its next scheduled fire."
    many = f"at least {count}" if capped else str(count)
    fires = "fire" if count == 1 and not capped else "fires"
    if policy is MissedFirePolicy.RUN_ALL:
        return (
            f"All {many} {fires} missed during the pause run now, late, as catch-up runs "
            f"(missed_fire=run_all)."
        )
    if policy is MissedFirePolicy.COALESCE:
        when = "" if latest is None or capped else f" ({format_instant(latest)})"
        if count == 1 and not capped:
            return (
                f"The fire missed during the pause{when} runs now as a catch-up run (missed_fire=coalesce)."
            )
        return (
            f"Only the latest of the {many} fires missed during the pause{when} runs now, as a catch-up "
            f"run; the others are recorded as missed (missed_fire=coalesce)."
        )
    return (
        f"None of the {many} {fires} missed during the pause runs; each is recorded as missed "
        f"(missed_fire=skip)."
    )


def rollback_patch(old: Job) -> JobPatch:
    """The edit that writes a job's definition at an earlier revision back (a rollback is an edit, so a new
    revision): every field a person sets, whole. The state stays as it is (a rollback restores what the job
    does, not whether it runs: pause and resume say that)."""
    schedule = old.schedule
    policies = old.policies
    return JobPatch(
        name=old.name,
        description=old.description,
        tags=dict(old.tags),
        schedule=SchedulePatch(
            expression=schedule.expression,
            timezone=schedule.timezone,
            start_at=schedule.start_at,
            end_at=schedule.end_at,
            jitter_seconds=schedule.jitter_seconds,
            dst_gap=schedule.dst_gap,
            dst_repeat=schedule.dst_repeat,
        ),
        target=old.target,
        policies=PoliciesPatch(
            overlap=policies.overlap,
            missed_fire=policies.missed_fire,
            retry=RetryPatch(
                max_attempts=policies.retry.max_attempts,
                backoff_base_seconds=policies.retry.backoff_base_seconds,
                backoff_max_seconds=policies.retry.backoff_max_seconds,
            ),
            concurrency=policies.concurrency,
        ),
        timeout_seconds=old.timeout_seconds,
        retention_days=old.retention_days,
        completion=old.completion,
        heartbeat_seconds=old.heartbeat_seconds,
        alerts=old.alerts,
        calendars=old.calendars,
        group=old.group,
    )
