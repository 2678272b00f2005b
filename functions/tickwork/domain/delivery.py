"""What a delivery of a run message does next: one pure decision over what the executor knows so far.

The executor (services/executing.py) carries out the step `next_step` returns, feeds its result back into
`Known`, and asks again, until the step is `Done` or `SendBack`. Every rule of at-least-once delivery is
here: when a missing run may still appear, when a message must stay with a running run, when a refused
write is someone else's move and when it was our own. docs/design.md, "A delivery, step by step", lists the
situations as a table; tests/domain/test_delivery.py holds one row per situation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum, StrEnum
from random import Random

from tickwork.domain.backoff import backoff_delay
from tickwork.domain.calendars import Calendar, excludable, exclusion
from tickwork.domain.callbacks import (
    CallbackLinks,
    CallbackToken,
    attempt_deadline,
    awaiting_lease,
    is_callback,
)
from tickwork.domain.dispatch import MAX_HOPS, RunMessage
from tickwork.domain.errors import TransientStoreError
from tickwork.domain.execution import (
    LEASE_MARGIN,
    Claim,
    Finish,
    after_attempt,
    call_seconds,
    cancellation_reason,
    claimable_at,
    claimed,
    excluded_at_claim,
    is_own_write,
    lease_until,
    recovered_by_message,
    standing_of,
    terminal,
    trusts_view,
)
from tickwork.domain.models import (
    Completion,
    Concurrency,
    Job,
    JobView,
    OverlapPolicy,
    RetryPolicy,
    Run,
    RunState,
    Standing,
    Target,
    split_run_id,
)
from tickwork.domain.slots import ALL, Pool, SlotHold, SlotLimits, pools_for
from tickwork.domain.targets import Invocation, TargetResult, rendered
from tickwork.domain.timekeys import truncate_ms

# Messages arrive up to a second early (SQS delays are whole seconds, rounded down): hold them. A message
# further ahead (a backoff longer than SQS's 900 s delay) goes back to the queue instead.
DEFAULT_MAX_HOLD = timedelta(seconds=2)
# A retry that finds the job's overlap slot taken looks again this much later.
BLOCKED_RETRY_WAIT = timedelta(seconds=30)
# A delivery whose store calls still throttle after the store retries goes back to the queue as a fresh
# message this much later (jittered, growing with its hops): a redelivery of the same message would count
# towards the DLQ's receive limit, and a dead letter fails the run. Throttling must never fail a run.
THROTTLED_RETRY_BASE_SECONDS = 5.0
THROTTLED_RETRY_MAX_SECONDS = 60.0
# The finish write after the target answered is tried this many times in the delivery (waiting 1 s, then
# 2 s, while the attempt's lease has time left) before the attempt's end goes by message instead
# (`Finish`): a throttled finish must never let the lease expire, which would call the target again.
FINISH_WRITES = 3
FINISH_RETRY_FIRST = timedelta(seconds=1)
# A run the concurrency bound holds back waits in the queue and asks again after this long (doubling with
# each wait, jittered, capped): it never fails for waiting.
SLOT_WAIT_FIRST = timedelta(seconds=1)
SLOT_WAIT_CAP = timedelta(seconds=10)
# A tracked run's work is looked at this long after it started, then twice as long after each look, at most
# the cap apart (and never after its lease end).
POLL_FIRST = timedelta(seconds=5)
POLL_CAP = timedelta(seconds=60)
# A slot is held exactly as long as its attempt's lease: a dead worker's slot is free at its lease end.
# The claim is built again once the slots are taken; it gives up the moments that took (at most this long,
# and a quarter of the lease margin), or, if taking them took longer, the slots' lease is moved first.
SLOT_LEASE_TOLERANCE = timedelta(seconds=1)
# A write refused only because a heartbeat moved the lease is made again on the run as stored, this many
# times at most in one delivery.
REWRITES = 3
# Two claims on the run's view at most: the second with the timeout the refusal showed the view has now.
CLAIMS_ON_VIEW = 2
# A claimed run's calendars are read this many times at most when the store throttles (a second apart).
CALENDAR_READS = 3


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    RETRY_SCHEDULED = "retry_scheduled"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    QUEUED = "queued"
    DEFERRED = "deferred"  # not yet due, or to be looked at afresh: sent back with a delay
    DUPLICATE = "duplicate"  # another delivery or attempt owns the run: nothing to do
    STALE_COMPLETION = "stale_completion"  # finished after losing the lease: result discarded
    NOT_FOUND = "not_found"
    WAITING_FOR_RUN = "waiting_for_run"  # sent before its run was committed: looks again shortly
    WATCHING_LEASE = "watching_lease"  # its run is running: the message comes back when the lease ends
    LEASE_EXPIRED = "lease_expired"  # its run's worker went silent: the attempt ended (retry, or failed)
    FINISH_SENT = "finish_sent"  # the finish write still throttled: the attempt's end goes by message
    ACCEPTED = "accepted"  # a callback run's target took the work (202): it reports to its completion URL
    WAITING_FOR_SLOT = "waiting_for_slot"  # the concurrency bound is full: back in the queue, to ask again
    TRACKING = "tracking"  # a tracked run's work still runs: looked at again later
    EXCLUDED = "excluded"  # one of the job's calendars excludes the fire: ended at its claim, not called


class Why(StrEnum):
    """Why a run is read: what its state decides next."""

    RUNAWAY = "runaway"  # a looping message: is its run still at its attempt, to be failed?
    CANCEL = "cancel"  # the job says no: is the run still this delivery's to cancel?
    EXCLUSIVE = "exclusive"  # overlap skip/queue: the slot is taken from the run as stored
    REFUSED = "refused"  # a write was refused: where is the run now?
    RELEASE = "release"  # an overlap=queue run finished: is the run waiting behind it still waiting?
    FINISH = "finish"  # a message carries an attempt's end: is the run still that running attempt?
    POLL = "poll"  # a tracked run's look: is the run still following what its attempt started?
    WATCH = "watch"  # a lease watch: is the run still running the attempt this message started?
    SLOT = "slot"  # the bound is full: does this message's run still wait for a claim, or is it running?


class Unsent(StrEnum):
    """What a failed send of a `SendBack` means."""

    RAISE = "raise"  # nothing was written: the delivery fails and the queue brings the message back
    SWEEPER = "sweeper"  # the run's state is committed with its sweeper entry: the sweeper re-sends it
    THROTTLED = "throttled"  # the delivery fails with the throttling error that sent it back


@dataclass(frozen=True, slots=True)
class Log:
    level: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One thing to do. `counts` are the metrics that doing it records, `logs` its lines: the executor
    writes both in one place (`Executor._record`); a `SendBack`'s once its message went."""

    counts: tuple[str, ...] = ()
    timings: tuple[tuple[str, float], ...] = ()  # (metric, milliseconds)
    logs: tuple[Log, ...] = ()


