"""Slots and accepted work, found by a review of the bound (each failed before its fix): the slot of work a
target holds is never freed by our own throttled write, never ends before the run's lease (a heartbeat
racing the accepted write). The full pool of a key the run no longer names: the delivery table's
`bound_full_for_a_key_the_run_no_longer_names`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.domain.test_delivery import (
    ACCEPTED,
    _callback_answered,
    _holding_slot,
)
from tests.services.test_callbacks import ACCEPTED as ACCEPTED_202
from tests.services.test_callbacks import LINKS, SECRET, CallbackWorld
from tests.services.test_executing import FIRE
from tickwork.adapters.memory.slots import MemorySlots
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.delivery import AwaitCallback, ReleaseSlots, SendBack, Step, next_step
from tickwork.domain.errors import TransientStoreError
from tickwork.domain.models import Run, RunState
from tickwork.domain.slots import ALL, Pool, SlotLimits
from tickwork.services.callbacks import Callbacks
from tickwork.services.executing import Executor, ExecutorConfig


def test_a_throttled_accepted_write_never_frees_the_slot_of_work_the_target_holds() -> None:
    # The target answered 202, the slot's lease moved; the run's write then throttles on every try (it may
    # have landed, its answer lost).
    known = _holding_slot(_callback_answered(ACCEPTED))
    steps: list[Step] = []
    while not steps or not isinstance(steps[-1], (SendBack, ReleaseSlots)):
        step = next_step(known)
        steps.append(step)
        throttled = TransientStoreError("throttled") if isinstance(step, AwaitCallback) else None
        known = known.after(step, known.now, throttled=throttled)
        assert len(steps) < 12
    assert isinstance(steps[-1], SendBack) and not any(isinstance(s, ReleaseSlots) for s in steps)


class _Store:
    """The store, with one behaviour changed on a run's write while it runs."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _bounded(world: CallbackWorld, store: _Store, slots: MemorySlots, limits: SlotLimits) -> Executor:
    """An executor of `world` under a bound of `limits`, writing through `store`."""
    config = ExecutorConfig(worker_id="worker-a", callbacks=LINKS, limits=limits)
    return Executor(store, world.invoker, world.dispatcher, world.clock, world.metrics, config, slots=slots)


def test_an_accepted_run_whose_lease_write_throttles_keeps_its_slot(
    store: MemoryStore, clock: FakeClock
) -> None:
    class ThrottledAccepts(_Store):
        def transition_run(self, expected: Run, updated: Run) -> None:
            if expected.state is RunState.RUNNING and updated.state is RunState.RUNNING:
                raise TransientStoreError("ProvisionedThroughputExceededException: injected")
            self.inner.transition_run(expected, updated)

    world = CallbackWorld(store, clock)
    slots = MemorySlots()
    world.invoker.results.append(ACCEPTED_202)
    world.clock.set(FIRE + timedelta(milliseconds=100))
    executor = _bounded(world, ThrottledAccepts(world.store), slots, SlotLimits(1))

    executor.execute(world.first_message())

    assert world.run().state is RunState.RUNNING and len(world.invoker.calls) == 1  # the target works on it
    assert slots.in_flight(Pool(ALL, 1), world.clock.now()) == 1


def test_a_heartbeat_right_after_the_202_never_leaves_the_run_past_its_slot(
    store: MemoryStore, clock: FakeClock
) -> None:
    world = CallbackWorld(store, clock)
    slots = MemorySlots()
    limits = SlotLimits(1)
    callbacks = Callbacks(world.store, world.dispatcher, world.clock, SECRET, slots=(slots, limits))
    world.invoker.results.append(ACCEPTED_202)
    world.clock.set(FIRE + timedelta(milliseconds=100))

    class HeartbeatRace(_Store):
        def transition_run(self, expected: Run, updated: Run) -> None:
            self.inner.transition_run(expected, updated)
            if expected.state is RunState.RUNNING and expected.heartbeat_at is None and updated.heartbeat_at:
                world.clock.advance(2)  # the target's first heartbeat, just after its 202
                callbacks.heartbeat(world.token())

    executor = _bounded(world, HeartbeatRace(world.store), slots, limits)

    executor.execute(world.first_message())

    lease = world.run().lease_expires_at
    assert lease is not None
    assert slots.in_flight(Pool(ALL, 1), lease - timedelta(milliseconds=500)) == 1
