"""Jobs and runs: small immutable types and the enums that name their states and policies."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from tickwork.domain.alert_rules import NO_ALERTS, AlertRules
from tickwork.domain.errors import ValidationError
from tickwork.domain.schedule import Schedule, jitter_offset, next_fire_after, previous_fire_before
from tickwork.domain.timekeys import compact_instant, due_key, parse_compact_instant


class JobState(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"


class RunState(StrEnum):
    PLANNED = "planned"  # committed by the ticker; dispatch message sent or about to be
    QUEUED = "queued"  # overlap=queue: waits for the job's running run to finish
    RUNNING = "running"  # claimed by an executor holding a lease
    RETRY_WAIT = "retry_wait"  # an attempt failed; the next one is scheduled with backoff
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # every attempt failed (or dead-lettered): alarmed
    SKIPPED = "skipped"  # overlap policy said no; the reason says why
    MISSED = "missed"  # missed-fire policy recorded the slot without running it
    CANCELLED = "cancelled"  # job paused, deleted, or the fire left its schedule before the run started
    EXCLUDED = "excluded"  # the fire fell in one of the job's exclusion calendars (domain/calendars.py)

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_RUN_STATES


TERMINAL_RUN_STATES = frozenset(
    {
        RunState.SUCCEEDED,
        RunState.FAILED,
        RunState.SKIPPED,
        RunState.MISSED,
        RunState.CANCELLED,
        RunState.EXCLUDED,
    }
)


class Trigger(StrEnum):
    SCHEDULE = "schedule"
    CATCH_UP = "catch-up"  # planned after its fire time had passed (the ticker was behind)
    MANUAL = "manual"  # run now: keyed off every schedule slot (docs/design.md "Runs on request")
    BACKFILL = "backfill"  # a past fire of the schedule, asked for by the backfill endpoint


class Completion(StrEnum):
    """How a run's attempt ends (docs/design.md, "How a run ends")."""

    RESPONSE = "response"  # the call's answer is the outcome (HTTP, Lambda RequestResponse)
    CALLBACK = "callback"  # the target may answer 202 and report later through its completion URL (HTTP)
    DELIVERY = "delivery"  # the run ends when the message is accepted (SQS, SNS, EventBridge, Lambda Event):
    # "delivered", not that the work succeeded
    TRACKED = "tracked"  # Tickwork follows what it started (a Step Functions execution) to its end


class OverlapPolicy(StrEnum):
    ALLOW = "allow"
    SKIP = "skip"
    QUEUE = "queue"


class MissedFirePolicy(StrEnum):
    RUN_ALL = "run_all"  # default: every missed fire runs (late), none silently lost
    COALESCE = "coalesce"  # run the latest missed fire, record the others as missed
    SKIP = "skip"  # record every missed fire as missed, run none


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 3
    backoff_base_seconds: float = 10.0
    backoff_max_seconds: float = 600.0


CONCURRENCY_KEY_PATTERN = r"^[A-Za-z0-9._:/-]{1,128}$"
MAX_CONCURRENCY_KEY_CHARS = 128
MAX_CONCURRENCY_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class Concurrency:
    """A job's own bound: at most `limit` runs at once of its owner's jobs that name the same `key` with the
    same limit (for example one target host). The key is the owner's: another owner's runs never count
    against it (domain/slots.py names the pool). Checked at construction."""

    key: str
    limit: int

    def __post_init__(self) -> None:
        if not re.fullmatch(CONCURRENCY_KEY_PATTERN, self.key):
            raise ValidationError(
                "policies.concurrency.key",
                f"must be 1-{MAX_CONCURRENCY_KEY_CHARS} characters of A-Z a-z 0-9 . _ : / - "
                f"(not {self.key!r})",
            )
        if isinstance(self.limit, bool) or not 1 <= self.limit <= MAX_CONCURRENCY_LIMIT:
            raise ValidationError(
                "policies.concurrency.limit", f"must be 1-{MAX_CONCURRENCY_LIMIT:,}, not {self.limit!r}"
            )


@dataclass(frozen=True, slots=True)
class Policies:
    """How a job's runs behave: a fire while the previous run still runs (overlap), fires that passed
    unplanned (missed_fire), failed attempts (retry), and how many of the runs sharing its concurrency key
    may run at once (concurrency; None: no bound of its own). One value, carried whole by the job, its spec,
    its patch, the stored item and the API."""

    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    missed_fire: MissedFirePolicy = MissedFirePolicy.RUN_ALL
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    concurrency: Concurrency | None = None


@dataclass(frozen=True, slots=True)
class Target:
    """What a run calls. `kind` selects the adapter (http, sqs, sns, eventbridge, lambda, stepfunctions)."""

    kind: str
    config: Mapping[str, Any] = field(default_factory=dict)