@dataclass(frozen=True, slots=True)
class Started:
    """A run this delivery holds: claimed (or its lost claim recognised), to be run with `view`."""

    run: Run
    view: JobView
    exclusive: bool  # it holds the job's overlap slot too
    claimed_at: datetime | None = None  # when this delivery's claim landed (a callback attempt's deadline)

    @property
    def callback(self) -> CallbackToken | None:
        """A callback run's token for this attempt (None: the call's answer is the outcome)."""
        if not is_callback(self.view):
            return None
        claimed_at = self.claimed_at or self.run.started_at
        if claimed_at is None:
            raise ValueError(f"run {self.run.run_id} is held but was never started")
        return CallbackToken(self.run.run_id, self.run.attempt, attempt_deadline(self.view, claimed_at))


@dataclass(frozen=True, slots=True, kw_only=True)
class Hold(Step):
    until: datetime
    then: Step | None = None  # what to do once held (None: carry on with the delivery)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadRun(Step):
    why: Why
    job_id: str
    scheduled_for: datetime
    then: Outcome | None = None  # RELEASE: the delivery's own outcome, once the waiting run is seen to


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadJob(Step):
    started: Started | None = None  # set: the claimed run's target is on the job, not on its view


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRun(Step):
    claim: Claim
    view: JobView | None  # None: a claim on the run's view (the store checks the view); else the job's


@dataclass(frozen=True, slots=True, kw_only=True)
class TakeSlot(Step):
    """Overlap skip/queue: claim the run and the job's one running slot in one transaction."""

    expected: Run
    mine: Run
    view: JobView
    now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueBehind(Step):
    """Overlap queue: the run takes the job's one waiting slot."""

    expected: Run
    waiting: Run


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadCalendars(Step):
    """The job's exclusion calendars as they are now (read at the claim: an edit counts from then): after
    the claim landed (`started`), or, for an overlap skip/queue job, before its run takes the job's slot
    (`waiting`, to be claimed with `view`): an excluded fire must not take the slot from a fire that runs."""

    names: tuple[str, ...]
    started: Started | None = None
    waiting: Run | None = None
    view: JobView | None = None
    recognised: str | None = None  # `_started`'s: carried to the start that follows

    @property
    def run(self) -> Run:
        run = self.started.run if self.started is not None else self.waiting
        if run is None:
            raise ValueError("a calendar read is for a run claimed or about to be")
        return run


@dataclass(frozen=True, slots=True, kw_only=True)
class StartTarget(Step):
    started: Started
    target: Target

    def invocation(self, links: CallbackLinks | None) -> Invocation:
        """The call: a callback run's gets its signed URLs (if the deployment has a callback route) and
        the call's own share of the timeout (`call_seconds`)."""
        run, view, token = self.started.run, self.started.view, self.started.callback
        return Invocation(
            run_id=run.run_id,
            job_id=run.job_id,
            scheduled_for=run.scheduled_for,
            attempt=run.attempt,
            timeout_seconds=float(call_seconds(view.timeout_seconds)),
            callback=None if token is None or links is None else links.urls(token),
            track=view.completion is Completion.TRACKED,
            owner=run.owner,
            trigger=str(run.trigger),
            revision=run.job_version,
            previous_slot=run.previous_slot,
            next_slot=run.next_slot,
        )

    def call(self, links: CallbackLinks | None) -> tuple[Target, Invocation]:
        """The target as this attempt calls it (a templated payload filled in) and the call."""
        invocation = self.invocation(links)
        return rendered(self.target, invocation), invocation


@dataclass(frozen=True, slots=True, kw_only=True)
class AwaitCallback(Step):
    """The target took the work (202): the run stays running under the accepted work's lease."""

    expected: Run
    awaiting: Run


@dataclass(frozen=True, slots=True, kw_only=True)
class AcquireSlots(Step):
    """Take a slot in every pool for the attempt a claim is about to start, before the claim: the bound
    counts runs, so no attempt starts without one. Then `then` (the claim)."""

    hold: SlotHold
    then: Step


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtendSlots(Step):
    """Move the slot's lease with the run's (an accepted callback attempt), then `then`."""

    hold: SlotHold
    then: Step


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseSlots(Step):
    """Free the attempt's slots (its run moved on, or its claim did not happen), then `then`."""

    hold: SlotHold
    then: Step


@dataclass(frozen=True, slots=True, kw_only=True)
class PollTarget(Step):
    """Look at what a tracked run's attempt started (`running.tracking`): still running, or its end."""

    running: Run
    target: Target


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchLease(Step):
    """The message stays with its running run: back when the lease ends, or the silent attempt ends now."""

    running: Run


@dataclass(frozen=True, slots=True, kw_only=True)
class EndAttempt(Step):
    """Write the run's end (cancelled, skipped, failed) or its attempt's result (`after_target`)."""

    expected: Run
    ended: Run
    outcome: Outcome
    after_target: bool = False
    frees_slot: bool = False  # the attempt held the job's overlap slot and the run is done with it
    by_message: bool = True  # a refusal is looked at again (a delivery), not taken as a duplicate
    # A carried end (a throttled finish, a callback's completion): this delivery frees the attempt's
    # concurrency slots once it lands, for the worker that took them.
    adopts: SlotHold | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SendBack(Step):
    """Send a message (this run's, later; or a run released by this one) and finish the delivery."""

    message: RunMessage
    shard: int
    outcome: Outcome
    unsent: Unsent = Unsent.RAISE
    unsent_note: str = ""  # SWEEPER: what the log says could not be sent


