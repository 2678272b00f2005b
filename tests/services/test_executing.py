"""The executor and the sweeper with a fault injected at each step (single-threaded, on the in-memory
store)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.fakes import CrashError, RecordingDispatcher, RecordingMetrics, ScriptedInvoker, failure
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import DeadLetter, RunMessage
from tickwork.domain.execution import VIEW_TRUST_WINDOW, claimed
from tickwork.domain.jobs import JobPatch, JobSpec, SchedulePatch
from tickwork.domain.models import (
    VIEW_TARGET_MAX_BYTES,
    JobState,
    OverlapPolicy,
    Policies,
    RetryPolicy,
    Run,
    RunState,
    Target,
)
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.targets import TargetResult
from tickwork.services.executing import Executor, ExecutorConfig, Outcome
from tickwork.services.jobs import Author, JobService, JobServiceConfig
from tickwork.services.planning import Planner
from tickwork.services.sweeping import Sweeper

HTTP = Target(kind="http", config={"url": "http://127.0.0.1:9/hook", "method": "POST"})
FIRE = datetime(2026, 12, 2, 12, 5, 0, tzinfo=UTC)


class NoDeadLetters:
    def __init__(self, letters: list[DeadLetter] | None = None) -> None:
        self.letters = letters or []
        self.deleted: list[str] = []

    def receive(self, max_messages: int) -> list[DeadLetter]:
        batch, self.letters = self.letters[:max_messages], self.letters[max_messages:]
        return batch

    def delete(self, receipt: str) -> None:
        self.deleted.append(receipt)


RETRY = RetryPolicy(max_attempts=3, backoff_base_seconds=10, backoff_max_seconds=60)


class World:
    """One scheduler on the in-memory store: a planned run of a `*/5` job at 12:05 and the parts that act
    on it."""

    def __init__(self, store: MemoryStore, clock: FakeClock, **spec: Any) -> None:
        self.store = store
        self.clock = clock
        self.dispatcher = RecordingDispatcher()
        self.metrics = RecordingMetrics()
        self.invoker = ScriptedInvoker()
        self.jobs = JobService(store, self.dispatcher, clock, JobServiceConfig(shard_count=2))
        defaults: dict[str, Any] = {
            "name": "job",
            "schedule": parse_schedule("*/5 * * * *"),
            "target": HTTP,
            "policies": Policies(retry=RETRY),
        }
        self.job = self.jobs.create("alice", JobSpec(**{**defaults, **spec}))
        Planner(store, self.dispatcher, clock).plan(self.job.shard, FIRE - timedelta(seconds=110))
        self.clock.set(FIRE)

    def executor(self, worker: str = "worker-a") -> Executor:
        return Executor(
            self.store,
            self.invoker,
            self.dispatcher,
            self.clock,
            self.metrics,
            ExecutorConfig(worker_id=worker),
        )

    def sweeper(self, dead_letters: NoDeadLetters | None = None) -> Sweeper:
        return Sweeper(
            self.store, self.dispatcher, dead_letters or NoDeadLetters(), self.clock, self.metrics, 2
        )

    def first_message(self) -> RunMessage:
        return RunMessage.for_run(self.dispatcher.sent[0])

    def sweeper_carried(self) -> World:
        """Make the planned run one sent after its commit, as the API's runs are: the sweeper's to repair.
        The ticker's own runs are queue-carried (tests/services/test_queue_carried.py)."""
        run = self.run()
        self.store.transition_run(run, replace(run, queue_carried=False))
        return self

    def run(self, fire: datetime = FIRE) -> Run:
        run = self.store.get_run(self.job.job_id, fire)
        assert run is not None
        return run


@pytest.fixture
def world(store: MemoryStore, clock: FakeClock) -> World:
    return World(store, clock)


def test_a_due_run_is_claimed_called_once_and_succeeds(world: World) -> None:
    world.clock.set(FIRE + timedelta(milliseconds=250))

    outcome = world.executor().execute(world.first_message())

    assert outcome is Outcome.SUCCEEDED
    run = world.run()
    assert (run.state, run.attempt, run.start_delay_ms) == (RunState.SUCCEEDED, 1, 250)
    assert run.started_at == FIRE + timedelta(milliseconds=250) and run.finished_at is not None
    assert [a["status"] for a in run.attempts] == ["200"]
    [(target, invocation)] = world.invoker.calls
    assert (invocation.run_id, invocation.attempt, target) == (run.run_id, 1, HTTP)
    assert world.metrics.timings["StartDelay"] == [250]


