"""Runs the ticker plans are queue-carried: their message goes out before their commit and stays in the
queue until the run ends, so they need no sweeper entry. These tests show each side of that bargain (the
in-memory store, single-threaded; the chaos and durability tests kill real processes around it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from random import Random
from typing import Any

import pytest

from tests.fakes import CrashError, FaultyPlanStore, RecordingDispatcher, RecordingMetrics, ScriptedInvoker
from tests.services.test_executing import NoDeadLetters
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import COMMIT_SETTLE, COMMIT_WINDOW, DeadLetter, RunMessage
from tickwork.domain.jobs import JobPatch, JobSpec
from tickwork.domain.models import Job, OverlapPolicy, Policies, RetryPolicy, Run, RunState, Target
from tickwork.domain.schedule import parse_schedule
from tickwork.services import planning
from tickwork.services.executing import Executor, ExecutorConfig, Outcome
from tickwork.services.jobs import Author, JobService, JobServiceConfig
from tickwork.services.planning import Planner
from tickwork.services.sweeping import Sweeper

HTTP = Target(kind="http", config={"url": "http://127.0.0.1:9/hook", "method": "POST"})
FIRE = datetime(2026, 12, 2, 12, 5, 0, tzinfo=UTC)
TICK = FIRE - timedelta(seconds=110)
FAR = FIRE + timedelta(days=1)  # any sweeper check time is long past by then


class StoreSeeingDispatcher(RecordingDispatcher):
    """Records, for each dispatched run, whether the store already held it when its message went."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__()
        self.store = store
        self.stored_at_send: dict[str, bool] = {}

    def dispatch(self, runs: Any, now: datetime, *, commit_by: datetime | None = None) -> None:
        for run in runs:
            self.stored_at_send[run.run_id] = self.store.get_run(run.job_id, run.scheduled_for) is not None
        super().dispatch(runs, now, commit_by=commit_by)


def a_job(store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher, **spec: Any) -> Job:
    service = JobService(store, dispatcher, clock, JobServiceConfig(shard_count=2))
    defaults: dict[str, Any] = {"name": "job", "schedule": parse_schedule("*/5 * * * *"), "target": HTTP}
    return service.create("alice", JobSpec(**{**defaults, **spec}))


def executor(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher, invoker: ScriptedInvoker
) -> Executor:
    return Executor(
        store, invoker, dispatcher, clock, RecordingMetrics(), ExecutorConfig(worker_id="w"), Random(7)
    )


def sent_message(dispatcher: RecordingDispatcher, index: int = 0) -> RunMessage:
    """The message as the dispatcher was asked to send it (with its commit_by)."""
    return RunMessage.for_run(dispatcher.sent[index], commit_by=dispatcher.commit_bys[index])


def open_run_ids(store: MemoryStore, through: datetime) -> list[str]:
    return [run.run_id for shard in range(2) for run in store.open_runs(shard, through)]


def test_the_ticker_sends_before_it_commits_and_the_run_has_no_sweeper_entry(
    store: MemoryStore, clock: FakeClock
) -> None:
    dispatcher = StoreSeeingDispatcher(store)
    job = a_job(store, clock, dispatcher)

    report = Planner(store, dispatcher, clock).plan(job.shard, TICK)

    run = store.get_run(job.job_id, FIRE)
    assert report.runs_planned == 1 and run is not None and run.queue_carried
    assert dispatcher.stored_at_send == {run.run_id: False}  # the message went first
    commit_by = dispatcher.commit_bys[0]
    assert commit_by is not None and commit_by - TICK == COMMIT_WINDOW  # sent "as of" the tick
    assert open_run_ids(store, FAR) == []  # nothing for the sweeper, even a day later


def crash_between_send_and_commit(
    store: MemoryStore, clock: FakeClock
) -> tuple[RecordingDispatcher, Job, RunMessage]:
    """A tick that sent a job's message and died before its commit: the message, and no run."""
    dispatcher = RecordingDispatcher()
    job = a_job(store, clock, dispatcher)
    faulty = FaultyPlanStore(store)
    faulty.crash_before_commit = True
    with pytest.raises(CrashError):
        Planner(faulty, dispatcher, clock).plan(job.shard, TICK)  # type: ignore[arg-type]
    assert store.get_run(job.job_id, FIRE) is None  # sent, never committed
    return dispatcher, job, sent_message(dispatcher)