@dataclass(frozen=True, slots=True, kw_only=True)
class Done(Step):
    """Nothing more to do: the message is deleted (a duplicate or orphan is dropped)."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class LeaseWatched:
    """What `WatchLease` found: a live lease (`ended` None), the silent attempt ended, or the run moved."""

    ended: Run | None = None
    moved: bool = False
    retry_not_sent: str | None = None  # the ended attempt's retry message failed to go


class Keep(Enum):
    JOB = "job"  # `Known.after`: the job read earlier stays known


@dataclass(frozen=True, slots=True)
class Known:
    """What a delivery knows so far. `last` is the step just carried out; the fields after it are its
    results. A refused write leaves the stored run (as the refusal returned it) in `run`."""

    message: RunMessage
    now: datetime
    worker: str  # this delivery's lease owner: unique per delivery, so two of one run never share a claim
    rng: Random = field(compare=False)
    lease_margin: timedelta = LEASE_MARGIN
    max_hold: timedelta = DEFAULT_MAX_HOLD
    # The concurrency pools a run of this message needs a slot in (none: no bound), and when the process
    # carrying the delivery ends (a Lambda invocation's end; None: no end to keep to).
    pools: tuple[Pool, ...] = ()
    deadline: datetime | None = None
    holding: SlotHold | None = None  # the slots this delivery holds for the attempt it claims or ends
    last: Step | None = None
    run: Run | None = None
    job: Job | None = None
    refused: bool = False  # the last write was refused by its condition
    busy: bool = False  # TakeSlot: the job's running slot is taken; QueueBehind: its waiting slot is
    released: str | None = None  # an exclusive finish freed the slot for this queued run
    result: TargetResult | None = None
    watched: LeaseWatched | None = None
    calendars: tuple[Calendar, ...] | None = None  # ReadCalendars: those found (kept, like the job)
    claims_on_view: int = 0
    finish_writes: int = 0  # finish writes after the target answered, tried by this delivery
    rewrites: int = 0  # writes of ours after the call, refused and made again (see _against_heartbeat)
    slot_moves: int = 0  # moves of an accepted attempt's slot lease that throttled
    calendar_reads: int = 0  # ReadCalendars steps carried out (throttled ones are tried again)
    throttled: TransientStoreError | None = field(default=None, compare=False)

    def after(
        self,
        step: Step,
        now: datetime,
        *,
        run: Run | None = None,
        job: Job | Keep | None = Keep.JOB,
        refused: bool = False,
        busy: bool = False,
        released: str | None = None,
        result: TargetResult | None = None,
        watched: LeaseWatched | None = None,
        calendars: tuple[Calendar, ...] | None = None,
        throttled: TransientStoreError | None = None,
    ) -> Known:
        """What is known once `step` was carried out at `now`, with its results. Each result is the last
        step's alone, but the job, once read, is kept: the steps after a job read decide by it.

        Every field is named here (not `dataclasses.replace`, which looks each one up again: about three
        times the cost, for a call made after every step of every delivery)."""
        return Known(
            message=self.message,
            worker=self.worker,
            rng=self.rng,
            lease_margin=self.lease_margin,
            max_hold=self.max_hold,
            pools=self.pools,
            deadline=self.deadline,
            last=step,
            now=now,
            run=run,
            job=self.job if isinstance(job, Keep) else job,
            refused=refused,
            busy=busy,
            released=released,
            result=result,
            watched=watched,
            calendars=self.calendars if calendars is None else calendars,
            holding=_holding(self.holding, step, busy=busy, refused=refused, throttled=throttled is not None),
            claims_on_view=self.claims_on_view + int(isinstance(step, ClaimRun) and step.view is None),
            finish_writes=self.finish_writes + int(isinstance(step, EndAttempt) and step.after_target),
            rewrites=self.rewrites
            + int((refused or throttled is not None) and isinstance(step, (EndAttempt, AwaitCallback))),
            slot_moves=self.slot_moves + int(throttled is not None and isinstance(step, ExtendSlots)),
            calendar_reads=self.calendar_reads + int(isinstance(step, ReadCalendars)),
            throttled=throttled,
        )


def next_step(known: Known) -> Step:
    """The one decision of a delivery: what to do, given what is known. The concurrency slots wrap the
    rest (`_with_slots`): taken before every claim, freed when the delivery is done with the attempt."""
    last = known.last
    if isinstance(last, ExtendSlots) and isinstance(last.then, (ClaimRun, TakeSlot)):
        # Taking the slots took long: their lease was moved to the claim's before claiming.
        if known.throttled is not None:
            return ReleaseSlots(hold=last.hold, then=_send_back_throttled(known))
        # Taken over meanwhile: free what the move may have reached in some pools, then wait.
        return ReleaseSlots(hold=last.hold, then=_wait_for_slot(known)) if known.busy else last.then
    if isinstance(last, ExtendSlots) and isinstance(last.then, AwaitCallback) and known.throttled is not None:
        if known.slot_moves < FINISH_WRITES:
            # The target took the work: cutting its lease short would call it again. Wait, then move again.
            return Hold(until=known.now + FINISH_RETRY_FIRST, then=last, counts=("SlotMoveRetries",))
        # The slot's lease could not move: the accepted lease ends with the slot's (a heartbeat moves both).
        awaiting = last.then.awaiting
        held = last.hold.lease_expires_at if known.holding is None else known.holding.lease_expires_at
        capped = replace(awaiting, lease_expires_at=min(awaiting.lease_expires_at or held, held))
        return replace(last.then, awaiting=capped, counts=(*last.then.counts, "SlotExtensionsThrottled"))
    if isinstance(last, ExtendSlots) and known.busy:
        # Its lease had ended and another attempt took the slot: this run now runs over the bound.
        text = f"run {last.hold.run_id} attempt {last.hold.attempt} lost its concurrency slot"
        return replace(
            last.then,
            counts=(*last.then.counts, "SlotsLost"),
            logs=(*last.then.logs, Log(logging.WARNING, text)),
        )
    if isinstance(last, (ReleaseSlots, ExtendSlots)):
        return last.then  # a slot that could not be freed or moved frees itself at its lease end
    if isinstance(last, AcquireSlots):
        if known.throttled is not None:
            # It may have landed with its answer lost: free what it may hold, then go back as throttled.
            return ReleaseSlots(hold=last.hold, then=_send_back_throttled(known))
        if known.busy:
            # A run read just now (overlap) is claimable; otherwise read it: a running run's own message,
            # delivered again, must watch its lease rather than wait for a slot its own run holds.
            return (
                _wait_for_slot(known) if isinstance(last.then, TakeSlot) else _read(known.message, Why.SLOT)
            )
        # The claim is built again from now: taking the slots took time the lease must not lose.
        claim = _rebuilt(known, last.then)
        checked = _within_deadline(known, claim)
        if checked is not claim:
            return ReleaseSlots(hold=last.hold, then=checked)
        return _lease_within_hold(known, last.hold, claim)
    return _with_slots(known, _decide(known))


def _decide(known: Known) -> Step:
    last = known.last
    if known.throttled is not None:
        if isinstance(last, EndAttempt) and last.after_target:
            return _finish_throttled(known, last)
        if isinstance(last, AwaitCallback) and known.finish_writes + known.rewrites < FINISH_WRITES:
            # The target took the work: losing this write would let the claim's lease end and call it again.
            return Hold(until=known.now + FINISH_RETRY_FIRST, then=last, counts=("FinishWriteRetries",))
        if isinstance(last, ReadCalendars):
            return _calendars_unread(known, last)
        return _send_back_throttled(known)
    if last is None:
        return _arrived(known)
    if isinstance(last, Hold):
        return last.then or _route(known)
    if isinstance(last, ReadRun):
        return _run_read(known, last)
    if isinstance(last, ReadJob):
        return _job_read(known, last)
    if isinstance(last, ClaimRun):
        return _claim_answered(known, last)
    if isinstance(last, TakeSlot):
        return _slot_answered(known, last)
    if isinstance(last, QueueBehind):
        return _queue_answered(known, last)
    if isinstance(last, ReadCalendars):
        return _calendars_read(known, last)
    if isinstance(last, StartTarget):
        return _target_answered(known, last.started)
    if isinstance(last, EndAttempt):
        return _end_answered(known, last)
    if isinstance(last, AwaitCallback):
        return _await_answered(known, last)
    if isinstance(last, WatchLease):
        return _lease_watched(known)
    if isinstance(last, PollTarget):
        return _polled(known, last)
    raise ValueError(f"{type(last).__name__} ends a delivery: nothing comes after it")


def _with_slots(known: Known, step: Step) -> Step:
    step = _within_deadline(known, step)
    if not known.pools:
        return step
    if isinstance(step, ClaimRun):
        claim = step.claim
        hold = attempt_hold(claim.run_id, claim.worker, claim.expected_attempt + 1, claim.lease_expires_at)
        return AcquireSlots(hold=hold, then=step)
    mine = step.mine if isinstance(step, TakeSlot) else None
    if mine is not None and mine.lease_owner is not None and mine.lease_expires_at is not None:
        hold = attempt_hold(mine.run_id, mine.lease_owner, mine.attempt, mine.lease_expires_at)
        return AcquireSlots(hold=hold, then=step)
    holding = known.holding
    if holding is None:
        return step
    accepted = step.awaiting.lease_expires_at if isinstance(step, AwaitCallback) else None
    if accepted is not None and accepted > holding.lease_expires_at:
        # The target holds the work: the slot's lease moves first, so that the run's never outlives it (a
        # slot held longer than its run is harmless; a run past its slot's lease runs over the bound).
        return ExtendSlots(hold=replace(holding, lease_expires_at=accepted), then=step)
    if not isinstance(step, (Done, SendBack)):
        return step
    last = known.last
    throttled = isinstance(step, SendBack) and step.unsent is Unsent.THROTTLED
    if isinstance(last, AwaitCallback) and (step.outcome is Outcome.ACCEPTED or throttled):
        # The target holds the work (its accepted lease may have landed, its answer lost): the slot stays
        # taken, for at least the run's lease. Never shortened: a heartbeat may have moved it meanwhile. The
        # end of the attempt frees it (its finish, or the lease watch that ends a silent one).
        return step
    return ReleaseSlots(hold=holding, then=step)


def attempt_hold(run_id: str, worker: str, attempt: int, lease_expires_at: datetime) -> SlotHold:
    """The slot hold of one claim: named by the run, the attempt and the claiming delivery's lease owner
    (unique per delivery). A duplicate delivery of the same attempt takes a hold of its own, and frees it
    when its claim is refused, never the winner's."""
    return SlotHold(f"{run_id}@{worker}", attempt, lease_expires_at)