def test_a_message_arriving_early_is_held_until_the_fire_time(world: World) -> None:
    world.clock.set(FIRE - timedelta(milliseconds=700))  # SQS delays are whole seconds: up to 1 s early

    assert world.executor().execute(world.first_message()) is Outcome.SUCCEEDED

    assert world.clock.slept == [pytest.approx(0.7)]
    assert world.run().start_delay_ms == 0


def test_a_message_far_ahead_of_its_time_goes_back_to_the_queue(world: World) -> None:
    world.clock.set(FIRE - timedelta(seconds=30))

    assert world.executor().execute(world.first_message()) is Outcome.DEFERRED

    assert world.invoker.calls == [] and world.run().state is RunState.PLANNED
    assert world.dispatcher.messages[-1] == world.first_message()


def test_duplicate_delivery_of_one_message_starts_the_target_once(world: World) -> None:
    message = world.first_message()
    outcomes = [world.executor("worker-a").execute(message), world.executor("worker-b").execute(message)]

    assert outcomes == [Outcome.SUCCEEDED, Outcome.DUPLICATE]
    assert len(world.invoker.calls) == 1


def test_a_duplicate_delivery_while_the_first_is_running_is_ignored(world: World) -> None:
    message = world.first_message()
    seen: list[Outcome] = []
    world.invoker.during_call = lambda: seen.append(world.executor("worker-b").execute(message))

    assert world.executor("worker-a").execute(message) is Outcome.SUCCEEDED

    # The run is queue-carried: the second delivery does not call the target, and comes back when the
    # first one's lease ends (then a duplicate), in case the first worker died.
    assert seen == [Outcome.WATCHING_LEASE] and len(world.invoker.calls) == 1
    assert world.dispatcher.messages[-1].not_before == FIRE + timedelta(seconds=60 + 30)
    world.clock.set(FIRE + timedelta(seconds=90))
    assert world.executor("worker-b").execute(world.dispatcher.messages[-1]) is Outcome.DUPLICATE


def test_a_duplicate_delivery_of_a_sweeper_carried_run_while_it_runs_is_ignored(world: World) -> None:
    message = world.sweeper_carried().first_message()
    seen: list[Outcome] = []
    world.invoker.during_call = lambda: seen.append(world.executor("worker-b").execute(message))

    assert world.executor("worker-a").execute(message) is Outcome.SUCCEEDED

    assert seen == [Outcome.DUPLICATE] and len(world.invoker.calls) == 1


def test_a_failed_attempt_is_retried_with_backoff_then_succeeds(world: World) -> None:
    world.invoker.results = [failure()]

    assert world.executor().execute(world.first_message()) is Outcome.RETRY_SCHEDULED

    waiting = world.run()
    assert waiting.state is RunState.RETRY_WAIT and waiting.attempt == 1
    assert waiting.retry_at is not None and FIRE <= waiting.retry_at <= FIRE + timedelta(seconds=10)
    retry = world.dispatcher.messages[-1]
    assert (retry.attempt, retry.not_before) == (1, waiting.retry_at)
    world.clock.set(waiting.retry_at)
    assert world.executor().execute(retry) is Outcome.SUCCEEDED
    done = world.run()
    assert (done.state, done.attempt, [a["ok"] for a in done.attempts]) == (
        RunState.SUCCEEDED,
        2,
        [False, True],
    )
    assert world.metrics.counts["Retries"] == 1


def test_a_poison_run_ends_failed_after_its_last_attempt_with_the_alarm_metric(world: World) -> None:
    world.invoker.results = [failure(), failure(), failure()]
    message = world.first_message()
    for _ in range(3):
        outcome = world.executor().execute(message)
        run = world.run()
        if run.retry_at is not None:
            world.clock.set(run.retry_at)
            message = world.dispatcher.messages[-1]

    assert outcome is Outcome.FAILED
    final = world.run()
    assert (final.state, final.attempt) == (RunState.FAILED, 3)
    assert final.reason is not None and "all 3 attempts failed" in final.reason
    assert world.metrics.counts["RunsFailed"] == 1


def test_a_non_retryable_failure_fails_at_once(world: World) -> None:
    world.invoker.results = [failure(retryable=False, status="404")]

    assert world.executor().execute(world.first_message()) is Outcome.FAILED

    assert world.run().state is RunState.FAILED and len(world.invoker.calls) == 1


