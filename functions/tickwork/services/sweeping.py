"""The sweeper's use case (minutely): repair runs that stalled, from the sparse index of unfinished runs."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from random import Random

from tickwork.domain.clock import Clock
from tickwork.domain.delivery import LeaseWatched
from tickwork.domain.dispatch import DeadLetter, RunMessage
from tickwork.domain.errors import DispatchError, StaleRunError, TransientStoreError
from tickwork.domain.execution import after_lease_expired, needs_repair, recovered_by_message, terminal
from tickwork.domain.models import Run, RunState
from tickwork.services.ports import DeadLetterSource, Dispatcher, Metrics, RunStore

logger = logging.getLogger(__name__)


# A sweep stops taking new repairs after this long: the next one starts a minute later (the Lambda's own
# timeout is above it, see infra; the handler passes its remaining time when shorter).
DEFAULT_SWEEP_BUDGET = timedelta(seconds=50)
# Re-sends are handed to the dispatcher this many at a time; it sends them in SQS batches of 10 per queue.
# Runs spread over the queues by run id, so a flush of only 10 would go out as one small request per queue
# (4 queues: ~2.5 messages a request); 100 fills the batches for up to 10 queues. A run is recorded as
# re-sent before its message goes: a crash before the flush only delays it to its next check.
REPAIR_BATCH = 100


@dataclass(frozen=True, slots=True)
class SweeperConfig:
    budget: timedelta = DEFAULT_SWEEP_BUDGET
    repair_batch: int = REPAIR_BATCH


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
    first_shard: int = 0  # the sweep starts here and goes round: no shard is always last
    shards_cut_short: list[int] = field(default_factory=list)  # their budget ran out: the rest next sweep
    failures: int = 0  # unexpected errors, isolated per run or shard (SweepFailures)
    errors: list[str] = field(default_factory=list)


def overdue_since(run: Run) -> datetime:
    """When an open run should have moved on by itself: a running run when its lease expired, a retry at
    its retry time, any other run at its due time (or when it was planned, for a run planned late)."""
    if run.state is RunState.RUNNING and run.lease_expires_at is not None:
        return run.lease_expires_at
    if run.state is RunState.RETRY_WAIT and run.retry_at is not None:
        return run.retry_at
    return max(run.due_at, run.planned_at)


def expire_lease(store: RunStore, run: Run, now: datetime, rng: Random) -> Run:
    """End a running run's attempt whose lease expired (its worker went silent), by the job's retry policy
    as it is now: waiting to retry, failed, or cancelled if the job is gone. Returns the run as written;
    StaleRunError if it moved meanwhile. The sweeper and a held message (the executor) both end leases."""
    job = store.get_job(run.job_id)
    after = after_lease_expired(run, None if job is None else job.policies.retry, now=now, rng=rng)
    store.transition_run(run, after)
    return after


@dataclass(frozen=True, slots=True)
class EndedAttempt:
    """A silent worker's attempt, ended by `watch_lease`: the run as written, and the error of its retry's
    send if that failed (the retry wait has its sweeper entry, so a later sweep re-sends it)."""

    run: Run
    retry_not_sent: DispatchError | None = None


def watch_lease(
    store: RunStore, dispatcher: Dispatcher, running: Run, watch: RunMessage, now: datetime, rng: Random
) -> EndedAttempt | None:
    """The lease rule for a queue-carried run whose message is what recovers it (`recovered_by_message`);
    `watch` is that message as it goes back to the queue. A live lease: `watch` is sent to come back when
    it ends (None). An expired one: the attempt ends (`expire_lease`; StaleRunError if the run moved) and a
    retry's message goes out, at `watch`'s hop. The executor and the sweeper's dead-letter drain use it."""
    lease = running.lease_expires_at
    if lease is not None and lease > now:
        dispatcher.redispatch(replace(watch, not_before=lease), running.shard, now)
        return None
    after = expire_lease(store, running, now, rng)
    if after.state is RunState.RETRY_WAIT and after.retry_at is not None:
        try:
            retry = RunMessage.for_run(after, after.retry_at, hops=watch.hops)
            dispatcher.redispatch(retry, running.shard, now)
        except DispatchError as error:
            return EndedAttempt(after, error)
    return EndedAttempt(after)


