"""Throttled reads and lost write responses in the executor (issue 11): throttling never fails a run, and a
claim or finish whose response was lost is recognised as our own."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from random import Random
from typing import Any

import pytest

from tests.fakes import CrashError, failure
from tests.services.test_executing import FIRE, RETRY, World
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.errors import TransientStoreError
from tickwork.domain.execution import Claim, claimed, is_own_write
from tickwork.domain.models import Job, OverlapPolicy, Policies, Run, RunState
from tickwork.services.executing import Executor, ExecutorConfig, Outcome
from tickwork.services.retrying import retrying


class FlakyRunStore:
    """The real store, with faults where a test puts them:
    - `throttled_reads`: how many get_run / get_job / claim calls throttle before one goes through;
    - `lose_responses`: how many writes land but answer with a throttling error (the response was lost,
      and botocore's or our own retry sends the same write again);
    - `before_claim`: runs once just before the next claim write (another delivery acting meanwhile)."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.throttled_reads = 0
        self.lose_responses = 0
        self.before_claim: Callable[[], None] | None = None

    def _read(self, operation: Callable[[], Any]) -> Any:
        if self.throttled_reads > 0:
            self.throttled_reads -= 1
            raise TransientStoreError("ProvisionedThroughputExceededException: injected")
        return operation()

    def _write(self, operation: Callable[[], Any], updated: Run | None) -> Any:
        claiming = updated is None or updated.state is RunState.RUNNING
        if claiming and self.before_claim is not None:
            hook, self.before_claim = self.before_claim, None
            hook()
        result = operation()
        if self.lose_responses > 0:
            self.lose_responses -= 1
            raise TransientStoreError("RequestTimeout: the write landed, its response did not")
        return result

    def get_run(self, job_id: str, scheduled_for: datetime) -> Run | None:
        return self._read(lambda: self.inner.get_run(job_id, scheduled_for))  # type: ignore[no-any-return]

    def get_job(self, job_id: str) -> Job | None:
        return self._read(lambda: self.inner.get_job(job_id))  # type: ignore[no-any-return]

    def transition_run(self, expected: Run, updated: Run) -> None:
        self._write(lambda: self.inner.transition_run(expected, updated), updated)

    def claim(self, claim: Claim) -> Run:
        # The hot path's first call (no read comes before it): throttled like a read, and its response can
        # be lost like a write's.
        return self._read(lambda: self._write(lambda: self.inner.claim(claim), None))  # type: ignore[no-any-return]

    def claim_exclusive(self, expected: Run, updated: Run, now: datetime) -> bool:
        return self._write(lambda: self.inner.claim_exclusive(expected, updated, now), updated)  # type: ignore[no-any-return]

    def finish_exclusive(self, expected: Run, updated: Run) -> str | None:
        return self._write(lambda: self.inner.finish_exclusive(expected, updated), updated)  # type: ignore[no-any-return]

    def enqueue_behind(self, expected: Run, updated: Run) -> bool:
        return self.inner.enqueue_behind(expected, updated)

    def open_runs(self, shard: int, through: datetime) -> Any:
        return self.inner.open_runs(shard, through)


@pytest.fixture
def world(store: MemoryStore, clock: FakeClock) -> World:
    return World(store, clock)


def executor(world: World, store: FlakyRunStore, worker: str = "worker-a") -> Executor:
    """The executor as composed for real: its store retried on throttling (`retrying`, the one place)."""
    return Executor(
        retrying(store, world.clock, Random(7)),
        world.invoker,
        world.dispatcher,
        world.clock,
        world.metrics,
        ExecutorConfig(worker_id=worker),
    )


# --- throttled reads --------------------------------------------------------------------------------------


def test_reads_are_retried_with_backoff(world: World) -> None:
    flaky = FlakyRunStore(world.store)
    flaky.throttled_reads = 3

    assert executor(world, flaky).execute(world.first_message()) is Outcome.SUCCEEDED

    assert len(world.invoker.calls) == 1 and len(world.clock.slept) == 3


def test_throttling_that_outlasts_the_retries_sends_the_message_back_and_never_fails_the_run(
    world: World,
) -> None:
    flaky = FlakyRunStore(world.store)
    message = world.first_message()
    for delivery in range(8):  # more deliveries than the queue's receive limit (5) would ever allow
        flaky.throttled_reads = 100
        sent_before = len(world.dispatcher.messages)

        assert executor(world, flaky).execute(message) is Outcome.DEFERRED

        [resent] = world.dispatcher.messages[sent_before:]
        assert resent.hops == message.hops + 1 and resent.attempt == message.attempt
        assert resent.not_before >= world.clock.now() + timedelta(seconds=5)
        message = resent
        world.clock.set(resent.not_before)
        assert delivery < 8
    assert world.invoker.calls == [] and world.run().state is RunState.PLANNED
    assert world.metrics.counts["ThrottledDeliveries"] == 8

    flaky.throttled_reads = 0  # the table recovers: the re-sent message runs the run
    assert executor(world, flaky).execute(message) is Outcome.SUCCEEDED
    assert world.run().state is RunState.SUCCEEDED and len(world.invoker.calls) == 1


# --- lost write responses ---------------------------------------------------------------------------------


def test_a_claim_whose_response_was_lost_is_recognised_and_the_target_is_called(world: World) -> None:
    flaky = FlakyRunStore(world.store)
    flaky.lose_responses = 1  # the claim lands; its retry is refused by its own condition

    assert executor(world, flaky).execute(world.first_message()) is Outcome.SUCCEEDED

    assert len(world.invoker.calls) == 1
    run = world.run()
    assert (run.state, run.attempt, len(run.attempts)) == (RunState.SUCCEEDED, 1, 1)
    assert world.metrics.counts["LostResponsesRecognised"] == 1


def test_an_exclusive_claim_whose_response_was_lost_is_recognised(
    store: MemoryStore, clock: FakeClock
) -> None:
    world = World(store, clock, policies=Policies(overlap=OverlapPolicy.SKIP, retry=RETRY))
    flaky = FlakyRunStore(world.store)
    flaky.lose_responses = 1

    assert executor(world, flaky).execute(world.first_message()) is Outcome.SUCCEEDED

    assert len(world.invoker.calls) == 1 and world.run().state is RunState.SUCCEEDED


def test_a_finish_whose_response_was_lost_schedules_its_retry(world: World) -> None:
    world.invoker.results = [failure()]

    class LoseTheFinish(FlakyRunStore):
        def transition_run(self, expected: Run, updated: Run) -> None:
            if updated.state is RunState.RETRY_WAIT:
                self.lose_responses = 1
            super().transition_run(expected, updated)

    flaky = LoseTheFinish(world.store)

    assert executor(world, flaky).execute(world.first_message()) is Outcome.RETRY_SCHEDULED

    assert world.run().state is RunState.RETRY_WAIT
    assert [m.attempt for m in world.dispatcher.messages] == [1]  # the retry's message was sent


def test_another_delivery_by_the_same_worker_is_not_taken_for_our_own(world: World) -> None:
    """Two deliveries of one run handled at the same instant by one worker (one Lambda batch, one local
    executor process): the one that loses its claim must not call the target as well."""
    flaky = FlakyRunStore(world.store)
    message = world.first_message()
    crashed: list[bool] = []

    def other_delivery_claims_first() -> None:
        # Same worker id, same clock instant, so the same lease expiry: only the delivery tells them apart.
        world.invoker.crash = True
        try:
            executor(world, FlakyRunStore(world.store)).execute(message)
        except CrashError:
            crashed.append(True)  # it holds the claim, mid-call
        world.invoker.crash = False

    flaky.before_claim = other_delivery_claims_first

    # Not a duplicate to drop: the run is queue-carried and its holder may have died (it did), so this
    # delivery comes back when the holder's lease ends.
    assert executor(world, flaky).execute(message) is Outcome.WATCHING_LEASE

    assert crashed == [True] and len(world.invoker.calls) == 1  # only the other delivery called it
    assert world.run().state is RunState.RUNNING


def test_own_write_needs_the_same_lease_owner(world: World) -> None:
    run = world.run()
    ours = claimed(run, world.job, worker="w#0001", now=FIRE)
    theirs = claimed(run, world.job, worker="w#0002", now=FIRE)
    assert is_own_write(ours, ours) and not is_own_write(theirs, ours) and not is_own_write(None, ours)
