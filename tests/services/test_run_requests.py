"""Runs on request (run now, retry, backfill) and the failed-runs listing, on the in-memory store, the SQLite
store and the DynamoDB store (moto: it alone refuses a transaction of more than 100 items, which the
backfill's chunks must respect): the same use cases, the same answers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ANCHOR
from tests.fakes import RecordingDispatcher, RecordingMetrics, ScriptedInvoker, failure
from tickwork.adapters.memory.store import MemoryStore
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.errors import NotFoundError, ValidationError
from tickwork.domain.jobs import JobPatch, JobSpec, SchedulePatch
from tickwork.domain.models import Job, OverlapPolicy, Policies, RetryPolicy, Run, RunState, Target, Trigger
from tickwork.domain.requests import MAX_BACKFILL_FIRES, BackfillWindow, JobPausedError, RunNotRetryableError
from tickwork.domain.schedule import parse_schedule
from tickwork.services.executing import Executor, ExecutorConfig
from tickwork.services.jobs import Author, IdempotencyKeyReusedError, JobService, JobServiceConfig
from tickwork.services.planning import Planner
from tickwork.services.requests import RunRequests
from tickwork.services.runs import RunService

ALICE, BOB = "alice", "bob"


@dataclass
class World:
    store: Any
    clock: FakeClock
    dispatcher: RecordingDispatcher
    jobs: JobService
    requests: RunRequests
    history: RunService
    invoker: ScriptedInvoker

    def executor(self) -> Executor:
        return Executor(
            self.store,
            self.invoker,
            self.dispatcher,
            self.clock,
            RecordingMetrics(),
            ExecutorConfig(worker_id="w1"),
        )

    def execute(self, run: Run) -> Run:
        """Deliver the run's message as the queue would, then read the run back."""
        message = RunMessage.for_run(run, run.retry_at or run.due_at)
        self.executor().execute(message)
        stored = self.store.get_run(run.job_id, run.scheduled_for)
        assert stored is not None
        return stored

    def job(self, owner: str = ALICE, expression: str = "*/5 * * * *", **spec: Any) -> Job:
        return self.jobs.create(
            owner,
            JobSpec(
                name="report",
                schedule=parse_schedule(expression, spec.pop("timezone", "UTC")),
                target=Target("http", {"url": "https://hooks.example.com/x"}),
                **spec,
            ),
        )


@pytest.fixture(params=["memory", "sqlite", pytest.param("moto", marks=pytest.mark.moto)])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    store: Any
    if request.param == "sqlite":
        store = SqliteStore(Database(tmp_path / "tickwork.db").open())
    elif request.param == "memory":
        store = MemoryStore()
    else:
        store = request.getfixturevalue("dynamo_store")
    clock = FakeClock(ANCHOR)
    dispatcher = RecordingDispatcher()
    jobs = JobService(store, dispatcher, clock, JobServiceConfig(shard_count=2))
    yield World(
        store,
        clock,
        dispatcher,
        jobs,
        RunRequests(store, dispatcher, clock),
        RunService(store),
        ScriptedInvoker(),
    )


# --- run now -----------------------------------------------------------------------------------------------


def test_run_now_creates_a_manual_run_that_runs_and_leaves_the_schedule_alone(world: World) -> None:
    job = world.job()
    result = world.requests.run_now(ALICE, job.job_id)
    (run,) = result.runs
    assert (run.trigger, run.state, result.replayed) == (Trigger.MANUAL, RunState.PLANNED, False)
    assert run.scheduled_for.microsecond != 0, "a run now is keyed off every (whole-second) slot"
    assert run.run_id == f"{job.job_id}:20261202T120030Z~000001"  # ANCHOR is a whole second: moved 1 µs
    assert world.dispatcher.run_ids[-1] == run.run_id
    after = world.store.get_job(job.job_id)
    assert after.next_fire_at == job.next_fire_at and after.version == job.version
    done = world.execute(run)
    assert (done.state, done.attempt, len(world.invoker.calls)) == (RunState.SUCCEEDED, 1, 1)
    listed = world.history.get(ALICE, job.job_id, run.run_id)
    assert listed.run_id == run.run_id and listed.trigger is Trigger.MANUAL


