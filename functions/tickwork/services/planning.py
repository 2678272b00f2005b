"""The ticker's use case: plan every due fire of one shard, each through the commit point."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickwork.domain.clock import Clock
from tickwork.domain.errors import DispatchError, PlanConflictError, TransientStoreError
from tickwork.domain.models import Job, JobState, Run, RunState
from tickwork.domain.planning import plan_batch
from tickwork.domain.timekeys import due_key, floor_minute
from tickwork.services.ports import Dispatcher, PlanStore

logger = logging.getLogger(__name__)

DEFAULT_LOOKAHEAD = timedelta(seconds=120)
# Buckets behind the watermark read again on each tick: the `due` index is eventually consistent, so a job
# written just before a tick may have been invisible to it.
DEFAULT_REREAD = timedelta(seconds=120)
# Bounds one transaction (DynamoDB allows 100 items): a long catch-up commits in slices.
DEFAULT_MAX_RUNS_PER_COMMIT = 25
# SQS sends up to 10 messages per request.
DISPATCH_BATCH = 10
# After this many lost races on one job in one tick, leave it for the next tick (the watermark stays).
MAX_CONFLICTS_PER_JOB = 3
# A watermark held for an unplanned fire stops just before it (stored instants have millisecond precision).
_BEFORE = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    lookahead: timedelta = DEFAULT_LOOKAHEAD
    reread: timedelta = DEFAULT_REREAD
    max_runs_per_commit: int = DEFAULT_MAX_RUNS_PER_COMMIT


@dataclass(slots=True)
class TickReport:
    shard: int
    now: datetime
    horizon: datetime
    buckets_read: int = 0
    jobs_seen: int = 0
    runs_planned: int = 0
    runs_catch_up: int = 0
    runs_missed: int = 0
    commits: int = 0
    conflicts: int = 0
    dispatch_failures: int = 0
    complete: bool = True  # the watermark reached the horizon
    deferred_jobs: list[str] = field(default_factory=list)  # lost races or throttling: next tick
    failed_jobs: list[str] = field(default_factory=list)  # unexpected errors, isolated (PlanFailures)
    errors: list[str] = field(default_factory=list)


class _JobProgress:
    """Where one job's planning stands: the first fire not yet committed."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.unplanned_from: datetime | None = job.next_fire_at

    def at(self, current: Job) -> None:
        self.unplanned_from = current.next_fire_at

    def done(self) -> None:
        self.unplanned_from = None


@dataclass(slots=True)
class TickSummary:
    """One tick over several shards: each shard's report, and the shards that could not be planned."""

    reports: list[TickReport]
    failed_shards: dict[int, str] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """The tick's metrics. PlanFailures counts isolated failures (jobs and whole shards): it alarms."""
        r = self.reports
        return {
            "RunsPlanned": sum(x.runs_planned for x in r),
            "RunsCatchUp": sum(x.runs_catch_up for x in r),
            "RunsMissed": sum(x.runs_missed for x in r),
            "PlanConflicts": sum(x.conflicts for x in r),
            "DispatchFailures": sum(x.dispatch_failures for x in r),
            "PlanFailures": sum(len(x.failed_jobs) for x in r) + len(self.failed_shards),
        }

    @property
    def incomplete_shards(self) -> list[int]:
        return sorted([x.shard for x in self.reports if not x.complete] + list(self.failed_shards))