def slot_pools(
    owner: str | None, limits: SlotLimits | None, concurrency: Concurrency | None = None
) -> tuple[Pool, ...]:
    """The pools a message's run needs a slot in before its claim (none without a bound: a job's
    concurrency key is a pool of the bound, so it binds only where the bound is on). A message from before
    messages carried the owner counts in the instance's pool only."""
    if limits is None:
        return ()
    if not owner:
        return (Pool(ALL, limits.total),)
    if concurrency is None:
        return pools_for(owner, None, limits)
    return pools_for(owner, concurrency.key, limits, concurrency.limit)


def claimed_lease(step: ClaimRun | TakeSlot, known: Known) -> datetime | None:
    """The lease of the claim `step` just made (None if it made none, or was refused)."""
    if known.refused or known.busy:
        return None
    if isinstance(step, TakeSlot):
        return step.mine.lease_expires_at
    return None if known.run is None else known.run.lease_expires_at


# What a delivery needs after its call, before its invocation ends: the finish write and the message's end.
AFTER_CALL = timedelta(seconds=15)


def _rebuilt(known: Known, step: Step) -> Step:
    if isinstance(step, ClaimRun):
        return _claim(known, step.claim.timeout_seconds, step.view)
    if isinstance(step, TakeSlot):
        return _take_slot(known, step.expected, step.view)
    return step


def _lease_within_hold(known: Known, hold: SlotHold, step: Step) -> Step:
    """A claim's lease never outlives its slots' (a run past its slot's lease would run over the bound)."""
    if isinstance(step, ClaimRun):
        lease = step.claim.lease_expires_at
    elif isinstance(step, TakeSlot) and step.mine.lease_expires_at is not None:
        lease = step.mine.lease_expires_at
    else:
        return step
    if lease <= hold.lease_expires_at:
        return step
    if lease - hold.lease_expires_at > min(SLOT_LEASE_TOLERANCE, known.lease_margin / 4):
        return ExtendSlots(hold=replace(hold, lease_expires_at=lease), then=step)
    if isinstance(step, ClaimRun):
        return replace(step, claim=replace(step.claim, lease_expires_at=hold.lease_expires_at))
    return replace(step, mine=replace(step.mine, lease_expires_at=hold.lease_expires_at))


def _within_deadline(known: Known, step: Step) -> Step:
    """A claim whose call could outlast the invocation carrying it is not made: the message goes back to
    the queue for a fresh invocation (a run's deadline never exceeds what its invocation has left)."""
    if known.deadline is None or not isinstance(step, (ClaimRun, TakeSlot)):
        return step
    timeout = step.claim.timeout_seconds if isinstance(step, ClaimRun) else step.view.timeout_seconds
    if known.now + timedelta(seconds=call_seconds(timeout)) + AFTER_CALL <= known.deadline:
        return step
    later = replace(known.message.resent(), not_before=max(known.message.not_before, known.now))
    return SendBack(message=later, shard=0, outcome=Outcome.DEFERRED, counts=("DeadlineDeferrals",))


def _wait_for_slot(known: Known) -> SendBack:
    """Every slot of a pool is taken: the message waits in the queue and asks again; a wait is not a hop."""
    message = known.message
    ceiling = min(SLOT_WAIT_CAP, SLOT_WAIT_FIRST * 2 ** min(message.slot_waits, 16))
    wait = ceiling * (0.5 + known.rng.random() / 2)
    later = replace(
        message,
        sent_at=None,
        slot_waits=message.slot_waits + 1,
        not_before=max(message.not_before, known.now + wait),
    )
    return SendBack(message=later, shard=0, outcome=Outcome.WAITING_FOR_SLOT, counts=("SlotWaits",))


def _holding(
    held: SlotHold | None, step: Step, *, busy: bool, refused: bool, throttled: bool
) -> SlotHold | None:
    """What a delivery holds once `step` was carried out (a carried end's hold only once it landed)."""
    if isinstance(step, AcquireSlots):
        return None if busy else step.hold  # throttled: it may hold it; ReleaseSlots follows
    if isinstance(step, ExtendSlots) and held is not None and not busy and not throttled:
        return step.hold
    if isinstance(step, ReleaseSlots):
        return None
    if isinstance(step, EndAttempt) and step.adopts is not None and not refused:
        return step.adopts
    return held


def _arrived(known: Known) -> Step:
    message = known.message
    if message.runaway:
        return _read(message, Why.RUNAWAY)
    wait = message.not_before - known.now
    if wait > known.max_hold:
        return SendBack(message=message.resent(), shard=0, outcome=Outcome.DEFERRED)
    if wait > timedelta(0):
        return Hold(until=message.not_before)
    return _route(known)


def _route(known: Known) -> Step:
    """The hot path claims on the run's view: one conditional write, no read. A retry (attempt > 0), a
    message without the view's timeout, or a run older than the views' window reads the job: job writes
    rewrite the views of unclaimed runs only, within that window."""
    message = known.message
    if message.finish is not None:
        return _read(message, Why.FINISH)
    if message.polls:
        return _read(message, Why.POLL)
    if message.watch:
        return _read(message, Why.WATCH)
    return _claim_route(known)