def test_a_crash_between_send_and_commit_loses_nothing_and_the_early_message_waits(
    store: MemoryStore, clock: FakeClock
) -> None:
    dispatcher, job, early = crash_between_send_and_commit(store, clock)

    # The message arrives before any run: it looks again a second later instead of being dropped.
    clock.set(FIRE)
    invoker = ScriptedInvoker()
    outcome = executor(store, clock, dispatcher, invoker).execute(early)
    assert outcome is Outcome.WAITING_FOR_RUN
    again = dispatcher.messages[-1]
    assert (again.run_id, again.commit_by, again.hops) == (early.run_id, early.commit_by, 1)
    assert again.not_before == FIRE + timedelta(seconds=1)

    # The next tick plans the fire again (the job never advanced); the looked-again message runs it.
    Planner(store, dispatcher, clock).plan(job.shard, FIRE - timedelta(seconds=5))
    clock.advance(1)
    assert executor(store, clock, dispatcher, invoker).execute(again) is Outcome.SUCCEEDED
    assert len(invoker.calls) == 1
    # The tick's own message is now a duplicate: the run succeeded, the target is not called again.
    assert executor(store, clock, dispatcher, invoker).execute(sent_message(dispatcher, 1)) is (
        Outcome.DUPLICATE
    )
    assert len(invoker.calls) == 1


def test_a_message_whose_run_never_came_is_dropped_once_its_commit_window_has_settled(
    store: MemoryStore, clock: FakeClock
) -> None:
    dispatcher, _, message = crash_between_send_and_commit(store, clock)
    assert message.commit_by is not None
    run_executor = executor(store, clock, dispatcher, ScriptedInvoker())

    clock.set(message.commit_by + COMMIT_SETTLE - timedelta(seconds=1))
    assert run_executor.execute(message) is Outcome.WAITING_FOR_RUN
    waits = [m.not_before - clock.now() for m in dispatcher.messages]
    clock.set(message.commit_by + COMMIT_SETTLE)
    assert run_executor.execute(message) is Outcome.NOT_FOUND
    assert len(dispatcher.messages) == 1  # dropped, not sent again
    # Looks again back off: hop 0 waits 1 s; a message at hop 12 waits the 5-minute cap.
    assert waits == [timedelta(seconds=1)]
    late = RunMessage.for_run(dispatcher.sent[0], commit_by=message.commit_by, hops=12)
    assert late.missing_run_recheck(FIRE).not_before == FIRE + timedelta(minutes=5)


def test_the_ticker_commits_nothing_after_the_commit_window(store: MemoryStore, clock: FakeClock) -> None:
    dispatcher = RecordingDispatcher()
    job = a_job(store, clock, dispatcher)

    class SlowAfterSend(RecordingDispatcher):
        def dispatch(self, runs: Any, now: datetime, *, commit_by: datetime | None = None) -> None:
            super().dispatch(runs, now, commit_by=commit_by)
            clock.advance(COMMIT_WINDOW.total_seconds())  # the send took the whole window (a stalled ticker)

    slow = SlowAfterSend()
    clock.set(TICK)
    report = Planner(store, slow, clock).plan(job.shard, TICK)

    assert store.get_run(job.job_id, FIRE) is None
    assert report.deferred_jobs == [job.job_id] and not report.complete
    stored = store.get_job(job.job_id)
    assert stored is not None and stored.next_fire_at == FIRE  # the next tick plans it
    watermark = store.get_watermark(job.shard)
    assert watermark is not None and watermark < FIRE


def test_a_failed_send_leaves_the_job_for_the_next_tick(store: MemoryStore, clock: FakeClock) -> None:
    dispatcher = RecordingDispatcher()
    job = a_job(store, clock, dispatcher)
    dispatcher.fail_next = 1

    report = Planner(store, dispatcher, clock).plan(job.shard, TICK)

    assert report.dispatch_failures == 1 and report.deferred_jobs == [job.job_id]
    assert store.get_run(job.job_id, FIRE) is None  # no committed run without its message
    report = Planner(store, dispatcher, clock).plan(job.shard, TICK + timedelta(seconds=60))
    assert report.runs_planned == 1 and store.get_run(job.job_id, FIRE) is not None


def claimed_run(store: MemoryStore, clock: FakeClock, retry: RetryPolicy) -> tuple[Any, ...]:
    """A queue-carried run claimed by a worker that then goes silent (its call never returns here)."""
    dispatcher = RecordingDispatcher()
    job = a_job(store, clock, dispatcher, policies=Policies(retry=retry), timeout_seconds=10)
    Planner(store, dispatcher, clock).plan(job.shard, TICK)
    message = sent_message(dispatcher)
    clock.set(FIRE)

    with pytest.raises(CrashError):
        executor(store, clock, dispatcher, ScriptedInvoker(crash=True)).execute(message)
    running = store.get_run(job.job_id, FIRE)
    assert running is not None and running.state is RunState.RUNNING and running.queue_carried
    return dispatcher, message, running


