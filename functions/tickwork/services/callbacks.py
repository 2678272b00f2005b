"""A callback run's target reports to Tickwork: its outcome (the completion URL) and that it is still at it
(the heartbeat URL). Both name one attempt by a signed token; an attempt that is no longer the run's running
one is refused (409), so a late report never overwrites a newer attempt."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from random import Random
from typing import Protocol

from tickwork.domain.callbacks import CallbackToken, awaiting_lease, awaits
from tickwork.domain.clock import Clock
from tickwork.domain.delivery import attempt_hold, slot_pools
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.errors import ConflictError, NotFoundError, StaleRunError
from tickwork.domain.execution import LEASE_MARGIN, Finish, after_attempt
from tickwork.domain.models import Job, OverlapPolicy, RetryPolicy, Run, RunState, split_run_id
from tickwork.domain.slots import SlotLimits
from tickwork.domain.targets import TargetResult
from tickwork.services.ports import Dispatcher, SlotStore

logger = logging.getLogger(__name__)


class CallbackStore(Protocol):
    def get_job(self, job_id: str) -> Job | None: ...

    def get_run(self, job_id: str, scheduled_for: datetime) -> Run | None: ...

    def transition_run(self, expected: Run, updated: Run) -> None: ...


@dataclass(frozen=True, slots=True)
class Report:
    """What a target says of its accepted work: done (`ok`), or failed (worth a retry unless it says not)."""

    ok: bool
    status: str = "callback"
    detail: str = ""
    retryable: bool = True


class Callbacks:
    def __init__(
        self,
        store: CallbackStore,
        dispatcher: Dispatcher,
        clock: Clock,
        secret: bytes,
        lease_margin: timedelta = LEASE_MARGIN,
        rng: Random | None = None,
        slots: tuple[SlotStore, SlotLimits] | None = None,
    ) -> None:
        self._store = store
        self._dispatcher = dispatcher
        self._clock = clock
        self._secret = secret
        self._lease_margin = lease_margin
        self._rng = rng or Random()
        self._slots = slots

    def complete(self, token: str, report: Report) -> Run:
        """The attempt's outcome. It is written the way a throttled finish is: as a `finish` message that
        an executor applies to this running attempt only, so a completion takes the path every finish takes
        (the retry's message, the overlap slot, the metrics). Returns the run as it was when accepted."""
        claims = CallbackToken.read(self._secret, token)
        run = self._awaiting(claims)
        now = self._clock.now()
        result = TargetResult(
            ok=report.ok,
            retryable=not report.ok and report.retryable,
            status=report.status,
            latency_ms=max(0, int((now - self._claimed_at(run, claims)).total_seconds() * 1000)),
            detail=report.detail,
        )
        finished = after_attempt(run, self._retry_policy(run), result, now=now, rng=self._rng)
        exclusive = run.job_view is not None and run.job_view.overlap is not OverlapPolicy.ALLOW
        finish = Finish.of(run, finished, frees_slot=exclusive and finished.state is not RunState.RETRY_WAIT)
        # The message of the attempt this one came from (attempt - 1), as the run's own message is: until it
        # is applied it also watches the run, as that message would (docs/design.md).
        message = replace(RunMessage.for_run(run, now), attempt=run.attempt - 1, finish=finish)
        self._dispatcher.redispatch(message, run.shard, now)
        return run

    def heartbeat(self, token: str) -> Run:
        """The target is still at it: the attempt's lease moves to the next heartbeat's due time (never past
        its deadline, never shorter than it is). Returns the run as written."""
        claims = CallbackToken.read(self._secret, token)
        run = self._awaiting(claims)
        now = self._clock.now()
        if now >= claims.deadline:
            raise ConflictError(f"run {run.run_id} attempt {claims.attempt}: its timeout has passed")
        interval = None if run.job_view is None else run.job_view.heartbeat_seconds
        lease = awaiting_lease(interval, claims.deadline, now, self._lease_margin)
        if run.lease_expires_at is not None:
            lease = max(lease, run.lease_expires_at)
        if run.lease_expires_at is not None and run.lease_expires_at <= now:
            # Its lease is over: its slot may be another run's by now, and the attempt is about to be ended.
            raise ConflictError(
                f"run {run.run_id} attempt {claims.attempt}: its lease ended before this heartbeat"
            )
        if self._slots is not None:
            # The slot first: a run's lease never outlives its concurrency slot's (a slot held longer is
            # harmless; a run past its slot's lease would run over the bound).
            store, limits = self._slots
            hold = attempt_hold(run.run_id, run.lease_owner or "", run.attempt, lease)
            # The pools its claim took: the view's concurrency key is the one its message was sent with
            # (a claim on the view checks them against each other).
            concurrency = None if run.job_view is None else run.job_view.concurrency
            if not store.extend(slot_pools(run.owner, limits, concurrency), hold):
                raise ConflictError(f"run {run.run_id} attempt {claims.attempt} no longer holds its slot")
        beating = replace(run, lease_expires_at=lease, heartbeat_at=now)
        try:
            self._store.transition_run(run, beating)
        except StaleRunError:
            self._awaiting(claims)  # moved meanwhile: a 409 if that attempt is over
            raise ConflictError(
                f"run {run.run_id} changed while its heartbeat was written: send it again"
            ) from None
        return beating

    def _awaiting(self, claims: CallbackToken) -> Run:
        job_id, scheduled_for = split_run_id(claims.run_id)
        run = self._store.get_run(job_id, scheduled_for)
        if run is None:
            raise NotFoundError(f"run {claims.run_id} not found")
        if not awaits(run, claims.attempt):
            raise ConflictError(
                f"run {run.run_id} attempt {claims.attempt} is over: the run is {run.state.value} at "
                f"attempt {run.attempt}"
            )
        return run

    @staticmethod
    def _claimed_at(run: Run, claims: CallbackToken) -> datetime:
        timeout = run.job_view.timeout_seconds if run.job_view is not None else 0
        return claims.deadline - timedelta(seconds=timeout)

    def _retry_policy(self, run: Run) -> RetryPolicy:
        if run.job_view is not None:
            return run.job_view.retry
        job = self._store.get_job(run.job_id)
        # A deleted job's run retries no more: this attempt is its last.
        return job.policies.retry if job is not None else RetryPolicy(max_attempts=run.attempt)