def _claim_route(known: Known) -> Step:
    message = known.message
    timeout = message.timeout_seconds
    if message.attempt > 0 or timeout is None or not trusts_view(message.scheduled_for, known.now):
        return ReadJob()
    return _claim(known, timeout, view=None)


def _claim(known: Known, timeout_seconds: int, view: JobView | None) -> ClaimRun:
    message, now = known.message, known.now
    claim = Claim(
        job_id=message.job_id,
        scheduled_for=message.scheduled_for,
        expected_attempt=message.attempt,
        worker=known.worker,
        now=now,
        timeout_seconds=timeout_seconds,
        lease_expires_at=lease_until(call_seconds(timeout_seconds), now, known.lease_margin),
        dispatched_at=message.sent_at,
        trusting_view=view is None,
        concurrency=message.concurrency,
    )
    return ClaimRun(claim=claim, view=view)


def _rekeyed(known: Known, concurrency: Concurrency | None) -> SendBack:
    """The run's job view names another concurrency key or limit than this message was sent with (a job
    edit rewrote it since): the attempt's slots would be another pool's than the one its heartbeats and its
    end look for. Nothing is claimed (slots taken are freed); the message goes back with the view's, and
    its next delivery takes the slots of that pool."""
    message = known.message
    again = replace(message.resent(), not_before=max(message.not_before, known.now), concurrency=concurrency)
    return SendBack(message=again, shard=0, outcome=Outcome.DEFERRED, counts=("ConcurrencyKeyChanges",))


def _claim_answered(known: Known, last: ClaimRun) -> Step:
    current = known.run
    if not known.refused and current is not None:
        return _started(known, Started(current, last.view or _view_of(current), exclusive=False))
    if current is None:
        return _run_missing(known)
    if last.claim.is_own(current):
        return _started(known, Started(current, last.view or _view_of(current), False), recognised="claim")
    if not claimable_at(current, known.message.attempt):
        return _not_claimable(known, current)
    view = current.job_view
    if last.view is not None:
        # Claimable, yet refused on the job's own terms: its view names another concurrency key, or a race.
        if _concurrency_of(current) != known.message.concurrency:
            return _rekeyed(known, _concurrency_of(current))
        return _not_claimable(known, current)
    # Still claimable, so its view refused: the job stops it, names another concurrency key or wants its
    # overlap slot, has another timeout since the message was sent, or the run has no view.
    if view is None:
        return ReadJob()
    reason = cancellation_reason(view.standing)
    if reason is not None:
        return _end(current, RunState.CANCELLED, reason, Outcome.CANCELLED, known.now)
    if view.concurrency != known.message.concurrency:
        return _rekeyed(known, view.concurrency)
    if view.overlap is not OverlapPolicy.ALLOW:
        return _to_overlap_slot(known, current, view)
    if known.claims_on_view < CLAIMS_ON_VIEW and view.timeout_seconds != last.claim.timeout_seconds:
        return _claim(known, view.timeout_seconds, view=None)
    return ReadJob()  # it moved under us: let the job decide


def _job_read(known: Known, last: ReadJob) -> Step:
    """The job as it is now decides, read strongly consistent: for a run whose view may be stale, and for
    the target of a run whose view leaves it out."""
    job = known.job
    if last.started is not None:
        if job is None:
            ended = terminal(last.started.run, RunState.CANCELLED, "job deleted", known.now)
            return EndAttempt(
                expected=last.started.run, ended=ended, outcome=Outcome.CANCELLED, by_message=False
            )
        started = last.started
        view = replace(started.view, target=job.target)
        return StartTarget(started=replace(started, view=view), target=job.target)
    if job is None or cancellation_reason(_standing(known)) is not None:
        return _read(known.message, Why.CANCEL)
    if job.policies.overlap is not OverlapPolicy.ALLOW:
        return _read(known.message, Why.EXCLUSIVE)
    return _claim(known, job.timeout_seconds, view=_job_view(known, job))


def _run_read(known: Known, last: ReadRun) -> Step:
    run, message = known.run, known.message
    if last.why is Why.FINISH and run is not None:
        if message.finish is None or not message.finish.holds(run):
            return _not_claimable(known, run)  # the attempt ended meanwhile (its lease, or a newer one)
        ended = message.finish.applied_to(run)
        return EndAttempt(
            expected=run,
            ended=ended,
            outcome=_finished(ended.state),
            after_target=True,
            frees_slot=message.finish.frees_slot,
            counts=("FinishesApplied",),
            adopts=attempt_hold(
                run.run_id, message.finish.worker, run.attempt, run.lease_expires_at or known.now
            ),
        )
    if last.why is Why.POLL and run is not None:
        return _poll(known, run)
    if last.why is Why.WATCH and run is not None:
        # Still claimable at its attempt (its worker never claimed, or a retry waits): a delivery as any.
        return _claim_route(known) if claimable_at(run, message.attempt) else _not_claimable(known, run)
    if last.why is Why.RELEASE:
        outcome = last.then or Outcome.SUCCEEDED
        if run is None or run.state is not RunState.QUEUED:
            return Done(outcome=outcome)
        # Another run's message: its own first re-send (hop 1). Counting the finished run's hops on
        # would fail a healthy backlogged overlap=queue job after MAX_HOPS runs.
        released = RunMessage.for_run(run, known.now, hops=1)
        note = f"could not release queued run {run.run_id}"
        return SendBack(
            message=released, shard=run.shard, outcome=outcome, unsent=Unsent.SWEEPER, unsent_note=note
        )
    if last.why is Why.SLOT:
        if run is None:
            return _run_missing(known)
        if not claimable_at(run, message.attempt):
            return _not_claimable(known, run)
        if _concurrency_of(run) != message.concurrency:
            return _rekeyed(known, _concurrency_of(run))  # a full pool of a key the run no longer names
        return _wait_for_slot(known)
    if run is None:
        if last.why is Why.EXCLUSIVE:
            return _run_missing(known)
        return _orphan(message)
    if last.why is Why.RUNAWAY:
        if run.state.is_terminal or run.attempt != message.attempt:
            return _not_claimable(known, run)
        reason = f"stopped a runaway re-send loop: message re-sent {message.hops} times (limit {MAX_HOPS})"
        step = _end(run, RunState.FAILED, reason, Outcome.FAILED, known.now)
        return replace(
            step, counts=("RunawayLoops",), logs=(Log(logging.ERROR, f"run {run.run_id}: {reason}"),)
        )
    if not claimable_at(run, message.attempt):
        return _not_claimable(known, run)
    if last.why is Why.REFUSED:
        # Still claimable at this attempt (a job write rewrote its view in between): the message goes back
        # to be handled afresh, since a queue-carried run has nothing else to bring it.
        again = replace(message.resent(), not_before=max(message.not_before, known.now))
        return SendBack(message=again, shard=run.shard, outcome=Outcome.DEFERRED)
    job = known.job
    if last.why is Why.CANCEL or job is None:
        reason = cancellation_reason(_standing(known)) or "job deleted"
        return _end(run, RunState.CANCELLED, reason, Outcome.CANCELLED, known.now)
    if _concurrency_of(run) != message.concurrency:
        return _rekeyed(known, _concurrency_of(run))
    return _to_overlap_slot(known, run, _job_view(known, job))


