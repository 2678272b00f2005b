"""A finish write that still throttles after the store's retries never calls the target again (issue 28, part
4): the delivery writes again while the lease has time, then sends the attempt's end by message, and any
executor applies that message to the running attempt only."""

from __future__ import annotations

from datetime import timedelta
from random import Random
from typing import Any

import pytest

from tests.services.test_executing import FIRE, World
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.errors import TransientStoreError
from tickwork.domain.models import Run, RunState
from tickwork.services.executing import Executor, ExecutorConfig, Outcome
from tickwork.services.retrying import retrying
from tickwork.services.sweeping import expire_lease


class ThrottledFinishes:
    """The real store whose finish writes (any run write that ends a running attempt) throttle, without
    landing, while `throttled` is set."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.throttled = False
        self.refused_writes = 0

    def transition_run(self, expected: Run, updated: Run) -> None:
        if self.throttled and expected.state is RunState.RUNNING:
            self.refused_writes += 1
            raise TransientStoreError("ProvisionedThroughputExceededException: injected")
        self.inner.transition_run(expected, updated)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def world(store: MemoryStore, clock: FakeClock) -> World:
    return World(store, clock)


def executor(world: World, store: ThrottledFinishes, worker: str) -> Executor:
    return Executor(
        retrying(store, world.clock, Random(3)),
        world.invoker,
        world.dispatcher,
        world.clock,
        world.metrics,
        ExecutorConfig(worker_id=worker),
    )


def test_a_finish_that_throttles_goes_by_message_and_the_target_is_called_once(world: World) -> None:
    store = ThrottledFinishes(world.store)
    store.throttled = True
    world.clock.set(FIRE + timedelta(milliseconds=100))

    outcome = executor(world, store, "worker-a").execute(world.first_message())

    assert outcome is Outcome.FINISH_SENT
    assert len(world.invoker.calls) == 1
    assert world.run().state is RunState.RUNNING  # nothing landed: the end travels in the message
    [carried] = world.dispatcher.messages
    assert carried.finish is not None and carried.finish.state is RunState.SUCCEEDED
    # Three finish writes in the delivery, each retried by the store: then the message.
    assert world.metrics.counts["FinishWriteRetries"] == 2 and world.metrics.counts["FinishesSent"] == 1
    assert store.refused_writes >= 3

    # The table recovers; another executor gets the message as the queue delivers it.
    store.throttled = False
    delivered = RunMessage.from_json(carried.to_json())
    world.clock.set(delivered.not_before)
    assert executor(world, store, "worker-b").execute(delivered) is Outcome.SUCCEEDED

    run = world.run()
    assert run.state is RunState.SUCCEEDED and run.attempt == 1 and len(run.attempts) == 1
    assert run.attempts[0]["worker"].startswith("worker-a#")  # the attempt that ran, not the one that wrote
    assert len(world.invoker.calls) == 1
    assert world.metrics.counts["FinishesApplied"] == 1


def test_a_carried_end_that_arrives_after_its_attempt_is_over_changes_nothing(world: World) -> None:
    store = ThrottledFinishes(world.store)
    store.throttled = True
    world.clock.set(FIRE + timedelta(milliseconds=100))
    executor(world, store, "worker-a").execute(world.first_message())
    [carried] = world.dispatcher.messages
    store.throttled = False

    # Before it arrives, the attempt's lease ends and is expired (the rule the sweeper and a watching
    # message share): the run waits to retry.
    running = world.run()
    assert running.lease_expires_at is not None
    world.clock.set(running.lease_expires_at + timedelta(seconds=1))
    expire_lease(world.store, running, world.clock.now(), Random(1))
    assert world.run().state is RunState.RETRY_WAIT

    assert executor(world, store, "worker-b").execute(carried) is Outcome.DUPLICATE
    assert world.run().state is RunState.RETRY_WAIT and len(world.run().attempts) == 1