def test_run_now_on_a_paused_job_is_refused_unless_asked_and_then_the_pause_does_not_cancel_it(
    world: World,
) -> None:
    job = world.jobs.pause(ALICE, world.job().job_id, by=Author("alice", "a test"))
    with pytest.raises(JobPausedError):
        world.requests.run_now(ALICE, job.job_id)
    (run,) = world.requests.run_now(ALICE, job.job_id, even_if_paused=True).runs
    assert world.execute(run).state is RunState.SUCCEEDED


def test_an_idempotency_key_names_one_run_now_and_only_for_its_own_request(world: World) -> None:
    job = world.job()
    other = world.job()
    first = world.requests.run_now(ALICE, job.job_id, idempotency_key="k-1")
    world.clock.advance(3)
    again = world.requests.run_now(ALICE, job.job_id, idempotency_key="k-1")
    assert again.replayed and again.runs[0].run_id == first.runs[0].run_id
    assert [r.run_id for r in world.dispatcher.sent if r.trigger is Trigger.MANUAL] == [first.runs[0].run_id]
    with pytest.raises(IdempotencyKeyReusedError):
        world.requests.run_now(ALICE, other.job_id, idempotency_key="k-1")
    # Keys are per owner: bob's "k-1" is his own, and bob cannot reach alice's job at all.
    with pytest.raises(NotFoundError):
        world.requests.run_now(BOB, job.job_id, idempotency_key="k-1")


def test_two_runs_now_in_the_same_microsecond_are_two_runs(world: World) -> None:
    job = world.job()
    first = world.requests.run_now(ALICE, job.job_id).runs[0]
    second = world.requests.run_now(ALICE, job.job_id).runs[0]  # the fake clock has not moved
    assert first.run_id != second.run_id
    assert {world.store.get_run(job.job_id, r.scheduled_for).state for r in (first, second)} == {
        RunState.PLANNED
    }


def test_a_run_now_on_a_scheduled_second_is_not_the_slot_and_survives_a_schedule_edit(world: World) -> None:
    job = world.job()
    fire = job.next_fire_at
    assert fire is not None
    world.clock.set(fire)
    manual = world.requests.run_now(ALICE, job.job_id).runs[0]
    Planner(world.store, world.dispatcher, world.clock).plan(job.shard)
    slot = world.store.get_run(job.job_id, fire)
    assert slot is not None and slot.run_id != manual.run_id and slot.trigger is not Trigger.MANUAL
    # An edit that takes the fire off the schedule cancels the slot's run, never the run asked for.
    edited = world.jobs.update(ALICE, job.job_id, JobPatch(schedule=SchedulePatch(expression="7 * * * *")))
    assert edited.version > job.version
    assert world.execute(slot).state is RunState.CANCELLED
    assert world.execute(manual).state is RunState.SUCCEEDED


def test_a_delete_after_a_run_now_cancels_it(world: World) -> None:
    job = world.job()
    run = world.requests.run_now(ALICE, job.job_id).runs[0]
    world.jobs.delete(ALICE, job.job_id, by=Author("alice", "a test"))
    assert world.execute(run).state is RunState.CANCELLED
    assert world.invoker.calls == []


def test_a_run_now_respects_the_overlap_policy(world: World) -> None:
    job = world.job(policies=Policies(overlap=OverlapPolicy.SKIP))
    first = world.requests.run_now(ALICE, job.job_id).runs[0]
    second = world.requests.run_now(ALICE, job.job_id).runs[0]

    def deliver_second() -> None:
        world.execute(second)

    world.invoker.during_call = deliver_second
    assert world.execute(first).state is RunState.SUCCEEDED
    assert world.store.get_run(job.job_id, second.scheduled_for).state is RunState.SKIPPED


# --- retry -------------------------------------------------------------------------------------------------


def _failed_run(world: World, job: Job) -> Run:
    world.invoker.results = [failure(retryable=False, status="400")]
    run = world.requests.run_now(ALICE, job.job_id).runs[0]
    failed = world.execute(run)
    assert failed.state is RunState.FAILED
    return failed