def test_a_worker_dying_mid_run_is_retried_after_its_lease_expires(world: World) -> None:
    world.sweeper_carried()  # the sweeper takes it over (a queue-carried run: its message does)
    world.invoker.crash = True
    with pytest.raises(CrashError):
        world.executor("worker-a").execute(world.first_message())
    running = world.run()
    assert running.state is RunState.RUNNING and (running.lease_owner or "").startswith("worker-a#")
    assert running.lease_expires_at == FIRE + timedelta(seconds=60 + 30)

    world.clock.set(FIRE + timedelta(seconds=89))
    assert world.sweeper().sweep().expired_leases == 0  # slow is not dead: the lease still holds

    world.clock.set(FIRE + timedelta(seconds=91))
    report = world.sweeper().sweep()
    assert report.expired_leases == 1
    waiting = world.run()
    assert waiting.state is RunState.RETRY_WAIT and waiting.attempts[-1]["status"] == "LeaseExpired"

    world.invoker.crash = False
    assert waiting.retry_at is not None
    world.clock.set(waiting.retry_at)
    assert world.executor("worker-b").execute(world.dispatcher.messages[-1]) is Outcome.SUCCEEDED
    assert world.run().attempt == 2 and world.metrics.counts["ExpiredLeases"] == 1


def test_a_slow_worker_finishing_after_a_takeover_cannot_overwrite_the_newer_attempt(world: World) -> None:
    def takeover() -> None:
        # While worker A's call hangs, its lease expires, the sweeper retries, and worker B succeeds.
        world.clock.set(FIRE + timedelta(seconds=91))
        world.sweeper().sweep()
        waiting = world.run()
        assert waiting.retry_at is not None
        world.clock.set(waiting.retry_at)
        assert world.executor("worker-b").execute(world.dispatcher.messages[-1]) is Outcome.SUCCEEDED

    world.sweeper_carried().invoker.during_call = takeover
    ok = TargetResult(ok=True, retryable=False, status="200", latency_ms=5, detail="ok")
    # Answers in the order the calls return: B (inside A's call) first, then the slow A.
    world.invoker.results = [ok, failure(retryable=False, status="500-from-slow-worker")]

    outcome = world.executor("worker-a").execute(world.first_message())

    assert outcome is Outcome.STALE_COMPLETION
    run = world.run()
    assert (run.state, run.attempt) == (RunState.SUCCEEDED, 2)
    assert all(a["status"] != "500-from-slow-worker" for a in run.attempts)
    assert world.metrics.counts["StaleCompletions"] == 1


def test_a_message_lost_after_the_commit_is_redispatched_by_the_sweeper(
    store: MemoryStore, clock: FakeClock
) -> None:
    world = World(store, clock).sweeper_carried()  # sent after its commit, as the API's runs are
    world.dispatcher.sent.clear()  # the message never reached the queue
    world.clock.set(FIRE + timedelta(seconds=89))
    assert world.sweeper().sweep().redispatched == 0  # within the dispatch grace: not yet lost

    world.clock.set(FIRE + timedelta(seconds=91))
    assert world.sweeper().sweep().redispatched == 1
    assert world.sweeper().sweep().redispatched == 0  # the re-send pushed the next check back

    message = world.dispatcher.messages[-1]
    assert (message.job_id, message.scheduled_for, message.attempt) == (world.job.job_id, FIRE, 0)
    assert world.executor().execute(message) is Outcome.SUCCEEDED
    assert world.metrics.counts["SweeperRedispatched"] == 1


