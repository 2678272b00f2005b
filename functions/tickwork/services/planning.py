"""The ticker's use case: plan every due fire of one shard, each through the commit point."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from random import Random
from typing import TypeVar

from tickwork.domain.clock import Clock
from tickwork.domain.errors import DispatchError, PlanConflictError, TransientStoreError
from tickwork.domain.models import Job, JobState, Run, RunState
from tickwork.domain.planning import plan_batch
from tickwork.domain.timekeys import due_key, floor_minute
from tickwork.services.ports import Dispatcher, PlanStore
from tickwork.services.retrying import with_store_retries

logger = logging.getLogger(__name__)
T = TypeVar("T")

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
    complete: bool = True
    deferred_jobs: list[str] = field(default_factory=list)


class Planner:
    def __init__(
        self,
        store: PlanStore,
        dispatcher: Dispatcher,
        clock: Clock,
        config: PlannerConfig | None = None,
        rng: Random | None = None,
    ) -> None:
        self._store = store
        self._dispatcher = dispatcher
        self._clock = clock
        self._config = config or PlannerConfig()
        self._rng = rng or Random()

    def plan(self, shard: int, now: datetime | None = None) -> TickReport:
        """Plan every fire of `shard` up to now + lookahead. The watermark moves only when all of it
        committed, so a crash at any point leaves work for the next tick rather than losing it."""
        now = now or self._clock.now()
        horizon = now + self._config.lookahead
        report = TickReport(shard=shard, now=now, horizon=horizon)
        watermark = self._retrying(lambda: self._store.get_watermark(shard))
        start = (watermark if watermark is not None else now) - self._config.reread
        bucket = floor_minute(start)
        outbox = _Outbox(self._dispatcher, now, report)
        try:
            while bucket <= horizon:
                report.buckets_read += 1
                for job in self._retrying(partial(self._read_bucket, due_key(shard, bucket), horizon)):
                    report.jobs_seen += 1
                    if not self._plan_job(job, now, horizon, report, outbox):
                        report.complete = False
                        report.deferred_jobs.append(job.job_id)
                bucket += timedelta(minutes=1)
        finally:
            outbox.flush()
        if report.complete and (watermark is None or horizon > watermark):
            self._retrying(lambda: self._store.set_watermark(shard, horizon))
        return report

    def _plan_job(
        self, job: Job, now: datetime, horizon: datetime, report: TickReport, outbox: _Outbox
    ) -> bool:
        """Commit every fire of one job up to the horizon. False: left for the next tick."""
        current: Job | None = job
        conflicts = 0
        while (
            current is not None
            and current.state is JobState.ACTIVE
            and current.next_fire_at is not None
            and current.next_fire_at <= horizon
        ):
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
                    current = self._retrying(partial(self._store.get_job, current.job_id))
                    continue
                # Only runs existed: created already (e.g. by the job's own write), so advance the job
                # past them without creating them again.
                existing = self._retrying(
                    partial(self._store.existing_run_times, current.job_id, [r.scheduled_for for r in runs])
                )
                runs = tuple(r for r in runs if r.scheduled_for not in existing)
                try:
                    self._commit(current, runs, batch.next_fire_at)
                except PlanConflictError:
                    report.conflicts += 1
                    current = self._retrying(partial(self._store.get_job, current.job_id))
                    continue
            except TransientStoreError:
                logger.warning(
                    "job %s: store still throttling after retries; left for the next tick", job.job_id
                )
                return False
            report.commits += 1
            to_dispatch = [r for r in runs if r.state is RunState.PLANNED]
            report.runs_planned += len(to_dispatch)
            report.runs_catch_up += sum(1 for r in to_dispatch if r.scheduled_for < now)
            report.runs_missed += sum(1 for r in runs if r.state is RunState.MISSED)
            outbox.add(to_dispatch)
            current = current.advanced_to(batch.next_fire_at)
        return True

    def _read_bucket(self, key: str, horizon: datetime) -> list[Job]:
        return list(self._store.query_due(key, horizon))

    def _commit(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        self._retrying(partial(self._store.commit_plan, job, runs, next_fire_at))

    def _retrying(self, operation: Callable[[], T]) -> T:
        return with_store_retries(operation, self._clock, self._rng)


class _Outbox:
    """Committed runs waiting to be sent, in SQS batches of 10 across jobs (one send per run would cost ten
    times the requests). A crash before a flush loses no run: the sweeper re-sends planned runs whose message
    never arrived."""

    def __init__(self, dispatcher: Dispatcher, now: datetime, report: TickReport) -> None:
        self._dispatcher = dispatcher
        self._now = now
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
        try:
            self._dispatcher.dispatch(sending, self._now)
        except DispatchError as error:
            self._report.dispatch_failures += len(error.failed_run_ids)
            logger.error("dispatch failed after commit, sweeper will re-send: %s", error)