DEFAULT_RETENTION = timedelta(days=30)


def shard_of(job_id: str, shard_count: int) -> int:
    """Stable shard of a job: a hash, so jobs (and their bursts) spread evenly."""
    digest = hashlib.sha256(job_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shard_count


@dataclass(frozen=True, slots=True)
class Job:
    job_id: str
    owner: str
    name: str
    schedule: Schedule
    target: Target
    shard: int
    created_at: datetime
    updated_at: datetime
    state: JobState = JobState.ACTIVE
    version: int = 1
    next_fire_at: datetime | None = None  # the job's next scheduled fire (UTC, no jitter)
    paused_at: datetime | None = None
    # Set by resume: fires between paused_at and now are still owed a decision (missed-fire policy), so the
    # job is filed in the `due` index under the resume minute, where the ticker's next read will find it.
    resumed_at: datetime | None = None
    # Set by user writes to now + lookahead: a job still owing fires (its next fire is in the past) is filed
    # in the `due` index under this minute, which the next tick reads, instead of under an old minute that
    # no tick reads again.
    due_floor: datetime | None = None
    policies: Policies = field(default_factory=Policies)
    timeout_seconds: int = 60
    completion: Completion = Completion.RESPONSE
    # Callback only: the longest silence (no heartbeat) before an accepted attempt counts as dead (None: the
    # attempt's lease runs to its timeout).
    heartbeat_seconds: int | None = None
    retention_days: int = 30
    description: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    # Counts the runs created on request (run now, retry, backfill). Each request moves it, and job writes
    # are conditional on it, so an edit or a delete cannot miss a run requested while it was being written.
    run_requests: int = 0
    # What the owner is told about, and where (domain/alert_rules.py).
    alerts: AlertRules = NO_ALERTS
    # Why the job is paused when Tickwork paused it (auto-pause after failures in a row); None otherwise.
    paused_reason: str | None = None
    # The owner's exclusion calendars whose dates and windows this job's scheduled fires skip, recorded
    # `excluded` (domain/calendars.py); read at the claim of each run, so an edit counts from then.
    calendars: tuple[str, ...] = ()
    group: str = "default"  # the one group the job belongs to (domain/bulk.py): what bulk actions select

    @property
    def due_key(self) -> str | None:
        """Key in the sparse `due` index; only active jobs with a next fire are in it.

        Filed under the minute of the next fire, or of `due_floor` when that fire is older (fires owed after
        a pause or an edit of a job that was behind): a bucket older than the ticker's re-read window would
        never be read again.
        """
        return self.due_key_at(self.next_fire_at)

    def due_key_at(self, next_fire_at: datetime | None) -> str | None:
        """The `due` key the job has once its next fire is `next_fire_at` (a plan's commit writes it without
        building the advanced job)."""
        return filed_due_key(self.state, self.shard, next_fire_at, self.due_floor)

    def advanced_to(self, next_fire_at: datetime | None) -> Job:
        return replace(self, next_fire_at=next_fire_at)


def filed_due_key(
    state: JobState, shard: int, next_fire_at: datetime | None, due_floor: datetime | None
) -> str | None:
    """The `due` key of a job in `state` with this next fire and floor (Job.due_key says why)."""
    if state is not JobState.ACTIVE or next_fire_at is None:
        return None
    filed_at = next_fire_at
    if due_floor is not None and due_floor > filed_at:
        filed_at = due_floor
    return due_key(shard, filed_at)


class Standing(StrEnum):
    """What the job says of one planned fire when a run of it is claimed."""

    ACTIVE = "active"
    PAUSED = "paused"
    DELETED = "deleted"
    OFF_SCHEDULE = "off_schedule"  # the (edited) schedule no longer has this fire time


@dataclass(frozen=True, slots=True)
class JobView:
    """What an executor needs of the job to claim and run one of its runs. Written onto the run when it is
    planned and rewritten by every job write that reaches the run (edit, pause, resume, delete: see
    docs/design.md), so the claim needs no read of the job."""

    version: int
    standing: Standing
    target: Target | None  # None: too large to copy onto every run; the claim reads it from the job
    timeout_seconds: int
    retry: RetryPolicy
    overlap: OverlapPolicy
    completion: Completion = Completion.RESPONSE
    heartbeat_seconds: int | None = None
    # The job's concurrency key and limit: the pools a claim on this view takes its slots in (the claim
    # checks it against the message's, as it does the timeout).
    concurrency: Concurrency | None = None
    calendars: tuple[str, ...] = ()  # the job's exclusion calendars, looked up at the first claim

    @classmethod
    def planned(cls, job: Job) -> JobView:
        """The view of a job's run as it is planned from the job's own schedule (so it is on it)."""
        standing = Standing.ACTIVE if job.state is JobState.ACTIVE else Standing.PAUSED
        target = job.target if target_size(job.target) <= VIEW_TARGET_MAX_BYTES else None
        policies = job.policies
        return cls(
            job.version,
            standing,
            target,
            job.timeout_seconds,
            policies.retry,
            policies.overlap,
            job.completion,
            job.heartbeat_seconds,
            policies.concurrency,
            job.calendars,
        )


# A target whose config is larger than this (as JSON) stays on the job: a run's view leaves it out and the
# claim reads the job for it, because every run item would otherwise pay its size in write units.
VIEW_TARGET_MAX_BYTES = 1024


def target_size(target: Target) -> int:
    """The target's size as JSON, in bytes (what a copy on a run item would cost)."""
    return len(json.dumps({"kind": target.kind, "config": target.config}, default=str).encode())


def make_run_id(job_id: str, scheduled_for: datetime) -> str:
    """The run's identity is (job, scheduled fire time): the lock against planning a fire twice."""
    return f"{job_id}:{compact_instant(scheduled_for)}"


def split_run_id(run_id: str) -> tuple[str, datetime]:
    job_id, sep, stamp = run_id.rpartition(":")
    if not sep or not job_id:
        raise ValueError(f"not a run id: {run_id!r}")
    return job_id, parse_compact_instant(stamp)


@dataclass(frozen=True, slots=True)
class Run:
    job_id: str
    scheduled_for: datetime  # the nominal fire time; part of the key
    due_at: datetime  # scheduled_for + the job's deterministic jitter: when the run should start
    state: RunState
    trigger: Trigger
    job_version: int
    planned_at: datetime
    expires_at: datetime  # retention (DynamoDB TTL)
    shard: int
    attempt: int = 0  # incremented by every claim: the fencing token
    dispatched_at: datetime | None = None  # when the queue accepted the message the first attempt came from
    redispatched_at: datetime | None = None  # last re-send by the sweeper: pushes its next check back
    started_at: datetime | None = None
    finished_at: datetime | None = None
    start_delay_ms: int | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    retry_at: datetime | None = None
    outcome: str | None = None
    reason: str | None = None
    attempts: tuple[Mapping[str, Any], ...] = ()
    job_view: JobView | None = None  # the job as the run's next claim sees it (None: read the job)
    owner: str = ""  # the job's owner (keys the failed-runs index); "" on runs planned before it was kept
    # The ticker sent this run's message before committing it (domain.dispatch.COMMIT_WINDOW): while it is
    # planned or running, that message, held in the queue until the run ends, is what recovers it, so it
    # needs no entry in the sweeper's index (domain.execution.check_at).
    queue_carried: bool = False
    # A callback run's last heartbeat from its target (its lease was extended then).
    heartbeat_at: datetime | None = None
    # A tracked run's running attempt: what it started (a Step Functions execution ARN), followed to its end.
    tracking: str | None = None
    # The schedule's fires either side of `scheduled_for` when the run was planned (its context: a run that
    # starts late still knows the slot it stands for and the one after). None: there was none.
    previous_slot: datetime | None = None
    next_slot: datetime | None = None
    # Its owner asked for its next attempt (a retry): no exclusion calendar decides it again.
    retry_requested: bool = False

    @property
    def run_id(self) -> str:
        return make_run_id(self.job_id, self.scheduled_for)

    @classmethod
    def for_fire(
        cls,
        job: Job,
        scheduled_for: datetime,
        *,
        now: datetime,
        trigger: Trigger,
        state: RunState,
        reason: str | None = None,
        due_at: datetime | None = None,
        queue_carried: bool = False,
    ) -> Run:
        """A run of one fire of the job (`due_at`: when it should start, by default the fire plus the job's
        jitter; `queue_carried`: its message goes out before its commit)."""
        if due_at is None:
            due_at = scheduled_for + jitter_offset(job.schedule, job.job_id, scheduled_for)
        # A run on request is keyed below the second (a rerun of a fire at the fire plus microseconds): its
        # slots are the schedule's either side of its whole second, so a rerun's previous slot is not itself.
        second = scheduled_for.replace(microsecond=0)
        return cls(
            job_id=job.job_id,
            scheduled_for=scheduled_for,
            due_at=due_at,
            state=state,
            trigger=trigger,
            job_version=job.version,
            planned_at=now,
            expires_at=scheduled_for + timedelta(days=job.retention_days),
            shard=job.shard,
            reason=reason,
            finished_at=now if state.is_terminal else None,
            job_view=None if state.is_terminal else JobView.planned(job),
            owner=job.owner,
            previous_slot=previous_fire_before(job.schedule, second),
            next_slot=next_fire_after(job.schedule, second),
            queue_carried=queue_carried,
        )
