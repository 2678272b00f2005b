"""Every executor re-send carries the hop counter one further; a message past MAX_HOPS fails its run."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.fakes import failure
from tests.services.test_executing import FIRE, World, _overlapping, blocked_retry
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import MAX_HOPS, RunMessage
from tickwork.domain.models import OverlapPolicy, RunState
from tickwork.services.executing import Outcome


@pytest.fixture
def world(store: MemoryStore, clock: FakeClock) -> World:
    return World(store, clock)


def test_an_early_arrival_goes_back_one_hop_further(world: World) -> None:
    world.clock.set(FIRE - timedelta(seconds=30))

    assert world.executor().execute(replace(world.first_message(), hops=7)) is Outcome.DEFERRED

    assert world.dispatcher.messages[-1].hops == 8


def test_a_retry_is_sent_one_hop_further(world: World) -> None:
    world.invoker.results = [failure()]

    assert world.executor().execute(replace(world.first_message(), hops=3)) is Outcome.RETRY_SCHEDULED

    retry = world.dispatcher.messages[-1]
    assert (retry.attempt, retry.hops) == (1, 4)


def test_a_blocked_retry_waits_one_hop_further(store: MemoryStore, clock: FakeClock) -> None:
    world, waiting = blocked_retry(store, clock)
    message = RunMessage.for_run(waiting, clock.now(), hops=12)

    assert world.executor().execute(message) is Outcome.DEFERRED
    assert world.dispatcher.messages[-1].hops == 13


def test_a_released_queued_run_starts_its_own_count(store: MemoryStore, clock: FakeClock) -> None:
    """The release is another run's message: a backlogged overlap=queue job is a healthy chain of runs,
    and must not inherit the finished run's count."""
    world, outcomes = _overlapping(store, clock, OverlapPolicy.QUEUE)

    assert outcomes[1] is Outcome.QUEUED
    assert world.dispatcher.messages[-1].hops == 1


def test_a_message_past_the_bound_fails_its_run_with_a_reason_and_a_metric(world: World) -> None:
    outcome = world.executor().execute(replace(world.first_message(), hops=MAX_HOPS + 1))

    assert outcome is Outcome.FAILED and world.invoker.calls == []
    run = world.run()
    assert run.state is RunState.FAILED
    assert run.reason is not None and "runaway re-send loop" in run.reason and str(MAX_HOPS) in run.reason
    assert world.metrics.counts["RunawayLoops"] == 1 and world.metrics.counts["RunsFailed"] == 1
    assert world.dispatcher.messages == []  # stopped, not sent on


def test_a_message_at_the_bound_still_runs(world: World) -> None:
    assert world.executor().execute(replace(world.first_message(), hops=MAX_HOPS)) is Outcome.SUCCEEDED


def test_a_message_that_never_comes_due_is_stopped_after_max_hops(world: World) -> None:
    """A real runaway: the run's time never arrives for the executor (here the clock is stuck far before
    it), so each delivery sends it straight back. Fed back as the queue would, it ends within the bound."""
    world.clock.set(FIRE - timedelta(hours=1))
    message = world.first_message()
    deliveries = 0
    outcome = Outcome.DEFERRED
    while outcome is Outcome.DEFERRED and deliveries <= MAX_HOPS + 1:
        outcome = world.executor().execute(message)
        deliveries += 1
        if outcome is Outcome.DEFERRED:
            message = world.dispatcher.messages[-1]

    assert outcome is Outcome.FAILED and deliveries == MAX_HOPS + 2
    assert world.run().state is RunState.FAILED