def _to_overlap_slot(known: Known, run: Run, view: JobView) -> Step:
    if view.calendars and known.calendars is None and excludable(run):
        return ReadCalendars(names=view.calendars, waiting=run, view=view)
    return _take_slot(known, run, view)


def _take_slot(known: Known, run: Run, view: JobView) -> TakeSlot:
    mine = claimed(
        run,
        view,
        worker=known.worker,
        now=known.now,
        lease_margin=known.lease_margin,
        dispatched_at=known.message.sent_at,
    )
    return TakeSlot(expected=run, mine=mine, view=view, now=known.now)


def _slot_answered(known: Known, last: TakeSlot) -> Step:
    if known.refused:
        if not is_own_write(known.run, last.mine):
            return _read(known.message, Why.REFUSED)  # another delivery claimed it first, or its view moved
        return _started(known, Started(last.mine, last.view, exclusive=True), recognised="claim")
    if not known.busy:
        return _started(known, Started(last.mine, last.view, exclusive=True))
    run, message = last.expected, known.message
    if run.attempt > 0:
        # A retry of a run that already started is not a new overlapping fire: it waits for the slot
        # instead of being skipped (a skipped retry would be a failure nobody hears about).
        wait = RunMessage.for_run(run, known.now + BLOCKED_RETRY_WAIT, hops=message.hops + 1)
        return SendBack(message=wait, shard=run.shard, outcome=Outcome.DEFERRED)
    if last.view.overlap is OverlapPolicy.QUEUE:
        waiting = replace(run, state=RunState.QUEUED, reason="waiting for the job's running run to finish")
        return QueueBehind(expected=run, waiting=waiting)
    reason = "overlap=skip and the previous run is still running"
    return _end(run, RunState.SKIPPED, reason, Outcome.SKIPPED, known.now)


def _queue_answered(known: Known, last: QueueBehind) -> Step:
    if known.refused:
        return _read(known.message, Why.REFUSED)
    if known.busy:
        reason = "overlap=queue and a run is already waiting"
        return _end(last.expected, RunState.SKIPPED, reason, Outcome.SKIPPED, known.now)
    return Done(outcome=Outcome.QUEUED, counts=("RunsQueued",))


def _started(known: Known, started: Started, recognised: str | None = None) -> Step:
    """The run is this delivery's: unless one of the job's calendars excludes its fire (looked up first),
    count the start, then call its target (read from the job if the view leaves it out)."""
    started = replace(started, claimed_at=started.claimed_at or known.now)
    run = started.run
    if started.view.calendars and known.calendars is None and excludable(run):
        return ReadCalendars(started=started, names=started.view.calendars, recognised=recognised)
    counts = ("RunsStarted",) + (("Retries",) if run.attempt > 1 else ())
    logs: tuple[Log, ...] = ()
    if recognised is not None:
        # Our write landed and its response was lost; the retry was refused by its own condition.
        counts = ("LostResponsesRecognised", *counts)
        logs = (_recognised(recognised, run.run_id),)
    timings: tuple[tuple[str, float], ...] = ()
    if run.attempt == 1 and run.start_delay_ms is not None:
        # Start delay is measured once, for the first attempt, against the due time (fire + jitter).
        timings = (("StartDelay", float(run.start_delay_ms)),)
    target = started.view.target
    if target is None:
        return ReadJob(started=started, counts=counts, timings=timings, logs=logs)
    return StartTarget(started=started, target=target, counts=counts, timings=timings, logs=logs)


def _calendars_read(known: Known, last: ReadCalendars) -> Step:
    started, found = last.started, known.calendars or ()
    run = last.run
    reason = exclusion(found, run.scheduled_for)
    missing = sorted(set(last.names) - {calendar.name for calendar in found})
    logs = () if not missing else (Log(logging.WARNING, f"run {run.run_id}: no calendar {missing}"),)
    if started is None:  # before the overlap slot: nothing is claimed yet
        assert last.view is not None, "a run waiting for its overlap slot has the view it is claimed with"
        unclaimed: Step = (
            _take_slot(known, run, last.view) if reason is None else _excluded_unclaimed(known, run, reason)
        )
        return replace(unclaimed, logs=(*logs, *unclaimed.logs))
    if reason is None:
        step = _started(known, started, last.recognised)
        return replace(step, logs=(*logs, *step.logs))
    ended = excluded_at_claim(started.run, reason, known.now)
    return EndAttempt(
        expected=started.run,
        ended=ended,
        outcome=Outcome.EXCLUDED,
        after_target=True,  # a claimed attempt's end: refused, it is looked at as a finish is
        frees_slot=started.exclusive,
        logs=logs,
    )


def _excluded_unclaimed(known: Known, run: Run, reason: str) -> EndAttempt:
    return _end(run, RunState.EXCLUDED, reason, Outcome.EXCLUDED, known.now)


def _calendars_unread(known: Known, last: ReadCalendars) -> Step:
    """The calendars could not be read (throttled past the store's retries) and the run is claimed: sending
    the message back would leave the claimed attempt to its lease's end and a retry that is never decided
    again. So the read is tried again shortly while the lease has time; after that the fire runs (at least
    once: an unread calendar excludes nothing), said in the log and counted."""
    started = last.started
    if started is None:
        return _send_back_throttled(known)  # nothing is claimed: the message comes back to read again
    lease = started.run.lease_expires_at
    wait = known.now + FINISH_RETRY_FIRST
    # Read again only while the call would still end inside the claim's lease.
    call_ends = wait + timedelta(seconds=call_seconds(started.view.timeout_seconds))
    if known.calendar_reads < CALENDAR_READS and lease is not None and call_ends < lease:
        return Hold(until=wait, then=last, counts=("CalendarReadRetries",))
    text = f"run {started.run.run_id}: calendars {list(last.names)} unread ({known.throttled}): it runs"
    step = _started(replace(known, calendars=()), started, last.recognised)
    logs = (*step.logs, Log(logging.ERROR, text))
    return replace(step, counts=(*step.counts, "CalendarsUnread"), logs=logs)


def _target_answered(known: Known, started: Started) -> Step:
    if known.result is None:
        raise ValueError("a target step needs the target's result")
    run, result = started.run, known.result
    token = started.callback
    if result.accepted and result.handle is not None and started.view.completion is Completion.TRACKED:
        deadline = attempt_deadline(started.view, started.claimed_at or known.now)
        awaiting = replace(
            run, lease_expires_at=truncate_ms(deadline + known.lease_margin), tracking=result.handle
        )
        return AwaitCallback(expected=run, awaiting=awaiting)
    if result.accepted and token is not None:
        lease = awaiting_lease(started.view.heartbeat_seconds, token.deadline, known.now, known.lease_margin)
        awaiting = replace(run, lease_expires_at=lease, heartbeat_at=known.now)
        return AwaitCallback(expected=run, awaiting=awaiting)
    finished = after_attempt(run, started.view.retry, result, now=known.now, rng=known.rng)
    outcome = _finished(finished.state)
    frees_slot = started.exclusive and finished.state is not RunState.RETRY_WAIT
    return EndAttempt(expected=run, ended=finished, outcome=outcome, after_target=True, frees_slot=frees_slot)