def test_a_dead_lettered_run_is_marked_failed_not_left_in_limbo(world: World) -> None:
    letter = DeadLetter("r-1", world.first_message(), world.first_message().to_json(), receive_count=5)
    dead_letters = NoDeadLetters([letter])

    report = world.sweeper(dead_letters).sweep()

    assert report.dead_lettered == 1 and dead_letters.deleted == ["r-1"]
    run = world.run()
    assert run.state is RunState.FAILED and run.reason is not None and "dead-lettered" in run.reason
    assert world.metrics.counts["RunsFailed"] == 1


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        pytest.param("pause", "job paused", id="paused_job_cancels_its_planned_run"),
        pytest.param("delete", "job deleted", id="deleted_job_cancels_its_planned_run"),
        pytest.param("reschedule", "schedule changed", id="fire_no_longer_on_the_schedule_is_cancelled"),
    ],
)
def test_the_jobs_state_at_claim_time_rules(world: World, change: str, reason: str) -> None:
    if change == "pause":
        world.jobs.pause("alice", world.job.job_id, by=Author("alice", "a test"))
    elif change == "delete":
        world.jobs.delete("alice", world.job.job_id, by=Author("alice", "a test"))
    else:
        edit = JobPatch(schedule=SchedulePatch(expression="*/7 * * * *"))
        world.jobs.update("alice", world.job.job_id, edit)

    assert world.executor().execute(world.first_message()) is Outcome.CANCELLED

    run = world.run()
    assert run.state is RunState.CANCELLED and run.reason is not None and run.reason.startswith(reason)
    assert world.invoker.calls == []


def test_a_large_target_stays_on_the_job_and_the_claim_reads_it(store: MemoryStore, clock: FakeClock) -> None:
    """A target config over VIEW_TARGET_MAX_BYTES is not copied onto every run (each run item would pay its
    size in write units): the view leaves it out, and the executor reads it from the job after the claim."""
    large = Target(kind="http", config={**HTTP.config, "body": "x" * (VIEW_TARGET_MAX_BYTES + 1)})
    world = World(store, clock, target=large)
    planned = world.run()
    assert planned.job_view is not None and planned.job_view.target is None

    assert world.executor().execute(world.first_message()) is Outcome.SUCCEEDED
    assert world.invoker.calls[0][0] == large


def test_a_changed_target_is_used_by_runs_planned_before_the_change(world: World) -> None:
    new_target = Target(kind="http", config={"url": "http://127.0.0.1:9/v2", "method": "POST"})
    world.jobs.update("alice", world.job.job_id, JobPatch(target=new_target, timeout_seconds=30))

    assert world.executor().execute(world.first_message()) is Outcome.SUCCEEDED
    assert world.invoker.calls[0][0] == new_target
    # The message was sent with the old timeout (60 s): the claim's condition refused it, and the second
    # claim used the view's 30 s (for the lease and for the call).
    assert world.first_message().timeout_seconds == 60
    assert world.invoker.calls[0][1].timeout_seconds == 30.0


SECOND = timedelta(seconds=1)


@pytest.mark.parametrize(
    ("age", "outcome"),
    [
        pytest.param(
            VIEW_TRUST_WINDOW - timedelta(seconds=1), Outcome.SUCCEEDED, id="young_run_trusts_its_view"
        ),
        pytest.param(VIEW_TRUST_WINDOW + timedelta(seconds=1), Outcome.CANCELLED, id="old_run_reads_the_job"),
    ],
)
def test_a_run_older_than_the_views_window_reads_the_job(
    world: World, age: timedelta, outcome: Outcome
) -> None:
    """Job writes rewrite the views of runs up to VIEW_REFRESH_WINDOW old; an older run (a late catch-up)
    may carry a stale view, so its claim reads the job instead. Here a pause reaches the job but not the
    run's view (written to the store directly, as for a run older than the window)."""
    current = world.store.get_job(world.job.job_id)
    assert current is not None
    world.store.replace_job(current, replace(current, state=JobState.PAUSED, version=current.version + 1), ())
    message = world.first_message()
    world.clock.set(message.scheduled_for + age)

    assert world.executor().execute(message) is outcome


def test_a_retry_of_a_run_whose_job_changed_while_it_ran_reads_the_job(world: World) -> None:
    """Job writes rewrite the views of unclaimed runs only: a run that was running when its job was paused
    comes back to retry with the view it was claimed with, so a retry reads the job."""
    world.invoker.results = [failure()]
    assert world.executor().execute(world.first_message()) is Outcome.RETRY_SCHEDULED
    world.jobs.pause("alice", world.job.job_id, by=Author("alice", "a test"))
    [retry] = world.dispatcher.messages
    world.clock.set(retry.not_before)

    assert world.executor().execute(retry) is Outcome.CANCELLED
    assert world.run().reason == "job paused" and len(world.invoker.calls) == 1


