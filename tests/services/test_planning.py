"""The ticker's commit point, on the in-memory store (single-threaded). Races run against MiniStack and
SQLite elsewhere (tests/services/test_planning_race.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from random import Random
from typing import Any

import pytest

from tests.conftest import ANCHOR
from tests.fakes import CrashError, FaultyPlanStore, RecordingDispatcher
from tests.services.conftest import raw_job
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Job, JobState, MissedFirePolicy, Policies, RunState, Target, Trigger
from tickwork.domain.schedule import parse_schedule
from tickwork.services.jobs import Author, JobService, JobServiceConfig
from tickwork.services.planning import Planner, PlannerConfig
from tickwork.services.retrying import retrying

SHARDS = 4
HTTP = Target(kind="http", config={"url": "http://127.0.0.1:9/hook", "method": "POST"})


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def make_service(store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher) -> JobService:
    return JobService(store, dispatcher, clock, JobServiceConfig(shard_count=SHARDS))


def create(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher, expression: str, **kwargs: Any
) -> Job:
    spec = JobSpec(name="job", schedule=parse_schedule(expression), target=HTTP, **kwargs)
    return make_service(store, clock, dispatcher).create("alice", spec)


def run_times(store: MemoryStore, job: Job) -> list[datetime]:
    return [r.scheduled_for for r in store.list_runs(job.job_id, newest_first=False)]


def test_due_job_gets_one_run_and_the_job_advances(store: MemoryStore, clock: FakeClock) -> None:
    dispatcher = RecordingDispatcher()
    job = create(store, clock, dispatcher, "*/5 * * * *")
    assert job.next_fire_at == at("2026-12-02T12:05:00")

    report = Planner(store, dispatcher, clock).plan(job.shard, at("2026-12-02T12:03:10"))

    assert report.runs_planned == 1 and report.complete
    run = store.get_run(job.job_id, at("2026-12-02T12:05:00"))
    assert run is not None
    assert (run.state, run.trigger, run.attempt, run.job_version) == (
        RunState.PLANNED,
        Trigger.SCHEDULE,
        0,
        1,
    )
    assert run.run_id == f"{job.job_id}:20261202T120500Z"
    assert dispatcher.run_ids == [run.run_id]
    stored = store.get_job(job.job_id)
    assert stored is not None and stored.next_fire_at == at("2026-12-02T12:10:00")
    assert stored.due_key == f"{job.shard:04d}#2026-12-02T12:10"


def test_a_job_firing_several_times_inside_the_horizon_gets_every_run(
    store: MemoryStore, clock: FakeClock
) -> None:
    dispatcher = RecordingDispatcher()
    job = create(store, clock, dispatcher, "*/30 * * * * *")  # seconds first: every 30 s
    planned_by_create = len(dispatcher.sent)  # fires inside the create's own horizon

    Planner(store, dispatcher, clock).plan(job.shard, at("2026-12-02T12:01:00"))

    times = run_times(store, job)
    expected = [ANCHOR.replace(second=0) + timedelta(seconds=30 * i) for i in range(2, 7)]
    assert times == expected  # 12:01:00 .. 12:03:00, each exactly once
    assert planned_by_create == 4
    assert len(dispatcher.sent) == len(expected)


def test_planning_the_same_shard_twice_creates_each_run_once(store: MemoryStore, clock: FakeClock) -> None:
    dispatcher = RecordingDispatcher()
    job = create(store, clock, dispatcher, "* * * * *")
    first = Planner(store, dispatcher, clock).plan(job.shard, at("2026-12-02T12:01:30"))
    second = Planner(store, dispatcher, clock).plan(job.shard, at("2026-12-02T12:01:30"))

    assert first.runs_planned == 1 and second.runs_planned == 0
    assert run_times(store, job) == [
        at("2026-12-02T12:01:00"),
        at("2026-12-02T12:02:00"),
        at("2026-12-02T12:03:00"),
    ]
    assert len(dispatcher.sent) == 3


class StaleIndex:
    """The `due` index answering with a snapshot taken before another ticker's commit."""

    def __init__(self, inner: MemoryStore, stale: list[Job]) -> None:
        self.inner = inner
        self.stale = stale

    def query_due(self, due_key: str, through: datetime) -> Any:
        return iter([j for j in self.stale if j.due_key == due_key])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_ticker_with_a_stale_read_does_not_plan_a_run_twice(store: MemoryStore, clock: FakeClock) -> None:
    dispatcher = RecordingDispatcher()
    job = create(store, clock, dispatcher, "*/5 * * * *")
    now = at("2026-12-02T12:03:10")
    Planner(store, dispatcher, clock).plan(job.shard, now)  # ticker A commits 12:05

    report = Planner(StaleIndex(store, [job]), dispatcher, clock).plan(job.shard, now)  # type: ignore[arg-type]

    assert report.conflicts == 1 and report.runs_planned == 0 and report.complete
    assert run_times(store, job) == [at("2026-12-02T12:05:00")]
    # Ticker B sent its message before its commit lost: two messages, one run (the claim fences them).
    assert [r.run_id for r in dispatcher.sent] == [f"{job.job_id}:20261202T120500Z"] * 2
    assert all(commit_by is not None for commit_by in dispatcher.commit_bys)