class Planner:
    def __init__(
        self,
        store: PlanStore,
        dispatcher: Dispatcher,
        clock: Clock,
        config: PlannerConfig | None = None,
    ) -> None:
        self._store = store
        self._dispatcher = dispatcher
        self._clock = clock
        self._config = config or PlannerConfig()

    def plan(self, shard: int, now: datetime | None = None) -> TickReport:
        """Plan every fire of `shard` up to now + lookahead. The watermark moves only as far as everything
        before it committed, so a crash at any point leaves work for the next tick rather than losing it.
        One job that cannot be planned (a poison record, a store error after retries) is recorded in the
        report and skipped; every other job of the shard is still planned, and the watermark stops just
        before the job's unplanned fire, so the next tick reads its bucket again."""
        now = now or self._clock.now()
        horizon = now + self._config.lookahead
        report = TickReport(shard=shard, now=now, horizon=horizon)
        watermark = self._store.get_watermark(shard)
        start = (watermark if watermark is not None else now) - self._config.reread
        bucket = floor_minute(start)
        planned_through = horizon
        outbox = _Outbox(self._dispatcher, self._clock, now, report)
        try:
            while bucket <= horizon:
                report.buckets_read += 1
                try:
                    jobs = self._store.query_due(due_key(shard, bucket), horizon)
                except TransientStoreError as error:
                    # Nothing from this bucket on was read: the watermark stays before it.
                    report.errors.append(f"bucket {due_key(shard, bucket)}: {error}")
                    logger.error("shard %d: could not read %s after retries: %s", shard, bucket, error)
                    planned_through = min(planned_through, bucket - _BEFORE)
                    break
                for job in jobs:
                    report.jobs_seen += 1
                    unplanned = self._plan_job_isolated(job, now, horizon, report, outbox)
                    if unplanned is not None:
                        planned_through = min(planned_through, unplanned - _BEFORE)
                bucket += timedelta(minutes=1)
        finally:
            outbox.flush()
        report.complete = planned_through >= horizon
        if watermark is None or planned_through > watermark:
            self._store.set_watermark(shard, planned_through)
        return report

    def plan_shards(self, shards: Sequence[int], now: datetime, max_threads: int = 16) -> TickSummary:
        """Plan several shards in parallel (the work is I/O bound), each isolated from the others: a shard
        that fails (its watermark unreadable, a bug) is recorded and the others are still planned."""
        summary = TickSummary(reports=[])

        def one(shard: int) -> TickReport | None:
            try:
                return self.plan(shard, now)
            except Exception as error:
                # Isolation, not silence: logged with its traceback and counted in PlanFailures.
                summary.failed_shards[shard] = f"{type(error).__name__}: {error}"
                logger.exception("shard %d could not be planned this tick", shard)
                return None

        if not shards:
            return summary
        with ThreadPoolExecutor(max_workers=min(max_threads, len(shards)), thread_name_prefix="plan") as pool:
            summary.reports = [r for r in pool.map(one, shards) if r is not None]
        return summary

    def _plan_job_isolated(
        self, job: Job, now: datetime, horizon: datetime, report: TickReport, outbox: _Outbox
    ) -> datetime | None:
        """Plan one job; whatever goes wrong with it stays with it. Returns its first fire left unplanned
        (None: all planned up to the horizon)."""
        progress = _JobProgress(job)
        try:
            if self._plan_job(progress, now, horizon, report, outbox):
                return None
            report.deferred_jobs.append(job.job_id)
        except TransientStoreError as error:
            # Throttling that outlasted the retries, wherever it struck (the commit, or a read inside the
            # conflict handling): the job waits for the next tick.
            report.deferred_jobs.append(job.job_id)
            logger.warning("job %s: store still throttling after retries (%s); next tick", job.job_id, error)
        except Exception as error:
            # Isolation, not silence: a job that cannot be planned (a bug, a record the code cannot read,
            # a write the store refuses) must not stop its shard every minute. It is logged with its
            # traceback, counted (PlanFailures alarms), and its fires are kept behind the watermark.
            report.failed_jobs.append(job.job_id)
            report.errors.append(f"job {job.job_id}: {type(error).__name__}: {error}")
            logger.exception(
                "job %s could not be planned; the rest of shard %d goes on", job.job_id, job.shard
            )
        return progress.unplanned_from

    def _plan_job(
        self, progress: _JobProgress, now: datetime, horizon: datetime, report: TickReport, outbox: _Outbox
    ) -> bool:
        """Commit every fire of one job up to the horizon. False: left for the next tick."""
        current: Job | None = progress.job
        conflicts = 0
        while (
            current is not None
            and current.state is JobState.ACTIVE
            and current.next_fire_at is not None
            and current.next_fire_at <= horizon
        ):
            progress.at(current)
            batch = plan_batch(current, now=now, horizon=horizon, max_runs=self._config.max_runs_per_commit)
            runs = batch.runs
            try:
                self._commit(current, runs, batch.next_fire_at)
            except PlanConflictError as conflict:
                conflicts += 1
                report.conflicts += 1
                if conflicts > MAX_CONFLICTS_PER_JOB:
                    logger.warning("job %s kept changing during the tick; left for the next", current.job_id)
                    return False
                if conflict.job_changed:
                    # Another ticker planned it, or the user edited / paused / deleted it: re-read, re-plan.
                    current = self._store.get_job(current.job_id)
                    continue
                # Only runs existed: created already (e.g. by the job's own write), so advance the job
                # past them without creating them again.
                existing = self._store.existing_run_times(current.job_id, [r.scheduled_for for r in runs])
                runs = tuple(r for r in runs if r.scheduled_for not in existing)
                try:
                    self._commit(current, runs, batch.next_fire_at)
                except PlanConflictError:
                    report.conflicts += 1
                    current = self._store.get_job(current.job_id)
                    continue
            report.commits += 1
            to_dispatch = [r for r in runs if r.state is RunState.PLANNED]
            report.runs_planned += len(to_dispatch)
            report.runs_catch_up += sum(1 for r in to_dispatch if r.scheduled_for < now)
            report.runs_missed += sum(1 for r in runs if r.state is RunState.MISSED)
            outbox.add(to_dispatch)
            current = current.advanced_to(batch.next_fire_at)
        progress.done()
        return True

    def _commit(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        self._store.commit_plan(job, runs, next_fire_at)


class _Outbox:
    """Committed runs waiting to be sent, in SQS batches of 10 across jobs (one send per run would cost ten
    times the requests). A crash before a flush loses no run: the sweeper re-sends planned runs whose message
    never arrived. Each message's delay is computed when it is sent, not when the tick began: a long tick
    would otherwise make every later message visible late by the time the tick had already run."""

    def __init__(
        self, dispatcher: Dispatcher, clock: Clock, tick_started: datetime, report: TickReport
    ) -> None:
        self._dispatcher = dispatcher
        self._clock = clock
        self._tick_started = tick_started
        self._report = report
        self._pending: list[Run] = []

    def add(self, runs: Sequence[Run]) -> None:
        self._pending.extend(runs)
        if len(self._pending) >= DISPATCH_BATCH:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        sending, self._pending = self._pending, []
        # Never before the tick's own instant (a caller may plan "as of" a given time).
        sent_at = max(self._tick_started, self._clock.now())
        try:
            self._dispatcher.dispatch(sending, sent_at)
        except DispatchError as error:
            self._report.dispatch_failures += len(error.failed_run_ids)
            logger.error("dispatch failed after commit, sweeper will re-send: %s", error)
