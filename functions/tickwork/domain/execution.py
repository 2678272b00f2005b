"""Pure execution rules: what the job's current state means for a run, leases, and failure handling."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from random import Random
from typing import Any

from tickwork.domain.backoff import backoff_delay
from tickwork.domain.models import (
    Concurrency,
    Job,
    JobState,
    JobView,
    RetryPolicy,
    Run,
    RunState,
    Standing,
    make_run_id,
)
from tickwork.domain.schedule import is_fire_time
from tickwork.domain.targets import TargetResult
from tickwork.domain.timekeys import format_instant_ms, is_whole_second, parse_instant, truncate_ms

# Time beyond the target's own timeout before a silent worker counts as dead.
LEASE_MARGIN = timedelta(seconds=30)
MAX_DETAIL_CHARS = 1024
# How long after its due time an unstarted run waits before the sweeper re-sends it.
DISPATCH_GRACE = timedelta(seconds=90)
# Job writes rewrite the job view of the job's unclaimed runs whose fire time is at most this old (and all
# later ones); claims trust the view of runs a minute younger than that (`trusts_view`). Bounded so that a
# job write and the views it rewrites fit in one transaction: 7 minutes of fires (this window plus the
# 120 s lookahead) at the API's fastest schedule (every 10 s) is 42 runs.
VIEW_REFRESH_WINDOW = timedelta(minutes=5)
VIEW_TRUST_WINDOW = VIEW_REFRESH_WINDOW - timedelta(minutes=1)
# The longest one call may hold an executor (what a Lambda invocation can give a run, with room to record
# it). A response-mode job's timeout is never above it; a callback job's may be (up to 24 h): its call gets
# this long to answer, 202 included, and the rest of the timeout is the accepted work's.
MAX_CALL_SECONDS = 840


def call_seconds(timeout_seconds: int) -> int:
    """How long the call itself may take, whatever the run's timeout: a claim's lease covers this."""
    return min(timeout_seconds, MAX_CALL_SECONDS)


# Runs that can still be claimed by a delivery of their current attempt.
CLAIMABLE_STATES = frozenset({RunState.PLANNED, RunState.RETRY_WAIT, RunState.QUEUED})


def claimable_at(run: Run, attempt: int) -> bool:
    """Whether a delivery sent for `attempt` may still claim (or cancel) the run."""
    return run.state in CLAIMABLE_STATES and run.attempt == attempt


def recovered_by_message(run: Run, attempt: int) -> bool:
    """Whether a message sent for `attempt` is what recovers the run: a queue-carried run running the
    attempt that message started has no sweeper entry, so the message must stay with it until it ends
    (dropping it as a duplicate could strand the run if its worker died)."""
    return run.state is RunState.RUNNING and run.queue_carried and run.attempt == attempt + 1


def waiting_slot_is_stale(holder: Run | None) -> bool:
    """Overlap queue: the job's one waiting slot names a run that is no longer waiting (cancelled,
    skipped, failed from the dead-letter queue, or gone): another run may take the slot over, or the job's
    queue would stay blocked for good."""
    return holder is None or holder.state is not RunState.QUEUED


def standing_of(job: Job | None, scheduled_for: datetime) -> Standing:
    """The job's state at claim time rules (recorded in docs/design.md): deleted, paused, or the fire no
    longer on the (edited) schedule stop the run; anything else, including a changed target, runs with the
    job as it is now. A run keyed off every schedule slot (run now: see `is_whole_second`) was asked for
    explicitly: only a delete stops it (the API refuses it on a paused job unless the caller insists)."""
    if job is None:
        return Standing.DELETED
    if not is_whole_second(scheduled_for):
        return Standing.ACTIVE
    if job.state is JobState.PAUSED:
        return Standing.PAUSED
    if not is_fire_time(job.schedule, scheduled_for):
        return Standing.OFF_SCHEDULE
    return Standing.ACTIVE


_CANCELLATION_REASONS = {
    Standing.DELETED: "job deleted",
    Standing.PAUSED: "job paused",
    Standing.OFF_SCHEDULE: "schedule changed: this fire time is no longer on it",
}


def cancellation_reason(standing: Standing) -> str | None:
    """Why a run of this standing ends cancelled instead of running (None: it runs)."""
    return _CANCELLATION_REASONS.get(standing)


def view_for(job: Job | None, run: Run) -> JobView:
    """The view a job write leaves on one of the job's unclaimed runs (`job` None: deleted)."""
    if job is None:
        base = run.job_view
        if base is None:
            raise ValueError(f"run {run.run_id} has no job view to mark deleted")
        return replace(base, standing=Standing.DELETED)
    return replace(JobView.planned(job), standing=standing_of(job, run.scheduled_for))


