"""The executor's use case: carry out the steps of a delivery (domain/delivery.py decides them), fenced by
the attempt: claim a run, call its target, record the outcome."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import timedelta
from random import Random

from tickwork.domain.callbacks import CallbackLinks
from tickwork.domain.clock import Clock
from tickwork.domain.delivery import (
    DEFAULT_MAX_HOLD,
    AcquireSlots,
    AwaitCallback,
    ClaimRun,
    Done,
    EndAttempt,
    ExtendSlots,
    Hold,
    Known,
    Outcome,
    PollTarget,
    QueueBehind,
    ReadCalendars,
    ReadJob,
    ReadRun,
    ReleaseSlots,
    SendBack,
    StartTarget,
    Step,
    TakeSlot,
    Unsent,
    WatchLease,
    claimed_lease,
    next_step,
    slot_pools,
)
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.errors import DispatchError, StaleRunError, StoreError, TransientStoreError
from tickwork.domain.execution import LEASE_MARGIN
from tickwork.domain.slots import SlotLimits
from tickwork.domain.targets import TargetInvoker, TargetTracker
from tickwork.services.ports import (
    CalendarReader,
    Carrier,
    Dispatcher,
    Metrics,
    RunStore,
    SlotStore,
    WriteUnits,
)
from tickwork.services.sweeping import watched_lease

__all__ = ["Begun", "Executor", "ExecutorConfig", "Outcome"]
logger = logging.getLogger(__name__)

# The steps that only write the store or the slots. Where the engine has write units, a run of them in a
# row is one commit: the slot and the claim, the finish and the slot back.
_WRITE_STEPS = (
    AcquireSlots,
    ExtendSlots,
    ReleaseSlots,
    ClaimRun,
    TakeSlot,
    QueueBehind,
    EndAttempt,
    AwaitCallback,
)


def _keep_hidden(carrier: Carrier | None, step: Step, known: Known) -> None:
    """A claim just made keeps its delivery's message hidden for its lease."""
    if carrier is not None and isinstance(step, (ClaimRun, TakeSlot)):
        carrier.keep_hidden_until(claimed_lease(step, known))  # None: no claim was made