def _end_answered(known: Known, last: EndAttempt) -> Step:
    ended = last.ended
    counts: tuple[str, ...] = ()
    logs: tuple[Log, ...] = ()
    if known.refused:
        if not last.after_target:
            return _read(known.message, Why.REFUSED) if last.by_message else Done(outcome=Outcome.DUPLICATE)
        again = _against_heartbeat(known, last.expected)
        if again is not None and not is_own_write(known.run, ended):
            # A heartbeat moved the lease after we read it: the attempt is still ours; write again on it.
            applied = Finish.of(last.expected, ended, frees_slot=last.frees_slot).applied_to(again)
            return replace(last, expected=again, ended=applied, counts=(), timings=(), logs=())
        if not is_own_write(known.run, ended):
            # A newer attempt owns the run (our lease expired and it was taken over): our result must not
            # overwrite it.
            text = f"stale completion of {ended.run_id} attempt {ended.attempt} discarded"
            return Done(
                outcome=Outcome.STALE_COMPLETION,
                counts=("StaleCompletions",),
                logs=(Log(logging.WARNING, text),),
            )
        # Landed; only the response was lost (a run queued behind it is then left to the sweeper: its
        # release id came back only with the lost response).
        counts = ("LostResponsesRecognised",)
        logs = (_recognised("finish", ended.run_id),)
    if not last.after_target:
        return Done(outcome=last.outcome, counts=(f"Runs{ended.state.value.capitalize()}",))
    if ended.state in (RunState.SUCCEEDED, RunState.EXCLUDED):
        counts = (*counts, f"Runs{ended.state.value.capitalize()}")
    elif ended.state is RunState.FAILED:
        counts = (*counts, "RunsFailed")
        failure = f"run {ended.run_id} failed after attempt {ended.attempt}: {ended.reason}"
        logs = (*logs, Log(logging.ERROR, failure))
    if known.released is not None:
        job_id, scheduled_for = split_run_id(known.released)
        return ReadRun(
            why=Why.RELEASE,
            job_id=job_id,
            scheduled_for=scheduled_for,
            then=last.outcome,
            counts=counts,
            logs=logs,
        )
    if ended.state is RunState.RETRY_WAIT and ended.retry_at is not None:
        retry = RunMessage.for_run(ended, ended.retry_at, hops=known.message.hops + 1)
        return SendBack(
            message=retry,
            shard=ended.shard,
            outcome=last.outcome,
            unsent=Unsent.SWEEPER,
            unsent_note=f"could not schedule the retry of {ended.run_id}",
            counts=counts,
            logs=logs,
        )
    return Done(outcome=last.outcome, counts=counts, logs=logs)


def _finished(state: RunState) -> Outcome:
    """A finished attempt's outcome: the run succeeded, waits to retry, or failed."""
    return {
        RunState.SUCCEEDED: Outcome.SUCCEEDED,
        RunState.RETRY_WAIT: Outcome.RETRY_SCHEDULED,
        RunState.EXCLUDED: Outcome.EXCLUDED,
    }.get(state, Outcome.FAILED)


def _finish_throttled(known: Known, last: EndAttempt) -> Step:
    """The target answered and its finish write throttled past the store's retries. Sending the run's
    message back, as any throttled delivery does, would find the run running, wait out the lease and call
    the target again. So the write is tried again while the lease has time; after that the attempt's end
    goes by message (`Finish`), which any executor applies (idempotently: only to that running attempt)."""
    wait = FINISH_RETRY_FIRST * 2 ** max(0, known.finish_writes - 1)
    lease = last.expected.lease_expires_at
    if known.finish_writes < FINISH_WRITES and lease is not None and known.now + wait < lease:
        return Hold(until=known.now + wait, then=last, counts=("FinishWriteRetries",))
    finish = Finish.of(last.expected, last.ended, frees_slot=last.frees_slot)
    later = _send_back_throttled(known)
    if lease is not None:  # applied before the lease ends, or the sweeper may retry a run whose end is known
        later = replace(
            later,
            message=replace(later.message, not_before=max(known.now, min(later.message.not_before, lease))),
        )
    tries = known.finish_writes
    text = f"run {last.ended.run_id}: finish write throttled {tries} times; its end goes by message"
    return replace(
        later,
        message=replace(later.message, finish=finish),
        outcome=Outcome.FINISH_SENT,
        counts=("ThrottledDeliveries", "FinishesSent"),
        logs=(Log(logging.WARNING, text),),
    )


def _against_heartbeat(known: Known, expected: Run) -> Run | None:
    """The run as stored when a write of ours was refused only because a heartbeat moved its lease: still
    running the same attempt under the same lease owner (a heartbeat never changes those). None otherwise.
    Bounded: a delivery writes again at most REWRITES times."""
    current = known.run
    if current is None or known.rewrites > REWRITES:
        return None
    same = current.attempt == expected.attempt and current.lease_owner == expected.lease_owner
    moved = current.lease_expires_at != expected.lease_expires_at
    return current if current.state is RunState.RUNNING and same and moved else None


def _await_answered(known: Known, last: AwaitCallback) -> Step:
    """The accepted attempt's lease is written. A queue-carried run's message stays with it, back at the
    lease end (a silent target's attempt then ends, as a silent worker's does)."""
    awaiting = last.awaiting
    again = _against_heartbeat(known, last.expected) if known.refused else None
    if again is not None and not is_own_write(known.run, awaiting):
        # The target heartbeat before its 202 reached us: still our attempt; keep the later lease.
        lease = max(awaiting.lease_expires_at or known.now, again.lease_expires_at or known.now)
        rewrite = replace(again, lease_expires_at=lease, tracking=awaiting.tracking)
        return replace(last, expected=again, awaiting=rewrite)
    if known.refused and not is_own_write(known.run, awaiting):
        text = f"run {awaiting.run_id} attempt {awaiting.attempt} was accepted after its lease was taken over"
        return Done(
            outcome=Outcome.STALE_COMPLETION, counts=("StaleCompletions",), logs=(Log(logging.WARNING, text),)
        )
    if awaiting.tracking is not None:
        # Tickwork follows what the attempt started: the first look (it also recovers the run, as the run's
        # message would: a look that finds the lease over ends the attempt).
        return replace(_next_look(known, awaiting), outcome=Outcome.ACCEPTED, counts=("RunsAccepted",))
    if awaiting.queue_carried and awaiting.lease_expires_at is not None:
        watch = replace(known.message, sent_at=None, not_before=awaiting.lease_expires_at, watch=True)
        return SendBack(
            message=watch, shard=awaiting.shard, outcome=Outcome.ACCEPTED, counts=("RunsAccepted",)
        )
    return Done(outcome=Outcome.ACCEPTED, counts=("RunsAccepted",))