def rewritten_views(job: Job | None, runs: Sequence[Run]) -> list[tuple[Run, JobView]]:
    """The views a job write (`job` as written, None for a delete) leaves on the job's unclaimed runs,
    for the runs whose view it changes."""
    rewritten = []
    for run in runs:
        if run.job_view is None and job is None:
            continue  # a run without a view reads the job at claim: it finds none
        view = view_for(job, run)
        if view != run.job_view:
            rewritten.append((run, view))
    return rewritten


def trusts_view(scheduled_for: datetime, now: datetime) -> bool:
    """Whether a claim may take the run's job view as the job's state: job writes rewrite the views of the
    job's unclaimed runs whose fire is at most VIEW_REFRESH_WINDOW old, and the claim trusts a minute less
    (clock skew between the API and the executor). An older run (a late catch-up, a slow retry) reads the
    job instead."""
    return scheduled_for >= now - VIEW_TRUST_WINDOW


def check_at(run: Run) -> datetime | None:
    """When the sweeper should look at an unfinished run if nothing has moved it by then (the sort key of
    the open-runs index): its due time, or when it was planned for a catch-up run, plus the grace for its
    message to arrive; a retry's retry time plus the grace; later after each re-send. A claim moves it
    only when the lease ends sooner (a timeout + margin under the grace, or a run claimed after a re-send):
    the claim is the hot path and an index key that moves costs two index writes. The sweeper reads a
    running run's lease itself (`needs_repair`). A queue-carried run (planned by the ticker, its message
    sent first) has none while planned or running: its message recovers it (docs/design.md)."""
    if run.state.is_terminal:
        return None
    if run.queue_carried and run.state in (RunState.PLANNED, RunState.RUNNING):
        return None
    if run.state is RunState.RETRY_WAIT and run.retry_at is not None:
        expected = run.retry_at
    else:
        expected = max(run.due_at, run.planned_at)
    if run.state is RunState.RUNNING:
        # Never later than the lease: a short lease must not wait for the grace to be noticed.
        first_check = expected + DISPATCH_GRACE
        lease = run.lease_expires_at
        return first_check if lease is None else min(first_check, lease)
    if run.redispatched_at is not None and run.redispatched_at >= expected:
        # Each re-send waits longer before the next (90 s, then doubling): a run waiting behind the
        # concurrency cap is slow, not lost, and must not be re-sent every sweep. A re-send from before
        # the run's current wait (an earlier attempt's) does not count.
        return run.redispatched_at + max(DISPATCH_GRACE, run.redispatched_at - expected)
    return expected + DISPATCH_GRACE


def needs_repair(run: Run, now: datetime) -> bool:
    """Whether the sweeper must act on an open run now: a running run once its lease has expired (a live
    lease is a worker still at it), any other unfinished run once its check time has passed."""
    if run.state.is_terminal:
        return False
    if run.state is RunState.RUNNING:
        return run.lease_expires_at is None or run.lease_expires_at <= now
    due = check_at(run)
    return due is not None and due <= now


def lease_until(timeout_seconds: int, now: datetime, lease_margin: timedelta = LEASE_MARGIN) -> datetime:
    """A claim's lease: the job's timeout plus the margin before a silent worker counts as dead."""
    return truncate_ms(now + timedelta(seconds=timeout_seconds) + lease_margin)