@dataclass(frozen=True, slots=True)
class Begun:
    """A delivery part way: what is known of it and the step decided next. `Executor.start` decides its
    first; `begin_together` and `carry_together` return it once its writes landed with others' in one
    commit; `advance` stops at its next write. `advance` or `resume` carries it on from there."""

    known: Known  # what is known so far (its message among it)
    next: Step  # the step decided next

    @property
    def done(self) -> bool:
        """Nothing is left to carry out: `advance` only records its end and returns its outcome."""
        return isinstance(self.next, Done)


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    worker_id: str
    max_hold: timedelta = DEFAULT_MAX_HOLD
    lease_margin: timedelta = LEASE_MARGIN
    callbacks: CallbackLinks | None = None  # where callback runs report (None: their 202 is a plain success)
    limits: SlotLimits | None = None  # the concurrency bound (None: none; the executor needs a SlotStore)


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
        slots: SlotStore | None = None,
        tracker: TargetTracker | None = None,
        calendars: CalendarReader | None = None,
        units: WriteUnits | None = None,
    ) -> None:
        self._store, self._invoker, self._dispatcher = store, invoker, dispatcher
        self._clock, self._metrics, self._config = clock, metrics, config
        self._rng, self._slots, self._tracker, self._calendars = rng or Random(), slots, tracker, calendars
        self._units = units  # None: every write commits on its own
        if (slots is None) != (config.limits is None):
            raise ValueError("the concurrency bound needs both a SlotStore and its limits")

    def execute(self, message: RunMessage, carrier: Carrier | None = None) -> Outcome:
        """Handle one delivery; safe to repeat: only the delivery whose claim wins calls the target, once per
        attempt. The hot path: the slot, the claim, the call, the finish, the slot back."""
        return self._drive(self._known(message, carrier), None, carrier)

    def start(self, message: RunMessage) -> Begun:
        """A delivery decided and not begun: `advance` carries it on."""
        known = self._known(message, None)
        return Begun(known, next_step(known))

    def begin_together(self, messages: Sequence[RunMessage]) -> list[Begun] | None:
        """Begin several deliveries with one commit: each one's first write steps (its slot and its claim)
        are carried out inside one write unit, decided as `execute` would decide them; `resume` carries each
        on once this returned. A delivery that begins with no write (it holds for its fire time) is only
        decided here. For callers that keep their messages hidden themselves (no carrier).

        None when the engine has no write units, or when the unit could not begin or commit (busy beyond
        the engine's wait): then nothing of it landed, and each delivery is to be `execute`d alone. What a
        delivery's writes raised otherwise is raised, and nothing of the batch landed either."""
        if self._units is None:
            return None
        return self.carry_together([self.start(message) for message in messages])

    def carry_together(self, begun: Sequence[Begun]) -> list[Begun] | None:
        """Carry out the write steps each delivery is at (its slot and claim, or its finish and slot back),
        and those decided right after them, with one commit for them all; each is decided as `execute`
        would decide it. A delivery that is not at a write step is passed through. Returns each delivery
        with the step decided after its writes (not a write). For callers that keep their messages hidden
        themselves (no carrier).

        None when the engine has no write units, or when the unit could not begin or commit (busy beyond
        the engine's wait): then nothing of it landed, and each delivery is to be `resume`d alone. What a
        delivery's writes raised otherwise is raised, and nothing of the batch landed either."""
        if self._units is None:
            return None
        carried = list(begun)
        if not any(isinstance(one.next, _WRITE_STEPS) for one in carried):
            return carried  # nothing to write
        landed: list[Step] = []
        try:
            with self._units.together():
                for index, one in enumerate(carried):
                    if isinstance(one.next, _WRITE_STEPS):
                        after, step, steps = self._carry_writes(one.next, one.known)
                        carried[index] = Begun(after, step)
                        landed.extend(done for done, _ in steps)
        except (TransientStoreError, StoreError):
            return None
        try:
            for step in landed:  # recorded once they landed, as `execute` records its own
                self._record(step)
        except Exception:  # they landed: the deliveries go on, only these records are missing
            logger.exception("recording the writes of %d deliveries carried together failed", len(carried))
        return carried

    def advance(self, begun: Begun) -> Begun | Outcome:
        """Carry a delivery on until it is done (its outcome) or its next step is a write (the delivery,
        for `carry_together` to carry out with others' writes). Without write units, writes are carried
        out here too. For callers that keep their messages hidden themselves (no carrier)."""
        known, step = begun.known, begun.next
        while True:
            if isinstance(step, Done):
                self._record(step)
                return step.outcome
            if isinstance(step, SendBack):
                return self._send(step, known)
            if self._units is not None and isinstance(step, _WRITE_STEPS):
                return Begun(known, step)
            self._record(step)
            known = self._attempt(step, known, None)
            step = next_step(known)

    def resume(self, begun: Begun) -> Outcome:
        """Carry on a delivery `begin_together`, `carry_together` or `advance` left, to its outcome."""
        return self._drive(begun.known, begun.next, None)

    def _known(self, message: RunMessage, carrier: Carrier | None) -> Known:
        return Known(
            message=message,
            now=self._clock.now(),
            # One lease owner per delivery: two deliveries of one run in one worker never share a claim.
            worker=f"{self._config.worker_id}#{self._rng.getrandbits(32):08x}",
            rng=self._rng,
            lease_margin=self._config.lease_margin,
            max_hold=self._config.max_hold,
            pools=slot_pools(message.owner, self._config.limits, message.concurrency),
            deadline=None if carrier is None else carrier.deadline,
        )

    def _drive(self, known: Known, decided: Step | None, carrier: Carrier | None) -> Outcome:
        """The delivery's steps from `known` (`decided`: the next step, when it is already decided) until
        it is done."""
        while True:
            step = next_step(known) if decided is None else decided
            decided = None
            if isinstance(step, Done):
                self._record(step)
                return step.outcome
            if isinstance(step, SendBack):
                return self._send(step, known)
            self._record(step)
            if self._units is not None and isinstance(step, _WRITE_STEPS):
                known, decided = self._together(step, known, carrier)
            else:
                known = self._attempt(step, known, carrier)

    def _attempt(self, step: Step, known: Known, carrier: Carrier | None) -> Known:
        """Carry out one step; a throttled store is what the step found (the decision handles it)."""
        try:
            known = self._carry_out(step, known)
        except TransientStoreError as error:
            known = known.after(step, self._clock.now(), throttled=error)
        _keep_hidden(carrier, step, known)
        return known

    def _together(self, first: Step, known: Known, carrier: Carrier | None) -> tuple[Known, Step | None]:
        """Carry out `first` and the write steps the decision asks for right after it in one write unit:
        one commit instead of one each. Each step is decided on what the one before it found, as without a
        unit. If the commit fails, none of them landed: `first` is then known as throttled (its answer
        lost), which every write already handles, and what the later steps found is dropped. (A failed
        commit is not retried as a lone write's is: the decision's own throttled path takes it.)

        Also returns the step decided after the unit, when it landed (None: decide again)."""
        assert self._units is not None
        unit = ExitStack()
        try:
            unit.enter_context(self._units.together())
        except TransientStoreError:
            return self._attempt(first, known, carrier), None  # busy beyond the engine's wait: alone, retried
        before = known
        try:
            with unit:
                known, step, carried = self._carry_writes(first, known)
        except TransientStoreError as error:
            return before.after(first, self._clock.now(), throttled=error), None
        for index, (landed, found) in enumerate(carried):
            if index:  # recorded once they landed (the first was, before it was tried)
                self._record(landed)
            _keep_hidden(carrier, landed, found)
        return known, step

    def _carry_writes(self, first: Step, known: Known) -> tuple[Known, Step, list[tuple[Step, Known]]]:
        """Inside an open unit: `first` and the write steps decided right after it. Returns what is known
        after the last, the step decided next (not a write), and each step with what was known right after
        it."""
        step = first
        carried: list[tuple[Step, Known]] = []
        while True:
            known = self._attempt(step, known, None)  # the carrier only hears of landed claims
            carried.append((step, known))
            step = next_step(known)
            if not isinstance(step, _WRITE_STEPS):
                return known, step, carried

    def _carry_out(self, step: Step, known: Known) -> Known:
        """Do one step's I/O; what it found is what the next decision reads. The clock is read after the
        call: a lease or a finish time must not start before the read or write that led to it."""
        store, clock = self._store, self._clock
        if isinstance(step, Hold):
            clock.sleep(max(0.0, (step.until - clock.now()).total_seconds()))
            return known.after(step, clock.now())
        if isinstance(step, ReadRun):
            run = store.get_run(step.job_id, step.scheduled_for)
            return known.after(step, clock.now(), run=run)
        if isinstance(step, ReadJob):
            job = store.get_job(known.message.job_id)
            return known.after(step, clock.now(), job=job)
        if isinstance(step, ReadCalendars):
            assert self._calendars is not None, "a job names calendars and this executor reads none"
            found = self._calendars.get_calendars(step.run.owner, step.names)
            return known.after(step, clock.now(), calendars=tuple(found.values()))
        if isinstance(step, StartTarget):
            result = self._invoker.invoke(*step.call(self._config.callbacks))
            return known.after(step, clock.now(), result=result)
        if isinstance(step, PollTarget):
            assert self._tracker is not None and step.running.tracking is not None, "no tracker to look with"
            seen = self._tracker.track(step.target, step.running.tracking)
            return known.after(step, clock.now(), result=seen)
        if isinstance(step, WatchLease):
            watch = replace(known.message, sent_at=None, watch=True)  # not a hop: heartbeats move leases
            watched = watched_lease(store, self._dispatcher, step.running, watch, clock.now(), self._rng)
            return known.after(step, clock.now(), watched=watched)
        if isinstance(step, (AcquireSlots, ExtendSlots, ReleaseSlots)):
            return known.after(step, clock.now(), busy=not self._slot_step(step, known))
        try:
            return self._write(step, known)
        except StaleRunError as error:
            # The run as stored: the decision tells our own write whose answer was lost from another's.
            return known.after(step, clock.now(), refused=True, run=error.current)

    def _write(self, step: Step, known: Known) -> Known:
        store, clock = self._store, self._clock
        if isinstance(step, ClaimRun):
            run = store.claim(step.claim)
            return known.after(step, clock.now(), run=run)
        if isinstance(step, (TakeSlot, QueueBehind)):  # False: the job's running or waiting slot is taken
            done = (
                store.claim_exclusive(step.expected, step.mine, step.now)
                if isinstance(step, TakeSlot)
                else store.enqueue_behind(step.expected, step.waiting)
            )
            return known.after(step, clock.now(), busy=not done)
        if isinstance(step, EndAttempt) and step.frees_slot:
            released = store.finish_exclusive(step.expected, step.ended)
            return known.after(step, clock.now(), released=released)
        if isinstance(step, (EndAttempt, AwaitCallback)):
            store.transition_run(step.expected, step.ended if isinstance(step, EndAttempt) else step.awaiting)
            return known.after(step, clock.now())
        raise TypeError(f"not a step the executor carries out: {step!r}")

    def _slot_step(self, step: AcquireSlots | ExtendSlots | ReleaseSlots, known: Known) -> bool:
        """False when a pool is full (acquire) or the hold is gone (extend)."""
        assert self._slots is not None, "a slot step without a slot store"
        if isinstance(step, AcquireSlots):
            return self._slots.acquire(known.pools, step.hold, self._clock.now())
        if isinstance(step, ExtendSlots):
            return self._slots.extend(known.pools, step.hold)
        self._slots.release(known.pools, step.hold.run_id, step.hold.attempt)
        return True

    def _send(self, step: SendBack, known: Known) -> Outcome:
        """Send, then record (a throttled delivery is recorded either way)."""
        if step.unsent is Unsent.THROTTLED:
            self._record(step)
        try:
            self._dispatcher.redispatch(step.message, step.shard, self._clock.now())
        except DispatchError as error:
            if step.unsent is Unsent.THROTTLED and known.throttled is not None:
                raise known.throttled from None  # nowhere to put it: the queue redelivers the original
            if step.unsent is not Unsent.SWEEPER:
                raise
            # The run's state is committed with its sweeper entry: the sweeper re-sends it.
            self._record(step)
            logger.error("%s, sweeper will: %s", step.unsent_note, error)
            self._metrics.count("DispatchFailures")
            return step.outcome
        if step.unsent is not Unsent.THROTTLED:
            self._record(step)
        return step.outcome

    def _record(self, step: Step) -> None:
        """Every metric and log line of a delivery is written here."""
        for name, milliseconds in step.timings:
            self._metrics.timing_ms(name, milliseconds)
        for name in step.counts:
            self._metrics.count(name)
        for line in step.logs:
            logger.log(line.level, "%s", line.text)
