"""The sweeper's use case (minutely): repair runs that stalled, from the sparse index of unfinished runs."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from random import Random

from tickwork.domain.clock import Clock
from tickwork.domain.dispatch import DeadLetter, RunMessage
from tickwork.domain.errors import DispatchError, StaleRunError, TransientStoreError
from tickwork.domain.execution import after_lease_expired, terminal
from tickwork.domain.models import Run, RunState
from tickwork.services.ports import DeadLetterSource, Dispatcher, Metrics, RunStore

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class SweepReport:
    redispatched: int = 0  # planned / retry-wait / queued runs whose message never arrived
    expired_leases: int = 0  # running runs whose worker went silent
    dead_lettered: int = 0  # runs marked failed from the DLQ
    failed: int = 0
    lost_races: int = 0  # the run moved while we looked: someone else repaired it
    # The safety net's own health: how long the oldest run in this sweep's work list has been past the
    # moment it should have moved on (0 if nothing was overdue). Re-sends do not reset it, so a run that
    # is repaired again and again without ever running keeps growing it.
    oldest_overdue_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


def overdue_since(run: Run) -> datetime:
    """When an open run should have moved on by itself: a running run when its lease expired, a retry at
    its retry time, any other run at its due time (or when it was planned, for a run planned late)."""
    if run.state is RunState.RUNNING and run.lease_expires_at is not None:
        return run.lease_expires_at
    if run.state is RunState.RETRY_WAIT and run.retry_at is not None:
        return run.retry_at
    return max(run.due_at, run.planned_at)


class Sweeper:
    def __init__(
        self,
        store: RunStore,
        dispatcher: Dispatcher,
        dead_letters: DeadLetterSource,
        clock: Clock,
        metrics: Metrics,
        shard_count: int,
        rng: Random | None = None,
    ) -> None:
        self._store = store
        self._dispatcher = dispatcher
        self._dead_letters = dead_letters
        self._clock = clock
        self._metrics = metrics
        self._shard_count = shard_count
        self._rng = rng or Random()

    def sweep(self, now: datetime | None = None) -> SweepReport:
        now = now or self._clock.now()
        report = SweepReport()
        for shard in range(self._shard_count):
            try:
                overdue = list(self._store.open_runs(shard, now))
            except TransientStoreError as error:
                report.errors.append(f"shard {shard}: {error}")
                logger.error("sweeper could not read shard %d (next sweep retries): %s", shard, error)
                continue
            for run in overdue:
                age = max(0.0, (now - overdue_since(run)).total_seconds())
                report.oldest_overdue_seconds = max(report.oldest_overdue_seconds, age)
                self._repair(run, now, report)
        try:
            self._drain_dead_letters(now, report)
        except (DispatchError, TransientStoreError) as error:
            report.errors.append(f"dead letters: {error}")
            logger.error("sweeper could not drain the DLQ (next sweep retries): %s", error)
        for name, value in (
            ("SweeperRedispatched", report.redispatched),
            ("ExpiredLeases", report.expired_leases),
            ("DeadLettered", report.dead_lettered),
        ):
            if value:
                self._metrics.count(name, value)
        return report

    def _repair(self, run: Run, now: datetime, report: SweepReport) -> None:
        try:
            if run.state is RunState.RUNNING:
                self._expire_lease(run, now, report)
            elif run.state in (RunState.PLANNED, RunState.RETRY_WAIT, RunState.QUEUED):
                # Record the re-send first (it pushes the next check back), then send: a crash in between
                # only delays the repair by one grace period. The message starts at hop 0: the sweeper runs
                # on a schedule, not from the queue, so its sends begin a new chain, and its own backoff
                # (the re-send doubles the wait before the next) already bounds how often it repeats.
                self._store.transition_run(run, replace(run, redispatched_at=now))
                not_before = run.retry_at if run.state is RunState.RETRY_WAIT and run.retry_at else run.due_at
                self._dispatcher.redispatch(
                    RunMessage(run.job_id, run.scheduled_for, run.attempt, not_before), run.shard, now
                )
                report.redispatched += 1
        except StaleRunError:
            report.lost_races += 1
        except (DispatchError, TransientStoreError) as error:
            # One run's trouble must not stop the sweep of the others; this run stays in the work list.
            report.errors.append(f"{run.run_id}: {error}")
            logger.error("sweeper could not repair %s (next sweep retries): %s", run.run_id, error)

    def _expire_lease(self, run: Run, now: datetime, report: SweepReport) -> None:
        job = self._store.get_job(run.job_id)
        after = after_lease_expired(run, job, now=now, rng=self._rng)
        self._store.transition_run(run, after)
        report.expired_leases += 1
        if after.state is RunState.RETRY_WAIT and after.retry_at is not None:
            self._dispatcher.redispatch(RunMessage.for_run(after, after.retry_at), run.shard, now)
        elif after.state is RunState.FAILED:
            report.failed += 1
            self._metrics.count("RunsFailed")

    @staticmethod
    def _dead_letter_ends(run: Run, letter: DeadLetter, now: datetime) -> bool:
        """A dead letter fails its run only if the run is still at the letter's attempt and no live worker
        holds it: a re-send may have moved the run on since, and that newer attempt must not be failed."""
        if run.state.is_terminal or letter.message is None or run.attempt != letter.message.attempt:
            return False
        live_lease = run.lease_expires_at is not None and run.lease_expires_at > now
        return not (run.state is RunState.RUNNING and live_lease)

    def _drain_dead_letters(self, now: datetime, report: SweepReport) -> None:
        while True:
            letters = self._dead_letters.receive(10)
            if not letters:
                return
            for letter in letters:
                if letter.message is None:
                    logger.error(
                        "dead letter that is not a run message, dropped after logging: %r", letter.body
                    )
                    self._dead_letters.delete(letter.receipt)
                    continue
                run = self._store.get_run(letter.message.job_id, letter.message.scheduled_for)
                if run is not None and self._dead_letter_ends(run, letter, now):
                    reason = f"dead-lettered after {letter.receive_count} deliveries (attempt {run.attempt})"
                    try:
                        self._store.transition_run(run, terminal(run, RunState.FAILED, reason, now))
                        report.dead_lettered += 1
                        report.failed += 1
                        self._metrics.count("RunsFailed")
                    except StaleRunError:
                        report.lost_races += 1
                        continue  # it moved while we looked; the letter stays for the next sweep
                self._dead_letters.delete(letter.receipt)