@dataclass(frozen=True, slots=True)
class Claim:
    """What an executor asks of the store to start an attempt: the run (by key) at the attempt its message
    was sent for, the delivery's lease owner and lease, and when the queue accepted the message."""

    job_id: str
    scheduled_for: datetime
    expected_attempt: int
    worker: str
    now: datetime
    timeout_seconds: int  # the target's timeout this lease is for
    lease_expires_at: datetime
    dispatched_at: datetime | None = None
    # Also require the run's job view to say the job lets it run under overlap allow (`trusts_view`), with
    # this lease's timeout.
    trusting_view: bool = False
    # The concurrency key and limit the attempt's slots were taken for: the run's view must name them (its
    # heartbeats and its end find the slots by the view's), trusted or not.
    concurrency: Concurrency | None = None

    @property
    def run_id(self) -> str:
        return make_run_id(self.job_id, self.scheduled_for)

    def is_own(self, current: Run | None) -> bool:
        """The stored run is this claim (a retried claim whose first try landed is refused by its own
        condition): running, at the next attempt, under this delivery's lease owner and lease."""
        return (
            current is not None
            and current.state is RunState.RUNNING
            and current.attempt == self.expected_attempt + 1
            and current.lease_owner == self.worker
            and current.lease_expires_at is not None
            and truncate_ms(current.lease_expires_at) == truncate_ms(self.lease_expires_at)
        )


def claimed(
    run: Run,
    job: Job | JobView,
    *,
    worker: str,
    now: datetime,
    lease_margin: timedelta = LEASE_MARGIN,
    dispatched_at: datetime | None = None,
) -> Run:
    """The run as an executor holds it: attempt + 1 is the fencing token of this attempt."""
    lease_expires_at = lease_until(call_seconds(job.timeout_seconds), now, lease_margin)
    first_start = run.started_at is None
    return replace(
        run,
        state=RunState.RUNNING,
        attempt=run.attempt + 1,
        lease_owner=worker,
        lease_expires_at=lease_expires_at,
        started_at=now if first_start else run.started_at,
        dispatched_at=dispatched_at if first_start else run.dispatched_at,
        # Start delay is measured once, for the first attempt, against the due time (fire + jitter).
        start_delay_ms=int((now - run.due_at).total_seconds() * 1000) if first_start else run.start_delay_ms,
        retry_at=None,
        heartbeat_at=None,
        tracking=None,
    )


def is_own_write(current: Run | None, intended: Run) -> bool:
    """The stored run is the write this caller intended: a retried request whose first try landed but whose
    response was lost is refused by its own condition, and must not be taken for someone else's move.
    Same state, same attempt, same lease owner (unique per delivery, see Executor) and lease, and the same
    attempt history: nobody else writes exactly that."""
    if current is None:
        return False

    def ms(instant: datetime | None) -> datetime | None:
        return None if instant is None else truncate_ms(instant)

    return (
        current.state is intended.state
        and current.attempt == intended.attempt
        and current.lease_owner == intended.lease_owner
        and ms(current.lease_expires_at) == ms(intended.lease_expires_at)
        and len(current.attempts) == len(intended.attempts)
        and ms(current.finished_at) == ms(intended.finished_at)
    )


def _attempt_record(run: Run, now: datetime, result: TargetResult) -> dict[str, Any]:
    return {
        "attempt": run.attempt,
        "worker": run.lease_owner or "",
        "finished_at": format_instant_ms(now),
        "ok": result.ok,
        "status": result.status,
        "latency_ms": result.latency_ms,
        "detail": result.detail[:MAX_DETAIL_CHARS],
    }


def after_attempt(run: Run, retry: RetryPolicy, result: TargetResult, *, now: datetime, rng: Random) -> Run:
    """Success ends the run; a retryable failure waits with backoff while attempts remain; else failed."""
    attempts = (*run.attempts, _attempt_record(run, now, result))

    def ended(**how: Any) -> Run:  # one `replace` for the step: each copies the whole run, every finish pays
        return replace(
            run, attempts=attempts, lease_owner=None, lease_expires_at=None, outcome=result.status, **how
        )

    if result.ok:
        return ended(state=RunState.SUCCEEDED, finished_at=now, reason=None)
    if result.retryable and run.attempt < retry.max_attempts:
        delay = backoff_delay(run.attempt, retry.backoff_base_seconds, retry.backoff_max_seconds, rng)
        return ended(
            state=RunState.RETRY_WAIT,
            retry_at=truncate_ms(now + timedelta(seconds=delay)),
            reason=result.detail[:200],
        )
    why = "not retryable" if not result.retryable else f"all {retry.max_attempts} attempts failed"
    return ended(state=RunState.FAILED, finished_at=now, reason=f"{why}: {result.detail[:200]}")