def _poll(known: Known, run: Run) -> Step:
    """A look at a tracked run: its attempt is still the one this message follows, and its lease is live."""
    following = (
        run.state is RunState.RUNNING
        and run.tracking is not None
        and run.attempt == known.message.attempt + 1
    )
    if not following:
        return _not_claimable(known, run)
    view = run.job_view
    if view is None or view.target is None:
        return WatchLease(running=run)
    return PollTarget(running=run, target=view.target)  # at the lease end too: one last look first


def _polled(known: Known, last: PollTarget) -> Step:
    run = last.running
    if known.result is None:
        if run.lease_expires_at is None or run.lease_expires_at <= known.now:
            return WatchLease(running=run)  # the attempt's time is up: it ends as a silent worker's does
        return _next_look(known, run)  # still running, or the look failed: look again later
    view = run.job_view
    retry = view.retry if view is not None else RetryPolicy()
    finished = after_attempt(run, retry, known.result, now=known.now, rng=known.rng)
    exclusive = view is not None and view.overlap is not OverlapPolicy.ALLOW
    return EndAttempt(
        expected=run,
        ended=finished,
        outcome=_finished(finished.state),
        after_target=True,
        frees_slot=exclusive and finished.state is not RunState.RETRY_WAIT,
        counts=("TrackedRunsEnded",),
        adopts=attempt_hold(
            run.run_id, run.lease_owner or "", run.attempt, run.lease_expires_at or known.now
        ),
    )


def _next_look(known: Known, run: Run) -> SendBack:
    """The next look at a tracked run: later each time, never after its lease end; not a hop."""
    message = known.message
    wait = min(POLL_CAP, POLL_FIRST * 2 ** min(message.polls, 16))
    at = known.now + wait
    if run.lease_expires_at is not None:
        at = min(at, run.lease_expires_at)
    look = replace(message, sent_at=None, polls=message.polls + 1, not_before=max(message.not_before, at))
    return SendBack(message=look, shard=run.shard, outcome=Outcome.TRACKING)


def _lease_watched(known: Known) -> Step:
    watched = known.watched or LeaseWatched()
    if watched.moved:
        return Done(outcome=Outcome.DUPLICATE)  # it moved while we looked: finished, or taken over
    if watched.ended is None:
        return Done(outcome=Outcome.WATCHING_LEASE)
    counts: tuple[str, ...] = ("ExpiredLeases",)
    logs: tuple[Log, ...] = ()
    if watched.retry_not_sent is not None:
        # The retry-wait is committed, with its sweeper entry: the sweeper re-sends it.
        counts = (*counts, "DispatchFailures")
        text = (
            f"could not schedule the retry of {watched.ended.run_id}, sweeper will: {watched.retry_not_sent}"
        )
        logs = (Log(logging.ERROR, text),)
    if watched.ended.state is RunState.FAILED:
        counts = (*counts, "RunsFailed")
    done = Done(outcome=Outcome.LEASE_EXPIRED, counts=counts, logs=logs)
    silent = known.last.running if isinstance(known.last, WatchLease) else None
    if not known.pools or silent is None or silent.lease_owner is None or silent.lease_expires_at is None:
        return done
    # The ended attempt's slot is free now, not at its hold's lease (a callback run's may be longer).
    hold = attempt_hold(silent.run_id, silent.lease_owner, silent.attempt, silent.lease_expires_at)
    return ReleaseSlots(hold=hold, then=done)


def _run_missing(known: Known) -> Step:
    """No run for this message. One the ticker sent before committing its run may be early: its commit
    can still land (`run_may_appear`), so the message looks again later rather than be dropped."""
    message = known.message
    if not message.run_may_appear(known.now):
        return _orphan(message)
    return SendBack(
        message=message.missing_run_recheck(known.now),
        shard=0,
        outcome=Outcome.WAITING_FOR_RUN,
        counts=("MessagesBeforeTheirRun",),
    )


def _not_claimable(known: Known, current: Run) -> Step:
    """A delivery that cannot claim its run: usually a duplicate (another delivery claimed it, or the run
    moved on). But a queue-carried run running at this message's attempt has no sweeper entry: this message
    is what brings it back if its worker died, so it stays with the run until the lease ends."""
    following = current.tracking is not None and current.attempt == known.message.attempt + 1
    if current.state is RunState.RUNNING and following:
        return _poll(known, current)  # a tracked run's message: it looks (its first look may not have gone)
    if recovered_by_message(current, known.message.attempt):
        return WatchLease(running=current)
    return Done(outcome=Outcome.DUPLICATE)


def _orphan(message: RunMessage) -> Done:
    text = f"message for unknown run {message.dedupe_id}: dropped"
    return Done(outcome=Outcome.NOT_FOUND, counts=("OrphanMessages",), logs=(Log(logging.WARNING, text),))


def _send_back_throttled(known: Known) -> SendBack:
    """Still throttled after the store's retries: the message goes again later, a fresh one, rather than
    let its receive count run out. Routing is by run id: the run may not have been read."""
    message = known.message
    delay = THROTTLED_RETRY_BASE_SECONDS + backoff_delay(
        message.hops + 1, THROTTLED_RETRY_BASE_SECONDS, THROTTLED_RETRY_MAX_SECONDS, known.rng
    )
    later = replace(
        message.resent(), not_before=max(message.not_before, known.now + timedelta(seconds=delay))
    )
    text = f"run {message.run_id}: store throttled ({known.throttled}); message sent back for {delay:.0f} s"
    return SendBack(
        message=later,
        shard=0,
        outcome=Outcome.DEFERRED,
        unsent=Unsent.THROTTLED,
        counts=("ThrottledDeliveries",),
        logs=(Log(logging.WARNING, text),),
    )


def _recognised(write: str, run_id: str) -> Log:
    return Log(logging.INFO, f"{write} of {run_id} recognised as our own after a lost response")


def _end(run: Run, state: RunState, reason: str, outcome: Outcome, now: datetime) -> EndAttempt:
    return EndAttempt(expected=run, ended=terminal(run, state, reason, now), outcome=outcome)


def _read(message: RunMessage, why: Why) -> ReadRun:
    return ReadRun(why=why, job_id=message.job_id, scheduled_for=message.scheduled_for)


def _standing(known: Known) -> Standing:
    return standing_of(known.job, known.message.scheduled_for)


def _job_view(known: Known, job: Job) -> JobView:
    return replace(JobView.planned(job), standing=_standing(known), target=job.target)


def _concurrency_of(run: Run) -> Concurrency | None:
    """The concurrency key and limit a run's attempts take their slots for: its job view's."""
    return None if run.job_view is None else run.job_view.concurrency


def _view_of(run: Run) -> JobView:
    if run.job_view is None:
        raise AssertionError(f"run {run.run_id} was claimed on its view but has none")
    return run.job_view