def test_a_job_paused_after_the_index_read_is_skipped(store: MemoryStore, clock: FakeClock) -> None:
    dispatcher = RecordingDispatcher()
    job = create(store, clock, dispatcher, "*/5 * * * *")
    make_service(store, clock, dispatcher).pause("alice", job.job_id, by=Author("alice", "a test"))

    report = Planner(StaleIndex(store, [job]), dispatcher, clock).plan(job.shard, at("2026-12-02T12:03:10"))  # type: ignore[arg-type]

    assert report.conflicts == 1 and report.runs_planned == 0
    assert run_times(store, job) == []


def test_a_crash_just_before_the_commit_loses_nothing(store: MemoryStore, clock: FakeClock) -> None:
    dispatcher = RecordingDispatcher()
    job = create(store, clock, dispatcher, "*/5 * * * *")
    faulty = FaultyPlanStore(store)
    faulty.crash_before_commit = True
    with pytest.raises(CrashError):
        Planner(faulty, dispatcher, clock).plan(job.shard, at("2026-12-02T12:03:10"))
    assert run_times(store, job) == [] and store.get_watermark(job.shard) is None

    Planner(store, dispatcher, clock).plan(job.shard, at("2026-12-02T12:04:10"))  # the next tick

    assert run_times(store, job) == [at("2026-12-02T12:05:00")]
    # The crashed tick's message had gone before its commit (it finds the run the next tick made, or none:
    # tests/services/test_queue_carried.py); the next tick sent its own.
    assert len(dispatcher.sent) == 2


def test_a_crash_just_after_the_commit_leaves_the_run_to_be_found(
    store: MemoryStore, clock: FakeClock
) -> None:
    dispatcher = RecordingDispatcher()
    job = create(store, clock, dispatcher, "*/5 * * * *")
    faulty = FaultyPlanStore(store)
    faulty.crash_after_commit = True
    with pytest.raises(CrashError):
        Planner(faulty, dispatcher, clock).plan(job.shard, at("2026-12-02T12:03:10"))
    # The commit is durable and its message went before it: the run exists and will be delivered, the job
    # moved on, the watermark not.
    run = store.get_run(job.job_id, at("2026-12-02T12:05:00"))
    assert run is not None and run.state is RunState.PLANNED and run.queue_carried
    assert dispatcher.run_ids == [run.run_id] and store.get_watermark(job.shard) is None

    report = Planner(store, dispatcher, clock).plan(job.shard, at("2026-12-02T12:04:10"))

    assert report.runs_planned == 0 and report.conflicts == 0
    assert run_times(store, job) == [at("2026-12-02T12:05:00")]