def test_retry_starts_the_next_attempt_of_a_failed_run_and_keeps_the_earlier_ones(world: World) -> None:
    job = world.job(policies=Policies(retry=RetryPolicy(max_attempts=1)))
    failed = _failed_run(world, job)
    world.clock.advance(60)
    result = world.requests.retry(ALICE, job.job_id, failed.run_id)
    waiting = result.runs[0]
    assert (waiting.state, waiting.attempt, waiting.finished_at) == (RunState.RETRY_WAIT, 1, None)
    page = world.history.failed(ALICE, since=None, limit=10, cursor=None)
    assert page.runs == (), "a retried run leaves the failed-runs index"
    done = world.execute(waiting)
    assert (done.state, done.attempt) == (RunState.SUCCEEDED, 2)
    assert [a["ok"] for a in done.attempts] == [False, True]


def test_retry_of_a_run_that_is_not_failed_or_cancelled_is_refused(world: World) -> None:
    job = world.job()
    run = world.requests.run_now(ALICE, job.job_id).runs[0]
    with pytest.raises(RunNotRetryableError, match="planned"):
        world.requests.retry(ALICE, job.job_id, run.run_id)

    def retry_while_running() -> None:
        with pytest.raises(RunNotRetryableError, match="running"):
            world.requests.retry(ALICE, job.job_id, run.run_id)

    world.invoker.during_call = retry_while_running
    assert world.execute(run).state is RunState.SUCCEEDED
    with pytest.raises(RunNotRetryableError, match="succeeded"):
        world.requests.retry(ALICE, job.job_id, run.run_id)
    with pytest.raises(NotFoundError):
        world.requests.retry(ALICE, job.job_id, f"{job.job_id}:20261202T110000Z")
    with pytest.raises(NotFoundError):
        world.requests.retry(BOB, job.job_id, run.run_id)


def test_a_retry_sent_twice_with_a_key_retries_once(world: World) -> None:
    job = world.job(policies=Policies(retry=RetryPolicy(max_attempts=1)))
    failed = _failed_run(world, job)
    first = world.requests.retry(ALICE, job.job_id, failed.run_id, idempotency_key="r-1")
    again = world.requests.retry(ALICE, job.job_id, failed.run_id, idempotency_key="r-1")
    assert again.replayed and again.runs[0].run_id == first.runs[0].run_id
    assert again.runs[0].state is RunState.RETRY_WAIT


# --- backfill ----------------------------------------------------------------------------------------------