def watched_lease(
    store: RunStore, dispatcher: Dispatcher, running: Run, watch: RunMessage, now: datetime, rng: Random
) -> LeaseWatched:
    """`watch_lease` for a delivery (the executor): what it found, as the delivery's decision reads it."""
    try:
        ended = watch_lease(store, dispatcher, running, watch, now, rng)
    except StaleRunError:
        return LeaseWatched(moved=True)
    if ended is None:
        return LeaseWatched()
    unsent = None if ended.retry_not_sent is None else str(ended.retry_not_sent)
    return LeaseWatched(ended=ended.run, retry_not_sent=unsent)


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
        config: SweeperConfig | None = None,
    ) -> None:
        self._store = store
        self._dispatcher = dispatcher
        self._dead_letters = dead_letters
        self._clock = clock
        self._metrics = metrics
        self._shard_count = shard_count
        self._rng = rng or Random()
        self._config = config or SweeperConfig()

    def sweep(self, now: datetime | None = None, budget: timedelta | None = None) -> SweepReport:
        """Repair every overdue run of every shard, within `budget` (default: the config's). Shards are
        visited from a start that moves every minute, and each gets an equal share of what is left, so a
        backlog in one shard cannot starve the others; what does not fit is repaired by the next sweep.
        The dead-letter drain comes last and has a share too (one more slot), plus what the shards left.
        One run, shard, batch or dead letter that fails unexpectedly is logged with its traceback,
        counted (SweepFailures) and skipped."""
        now = now or self._clock.now()
        report = SweepReport()
        started = self._clock.now()
        allowed = self._config.budget if budget is None else min(budget, self._config.budget)
        deadline = started + max(allowed, timedelta(0))
        report.first_shard = int(now.timestamp() // 60) % self._shard_count
        order = [(report.first_shard + i) % self._shard_count for i in range(self._shard_count)]
        outbox = _RepairOutbox(self._dispatcher, self._clock, self._config.repair_batch, report)
        for position, shard in enumerate(order):
            left = (deadline - self._clock.now()) / (self._shard_count - position + 1)  # +1: the drain
            self._sweep_shard(shard, now, self._clock.now() + left, report, outbox)
        outbox.flush()
        try:
            self._drain_dead_letters(now, deadline, report)
        except (DispatchError, TransientStoreError) as error:
            report.errors.append(f"dead letters: {error}")
            logger.error("sweeper could not drain the DLQ (next sweep retries): %s", error)
        except Exception as error:
            logger.exception("sweeper: draining the dead letters failed; the sweep goes on")
            self._isolated(report, "dead letters", error)
        for name, value in (
            ("SweeperRedispatched", report.redispatched),
            ("ExpiredLeases", report.expired_leases),
            ("DeadLettered", report.dead_lettered),
            ("SweepFailures", report.failures),
        ):
            if value:
                self._metrics.count(name, value)
        return report

    def repair(self, runs: Iterable[Run], now: datetime) -> SweepReport:
        """Repair these runs the way a sweep repairs its overdue ones (re-send, or end an expired attempt
        by the job's retry policy), whatever listed them: the reconciliation audit's runs that no index
        lists. One run that fails unexpectedly is logged, counted and skipped."""
        report = SweepReport()
        outbox = _RepairOutbox(self._dispatcher, self._clock, self._config.repair_batch, report)
        for run in runs:
            try:
                self._repair(run, now, report, outbox)
            except Exception as error:
                logger.exception("repairing %s failed; the others go on", run.run_id)
                self._isolated(report, run.run_id, error)
        outbox.flush()
        return report

    def _sweep_shard(
        self, shard: int, now: datetime, shard_deadline: datetime, report: SweepReport, outbox: _RepairOutbox
    ) -> None:
        try:
            for run in self._store.open_runs(shard, now):
                if self._clock.now() >= shard_deadline:
                    report.shards_cut_short.append(shard)
                    return
                if not needs_repair(run, now):
                    continue  # listed by its check time, but still healthy: a live lease, a retry to come
                age = max(0.0, (now - overdue_since(run)).total_seconds())
                report.oldest_overdue_seconds = max(report.oldest_overdue_seconds, age)
                try:
                    self._repair(run, now, report, outbox)
                except Exception as error:
                    logger.exception("sweeper: repairing %s failed; the sweep goes on", run.run_id)
                    self._isolated(report, run.run_id, error)
        except TransientStoreError as error:
            report.errors.append(f"shard {shard}: {error}")
            logger.error("sweeper could not read shard %d (next sweep retries): %s", shard, error)
        except Exception as error:
            logger.exception("sweeper: shard %d failed; the other shards go on", shard)
            self._isolated(report, f"shard {shard}", error)

    @staticmethod
    def _isolated(report: SweepReport, what: str, error: Exception) -> None:
        """Isolation, not silence: the caller logged the traceback; the failure is counted and alarmed on."""
        report.failures += 1
        report.errors.append(f"{what}: {type(error).__name__}: {error}")

    def _repair(self, run: Run, now: datetime, report: SweepReport, outbox: _RepairOutbox) -> None:
        try:
            if run.state is RunState.RUNNING:
                self._expire_lease(run, now, report, outbox)
            elif run.state in (RunState.PLANNED, RunState.RETRY_WAIT, RunState.QUEUED):
                # Record the re-send first (it pushes the next check back), then send: a crash in between
                # only delays the repair by one grace period. The message starts at hop 0: the sweeper runs
                # on a schedule, not from the queue, so its sends begin a new chain, and its own backoff
                # (the re-send doubles the wait before the next) already bounds how often it repeats.
                self._store.transition_run(run, replace(run, redispatched_at=now))
                not_before = run.retry_at if run.state is RunState.RETRY_WAIT and run.retry_at else run.due_at
                outbox.add(RunMessage.for_run(run, not_before))
                report.redispatched += 1
        except StaleRunError:
            report.lost_races += 1
        except TransientStoreError as error:
            # One run's trouble must not stop the sweep of the others; this run stays in the work list.
            report.errors.append(f"{run.run_id}: {error}")
            logger.error("sweeper could not repair %s (next sweep retries): %s", run.run_id, error)

    def _expire_lease(self, run: Run, now: datetime, report: SweepReport, outbox: _RepairOutbox) -> None:
        after = expire_lease(self._store, run, now, self._rng)
        report.expired_leases += 1
        if after.state is RunState.RETRY_WAIT and after.retry_at is not None:
            outbox.add(RunMessage.for_run(after, after.retry_at))
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

    def _drain_dead_letters(self, now: datetime, deadline: datetime, report: SweepReport) -> None:
        """Until the DLQ is empty or the sweep's time is up. A letter that fails unexpectedly is logged,
        counted and left in the DLQ: it comes back to a later sweep after its visibility timeout."""
        while self._clock.now() < deadline:
            letters = self._dead_letters.receive(10)
            if not letters:
                return
            for letter in letters:
                try:
                    self._end_dead_letter(letter, now, report)
                except (DispatchError, TransientStoreError):
                    raise  # the DLQ or the table is in trouble, not this letter: stop, the next sweep retries
                except Exception as error:
                    logger.exception("sweeper: dead letter %r failed; the drain goes on", letter.receipt)
                    self._isolated(report, f"dead letter {letter.receipt}", error)

    def _end_dead_letter(self, letter: DeadLetter, now: datetime, report: SweepReport) -> None:
        if letter.message is None:
            logger.error("dead letter that is not a run message, dropped after logging: %r", letter.body)
            self._dead_letters.delete(letter.receipt)
            return
        run = self._store.get_run(letter.message.job_id, letter.message.scheduled_for)
        if run is not None and recovered_by_message(run, letter.message.attempt):
            # The letter was all that would bring this run back if its worker died: take over its watch.
            self._watch_for_dead_letter(run, letter.message, now, report)
        elif run is not None and self._dead_letter_ends(run, letter, now):
            reason = f"dead-lettered after {letter.receive_count} deliveries (attempt {run.attempt})"
            try:
                self._store.transition_run(run, terminal(run, RunState.FAILED, reason, now))
                report.dead_lettered += 1
                report.failed += 1
                self._metrics.count("RunsFailed")
            except StaleRunError:
                report.lost_races += 1
                return  # it moved while we looked; the letter stays for the next sweep
        self._dead_letters.delete(letter.receipt)

    def _watch_for_dead_letter(
        self, run: Run, message: RunMessage, now: datetime, report: SweepReport
    ) -> None:
        """A queue-carried run still running the attempt a dead letter started: a live lease gets a fresh
        message that comes back when it ends; an expired one ends the attempt (retry or failed), as the
        letter would have. A send that fails keeps the letter (DispatchError: the drain stops)."""
        watch = replace(message, hops=0, sent_at=None, watch=True)  # the sweeper's sends begin a new chain
        try:
            ended = watch_lease(self._store, self._dispatcher, run, watch, now, self._rng)
        except StaleRunError:
            report.lost_races += 1
            return
        if ended is None:
            return
        report.expired_leases += 1
        if ended.retry_not_sent is not None:
            report.errors.append(f"retry of {run.run_id}: {ended.retry_not_sent}")
        if ended.run.state is RunState.FAILED:
            report.failed += 1
            self._metrics.count("RunsFailed")


class _RepairOutbox:
    """Re-sends collected into batches. A batch that fails is logged and left: its runs keep their
    `redispatched_at`, so the next sweeps look at them again after the grace period. A batch that fails
    unexpectedly is also counted (SweepFailures) here, where all of its runs are known, not blamed on the
    run whose repair happened to fill it."""

    def __init__(self, dispatcher: Dispatcher, clock: Clock, batch: int, report: SweepReport) -> None:
        self._dispatcher = dispatcher
        self._clock = clock
        self._batch = max(1, batch)
        self._report = report
        self._pending: list[RunMessage] = []

    def add(self, message: RunMessage) -> None:
        self._pending.append(message)
        if len(self._pending) >= self._batch:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        sending, self._pending = self._pending, []
        try:
            self._dispatcher.redispatch_many(sending, self._clock.now())
        except DispatchError as error:
            self._report.errors.append(f"re-send: {error}")
            logger.error("sweeper could not re-send %d run(s) (next sweeps retry): %s", len(sending), error)
        except Exception as error:
            runs = ", ".join(m.run_id for m in sending)
            logger.exception("sweeper: re-sending %s failed; the sweep goes on", runs)
            Sweeper._isolated(self._report, f"re-send of {runs}", error)