def test_throttled_commits_are_retried_with_backoff_not_dropped(store: MemoryStore, clock: FakeClock) -> None:
    dispatcher = RecordingDispatcher()
    job = create(store, clock, dispatcher, "*/5 * * * *")
    faulty = FaultyPlanStore(store)
    faulty.throttle_commits = 2

    # As composed for real: the store retried on throttling, in one place (`retrying`).
    report = Planner(retrying(faulty, clock, Random(3)), dispatcher, clock).plan(
        job.shard, at("2026-12-02T12:03:10")
    )

    assert report.runs_planned == 1 and report.complete
    assert len(clock.slept) == 2 and all(0 <= s <= 2.0 for s in clock.slept)


def test_a_store_throttling_past_every_retry_defers_the_job_and_holds_the_watermark(
    store: MemoryStore, clock: FakeClock
) -> None:
    dispatcher = RecordingDispatcher()
    job = create(store, clock, dispatcher, "*/5 * * * *")
    faulty = FaultyPlanStore(store)
    faulty.throttle_commits = 100

    report = Planner(faulty, dispatcher, clock).plan(job.shard, at("2026-12-02T12:03:10"))

    assert not report.complete and report.deferred_jobs == [job.job_id]
    # Held just before the fire it could not plan, so the next tick reads that fire's bucket again.
    assert store.get_watermark(job.shard) == at("2026-12-02T12:05:00") - timedelta(milliseconds=1)
    Planner(store, dispatcher, clock).plan(job.shard, at("2026-12-02T12:04:10"))
    assert run_times(store, job) == [at("2026-12-02T12:05:00")]


@pytest.mark.parametrize(
    ("policy", "expected_planned", "expected_missed"),
    [
        pytest.param(MissedFirePolicy.RUN_ALL, 180, 0, id="run_all_runs_every_missed_fire"),
        pytest.param(MissedFirePolicy.COALESCE, 1, 179, id="coalesce_runs_the_latest_records_the_rest"),
        pytest.param(MissedFirePolicy.SKIP, 0, 180, id="skip_records_every_missed_fire"),
    ],
)
def test_a_ticker_down_for_three_hours_catches_up_every_missed_fire_per_policy(
    store: MemoryStore,
    clock: FakeClock,
    policy: MissedFirePolicy,
    expected_planned: int,
    expected_missed: int,
) -> None:
    dispatcher = RecordingDispatcher()
    job = create(store, clock, dispatcher, "* * * * *", policies=Policies(missed_fire=policy))
    planner = Planner(store, dispatcher, clock)
    planner.plan(job.shard, at("2026-12-02T12:00:40"))  # plans 12:01 and 12:02 on time
    on_time = len(dispatcher.sent)

    report = planner.plan(job.shard, at("2026-12-02T15:02:40"))  # three hours later

    runs = store.list_runs(job.job_id, newest_first=False)
    late = [r for r in runs if r.scheduled_for < at("2026-12-02T15:02:40")][2:]
    assert len(late) == 180  # 12:03 .. 15:02: every slot has a record
    assert sum(r.state is RunState.PLANNED for r in late) == expected_planned
    assert sum(r.state is RunState.MISSED for r in late) == expected_missed
    assert all(r.trigger is Trigger.CATCH_UP for r in late)
    # Only a planned run's message goes before its commit; a missed fire's record has no message.
    assert all(r.queue_carried is (r.state is RunState.PLANNED) for r in late)
    assert report.runs_missed == expected_missed
    assert len(dispatcher.sent) == on_time + expected_planned + 2  # + 15:03 and 15:04 on time
    if policy is MissedFirePolicy.COALESCE:
        assert [r.scheduled_for for r in late if r.state is RunState.PLANNED] == [at("2026-12-02T15:02:00")]
    assert [r.scheduled_for for r in runs] == sorted({r.scheduled_for for r in runs})  # no slot twice
    assert report.commits >= 180 // 25  # a long catch-up commits in bounded slices


