"""Runs on request: run now, retry a failed run, backfill a past window. Pure rules; the use cases are in
services/requests.py and docs/design.md "Runs on request" says why they are shaped this way."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from tickwork.domain.errors import ConflictError, ValidationError
from tickwork.domain.models import Job, JobState, JobView, Run, RunState, Standing, Trigger
from tickwork.domain.schedule import is_fire_time, next_fire_after
from tickwork.domain.timekeys import is_whole_second

# One backfill request creates at most this many runs (the API answers 422 beyond): a window is split by
# the caller, never half-planned by us.
MAX_BACKFILL_FIRES = 1000
DEFAULT_BACKFILL_RATE = 10.0  # runs started per second
MAX_BACKFILL_RATE = 100.0
MIN_BACKFILL_RATE = 0.01
# How long an Idempotency-Key names the same request (and its answer is replayed).
REQUEST_RETENTION = timedelta(hours=24)
# Run states a retry may start again.
RETRYABLE_STATES = frozenset({RunState.FAILED, RunState.CANCELLED})
_MICROS = 1_000_000


class RequestKind(StrEnum):
    RUN_NOW = "run_now"
    RETRY = "retry"
    BACKFILL = "backfill"


class JobPausedError(ConflictError):
    """A run was asked of a paused job without saying to run it anyway (the API answers 409)."""


class RunNotRetryableError(ConflictError):
    """The run is not failed or cancelled (still running, waiting, or it succeeded): 409."""


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What an Idempotency-Key names: the request it was first sent with (its fingerprint) and what it
    created, so a retried request is answered the same without doing it twice."""

    request_key: str  # a hash of the owner, the kind and the key: one owner's key never names another's
    owner: str
    kind: RequestKind
    job_id: str
    fingerprint: str
    created_at: datetime
    expires_at: datetime
    answer: Mapping[str, Any] = field(default_factory=dict)


def request_key(owner: str, kind: RequestKind, key: str) -> str:
    return hashlib.sha256(f"{owner}\0{kind}\0{key}".encode()).hexdigest()


def off_slot_instant(now: datetime) -> datetime:
    """The key of a run now: the request instant, moved to a non-zero microsecond when it falls on a whole
    second. Schedule fires are whole seconds, so this can never be a scheduled slot's key."""
    return now if not is_whole_second(now) else now + timedelta(microseconds=1)


def manual_run(job: Job, at: datetime, *, now: datetime) -> Run:
    """A run now of the job, keyed at `at` (an off-slot instant), due at once. Its view is the job's, on
    its own standing: active unless the job is deleted (a pause does not stop a run asked for explicitly;
    the API refuses it on a paused job unless the caller insists)."""
    if is_whole_second(at):
        raise ValueError("a run now must be keyed off every schedule slot")
    run = Run.for_fire(job, at, now=now, trigger=Trigger.MANUAL, state=RunState.PLANNED, due_at=now)
    return replace(run, job_view=replace(JobView.planned(job), standing=Standing.ACTIVE))


def check_may_request(job: Job, *, even_if_paused: bool) -> None:
    if job.state is JobState.PAUSED and not even_if_paused:
        raise JobPausedError(
            f"job {job.job_id} is paused: resume it, or ask again with even_if_paused set to run it anyway"
        )


def retried(run: Run, job: Job, *, now: datetime) -> Run:
    """The run's next attempt, asked for after it failed or was cancelled: waiting to be claimed at once,
    fenced like any attempt (the claim takes attempt + 1), its earlier attempts kept in its record."""
    if run.state not in RETRYABLE_STATES:
        raise RunNotRetryableError(
            f"run {run.run_id} is {run.state}: only a failed or cancelled run can be retried"
        )
    if job.state is JobState.PAUSED and is_whole_second(run.scheduled_for):
        raise JobPausedError(f"job {job.job_id} is paused: resume it first, or use run now")
    if is_whole_second(run.scheduled_for) and not is_fire_time(job.schedule, run.scheduled_for):
        raise RunNotRetryableError(
            f"run {run.run_id}'s fire time is no longer on the job's schedule; use run now instead"
        )
    return replace(
        run,
        state=RunState.RETRY_WAIT,
        retry_at=now,
        finished_at=None,
        lease_owner=None,
        lease_expires_at=None,
        reason=f"retry requested after {run.state}",
        retry_requested=True,
        redispatched_at=None,
        job_version=job.version,
        job_view=JobView.planned(job),
        expires_at=max(run.expires_at, now + timedelta(days=job.retention_days)),
    )


