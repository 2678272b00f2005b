"""Callback runs (issue 28, part 1) on the in-memory store: the target answers 202 and the run stays running
under the accepted work's lease; heartbeats move the lease; the completion ends the attempt through the
same finish path as every other; a report for an attempt that is over is refused (409) and changes nothing;
a silent target's attempt ends at its lease end like a silent worker's."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.services.test_executing import FIRE, World
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.callbacks import CallbackLinks, CallbackToken
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.errors import ConflictError, ValidationError
from tickwork.domain.execution import LEASE_MARGIN
from tickwork.domain.models import Completion, RunState
from tickwork.domain.targets import TargetResult
from tickwork.services.callbacks import Callbacks, Report
from tickwork.services.executing import Executor, ExecutorConfig, Outcome

SECRET = b"s3cret"
LINKS = CallbackLinks("https://tickwork.example/api", SECRET)
ACCEPTED = TargetResult(ok=True, retryable=False, status="202", latency_ms=3, accepted=True)
HEARTBEAT = 60
TIMEOUT = 3600


class CallbackWorld(World):
    def __init__(self, store: MemoryStore, clock: FakeClock) -> None:
        super().__init__(
            store, clock, completion=Completion.CALLBACK, heartbeat_seconds=HEARTBEAT, timeout_seconds=TIMEOUT
        )
        self.callbacks = Callbacks(self.store, self.dispatcher, self.clock, SECRET)

    def executor(self, worker: str = "worker-a") -> Executor:
        return Executor(
            self.store,
            self.invoker,
            self.dispatcher,
            self.clock,
            self.metrics,
            ExecutorConfig(worker_id=worker, callbacks=LINKS),
        )

    def token(self) -> str:
        [(_, invocation)] = self.invoker.calls[-1:]
        assert invocation.callback is not None
        return invocation.callback.complete.split("/callbacks/")[1].split("/")[0]

    def deliver(self, message: RunMessage) -> Outcome:
        return self.executor("worker-b").execute(RunMessage.from_json(message.to_json()))


@pytest.fixture
def world(store: MemoryStore, clock: FakeClock) -> CallbackWorld:
    return CallbackWorld(store, clock)


def accept(world: CallbackWorld) -> RunMessage:
    """The first delivery: the target answers 202. Returns the message that stays with the run."""
    world.invoker.results.append(ACCEPTED)
    world.clock.set(FIRE + timedelta(milliseconds=100))
    sent_before = len(world.dispatcher.messages)
    assert world.executor().execute(world.first_message()) is Outcome.ACCEPTED
    [watch] = world.dispatcher.messages[sent_before:]
    return watch


def test_a_202_keeps_the_run_running_under_the_heartbeat_lease_with_its_message(world: CallbackWorld) -> None:
    watch = accept(world)

    run = world.run()
    [(_, invocation)] = world.invoker.calls
    assert invocation.callback is not None
    assert invocation.callback.heartbeat.startswith("https://tickwork.example/api/callbacks/")
    assert invocation.timeout_seconds == 840  # the call's share of a 1 h timeout, not the hour
    accepted_at = FIRE + timedelta(milliseconds=100)
    assert run.state is RunState.RUNNING and run.attempt == 1 and run.heartbeat_at == accepted_at
    assert run.lease_expires_at == accepted_at + timedelta(seconds=HEARTBEAT) + LEASE_MARGIN
    # The queue-carried run keeps its message, back at the lease end.
    assert watch.attempt == 0 and watch.not_before == run.lease_expires_at
    assert world.metrics.counts["RunsAccepted"] == 1


def test_heartbeats_move_the_lease_and_the_completion_ends_the_attempt_once(world: CallbackWorld) -> None:
    watch = accept(world)
    token = world.token()

    world.clock.advance(50)
    beating = world.callbacks.heartbeat(token)
    assert beating.lease_expires_at == world.clock.now() + timedelta(seconds=HEARTBEAT) + LEASE_MARGIN
    # The watching message comes back at the old lease end, finds a live lease, and waits for the new one.
    world.clock.set(watch.not_before)
    sent_before = len(world.dispatcher.messages)
    assert world.deliver(watch) is Outcome.WATCHING_LEASE
    [rewatch] = world.dispatcher.messages[sent_before:]
    assert rewatch.not_before == beating.lease_expires_at and world.run().state is RunState.RUNNING

    world.clock.advance(30)
    sent_before = len(world.dispatcher.messages)
    world.callbacks.complete(token, Report(ok=True, status="0", detail="done"))
    [finish] = world.dispatcher.messages[sent_before:]
    assert finish.finish is not None and world.run().state is RunState.RUNNING  # applied by an executor

    world.clock.set(max(world.clock.now(), finish.not_before))
    assert world.deliver(finish) is Outcome.SUCCEEDED
    run = world.run()
    assert run.state is RunState.SUCCEEDED and run.attempt == 1 and len(world.invoker.calls) == 1
    assert run.attempts[-1]["status"] == "0" and run.attempts[-1]["ok"] is True

    # A second completion, or a heartbeat, of the ended attempt: 409, nothing changes.
    with pytest.raises(ConflictError):
        world.callbacks.complete(token, Report(ok=False))
    with pytest.raises(ConflictError):
        world.callbacks.heartbeat(token)
    assert world.run() == run


def test_a_failed_completion_retries_the_run(world: CallbackWorld) -> None:
    accept(world)
    world.callbacks.complete(world.token(), Report(ok=False, status="exit 3", detail="boom"))
    finish = world.dispatcher.messages[-1]
    world.clock.set(max(world.clock.now(), finish.not_before))

    assert world.deliver(finish) is Outcome.RETRY_SCHEDULED
    assert world.run().state is RunState.RETRY_WAIT and world.run().reason == "boom"


def test_a_report_from_a_superseded_attempt_is_refused_and_overwrites_nothing(world: CallbackWorld) -> None:
    watch = accept(world)
    old_token = world.token()
    # The target goes silent: at the lease end the watching message ends the attempt, and the retry runs.
    lease = world.run().lease_expires_at
    assert lease is not None
    world.clock.set(lease + timedelta(seconds=1))
    assert world.deliver(replace(watch, not_before=world.clock.now())) is Outcome.LEASE_EXPIRED
    assert world.run().state is RunState.RETRY_WAIT
    retry = world.dispatcher.messages[-1]
    world.invoker.results.append(ACCEPTED)
    world.clock.set(retry.not_before)
    assert world.deliver(retry) is Outcome.ACCEPTED
    assert world.run().attempt == 2

    for report in (
        lambda: world.callbacks.complete(old_token, Report(ok=True)),
        lambda: world.callbacks.heartbeat(old_token),
    ):
        with pytest.raises(ConflictError, match="attempt 1 is over"):
            report()
    assert world.run().state is RunState.RUNNING and world.run().attempt == 2


def test_a_token_this_deployment_did_not_sign_is_refused(world: CallbackWorld) -> None:
    accept(world)
    forged = CallbackToken(world.run().run_id, 1, FIRE + timedelta(hours=1)).sign(b"another secret")
    with pytest.raises(ValidationError):
        world.callbacks.complete(forged, Report(ok=True))
    with pytest.raises(ValidationError):
        world.callbacks.heartbeat(world.token()[:-2] + "AA")
    assert world.run().state is RunState.RUNNING


@pytest.mark.parametrize(
    "answer", [ACCEPTED, TargetResult(ok=True, retryable=False, status="200", latency_ms=3)]
)
def test_a_heartbeat_during_the_call_does_not_strand_the_run(
    world: CallbackWorld, answer: TargetResult
) -> None:
    """Found in review: a heartbeat that lands while the executor is still in the call moved the lease, the
    executor's own next write was refused, and the delivery ended without a message: the run stayed running
    with nothing to bring it back."""
    world.invoker.results.append(answer)
    world.invoker.during_call = lambda: world.callbacks.heartbeat(world.token())
    world.clock.set(FIRE + timedelta(milliseconds=100))

    outcome = world.executor().execute(world.first_message())

    if answer.accepted:
        assert outcome is Outcome.ACCEPTED
        run = world.run()
        assert run.state is RunState.RUNNING and run.heartbeat_at is not None
        [watch] = world.dispatcher.messages  # the run keeps a message that comes back at its lease end
        assert watch.not_before == run.lease_expires_at
    else:
        assert outcome is Outcome.SUCCEEDED and world.run().state is RunState.SUCCEEDED
    assert len(world.invoker.calls) == 1


def test_under_a_full_bound_the_watch_still_ends_a_silent_attempt(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Found in review: the watching message had to take a slot before it could look at its run, so with the
    bound full (the silent run holds the only slot) it waited for a slot instead of ending the attempt."""
    from tickwork.adapters.memory.slots import MemorySlots
    from tickwork.domain.slots import SlotLimits

    world = CallbackWorld(store, clock)
    slots = MemorySlots()

    def bounded(worker: str) -> Executor:
        config = ExecutorConfig(worker_id=worker, callbacks=LINKS, limits=SlotLimits(1))
        return Executor(
            world.store, world.invoker, world.dispatcher, world.clock, world.metrics, config, slots=slots
        )

    world.invoker.results.append(ACCEPTED)
    world.clock.set(FIRE + timedelta(milliseconds=100))
    assert bounded("worker-a").execute(world.first_message()) is Outcome.ACCEPTED
    watch = world.dispatcher.messages[-1]
    assert watch.watch is True
    world.clock.set(watch.not_before + timedelta(seconds=1))  # the target never reported

    assert bounded("worker-b").execute(RunMessage.from_json(watch.to_json())) is Outcome.LEASE_EXPIRED
    assert world.run().state is RunState.RETRY_WAIT
