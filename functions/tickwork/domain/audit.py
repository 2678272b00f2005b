"""The reconciliation audit's rules (pure): what counts as lost around the code, and how it is put back.

The at-least-once argument holds for every failure the code can see. A ticker-planned run's only pointer
is its queue message, though, and a job's only pointer is its `due` entry: a purged queue, a restored
table or an index that lags past the ticker's re-read window lose them without an error anywhere. The
audit walks every job once a pass (a segment of them each minute) and checks three things against the
job itself, the one record those losses leave intact:

- a queue-carried run still `planned`, or `running` past its lease, long after it should have moved on
  (its message is gone): sent again, or its attempt ended by the job's retry policy, as the sweeper does;
- a fire of the job's schedule before its stored next fire with no run record (the runs table lost it):
  recorded again, under the job's missed-fire policy, and sent;
- an active job filed under a `due` minute the ticker no longer reads: filed again where it will.

Never twice for an attempt that is progressing: a run is only touched `AUDIT_GRACE` after it should have
moved on (a live lease, a heartbeat, a queue that is merely slow never get there), a re-send backs off
the way the sweeper's does, and a claim is fenced by the run's attempt, so a duplicate message calls the
target once.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from tickwork.domain.execution import LEASE_MARGIN
from tickwork.domain.models import Job, JobState, Run, RunState, Trigger, filed_due_key
from tickwork.domain.planning import classify_fire
from tickwork.domain.schedule import Schedule, next_fire_after
from tickwork.domain.timekeys import floor_minute

# How long past the moment a queue-carried run should have moved on (its due time, or its lease's end)
# before the audit acts on it. Longer than any drain the load model plans for (the top of the hour's
# 60 s runs start within 300 s: `benchmarks/bench_top_of_hour.py`), so a backlog is never mistaken for a
# loss.
AUDIT_GRACE = timedelta(minutes=10)
# How far back a pass looks at a job's runs: a pass (AUDIT_SEGMENTS minutes) plus the grace plus slack,
# so every run is seen at least once after its grace; a runs table restored from up to this long ago is
# filled in. A restore from further back needs a wider audit (docs/deploy.md, "Restoring the runs table").
AUDIT_LOOKBACK = timedelta(minutes=30)
# The jobs are split into this many segments, one audited a minute: every job once every 10 minutes.
AUDIT_SEGMENTS = 10
# A job filed under a minute this far behind the ticker's watermark, beyond its re-read window, is never
# read again by the ticker.
STRANDED_SLACK = timedelta(seconds=60)
# A fire this recent may have its commit in flight: the audit does not expect its record yet.
RECORD_SETTLE = timedelta(minutes=2)
RECOVERED_REASON = "its run record was lost (restored table or lost write); recorded again by the audit"


@dataclass(frozen=True, slots=True)
class RecordedRuns:
    """What the audit needs of a job's runs in its window: the fires that have a record (owed fires are
    checked against them), and the runs not finished, the only ones that can be lost (`lost`). A finished
    run is read as its fire alone, so an engine need not decode it."""

    fires: frozenset[datetime]
    unfinished: tuple[Run, ...]

    @classmethod
    def of(cls, runs: Iterable[Run]) -> RecordedRuns:
        read = list(runs)
        return cls(
            frozenset(run.scheduled_for for run in read), tuple(r for r in read if not r.state.is_terminal)
        )

    @classmethod
    def job_by_job(
        cls,
        firsts: Mapping[str, datetime],
        last: datetime,
        runs_between: Callable[[str, datetime, datetime], Iterable[Run]],
    ) -> dict[str, RecordedRuns]:
        """Each job's, from its own read of its runs (an engine with no read across jobs)."""
        return {job_id: cls.of(runs_between(job_id, first, last)) for job_id, first in firsts.items()}


def audit_segment(job_id: str, segments: int) -> int:
    """Stable segment of a job for the engines that have no parallel scan of their own."""
    return zlib.crc32(job_id.encode()) % segments


