"""The executor tells what carries a delivery to keep its message hidden for the claimed run's lease (a dead
executor's run then comes back at its lease end), and keeps to the carrier's deadline (issue 28, part 3)."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.services.test_executing import FIRE, World
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.models import RunState
from tickwork.services.executing import Outcome


class Carrier:
    def __init__(self, deadline: datetime | None) -> None:
        self.deadline = deadline
        self.hidden_until: list[datetime | None] = []

    def keep_hidden_until(self, instant: datetime | None) -> None:
        self.hidden_until.append(instant)


def test_a_claim_keeps_the_message_hidden_for_the_lease(store: MemoryStore, clock: FakeClock) -> None:
    world = World(store, clock)
    world.clock.set(FIRE + timedelta(milliseconds=100))
    carrier = Carrier(deadline=FIRE + timedelta(minutes=15))
    leases: list[datetime | None] = []
    world.invoker.during_call = lambda: leases.append(world.run().lease_expires_at)

    assert world.executor().execute(world.first_message(), carrier) is Outcome.SUCCEEDED

    assert carrier.hidden_until == leases and leases[0] is not None


def test_a_call_that_would_outlast_its_invocation_is_not_claimed(
    store: MemoryStore, clock: FakeClock
) -> None:
    world = World(store, clock)
    world.clock.set(FIRE + timedelta(milliseconds=100))
    carrier = Carrier(deadline=world.clock.now() + timedelta(seconds=30))  # a 60 s timeout does not fit

    assert world.executor().execute(world.first_message(), carrier) is Outcome.DEFERRED

    assert world.run().state is RunState.PLANNED and world.invoker.calls == []
    assert carrier.hidden_until == [] and len(world.dispatcher.messages) == 1