def test_a_redelivered_message_watches_a_live_lease_then_takes_over_when_it_ends(
    store: MemoryStore, clock: FakeClock
) -> None:
    retry = RetryPolicy(max_attempts=3, backoff_base_seconds=10, backoff_max_seconds=60)
    dispatcher, message, running = claimed_run(store, clock, retry)
    invoker = ScriptedInvoker()
    assert open_run_ids(store, FAR) == []  # a dead worker's run: only its message can bring it back

    # The message comes back while the lease is live: it waits for the lease, the run is left alone.
    clock.advance(5)
    assert executor(store, clock, dispatcher, invoker).execute(message) is Outcome.WATCHING_LEASE
    watch = dispatcher.messages[-1]
    assert watch.not_before == running.lease_expires_at and watch.attempt == message.attempt
    assert store.get_run(running.job_id, FIRE) == running

    # At the lease's end the attempt counts as failed and a retry is scheduled, with a sweeper entry.
    clock.set(watch.not_before)
    assert executor(store, clock, dispatcher, invoker).execute(watch) is Outcome.LEASE_EXPIRED
    waiting = store.get_run(running.job_id, FIRE)
    assert waiting is not None and waiting.state is RunState.RETRY_WAIT and waiting.retry_at is not None
    assert open_run_ids(store, FAR) == [waiting.run_id]
    retry_message = dispatcher.messages[-1]
    assert (retry_message.attempt, retry_message.not_before) == (1, waiting.retry_at)
    assert invoker.calls == []

    # The retry runs and succeeds; finishing removes the entry the retry wait added.
    clock.set(waiting.retry_at)
    assert executor(store, clock, dispatcher, invoker).execute(retry_message) is Outcome.SUCCEEDED
    done = store.get_run(running.job_id, FIRE)
    assert done is not None and done.state is RunState.SUCCEEDED and done.attempt == 2
    assert open_run_ids(store, FAR) == []
    # The watched message of attempt 0, if it came once more, is a duplicate now.
    assert executor(store, clock, dispatcher, invoker).execute(watch) is Outcome.DUPLICATE


def test_a_dead_worker_on_the_last_attempt_fails_the_run_through_its_message(
    store: MemoryStore, clock: FakeClock
) -> None:
    _, message, running = claimed_run(store, clock, RetryPolicy(max_attempts=1))
    dispatcher = RecordingDispatcher()
    assert running.lease_expires_at is not None
    clock.set(running.lease_expires_at)

    outcome = executor(store, clock, dispatcher, ScriptedInvoker()).execute(message)

    failed = store.get_run(running.job_id, FIRE)
    assert outcome is Outcome.LEASE_EXPIRED and failed is not None and failed.state is RunState.FAILED
    assert dispatcher.messages == []
    # The sweeper would not have found it (no entry), and now has nothing to do for it either.
    letters = NoDeadLetters()
    report = Sweeper(store, dispatcher, letters, clock, RecordingMetrics(), 2).sweep(FAR)
    assert report.expired_leases == 0 and report.redispatched == 0 and letters.deleted == []


def test_runs_made_by_the_api_keep_their_sweeper_entry(store: MemoryStore, clock: FakeClock) -> None:
    """A job write plans its own fires inside the horizon and sends after committing them: those runs
    are the sweeper's (a crash between commit and send must still be repaired)."""
    dispatcher = RecordingDispatcher()
    job = a_job(store, clock, dispatcher, schedule=parse_schedule("*/30 * * * * *"))
    made: list[Run] = list(dispatcher.sent)

    assert made and not any(run.queue_carried for run in made)
    assert sorted(open_run_ids(store, FAR)) == sorted(run.run_id for run in made)
    assert job.next_fire_at is not None


class EditBeforeWrite:
    """The store, with a job edit landing just before the executor's overlap claim (a race the executor
    cannot see coming: the edit rewrites the unclaimed run's view, so the claim is refused)."""

    def __init__(self, store: MemoryStore, edit: Any) -> None:
        self._store = store
        self._edit = edit

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if name != "claim_exclusive" or self._edit is None:
            return attribute

        def edited_first(*args: Any, **kwargs: Any) -> Any:
            edit, self._edit = self._edit, None
            edit()
            return attribute(*args, **kwargs)

        return edited_first