def segment_at(now: datetime, segments: int) -> int:
    """The segment the audit takes at `now`: the minute goes round them all."""
    return int(now.timestamp() // 60) % segments


def owed_window(
    job: AuditedJob, now: datetime, lookback: timedelta = AUDIT_LOOKBACK
) -> tuple[datetime, bool]:
    """Where the fires that must have a run record start, and whether that start counts itself: within the
    lookback (inclusive), and strictly after the job's creation or its last user write (a write may have
    changed its schedule; a fire at the write's own millisecond was the old schedule's)."""
    written = max(job.created_at, job.updated_at)
    earliest = now - lookback
    return (earliest, True) if earliest > written else (written, False)


def fires_owed_records(
    job: AuditedJob, now: datetime, lookback: timedelta = AUDIT_LOOKBACK
) -> list[datetime]:
    """The job's fires that must already have a run record: planning moves the job's next fire past a fire
    only in the commit that records it, so every fire before the stored next fire has one. Only fires at
    least RECORD_SETTLE old (a commit in flight, a clock a little apart). A paused job is not moved on while
    paused, so its owed fires stop where the pause began."""
    if job.next_fire_at is None or job.state not in (JobState.ACTIVE, JobState.PAUSED):
        return []
    start, inclusive = owed_window(job, now, lookback)
    end = min(job.next_fire_at, now - RECORD_SETTLE)
    fires: list[datetime] = []
    fire = next_fire_after(job.schedule, start - timedelta(microseconds=1) if inclusive else start)
    while fire is not None and fire < end:
        fires.append(fire)
        fire = next_fire_after(job.schedule, fire)
    return fires


def stuck_window_start(
    job: AuditedJob, now: datetime, grace: timedelta = AUDIT_GRACE, segments: int = AUDIT_SEGMENTS
) -> datetime:
    """How far back the job's unfinished queue-carried runs are looked for: long enough that a run whose
    attempt holds the job's whole timeout (plus the lease margin) is seen at least once after its grace
    (a pass takes `segments` minutes), and never less than the lookback. Independent of the job's writes:
    a run planned before an edit can still be stuck after it."""
    holds = timedelta(seconds=job.timeout_seconds) + LEASE_MARGIN + grace + timedelta(minutes=2 * segments)
    return now - max(AUDIT_LOOKBACK, holds)


def recovered_runs(job: Job, missing: list[datetime], now: datetime) -> list[Run]:
    """Run records for fires that lost theirs, by the job's missed-fire policy as a late tick would plan
    them (run late, or recorded `missed`): never silently absent. Not queue-carried, so the sweeper
    follows them too."""
    runs: list[Run] = []
    for fire in sorted(missing):
        following = next_fire_after(job.schedule, fire)
        state = classify_fire(job, fire, following, now)
        runs.append(
            Run.for_fire(job, fire, now=now, trigger=Trigger.CATCH_UP, state=state, reason=RECOVERED_REASON)
        )
    return runs


def audit_check_at(run: Run, grace: timedelta = AUDIT_GRACE) -> datetime | None:
    """When the audit acts on a run nothing moved: a queue-carried run (no sweeper entry) `grace` after its
    due time, or its lease's end while running; later after each re-send, backing off as the sweeper does.
    None for a run the audit leaves alone: finished, or followed by the sweeper's index."""
    if run.state.is_terminal or not run.queue_carried:
        return None
    if run.state is RunState.RUNNING:
        return None if run.lease_expires_at is None else run.lease_expires_at + grace
    if run.state is not RunState.PLANNED:
        return None
    expected = max(run.due_at, run.planned_at)
    if run.redispatched_at is not None and run.redispatched_at >= expected:
        return run.redispatched_at + max(grace, run.redispatched_at - expected)
    return expected + grace


def lost(run: Run, now: datetime, grace: timedelta = AUDIT_GRACE) -> bool:
    check = audit_check_at(run, grace)
    return check is not None and check <= now


def stranded(job: AuditedJob, watermark: datetime | None, reread: timedelta) -> bool:
    """An active job no tick will plan: filed under no `due` minute or another one than its own (its entry
    was removed, or written from outside the API), or under one behind every tick's read (the watermark less
    the re-read window: an entry that became visible too late)."""
    if job.state is not JobState.ACTIVE or job.next_fire_at is None:
        return False
    if job.filed_under != job.due_key:
        return True
    if watermark is None:
        return False
    filed_at = max(job.next_fire_at, job.due_floor or job.next_fire_at)
    return floor_minute(filed_at) < watermark - reread - STRANDED_SLACK


def refiled(job: Job, watermark: datetime | None, now: datetime) -> Job:
    """The job filed where the ticker reads next: under its next fire's minute, or a minute past the later
    of its shard's watermark and now if that one is older; its next fire stays, so the ticker plans what it
    owes by its missed-fire policy."""
    floor = floor_minute(max(watermark or now, now)) + timedelta(minutes=1)
    return replace(job, due_floor=floor)


@dataclass(frozen=True, slots=True)
class AuditedJob:
    """A job as the audit reads it: what its checks need of the job, and the `due` minute its stored record
    is filed under (None: none), which the job model itself does not carry. An engine may read no more of
    the record than that (SQLite takes these out of it with `json_extract`: decoding every job whole was
    most of an idle sweeper's CPU); a repair then reads the whole job. `whole`: the job, where the engine
    read it whole anyway."""

    job_id: str
    shard: int
    state: JobState
    version: int
    run_requests: int
    schedule: Schedule
    next_fire_at: datetime | None
    due_floor: datetime | None
    created_at: datetime
    updated_at: datetime
    timeout_seconds: int
    filed_under: str | None
    whole: Job | None = None

    @classmethod
    def of(cls, job: Job, filed_under: str | None) -> AuditedJob:
        return cls(
            job_id=job.job_id,
            shard=job.shard,
            state=job.state,
            version=job.version,
            run_requests=job.run_requests,
            schedule=job.schedule,
            next_fire_at=job.next_fire_at,
            due_floor=job.due_floor,
            created_at=job.created_at,
            updated_at=job.updated_at,
            timeout_seconds=job.timeout_seconds,
            filed_under=filed_under,
            whole=job,
        )

    @property
    def due_key(self) -> str | None:
        return filed_due_key(self.state, self.shard, self.next_fire_at, self.due_floor)

    def read_from(self, job: Job) -> bool:
        """Whether `job` is still the job this was read from, as a job write's condition sees it (its
        version, run requests and next fire): a repair written from it is what the audit checked."""
        return (job.version, job.run_requests, job.next_fire_at) == (
            self.version,
            self.run_requests,
            self.next_fire_at,
        )
