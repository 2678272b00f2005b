"""The bound counts runs (issue 28, part 2), on the in-memory store and slots: an attempt takes a slot
before its claim and gives it back when it ends; a run that finds the bound full waits in the queue (never
fails, and a wait is not a hop); a duplicate delivery never frees the winner's slot; an accepted callback
run keeps its slot until it completes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from tests.services.test_callbacks import ACCEPTED, LINKS, CallbackWorld
from tests.services.test_executing import FIRE, World
from tickwork.adapters.memory.slots import MemorySlots
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.models import RunState
from tickwork.domain.slots import ALL, Pool, SlotLimits
from tickwork.services.executing import Executor, ExecutorConfig, Outcome
from tickwork.services.planning import Planner

CAP = 1
NEXT_FIRE = FIRE + timedelta(minutes=5)


class BoundWorld(World):
    def __init__(self, store: MemoryStore, clock: FakeClock, cap: int = CAP) -> None:
        super().__init__(store, clock)
        self.slots = MemorySlots()
        self.cap = cap

    def executor(self, worker: str = "worker-a") -> Executor:
        config = ExecutorConfig(worker_id=worker, limits=SlotLimits(self.cap))
        return Executor(
            self.store, self.invoker, self.dispatcher, self.clock, self.metrics, config, slots=self.slots
        )

    def next_fire_message(self) -> RunMessage:
        """The job's next fire (12:10), planned now, its message delivered at once."""
        Planner(self.store, self.dispatcher, self.clock).plan(
            self.job.shard, NEXT_FIRE - timedelta(seconds=110)
        )
        return replace(RunMessage.for_run(self.dispatcher.sent[-1]), not_before=self.clock.now())

    def in_flight(self) -> int:
        return self.slots.in_flight(Pool(ALL, self.cap), self.clock.now())


@pytest.fixture
def world(store: MemoryStore, clock: FakeClock) -> BoundWorld:
    world = BoundWorld(store, clock)
    world.clock.set(FIRE + timedelta(milliseconds=100))
    return world


def test_an_attempt_holds_a_slot_while_it_runs_and_gives_it_back(world: BoundWorld) -> None:
    seen: list[int] = []
    world.invoker.during_call = lambda: seen.append(world.in_flight())

    assert world.executor().execute(world.first_message()) is Outcome.SUCCEEDED

    assert seen == [1] and world.in_flight() == 0


def test_a_full_bound_sends_the_run_back_to_wait_and_it_runs_once_a_slot_is_free(world: BoundWorld) -> None:
    message = world.first_message()
    waiting: list[tuple[Outcome, RunMessage]] = []

    def another_run_arrives_meanwhile() -> None:
        # The job's next fire, planned and delivered early: a run that needs the one slot now taken.
        outcome = world.executor("worker-b").execute(world.next_fire_message())
        waiting.append((outcome, world.dispatcher.messages[-1]))

    world.invoker.during_call = another_run_arrives_meanwhile
    assert world.executor().execute(message) is Outcome.SUCCEEDED

    [(outcome, later)] = waiting
    assert outcome is Outcome.WAITING_FOR_SLOT
    assert later.slot_waits == 1 and later.hops == message.hops  # a wait is not a hop
    assert later.not_before > world.clock.now() - timedelta(seconds=1)
    assert world.metrics.counts["SlotWaits"] == 1 and world.in_flight() == 0


@pytest.mark.parametrize("cap", [1, 2])
def test_a_duplicate_delivery_during_the_call_watches_the_lease_and_never_frees_the_winners_slot(
    store: MemoryStore, clock: FakeClock, cap: int
) -> None:
    """Cap 1: the duplicate cannot take a slot; it reads the run, finds it running its attempt and watches
    the lease (never waits for the slot its own run holds). Cap 2: it takes a second slot, loses the claim
    and gives back its own. Either way the winner's slot stays taken until its run ends."""
    world = BoundWorld(store, clock, cap=cap)
    world.clock.set(FIRE + timedelta(milliseconds=100))
    message = world.first_message()
    during: list[tuple[Outcome, int]] = []

    def duplicate_delivered_meanwhile() -> None:
        outcome = world.executor("worker-b").execute(message)
        during.append((outcome, world.in_flight()))

    world.invoker.during_call = duplicate_delivered_meanwhile
    assert world.executor().execute(message) is Outcome.SUCCEEDED

    [(outcome, in_flight)] = during
    assert outcome is Outcome.WATCHING_LEASE and in_flight == 1
    assert world.run().state is RunState.SUCCEEDED and world.in_flight() == 0
    assert len(world.invoker.calls) == 1


def _callback_world(
    store: MemoryStore, clock: FakeClock, cap: int
) -> tuple[CallbackWorld, MemorySlots, Callable[[str], Executor]]:
    world = CallbackWorld(store, clock)
    slots = MemorySlots()

    def bounded(worker: str) -> Executor:
        config = ExecutorConfig(worker_id=worker, callbacks=LINKS, limits=SlotLimits(cap))
        return Executor(
            world.store, world.invoker, world.dispatcher, world.clock, world.metrics, config, slots=slots
        )

    world.invoker.results.append(ACCEPTED)
    world.clock.set(FIRE + timedelta(milliseconds=100))
    return world, slots, bounded


def test_an_accepted_runs_own_message_delivered_again_under_a_full_bound_watches_its_lease(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Found by bench_callbacks at 10,000 runs with --cap 10000: a redelivered message (its delete did not
    land) waited for a slot only its own run's end could free, sent back every 1-10 s for as long as the
    bound stayed full."""
    world, slots, bounded = _callback_world(store, clock, cap=1)
    first = world.first_message()
    assert bounded("worker-a").execute(first) is Outcome.ACCEPTED  # the run holds the only slot

    world.clock.advance(7)
    outcome = bounded("worker-b").execute(RunMessage.from_json(first.to_json()))

    assert outcome is Outcome.WATCHING_LEASE and world.metrics.counts.get("SlotWaits", 0) == 0
    assert world.run().state is RunState.RUNNING and len(world.invoker.calls) == 1
    assert slots.in_flight(Pool(ALL, 1), world.clock.now()) == 1


def test_a_dead_workers_slot_is_free_when_its_attempt_ends_at_its_lease_end(
    store: MemoryStore, clock: FakeClock
) -> None:
    """The SIGKILL case under a full bound: the accepted attempt's slot keeps the claim's lease (never
    shortened, a heartbeat may have moved it), so the bound is still full when the run's lease ends; the
    message that comes back then reads the run, ends the silent attempt, and frees its slot."""
    world, slots, bounded = _callback_world(store, clock, cap=1)
    first = world.first_message()
    assert bounded("worker-a").execute(first) is Outcome.ACCEPTED
    lease = world.run().lease_expires_at
    assert lease is not None
    pool = Pool(ALL, 1)
    # worker-a dies: its watch message is lost with it, the original comes back (never deleted).
    world.clock.set(lease)
    assert slots.in_flight(pool, world.clock.now()) == 1

    outcome = bounded("worker-b").execute(RunMessage.from_json(first.to_json()))

    assert outcome is Outcome.LEASE_EXPIRED
    assert world.run().state is RunState.RETRY_WAIT
    assert slots.in_flight(pool, world.clock.now()) == 0
