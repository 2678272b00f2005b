"""Tracked runs (issue 28, part 1) on the in-memory store: a Step Functions start is followed to its end.
The start keeps the run running with what it began; looks come back (not as hops), later each time; the
execution's end is the attempt's; a look after the attempt's deadline ends the attempt like a silent
worker's."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.services.test_executing import FIRE, World
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.models import Completion, Policies, RetryPolicy, RunState, Target
from tickwork.domain.targets import TargetResult
from tickwork.services.executing import Executor, ExecutorConfig, Outcome

SFN = Target(
    "stepfunctions",
    {
        "state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:tickwork-target-flow",
        "input": {},
    },
)
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:tickwork-target-flow:run"
STARTED = TargetResult(ok=True, retryable=False, status="200", latency_ms=4, accepted=True, handle=EXECUTION)


class Tracker:
    def __init__(self, *answers: TargetResult | None) -> None:
        self.answers = list(answers)
        self.looks: list[str] = []

    def track(self, target: Target, handle: str) -> TargetResult | None:
        self.looks.append(handle)
        return self.answers.pop(0) if self.answers else None


class TrackedWorld(World):
    def __init__(self, store: MemoryStore, clock: FakeClock, tracker: Tracker) -> None:
        super().__init__(
            store,
            clock,
            target=SFN,
            completion=Completion.TRACKED,
            timeout_seconds=3600,
            policies=Policies(retry=RetryPolicy(max_attempts=1)),
        )
        self.tracker = tracker
        self.invoker.results.append(STARTED)

    def executor(self, worker: str = "worker-a") -> Executor:
        config = ExecutorConfig(worker_id=worker)
        return Executor(
            self.store, self.invoker, self.dispatcher, self.clock, self.metrics, config, tracker=self.tracker
        )

    def deliver(self, message: RunMessage) -> Outcome:
        self.clock.set(max(self.clock.now(), message.not_before))
        return self.executor("worker-b").execute(RunMessage.from_json(message.to_json()))


def start(world: TrackedWorld) -> RunMessage:
    world.clock.set(FIRE + timedelta(milliseconds=100))
    assert world.executor().execute(world.first_message()) is Outcome.ACCEPTED
    [(_, invocation)] = world.invoker.calls
    assert invocation.track is True
    return world.dispatcher.messages[-1]


@pytest.mark.parametrize(
    ("end", "state"),
    [
        pytest.param(TargetResult(True, False, "SUCCEEDED", 0, "{}"), RunState.SUCCEEDED, id="succeeded"),
        pytest.param(
            TargetResult(False, False, "FAILED", 0, "States.TaskFailed"), RunState.FAILED, id="failed"
        ),
    ],
)
def test_a_tracked_run_ends_with_what_it_started(
    store: MemoryStore, clock: FakeClock, end: TargetResult, state: RunState
) -> None:
    world = TrackedWorld(store, clock, Tracker(None, None, end))
    look = start(world)
    run = world.run()
    assert run.state is RunState.RUNNING and run.tracking == EXECUTION
    assert run.lease_expires_at is not None and run.lease_expires_at > FIRE + timedelta(minutes=59)

    outcome = Outcome.TRACKING
    while outcome is Outcome.TRACKING:
        outcome = world.deliver(look)
        look = world.dispatcher.messages[-1]
        assert look.hops == 0  # looks are not hops

    assert outcome.value == state.value
    assert world.run().state is state and world.run().attempts[-1]["status"] == end.status
    assert world.tracker.looks == [EXECUTION] * 3 and len(world.invoker.calls) == 1
    assert world.metrics.counts["TrackedRunsEnded"] == 1


def test_looks_come_later_each_time_and_never_after_the_lease(store: MemoryStore, clock: FakeClock) -> None:
    world = TrackedWorld(store, clock, Tracker())
    look = start(world)
    gaps = []
    for _ in range(8):
        assert world.deliver(look) is Outcome.TRACKING
        following = world.dispatcher.messages[-1]
        gaps.append((following.not_before - world.clock.now()).total_seconds())
        look = following
    assert gaps == [10, 20, 40, 60, 60, 60, 60, 60]


def test_a_look_after_the_deadline_asks_once_more_then_ends_the_attempt(
    store: MemoryStore, clock: FakeClock
) -> None:
    world = TrackedWorld(store, clock, Tracker())
    look = start(world)
    lease = world.run().lease_expires_at
    assert lease is not None
    world.clock.set(lease + timedelta(seconds=1))

    assert world.deliver(look) is Outcome.LEASE_EXPIRED
    assert world.run().state is RunState.FAILED and world.tracker.looks == [EXECUTION]


def test_work_that_ended_in_the_last_interval_is_its_end_not_an_expiry(
    store: MemoryStore, clock: FakeClock
) -> None:
    world = TrackedWorld(store, clock, Tracker(TargetResult(True, False, "SUCCEEDED", 0, "{}")))
    look = start(world)
    lease = world.run().lease_expires_at
    assert lease is not None
    world.clock.set(lease + timedelta(seconds=1))

    assert world.deliver(look) is Outcome.SUCCEEDED
    assert world.run().state is RunState.SUCCEEDED