def after_lease_expired(run: Run, retry: RetryPolicy | None, *, now: datetime, rng: Random) -> Run:
    """A worker stopped answering: its attempt counts as failed (it may still be running: the fencing
    token keeps its late result out)."""
    result = TargetResult(
        ok=False, retryable=True, status=LEASE_EXPIRED_STATUS, latency_ms=0, detail="worker lease expired"
    )
    if retry is None:  # the job is gone
        return replace(run, state=RunState.CANCELLED, finished_at=now, reason="job deleted", lease_owner=None)
    return after_attempt(run, retry, result, now=now, rng=rng)


def terminal(run: Run, state: RunState, reason: str, now: datetime) -> Run:
    return replace(run, state=state, reason=reason, finished_at=now, lease_owner=None, lease_expires_at=None)


EXCLUDED_STATUS = "Excluded"
LEASE_EXPIRED_STATUS = "LeaseExpired"  # an attempt that ended by its lease: no answer was recorded


def excluded_at_claim(run: Run, reason: str, now: datetime) -> Run:
    """A claimed first attempt one of the job's calendars excludes: it ends without calling the target,
    recorded like an attempt (so its end can travel as a `Finish` too), the run `excluded`."""
    result = TargetResult(ok=False, retryable=False, status=EXCLUDED_STATUS, latency_ms=0, detail=reason)
    attempts = (*run.attempts, _attempt_record(run, now, result))
    return replace(terminal(run, RunState.EXCLUDED, reason, now), attempts=attempts, outcome=EXCLUDED_STATUS)


@dataclass(frozen=True, slots=True)
class Finish:
    """An attempt's end as its worker computed it after the target answered, carried by a message when the
    finish write itself could not land (the store throttled past its retries). Whoever applies it writes
    the same run the worker would have: the target is never called again for a result already known."""

    attempt: int
    worker: str  # the attempt's lease owner: only its own running attempt takes this finish
    state: RunState
    finished_at: datetime | None
    retry_at: datetime | None
    reason: str | None
    outcome: str | None
    record: Mapping[str, Any]  # the attempt's entry in the run's history
    frees_slot: bool = False  # the attempt held the job's overlap slot and the finish frees it

    @classmethod
    def of(cls, held: Run, finished: Run, *, frees_slot: bool) -> Finish:
        if not finished.attempts or held.lease_owner is None:
            raise ValueError(f"run {held.run_id}: a finish needs the attempt's record and lease owner")
        return cls(
            attempt=held.attempt,
            worker=held.lease_owner,
            state=finished.state,
            finished_at=finished.finished_at,
            retry_at=finished.retry_at,
            reason=finished.reason,
            outcome=finished.outcome,
            record=dict(finished.attempts[-1]),
            frees_slot=frees_slot,
        )

    def holds(self, run: Run) -> bool:
        """The run is still the running attempt this finish ends."""
        running = run.state is RunState.RUNNING
        return running and run.attempt == self.attempt and run.lease_owner == self.worker

    def applied_to(self, run: Run) -> Run:
        """The run as this finish writes it (what `after_attempt` gave the worker)."""
        return replace(
            run,
            state=self.state,
            finished_at=self.finished_at,
            retry_at=self.retry_at,
            reason=self.reason,
            outcome=self.outcome,
            attempts=(*run.attempts, dict(self.record)),
            lease_owner=None,
            lease_expires_at=None,
        )

    def to_dict(self) -> dict[str, Any]:
        def instant(value: datetime | None) -> str | None:
            return None if value is None else format_instant_ms(value)

        return {
            "attempt": self.attempt,
            "worker": self.worker,
            "state": self.state.value,
            "finished_at": instant(self.finished_at),
            "retry_at": instant(self.retry_at),
            "reason": self.reason,
            "outcome": self.outcome,
            "record": dict(self.record),
            "frees_slot": self.frees_slot,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finish:
        """Raises ValueError, KeyError or TypeError on a malformed body (the message parser reports it)."""

        def instant(value: object) -> datetime | None:
            return None if value is None else parse_instant(str(value))

        def text(value: object) -> str | None:
            return None if value is None else str(value)

        record = data["record"]
        if not isinstance(record, Mapping):
            raise TypeError("finish record must be an object")
        return cls(
            attempt=int(data["attempt"]),
            worker=str(data["worker"]),
            state=RunState(str(data["state"])),
            finished_at=instant(data.get("finished_at")),
            retry_at=instant(data.get("retry_at")),
            reason=text(data.get("reason")),
            outcome=text(data.get("outcome")),
            record=dict(record),
            frees_slot=bool(data.get("frees_slot", False)),
        )