def test_a_job_edit_racing_the_overlap_claim_sends_the_message_back_instead_of_dropping_it(
    store: MemoryStore, clock: FakeClock
) -> None:
    dispatcher = RecordingDispatcher()
    service = JobService(store, dispatcher, clock, JobServiceConfig(shard_count=2))
    job = a_job(store, clock, dispatcher, policies=Policies(overlap=OverlapPolicy.SKIP))
    Planner(store, dispatcher, clock).plan(job.shard, TICK)
    message = sent_message(dispatcher)
    clock.set(FIRE)

    def edit() -> None:
        service.update("alice", job.job_id, JobPatch(timeout_seconds=61))

    invoker = ScriptedInvoker()
    raced = Executor(
        EditBeforeWrite(store, edit),  # type: ignore[arg-type]
        invoker,
        dispatcher,
        clock,
        RecordingMetrics(),
        ExecutorConfig(worker_id="w"),
    )
    first = raced.execute(message)

    run = store.get_run(job.job_id, FIRE)
    assert run is not None and run.state is RunState.PLANNED and invoker.calls == []
    assert open_run_ids(store, FAR) == []  # still only its message can bring it
    assert first is Outcome.DEFERRED  # refused by the rewritten view: sent back, not dropped
    again = dispatcher.messages[-1]
    assert (again.run_id, again.attempt, again.hops) == (run.run_id, 0, 1)
    assert executor(store, clock, dispatcher, invoker).execute(again) is Outcome.SUCCEEDED
    assert len(invoker.calls) == 1


def test_a_dead_workers_run_whose_job_was_deleted_ends_when_its_message_comes_back(
    store: MemoryStore, clock: FakeClock
) -> None:
    """The message comes back after the views' trust window, so the executor reads the job: deleted. The
    run is running at the message's attempt: not a duplicate to drop, its lease is what decides."""
    _, message, running = claimed_run(store, clock, RetryPolicy(max_attempts=3))
    dispatcher = RecordingDispatcher()
    JobService(store, dispatcher, clock, JobServiceConfig(shard_count=2)).delete(
        "alice", running.job_id, by=Author("alice", "a test")
    )
    clock.set(FIRE + timedelta(minutes=16))  # the queue's visibility timeout in AWS: 960 s

    outcome = executor(store, clock, dispatcher, ScriptedInvoker()).execute(message)

    ended = store.get_run(running.job_id, FIRE)
    assert outcome is Outcome.LEASE_EXPIRED and ended is not None
    assert (ended.state, ended.reason) == (RunState.CANCELLED, "job deleted")


def test_a_dead_letter_of_a_running_queue_carried_run_keeps_watching_it(
    store: MemoryStore, clock: FakeClock
) -> None:
    _, message, running = claimed_run(store, clock, RetryPolicy(max_attempts=3))
    assert running.lease_expires_at is not None
    letter = DeadLetter(receipt="r-1", message=message, body=message.to_json(), receive_count=5)
    dispatcher = RecordingDispatcher()
    letters = NoDeadLetters([letter])
    sweeper = Sweeper(store, dispatcher, letters, clock, RecordingMetrics(), 2)

    clock.set(running.lease_expires_at - timedelta(seconds=10))  # the lease still holds
    sweeper.sweep()
    watch = dispatcher.messages[-1]
    assert letters.deleted == ["r-1"] and watch.not_before == running.lease_expires_at
    assert store.get_run(running.job_id, FIRE) == running

    letters.letters = [letter]  # the same letter again, after the lease
    clock.set(running.lease_expires_at)
    report = sweeper.sweep()
    waiting = store.get_run(running.job_id, FIRE)
    assert report.expired_leases == 1 and waiting is not None and waiting.state is RunState.RETRY_WAIT
    assert dispatcher.messages[-1].not_before == waiting.retry_at


def test_a_job_whose_fires_cannot_be_planned_does_not_stop_its_shard(
    store: MemoryStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatcher = RecordingDispatcher()
    bad = a_job(store, clock, dispatcher)
    others = [a_job(store, clock, dispatcher) for _ in range(12)]
    real = planning.plan_batch

    def poisoned(job: Job, **kwargs: Any) -> Any:
        if job.job_id == bad.job_id:
            raise ValueError("a record the code cannot read")
        return real(job, **kwargs)

    monkeypatch.setattr(planning, "plan_batch", poisoned)
    reports = [Planner(store, dispatcher, clock).plan(shard, TICK) for shard in range(2)]

    assert sum(r.runs_planned for r in reports) == len(others)
    assert [j for r in reports for j in r.failed_jobs] == [bad.job_id]
    assert all(store.get_run(j.job_id, FIRE) is not None for j in others)
    watermark = store.get_watermark(bad.shard)
    assert watermark is not None and watermark < FIRE  # its fire stays behind the watermark