def test_a_paused_job_leaves_the_due_index(store: MemoryStore, clock: FakeClock) -> None:
    dispatcher = RecordingDispatcher()
    job = create(store, clock, dispatcher, "*/5 * * * *")
    assert list(store.query_due(job.due_key or "", at("2026-12-02T13:00:00"))) != []

    paused = make_service(store, clock, dispatcher).pause("alice", job.job_id, by=Author("alice", "a test"))

    assert paused.state is JobState.PAUSED and paused.due_key is None
    assert list(store.query_due(job.due_key or "", at("2026-12-02T13:00:00"))) == []
    assert "due_key" not in raw_job(store, job.job_id)
    report = Planner(store, dispatcher, clock).plan(job.shard, at("2026-12-02T12:03:10"))
    assert report.jobs_seen == 0 and run_times(store, job) == []


@pytest.mark.parametrize(
    ("reread", "planned"),
    [
        pytest.param(timedelta(seconds=120), True, id="trailing_buckets_reread_find_the_lagging_job"),
        pytest.param(timedelta(0), False, id="without_reread_the_lagging_job_would_be_passed_over"),
    ],
)
def test_index_lag_at_tick_time_is_closed_by_rereading_trailing_buckets(
    store: MemoryStore, clock: FakeClock, reread: timedelta, planned: bool
) -> None:
    dispatcher = RecordingDispatcher()
    job = create(store, clock, dispatcher, "30 59 12 * * *")  # 12:59:30 daily (seconds first)
    faulty = FaultyPlanStore(store)
    faulty.hidden_from_index.add(job.job_id)
    planner = Planner(faulty, dispatcher, clock, PlannerConfig(reread=reread))
    planner.plan(job.shard, at("2026-12-02T12:58:00"))  # horizon 13:00:00: the job is due but invisible
    faulty.hidden_from_index.clear()

    planner.plan(job.shard, at("2026-12-02T12:59:00"))

    assert (run_times(store, job) == [at("2026-12-02T12:59:30")]) is planned


def test_a_job_created_inside_the_planned_horizon_plans_its_own_fire(
    store: MemoryStore, clock: FakeClock
) -> None:
    dispatcher = RecordingDispatcher()
    planner = Planner(store, dispatcher, clock)
    for shard in range(SHARDS):
        planner.plan(shard, at("2026-12-02T12:00:40"))  # every shard planned through 12:02:40
    clock.set(at("2026-12-02T12:00:50"))

    job = create(store, clock, dispatcher, "* * * * *")

    assert run_times(store, job) == [at("2026-12-02T12:01:00"), at("2026-12-02T12:02:00")]
    assert dispatcher.run_ids[-2:] == [f"{job.job_id}:20261202T120100Z", f"{job.job_id}:20261202T120200Z"]
    planner.plan(job.shard, at("2026-12-02T12:01:40"))
    assert run_times(store, job) == [at(f"2026-12-02T12:0{m}:00") for m in (1, 2, 3)]


def test_a_job_past_its_end_leaves_the_index(store: MemoryStore, clock: FakeClock) -> None:
    dispatcher = RecordingDispatcher()
    spec = JobSpec(
        name="bounded",
        schedule=parse_schedule("* * * * *", end_at=at("2026-12-02T12:04:00")),
        target=HTTP,
    )
    job = make_service(store, clock, dispatcher).create("alice", spec)

    Planner(store, dispatcher, clock).plan(job.shard, at("2026-12-02T12:03:00"))

    assert run_times(store, job) == [at(f"2026-12-02T12:0{m}:00") for m in (1, 2, 3, 4)]
    stored = store.get_job(job.job_id)
    assert stored is not None and stored.next_fire_at is None and stored.due_key is None
