"""The bound counts runs (issue 28, part 2), on the in-memory store and slots: an attempt takes a slot
before its claim and gives it back when it ends; a run that finds the bound full waits in the queue (never
fails, and a wait is not a hop); a duplicate delivery never frees the winner's slot; an accepted callback
run keeps its slot until it completes."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.services.test_executing import FIRE, World
from tickwork.adapters.memory.slots import MemorySlots
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.models import RunState
from tickwork.domain.slots import ALL, Pool, SlotLimits
from tickwork.services.executing import Executor, ExecutorConfig, Outcome

CAP = 1


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
        # The same run's twin would share the run; a message for a run that needs the one slot now taken.
        sent_before = len(world.dispatcher.messages)
        outcome = world.executor("worker-b").execute(replace_key(message))
        waiting.append((outcome, world.dispatcher.messages[sent_before]))

    world.invoker.during_call = another_run_arrives_meanwhile
    assert world.executor().execute(message) is Outcome.SUCCEEDED

    [(outcome, later)] = waiting
    assert outcome is Outcome.WAITING_FOR_SLOT
    assert later.slot_waits == 1 and later.hops == message.hops  # a wait is not a hop
    assert later.not_before > world.clock.now() - timedelta(seconds=1)
    assert world.metrics.counts["SlotWaits"] == 1 and world.in_flight() == 0


def test_a_duplicate_delivery_never_frees_the_winners_slot(world: BoundWorld) -> None:
    message = world.first_message()
    during: list[tuple[Outcome, int]] = []

    def duplicate_delivered_meanwhile() -> None:
        outcome = world.executor("worker-b").execute(message)
        during.append((outcome, world.in_flight()))

    world.invoker.during_call = duplicate_delivered_meanwhile
    assert world.executor().execute(message) is Outcome.SUCCEEDED

    # The duplicate could not even take a slot (the bound of 1 is the winner's), and went back to wait;
    # the winner's slot stayed taken until its run ended.
    [(outcome, in_flight)] = during
    assert outcome is Outcome.WAITING_FOR_SLOT and in_flight == 1
    assert world.run().state is RunState.SUCCEEDED and world.in_flight() == 0


def test_a_duplicate_that_takes_a_slot_frees_its_own_when_its_claim_is_refused(
    store: MemoryStore, clock: FakeClock
) -> None:
    world = BoundWorld(store, clock, cap=2)
    world.clock.set(FIRE + timedelta(milliseconds=100))
    message = world.first_message()
    during: list[tuple[Outcome, int]] = []

    def duplicate_delivered_meanwhile() -> None:
        outcome = world.executor("worker-b").execute(message)
        during.append((outcome, world.in_flight()))

    world.invoker.during_call = duplicate_delivered_meanwhile
    assert world.executor().execute(message) is Outcome.SUCCEEDED

    # The duplicate took a second slot, lost the claim, and gave back its own: the winner's still counted.
    [(outcome, in_flight)] = during
    assert outcome is Outcome.WATCHING_LEASE and in_flight == 1
    assert world.in_flight() == 0 and len(world.invoker.calls) == 1


def replace_key(message: RunMessage) -> RunMessage:
    """A message for another run (the next fire of the same job)."""
    return replace(message, scheduled_for=message.scheduled_for + timedelta(minutes=5))