def _overlapping(store: MemoryStore, clock: FakeClock, policy: OverlapPolicy) -> tuple[World, list[Outcome]]:
    """Three runs of one job fall due while the first is still running."""
    world = World(
        store,
        clock,
        schedule=parse_schedule("*/10 * * * * *"),
        policies=Policies(overlap=policy, retry=RETRY),
    )
    messages = sorted((RunMessage.for_run(r) for r in world.dispatcher.sent), key=lambda m: m.scheduled_for)
    world.clock.set(messages[2].not_before)
    outcomes: list[Outcome] = []

    def others_fire_meanwhile() -> None:
        outcomes.extend(world.executor("worker-b").execute(m) for m in messages[1:3])

    world.invoker.during_call = others_fire_meanwhile
    outcomes.insert(0, world.executor("worker-a").execute(messages[0]))
    return world, outcomes


def test_overlap_skip_records_the_overlapping_runs_as_skipped(store: MemoryStore, clock: FakeClock) -> None:
    world, outcomes = _overlapping(store, clock, OverlapPolicy.SKIP)

    assert outcomes == [Outcome.SUCCEEDED, Outcome.SKIPPED, Outcome.SKIPPED]
    runs = world.store.list_runs(world.job.job_id, newest_first=False)
    assert [r.state for r in runs[:3]] == [RunState.SUCCEEDED, RunState.SKIPPED, RunState.SKIPPED]
    assert runs[1].reason is not None and "still running" in runs[1].reason


def test_overlap_queue_keeps_one_waiting_run_and_starts_it_after(
    store: MemoryStore, clock: FakeClock
) -> None:
    world, outcomes = _overlapping(store, clock, OverlapPolicy.QUEUE)

    assert outcomes == [Outcome.SUCCEEDED, Outcome.QUEUED, Outcome.SKIPPED]
    release = world.dispatcher.messages[-1]  # the finishing run released the waiting one
    runs = world.store.list_runs(world.job.job_id, newest_first=False)
    assert release.scheduled_for == runs[1].scheduled_for and runs[1].state is RunState.QUEUED
    assert world.executor("worker-c").execute(release) is Outcome.SUCCEEDED
    runs = world.store.list_runs(world.job.job_id, newest_first=False)
    assert [r.state for r in runs[:3]] == [RunState.SUCCEEDED, RunState.SUCCEEDED, RunState.SKIPPED]


def test_overlap_allow_runs_them_side_by_side(store: MemoryStore, clock: FakeClock) -> None:
    _, outcomes = _overlapping(store, clock, OverlapPolicy.ALLOW)
    assert outcomes == [Outcome.SUCCEEDED, Outcome.SUCCEEDED, Outcome.SUCCEEDED]


def test_a_dead_letter_of_an_older_attempt_does_not_fail_the_newer_one(world: World) -> None:
    world.invoker.results = [failure()]
    stale = world.first_message()
    assert world.executor().execute(stale) is Outcome.RETRY_SCHEDULED  # attempt 1 failed, retry pending
    dead_letters = NoDeadLetters([DeadLetter("r-old", stale, stale.to_json(), receive_count=5)])

    report = world.sweeper(dead_letters).sweep()

    assert report.dead_lettered == 0 and dead_letters.deleted == ["r-old"]
    assert world.run().state is RunState.RETRY_WAIT  # the retry still happens


def blocked_retry(store: MemoryStore, clock: FakeClock) -> tuple[World, Run]:
    """An overlap=skip job whose run 4 holds the slot (claimed by another worker) while run 5 is due to
    retry: returns the world and run 5, waiting to retry now."""
    world, _ = _overlapping(store, clock, OverlapPolicy.SKIP)
    runs = world.store.list_runs(world.job.job_id, newest_first=False)
    holder, retrying = runs[3], runs[4]
    assert world.store.claim_exclusive(
        holder, claimed(holder, world.job, worker="x", now=clock.now()), clock.now()
    )
    waiting = replace(retrying, state=RunState.RETRY_WAIT, attempt=1, retry_at=clock.now())
    world.store.transition_run(retrying, waiting)
    return world, waiting


def test_a_retry_that_finds_the_overlap_slot_taken_waits_instead_of_being_skipped(
    store: MemoryStore, clock: FakeClock
) -> None:
    world, waiting = blocked_retry(store, clock)

    outcome = world.executor().execute(RunMessage.for_run(waiting, clock.now()))

    assert outcome is Outcome.DEFERRED and world.run(waiting.scheduled_for).state is RunState.RETRY_WAIT
    assert world.dispatcher.messages[-1].not_before == clock.now() + timedelta(seconds=30)