def test_a_backfill_across_a_dst_transition_creates_each_fire_once_and_starts_them_gradually(
    world: World,
) -> None:
    world.clock.set(datetime(2026, 4, 2, tzinfo=UTC))
    job = world.job(expression="30 2 * * *", timezone="Europe/Berlin")
    window = BackfillWindow(
        datetime(2026, 3, 27, tzinfo=UTC), datetime(2026, 3, 31, 12, tzinfo=UTC), rate_per_second=2.0
    )
    result = world.requests.backfill(ALICE, job.job_id, window)
    # 02:30 CET is 01:30Z; on the 29th 02:30 does not exist (spring forward) and dst_gap=shift fires at the
    # first instant after the gap, 03:00 CEST (01:00Z); from the 30th, 02:30 CEST is 00:30Z.
    expected = [
        datetime(2026, 3, 27, 1, 30, tzinfo=UTC),
        datetime(2026, 3, 28, 1, 30, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
        datetime(2026, 3, 31, 0, 30, tzinfo=UTC),
    ]
    runs = sorted(
        (r for r in world.store.list_runs(job.job_id) if r.trigger is Trigger.BACKFILL),
        key=lambda r: r.scheduled_for,
    )
    assert [r.scheduled_for for r in runs] == expected
    assert (result.created, result.skipped) == (5, 0)
    now = world.clock.now()
    assert [r.due_at - now for r in runs] == [timedelta(seconds=0.5 * i) for i in range(5)]
    assert all(r.expires_at > now for r in runs), "kept for the retention from now, not from the old fire"
    assert world.execute(runs[2]).state is RunState.SUCCEEDED


def test_a_backfill_again_creates_nothing_and_a_rerun_with_a_key_creates_each_once(world: World) -> None:
    world.clock.set(datetime(2026, 12, 2, 13, 0, tzinfo=UTC))
    job = world.job(expression="0 * * * *")
    window = BackfillWindow(datetime(2026, 12, 2, 8, tzinfo=UTC), datetime(2026, 12, 2, 11, tzinfo=UTC))
    assert (world.requests.backfill(ALICE, job.job_id, window).created) == 4
    again = world.requests.backfill(ALICE, job.job_id, window)
    assert (again.created, again.skipped) == (0, 4)
    rerun = BackfillWindow(window.start, window.end, rerun=True)
    first = world.requests.backfill(ALICE, job.job_id, rerun, idempotency_key="b-1")
    replay = world.requests.backfill(ALICE, job.job_id, rerun, idempotency_key="b-1")
    assert (first.created, first.skipped, replay.created, replay.replayed) == (4, 0, 4, True)
    backfilled = [r for r in world.store.list_runs(job.job_id) if r.trigger is Trigger.BACKFILL]
    assert len(backfilled) == 8
    assert sum(1 for r in backfilled if r.scheduled_for.microsecond) == 4


def test_a_backfill_is_bounded_and_refuses_the_future_and_paused_jobs(world: World) -> None:
    world.clock.set(datetime(2026, 12, 2, 13, 0, tzinfo=UTC))
    job = world.job(expression="* * * * *")
    now = world.clock.now()
    with pytest.raises(ValidationError, match=f"more than {MAX_BACKFILL_FIRES}"):
        world.requests.backfill(ALICE, job.job_id, BackfillWindow(now - timedelta(days=1), now))
    with pytest.raises(ValidationError, match="future"):
        world.requests.backfill(
            ALICE, job.job_id, BackfillWindow(now - timedelta(hours=1), now + timedelta(1))
        )
    with pytest.raises(ValidationError, match="before from"):
        world.requests.backfill(ALICE, job.job_id, BackfillWindow(now, now - timedelta(hours=1)))
    world.jobs.pause(ALICE, job.job_id, by=Author("alice", "a test"))
    with pytest.raises(JobPausedError):
        world.requests.backfill(ALICE, job.job_id, BackfillWindow(now - timedelta(hours=1), now))
    assert [r for r in world.store.list_runs(job.job_id) if r.trigger is Trigger.BACKFILL] == []


def test_a_backfill_larger_than_one_transaction_is_written_in_chunks(world: World) -> None:
    world.clock.set(datetime(2026, 12, 2, 13, 0, tzinfo=UTC))
    job = world.job(expression="* * * * *")
    now = world.clock.now()
    window = BackfillWindow(now - timedelta(minutes=249), now, rate_per_second=100)
    result = world.requests.backfill(ALICE, job.job_id, window, idempotency_key="big")
    assert (result.created, result.skipped) == (250, 0)
    assert world.store.get_job(job.job_id).run_requests == 3  # 90 + 90 + 70


# --- failed runs across jobs -------------------------------------------------------------------------------


def test_failed_runs_across_jobs_newest_first_a_page_at_a_time_and_only_the_callers(world: World) -> None:
    jobs = [world.job(policies=Policies(retry=RetryPolicy(max_attempts=1))) for _ in range(2)]
    failed = []
    for i in range(5):
        world.clock.advance(10)
        failed.append(_failed_run(world, jobs[i % 2]))
    bobs = world.job(owner=BOB, policies=Policies(retry=RetryPolicy(max_attempts=1)))
    world.invoker.results = [failure(retryable=False)]
    world.execute(world.requests.run_now(BOB, bobs.job_id).runs[0])

    first = world.history.failed(ALICE, since=None, limit=3, cursor=None)
    assert [r.run_id for r in first.runs] == [r.run_id for r in reversed(failed)][:3]
    assert first.next_cursor is not None
    rest = world.history.failed(ALICE, since=None, limit=3, cursor=first.next_cursor)
    assert [r.run_id for r in rest.runs] == [r.run_id for r in reversed(failed)][3:]
    assert rest.next_cursor is None
    recent = world.history.failed(ALICE, since=failed[3].finished_at, limit=10, cursor=None)
    assert [r.run_id for r in recent.runs] == [failed[4].run_id, failed[3].run_id]
    assert [r.job_id for r in world.history.failed(BOB, since=None, limit=10, cursor=None).runs] == [
        bobs.job_id
    ]
    with pytest.raises(ValidationError, match="cursor"):
        world.history.failed(BOB, since=None, limit=3, cursor=first.next_cursor)
