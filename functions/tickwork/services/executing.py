"""The executor's use case: claim a run, call its target, record the outcome, fenced by the attempt."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from random import Random

from tickwork.domain.backoff import backoff_delay
from tickwork.domain.clock import Clock
from tickwork.domain.dispatch import MAX_HOPS, RunMessage
from tickwork.domain.errors import DispatchError, StaleRunError, TransientStoreError
from tickwork.domain.execution import (
    LEASE_MARGIN,
    Claim,
    after_attempt,
    cancellation_reason,
    claimable_at,
    claimed,
    is_own_write,
    lease_until,
    recovered_by_message,
    standing_of,
    terminal,
    trusts_view,
)
from tickwork.domain.models import JobView, OverlapPolicy, Run, RunState, split_run_id
from tickwork.domain.targets import Invocation, TargetInvoker
from tickwork.services.ports import Dispatcher, Metrics, RunStore
from tickwork.services.sweeping import watch_lease

logger = logging.getLogger(__name__)

# Messages arrive up to a second early (SQS delays are whole seconds, rounded down): hold them. A message
# further ahead (a backoff longer than SQS's 900 s delay) goes back to the queue instead.
DEFAULT_MAX_HOLD = timedelta(seconds=2)
# A retry that finds the job's overlap slot taken looks again this much later.
BLOCKED_RETRY_WAIT = timedelta(seconds=30)
# A delivery whose reads or claim still throttle after the store retries goes back to the queue as a fresh
# message this much later (jittered, growing with its hops): a redelivery of the same message would count
# towards the DLQ's receive limit, and a dead letter fails the run. Throttling must never fail a run.
THROTTLED_RETRY_BASE_SECONDS = 5.0
THROTTLED_RETRY_MAX_SECONDS = 60.0


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    RETRY_SCHEDULED = "retry_scheduled"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    QUEUED = "queued"
    DEFERRED = "deferred"  # not yet due: sent back with a delay
    DUPLICATE = "duplicate"  # another delivery or attempt owns the run: nothing to do
    STALE_COMPLETION = "stale_completion"  # finished after losing the lease: result discarded
    NOT_FOUND = "not_found"
    WAITING_FOR_RUN = "waiting_for_run"  # sent before its run was committed: looks again shortly
    WATCHING_LEASE = "watching_lease"  # its run is running: the message comes back when the lease ends
    LEASE_EXPIRED = "lease_expired"  # its run's worker went silent: the attempt ended (retry, or failed)


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    worker_id: str
    max_hold: timedelta = DEFAULT_MAX_HOLD
    lease_margin: timedelta = LEASE_MARGIN


class Executor:
    def __init__(
        self,
        store: RunStore,
        invoker: TargetInvoker,
        dispatcher: Dispatcher,
        clock: Clock,
        metrics: Metrics,
        config: ExecutorConfig,
        rng: Random | None = None,
    ) -> None:
        self._store = store
        self._invoker = invoker
        self._dispatcher = dispatcher
        self._clock = clock
        self._metrics = metrics
        self._config = config
        self._rng = rng or Random()

    def execute(self, message: RunMessage) -> Outcome:
        """Handle one delivery. Safe to call any number of times for the same message: only the delivery
        whose claim wins calls the target, once per attempt."""
        try:
            return self._execute(message)
        except TransientStoreError as error:
            # Still throttled after the store retries, before the target was called: nothing happened to
            # the run yet, so send the message again later rather than let its receive count run out.
            return self._send_back_throttled(message, error)

    def _execute(self, message: RunMessage) -> Outcome:
        # The hot path is one conditional write: the message carries the run's key, attempt, due time and
        # timeout, and the run carries the job's view (kept current by job writes), so neither is read
        # first. A run older than the views' window reads the job instead (docs/design.md).
        now = self._clock.now()
        if message.runaway:
            return self._stop_runaway(message)
        wait = (message.not_before - now).total_seconds()
        if wait > self._config.max_hold.total_seconds():
            self._dispatcher.redispatch(message.resent(), 0, now)
            return Outcome.DEFERRED
        if wait > 0:
            self._clock.sleep(wait)
        now = self._clock.now()
        # A retry (attempt > 0) reads the job: job writes rewrite the views of unclaimed runs only, so a run
        # that was running when its job changed comes back to retry with the view it was claimed with.
        timeout = message.timeout_seconds
        if message.attempt > 0 or timeout is None or not trusts_view(message.scheduled_for, now):
            return self._execute_with_job_read(message)
        return self._claim_on_view(message, timeout, now, tries=2)

    def _claim_on_view(self, message: RunMessage, timeout_seconds: int, now: datetime, tries: int) -> Outcome:
        """Claim on the run's view: the store checks that the view lets the run go under overlap allow with
        this timeout (which sets the lease). A refusal returns the stored run, which says what to do."""
        claim = self._claim_for(message, now, timeout_seconds, trusting_view=True)
        try:
            mine = self._store.claim(claim)
        except StaleRunError as error:
            current = error.current
            if current is None:
                return self._run_missing(message)
            if claim.is_own(current):
                return self._own_claim_recognised(current, self._view_of(current), message.hops)
            if not claimable_at(current, message.attempt):
                return self._not_claimable(current, message)
            # Still claimable, so its view refused: the job stops it, wants its overlap slot, has another
            # timeout since the message was sent, or the run has no view.
            view = current.job_view
            if view is None:
                return self._execute_with_job_read(message)
            reason = cancellation_reason(view.standing)
            if reason is not None:
                return self._end(current, RunState.CANCELLED, reason, Outcome.CANCELLED, message)
            if view.overlap is not OverlapPolicy.ALLOW:
                return self._execute_exclusive(current, view, message, self._clock.now())
            if tries > 1 and view.timeout_seconds != timeout_seconds:
                return self._claim_on_view(message, view.timeout_seconds, self._clock.now(), tries - 1)
            return self._execute_with_job_read(message)  # it moved under us: let the job decide
        return self._started(mine, self._view_of(mine), message.hops)

    def _execute_with_job_read(self, message: RunMessage) -> Outcome:
        """A run whose view may be stale (older than the views' window), or that has none: the job as it is
        now decides, read strongly consistent."""
        job = self._store.get_job(message.job_id)
        now = self._clock.now()
        standing = standing_of(job, message.scheduled_for)
        reason = cancellation_reason(standing)
        if reason is not None or job is None:
            return self._cancel(message, reason or "job deleted")
        view = replace(JobView.planned(job), standing=standing, target=job.target)
        if job.policies.overlap is not OverlapPolicy.ALLOW:
            run = self._store.get_run(message.job_id, message.scheduled_for)
            if run is None:
                return self._run_missing(message)
            if not claimable_at(run, message.attempt):
                return self._not_claimable(run, message)
            return self._execute_exclusive(run, view, message, now)
        claim = self._claim_for(message, now, job.timeout_seconds, trusting_view=False)
        try:
            mine = self._store.claim(claim)
        except StaleRunError as error:
            if error.current is None:
                return self._run_missing(message)
            if not claim.is_own(error.current):
                return self._not_claimable(error.current, message)
            return self._own_claim_recognised(error.current, view, message.hops)
        return self._started(mine, view, message.hops)

    def _claim_for(
        self, message: RunMessage, now: datetime, timeout_seconds: int, *, trusting_view: bool
    ) -> Claim:
        return Claim(
            job_id=message.job_id,
            scheduled_for=message.scheduled_for,
            expected_attempt=message.attempt,
            worker=self._delivery_worker(),
            now=now,
            timeout_seconds=timeout_seconds,
            lease_expires_at=lease_until(timeout_seconds, now, self._config.lease_margin),
            dispatched_at=message.sent_at,
            trusting_view=trusting_view,
        )

    def _own_claim_recognised(self, current: Run, view: JobView, hops: int) -> Outcome:
        self._lost_response_recognised("claim", current.run_id)
        return self._started(current, view, hops)

    def _lost_response_recognised(self, write: str, run_id: str) -> None:
        # Our write landed and its response was lost; the retry was refused by its own condition.
        logger.info("%s of %s recognised as our own after a lost response", write, run_id)
        self._metrics.count("LostResponsesRecognised")

    @staticmethod
    def _view_of(run: Run) -> JobView:
        if run.job_view is None:
            raise AssertionError(f"run {run.run_id} was claimed on its view but has none")
        return run.job_view

    def _started(self, run: Run, view: JobView, hops: int) -> Outcome:
        self._count_start(run)
        return self._run_target(run, view, False, hops)

    def _execute_exclusive(self, run: Run, view: JobView, message: RunMessage, now: datetime) -> Outcome:
        """Overlap skip / queue: the claim also takes the job's single running slot, in a transaction, from
        the run as read (or as the refused claim returned it)."""
        mine = claimed(
            run,
            view,
            worker=self._delivery_worker(),
            now=now,
            lease_margin=self._config.lease_margin,
            dispatched_at=message.sent_at,
        )
        try:
            if not self._store.claim_exclusive(run, mine, now):
                return self._blocked_by_overlap(run, view, message)
        except StaleRunError as error:
            if not is_own_write(error.current, mine):
                return self._refused(message)  # another delivery claimed it first, or its view moved
            self._lost_response_recognised("claim", run.run_id)
        self._count_start(mine)
        return self._run_target(mine, view, True, message.hops)

    def _delivery_worker(self) -> str:
        # One lease owner per delivery, not per process: two deliveries of one run handled at once by the
        # same worker must not take each other's claim for their own.
        return f"{self._config.worker_id}#{self._rng.getrandbits(32):08x}"

    def _count_start(self, run: Run) -> None:
        if run.attempt == 1 and run.start_delay_ms is not None:
            self._metrics.timing_ms("StartDelay", run.start_delay_ms)
        self._metrics.count("RunsStarted")
        if run.attempt > 1:
            self._metrics.count("Retries")

    def _run_missing(self, message: RunMessage) -> Outcome:
        """No run for this message. One the ticker sent before committing its run may be early: its commit
        can still land (`run_may_appear`), so the message looks again later rather than be dropped."""
        now = self._clock.now()
        if not message.run_may_appear(now):
            return self._orphan(message)
        self._dispatcher.redispatch(message.missing_run_recheck(now), 0, now)
        self._metrics.count("MessagesBeforeTheirRun")
        return Outcome.WAITING_FOR_RUN

    def _not_claimable(self, current: Run, message: RunMessage) -> Outcome:
        """A delivery that cannot claim its run: usually a duplicate (another delivery claimed it, or the
        run moved on). But a queue-carried run running at this message's attempt has no sweeper entry:
        this message is what brings it back if its worker died, so it stays with the run until the lease
        ends (docs/design.md, "Where a run could be lost")."""
        if recovered_by_message(current, message.attempt):
            return self._watch_lease(current, message)
        return Outcome.DUPLICATE

    def _refused(self, message: RunMessage) -> Outcome:
        """A write of this delivery was refused: the run moved since it was read. Read it again. Still
        claimable at this attempt (a job write rewrote its view in between): the message goes back to be
        handled afresh, since a queue-carried run has nothing else to bring it. Otherwise as any delivery
        that cannot claim."""
        current = self._store.get_run(message.job_id, message.scheduled_for)
        if current is None:
            return self._orphan(message)
        if claimable_at(current, message.attempt):
            now = self._clock.now()
            again = replace(message.resent(), not_before=max(message.not_before, now))
            self._dispatcher.redispatch(again, current.shard, now)
            return Outcome.DEFERRED
        return self._not_claimable(current, message)

    def _watch_lease(self, running: Run, message: RunMessage) -> Outcome:
        # Its worker may still be at it: the message comes back when the lease ends (a finished run then
        # makes it a duplicate); a silent worker's attempt is ended.
        now = self._clock.now()
        try:
            ended = watch_lease(self._store, self._dispatcher, running, message.resent(), now, self._rng)
        except StaleRunError:
            return Outcome.DUPLICATE  # it moved while we looked: finished, or taken over by another
        if ended is None:
            return Outcome.WATCHING_LEASE
        self._metrics.count("ExpiredLeases")
        if ended.retry_not_sent is not None:
            # The retry-wait is committed, with its sweeper entry: the sweeper re-sends it.
            logger.error(
                "could not schedule the retry of %s, sweeper will: %s", running.run_id, ended.retry_not_sent
            )
            self._metrics.count("DispatchFailures")
        if ended.run.state is RunState.FAILED:
            self._metrics.count("RunsFailed")
        return Outcome.LEASE_EXPIRED

    def _orphan(self, message: RunMessage) -> Outcome:
        logger.warning("message for unknown run %s: dropped", message.dedupe_id)
        self._metrics.count("OrphanMessages")
        return Outcome.NOT_FOUND

    def _cancel(self, message: RunMessage, reason: str) -> Outcome:
        """The job's state at claim time says no (deleted, paused, fire off the schedule): the run ends
        cancelled, if this delivery's attempt still holds it."""
        run = self._store.get_run(message.job_id, message.scheduled_for)
        if run is None:
            return self._orphan(message)
        if not claimable_at(run, message.attempt):
            return self._not_claimable(run, message)
        return self._end(run, RunState.CANCELLED, reason, Outcome.CANCELLED, message)

    def _send_back_throttled(self, message: RunMessage, error: TransientStoreError) -> Outcome:
        delay = THROTTLED_RETRY_BASE_SECONDS + backoff_delay(
            message.hops + 1, THROTTLED_RETRY_BASE_SECONDS, THROTTLED_RETRY_MAX_SECONDS, self._rng
        )
        now = self._clock.now()
        later = replace(message.resent(), not_before=max(message.not_before, now + timedelta(seconds=delay)))
        logger.warning(
            "run %s: store throttled (%s); message sent back for %.0f s", message.run_id, error, delay
        )
        self._metrics.count("ThrottledDeliveries")
        try:
            # The run may not have been read (that read throttled); routing is by run id, not shard.
            self._dispatcher.redispatch(later, 0, now)
        except DispatchError:
            raise error from None  # nowhere to put it: the queue redelivers the original after its timeout
        return Outcome.DEFERRED

    def _stop_runaway(self, message: RunMessage) -> Outcome:
        """A message re-sent more than MAX_HOPS times is a loop (Lambda's own cut-off is off on the
        executor): the run ends failed, with the reason on it and a metric, rather than cycling forever
        or vanishing."""
        run = self._store.get_run(message.job_id, message.scheduled_for)
        if run is None:
            return self._orphan(message)
        if run.state.is_terminal or run.attempt != message.attempt:
            return self._not_claimable(run, message)
        reason = f"stopped a runaway re-send loop: message re-sent {message.hops} times (limit {MAX_HOPS})"
        logger.error("run %s: %s", run.run_id, reason)
        self._metrics.count("RunawayLoops")
        return self._end(run, RunState.FAILED, reason, Outcome.FAILED, message)

    def _run_target(self, run: Run, job: JobView, exclusive: bool, hops: int) -> Outcome:
        target = job.target
        if target is None:
            # A large target stays on the job (not copied onto every run): read it now, as it is now.
            current = self._store.get_job(run.job_id)
            if current is None:
                return self._end(run, RunState.CANCELLED, "job deleted", Outcome.CANCELLED)
            target = current.target
        invocation = Invocation(
            run_id=run.run_id,
            job_id=run.job_id,
            scheduled_for=run.scheduled_for,
            attempt=run.attempt,
            timeout_seconds=float(job.timeout_seconds),
        )
        result = self._invoker.invoke(target, invocation)
        now = self._clock.now()
        finished = after_attempt(run, job.retry, result, now=now, rng=self._rng)
        try:
            # Retried on throttling: losing this write would turn a finished call into an expired lease,
            # and so into a second call of the target.
            if exclusive and finished.state is not RunState.RETRY_WAIT:
                waiting = self._store.finish_exclusive(run, finished)
                if waiting is not None:
                    self._release_queued(waiting, run.shard)
            else:
                self._store.transition_run(run, finished)
        except StaleRunError as error:
            if not is_own_write(error.current, finished):
                # A newer attempt owns the run (our lease expired and it was taken over): our result must
                # not overwrite it.
                logger.warning("stale completion of %s attempt %d discarded", run.run_id, run.attempt)
                self._metrics.count("StaleCompletions")
                return Outcome.STALE_COMPLETION
            # A run queued behind an exclusive one is then left to the sweeper (its release id came back
            # only with the lost response).
            self._lost_response_recognised("finish", run.run_id)
        if finished.state is RunState.SUCCEEDED:
            self._metrics.count("RunsSucceeded")
            return Outcome.SUCCEEDED
        if finished.state is RunState.RETRY_WAIT and finished.retry_at is not None:
            try:
                retry = RunMessage.for_run(finished, finished.retry_at, hops=hops + 1)
                self._dispatcher.redispatch(retry, run.shard, now)
            except DispatchError as error:
                # The retry-wait is committed; the sweeper re-sends it once retry_at + grace has passed.
                logger.error("could not schedule the retry of %s, sweeper will: %s", run.run_id, error)
                self._metrics.count("DispatchFailures")
            return Outcome.RETRY_SCHEDULED
        self._metrics.count("RunsFailed")
        logger.error("run %s failed after attempt %d: %s", run.run_id, run.attempt, finished.reason)
        return Outcome.FAILED

    def _blocked_by_overlap(self, run: Run, job: JobView, message: RunMessage) -> Outcome:
        hops = message.hops
        if run.attempt > 0:
            # A retry of a run that already started is not a new overlapping fire: it waits for the slot
            # instead of being skipped (a skipped retry would be a failure nobody hears about).
            now = self._clock.now()
            wait = RunMessage.for_run(run, now + BLOCKED_RETRY_WAIT, hops=hops + 1)
            self._dispatcher.redispatch(wait, run.shard, now)
            return Outcome.DEFERRED
        if job.overlap is OverlapPolicy.QUEUE:
            waiting = replace(
                run, state=RunState.QUEUED, reason="waiting for the job's running run to finish"
            )
            try:
                if self._store.enqueue_behind(run, waiting):
                    self._metrics.count("RunsQueued")
                    return Outcome.QUEUED
            except StaleRunError:
                return self._refused(message)
            return self._end(
                run, RunState.SKIPPED, "overlap=queue and a run is already waiting", Outcome.SKIPPED, message
            )
        return self._end(
            run,
            RunState.SKIPPED,
            "overlap=skip and the previous run is still running",
            Outcome.SKIPPED,
            message,
        )

    def _release_queued(self, run_id: str, shard: int) -> None:
        job_id, scheduled_for = split_run_id(run_id)
        queued = self._store.get_run(job_id, scheduled_for)
        if queued is not None and queued.state is RunState.QUEUED:
            now = self._clock.now()
            try:
                # Another run's message: its own first re-send (hop 1). Counting the finished run's hops
                # on would fail a healthy backlogged overlap=queue job after MAX_HOPS runs.
                self._dispatcher.redispatch(RunMessage.for_run(queued, now, hops=1), shard, now)
            except DispatchError as error:
                # The queued run is in the sweeper's work list; it re-sends it after its grace period.
                logger.error("could not release queued run %s, sweeper will: %s", run_id, error)
                self._metrics.count("DispatchFailures")

    def _end(
        self, run: Run, state: RunState, reason: str, outcome: Outcome, message: RunMessage | None = None
    ) -> Outcome:
        """End the run as read. Refused: a delivery (`message`) looks at the run again (`_refused`); the
        worker holding a claimed run (no message) has nothing to redo."""
        try:
            self._store.transition_run(run, terminal(run, state, reason, self._clock.now()))
        except StaleRunError:
            return Outcome.DUPLICATE if message is None else self._refused(message)
        self._metrics.count(f"Runs{state.value.capitalize()}")
        return outcome