@dataclass(frozen=True, slots=True)
class BackfillWindow:
    """Every fire of the job's schedule with start <= fire <= end, in the past."""

    start: datetime
    end: datetime
    rerun: bool = False
    rate_per_second: float = DEFAULT_BACKFILL_RATE

    def check(self, now: datetime) -> None:
        if self.end < self.start:
            raise ValidationError("to", "is before from")
        if self.end > now:
            raise ValidationError("to", "is in the future: backfill covers past fires only")
        if not MIN_BACKFILL_RATE <= self.rate_per_second <= MAX_BACKFILL_RATE:
            raise ValidationError(
                "rate_per_second", f"must be between {MIN_BACKFILL_RATE} and {MAX_BACKFILL_RATE}"
            )


def backfill_fires(job: Job, window: BackfillWindow) -> list[datetime]:
    """The schedule's fires in the window, oldest first. ValidationError (422) past MAX_BACKFILL_FIRES."""
    fires: list[datetime] = []
    fire = next_fire_after(job.schedule, window.start - timedelta(microseconds=1))
    while fire is not None and fire <= window.end:
        if len(fires) == MAX_BACKFILL_FIRES:
            raise ValidationError(
                "to",
                f"the window holds more than {MAX_BACKFILL_FIRES} fires of this schedule; split it into "
                "smaller windows",
            )
        fires.append(fire)
        fire = next_fire_after(job.schedule, fire)
    return fires


def rerun_instant(fire: datetime, salt: str) -> datetime:
    """The key of a second run of a slot that already has one (backfill with rerun): the fire time at a
    microsecond named by the request, so the same request names the same key again (a retried request
    does not rerun twice) and no slot key is ever reused."""
    digest = hashlib.sha256(f"{salt}\0{fire.isoformat()}".encode()).digest()
    return fire + timedelta(microseconds=1 + int.from_bytes(digest[:8], "big") % (_MICROS - 1))


def backfill_runs(
    job: Job,
    fires: list[datetime],
    taken: set[datetime],
    window: BackfillWindow,
    *,
    now: datetime,
    salt: str,
    first_index: int = 0,
) -> tuple[list[Run], int]:
    """The runs a backfill creates, and how many slots it leaves alone (they have a run and rerun is not
    set). They start gradually: the n-th (counting from `first_index`) at now + n / rate."""
    runs: list[Run] = []
    skipped = 0
    step = timedelta(seconds=1 / window.rate_per_second)
    # Kept for the job's retention from now, not from the (old) fire: a backfill must not expire at once.
    expires_at = now + timedelta(days=job.retention_days)
    for fire in fires:
        key = fire
        if fire in taken:
            if not window.rerun:
                skipped += 1
                continue
            key = rerun_instant(fire, salt)
        run = Run.for_fire(
            job,
            key,
            now=now,
            trigger=Trigger.BACKFILL,
            state=RunState.PLANNED,
            due_at=now + step * (first_index + len(runs)),
        )
        run = replace(run, expires_at=max(run.expires_at, expires_at))
        if key != fire:
            # A rerun is keyed off the slot, so a schedule edit does not cancel it: like a run now, only a
            # delete stops it.
            run = replace(run, job_view=replace(JobView.planned(job), standing=Standing.ACTIVE))
        runs.append(run)
    return runs, skipped
