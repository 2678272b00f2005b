"""A round's commits in one call to the store (PlannerConfig.commit_together, the SQLite engine's): the same
runs as one commit per job, each job's refusal handled as its own, and nothing lost when the call fails."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FaultyPlanStore, RecordingDispatcher, RecordingMetrics
from tests.services.test_planner_isolation import TICK, one_shard_jobs
from tests.services.test_planning import HTTP, at, run_times
from tickwork.adapters.memory.store import MemoryStore
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.composition import Components
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import COMMIT_WINDOW
from tickwork.domain.errors import PlanConflictError, TransientStoreError
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Job, Run, RunState, Trigger
from tickwork.domain.planning import JobPlan
from tickwork.domain.schedule import parse_schedule
from tickwork.services.jobs import JobService, JobServiceConfig
from tickwork.services.planning import DISPATCH_BATCH, PLAN_SHARD_THREADS, Planner, PlannerConfig
from tickwork.settings import Settings

TOGETHER = PlannerConfig(commit_together=True)
FOUR_PAST, FIVE_PAST = at("2026-12-02T12:04:00"), at("2026-12-02T12:05:00")


class Together(FaultyPlanStore):
    """The store as the ticker sees it, recording each round that went together. It can fail a round as a
    whole, answer one job's plan as throttled (not written), have the job edited just before its round
    commits, or hold a job whose record cannot be written (either way)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.rounds: list[int] = []
        self.fail_rounds = 0
        self.throttled: set[str] = set()
        self.edited: set[str] = set()
        self.poison: str | None = None

    def commit_plans(self, plans: Sequence[JobPlan]) -> list[Exception | None]:
        self.rounds.append(len(plans))
        ids = [plan.job.job_id for plan in plans]
        if self.fail_rounds or self.poison in ids:
            self.fail_rounds = max(0, self.fail_rounds - 1)
            raise RuntimeError("the round's transaction could not be written")
        for plan in plans:
            if plan.job.job_id in self.edited:  # another writer, a moment before
                self.edited.discard(plan.job.job_id)
                job = plan.job
                self.inner.replace_job(job, replace(job, name="edited", version=job.version + 1), ())  # type: ignore[attr-defined]
        throttled = {i for i in ids if i in self.throttled}
        self.throttled -= throttled
        written = iter(self.inner.commit_plans([p for p in plans if p.job.job_id not in throttled]))
        return [
            TransientStoreError("ThrottlingException: injected") if i in throttled else next(written)
            for i in ids
        ]

    def commit_plan(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        if job.job_id == self.poison:
            raise RuntimeError(f"cannot encode job {job.job_id}")
        super().commit_plan(job, runs, next_fire_at)


@pytest.fixture(params=["memory", "sqlite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return MemoryStore()
    return SqliteStore(Database(tmp_path / "tickwork.db").open())


def jobs_due(engine: Any, clock: FakeClock) -> list[Job]:
    return one_shard_jobs(engine, clock, ["4 12 * * *"] * 12 + ["5 12 * * *"] * 13)


def planned_once(engine: Any, jobs: Sequence[Job]) -> bool:
    return all(run_times(engine, job) == [FOUR_PAST if n < 12 else FIVE_PAST] for n, job in enumerate(jobs))


def test_rounds_commit_together_and_plan_every_fire_once(engine: Any, clock: FakeClock) -> None:
    jobs = jobs_due(engine, clock)
    together = Together(engine)

    report = Planner(together, RecordingDispatcher(), clock, TOGETHER).plan(0, TICK)

    assert report.complete and report.commits == report.runs_planned == len(jobs)
    assert sum(together.rounds) == len(jobs) and max(together.rounds) == TOGETHER.round_messages
    assert together.commits == 0  # not one commit on its own
    assert planned_once(engine, jobs)


def test_a_job_edited_just_before_its_round_is_planned_again_and_the_rest_of_the_round_commits(
    engine: Any, clock: FakeClock
) -> None:
    jobs = jobs_due(engine, clock)
    together = Together(engine)
    together.edited = {jobs[3].job_id}

    report = Planner(together, RecordingDispatcher(), clock, TOGETHER).plan(0, TICK)

    assert report.conflicts == 1 and report.complete and report.runs_planned == len(jobs)
    assert planned_once(engine, jobs)
    edited = engine.get_job(jobs[3].job_id)
    assert edited is not None and edited.name == "edited" and edited.next_fire_at is not None


def test_a_plan_answered_throttled_is_committed_again_on_its_own(engine: Any, clock: FakeClock) -> None:
    jobs = jobs_due(engine, clock)
    together = Together(engine)
    together.throttled = {jobs[0].job_id}

    report = Planner(together, RecordingDispatcher(), clock, TOGETHER).plan(0, TICK)

    assert report.deferred_jobs == [] and report.complete and together.commits == 1
    assert planned_once(engine, jobs)


def test_a_round_that_fails_whole_is_committed_one_by_one(engine: Any, clock: FakeClock) -> None:
    jobs = jobs_due(engine, clock)
    together = Together(engine)
    together.fail_rounds = 1

    report = Planner(together, RecordingDispatcher(), clock, TOGETHER).plan(0, TICK)

    assert report.complete and report.failed_jobs == [] and report.runs_planned == len(jobs)
    assert together.commits == together.rounds[0]  # the failed round's jobs, each on its own
    assert planned_once(engine, jobs)


def test_a_poison_job_fails_its_round_whole_and_is_isolated_when_the_round_goes_one_by_one(
    engine: Any, clock: FakeClock
) -> None:
    jobs = jobs_due(engine, clock)
    poison = jobs[14]
    together = Together(engine)
    together.poison = poison.job_id

    report = Planner(together, RecordingDispatcher(), clock, TOGETHER).plan(0, TICK)

    assert report.failed_jobs == [poison.job_id] and "RuntimeError" in report.errors[0]
    assert run_times(engine, poison) == [] and not report.complete
    assert planned_once(engine, [job for job in jobs if job is not poison][:12])
    assert all(run_times(engine, job) == [FIVE_PAST] for job in jobs[12:] if job is not poison)


def test_a_round_fills_one_batch_per_queue_on_either_engine(tmp_path: Path, clock: FakeClock) -> None:
    """The SQLite engine's round was one batch (10 messages) whatever its queues: four sends and four commits
    for what one round of each now carries."""
    queues = ("q1", "q2", "q3", "q4")
    settings = Settings(engine="sqlite", database_path=str(tmp_path / "t.db"), dispatch_queue_urls=queues)
    for engine in ("sqlite", "dynamodb"):
        config = (
            Components(replace(settings, engine=engine), clock, lambda _: None, RecordingMetrics())
            .planner()
            ._config
        )
        assert config.round_messages == DISPATCH_BATCH * len(queues)
        assert config.commit_together is (engine == "sqlite")


def test_the_sqlite_engine_plans_its_shards_in_turn_on_one_thread(tmp_path: Path, clock: FakeClock) -> None:
    """One writer to the file: shards planned side by side would only contend for it (and for the GIL).
    The composition root says so in the config, and a tick that does not name its threads follows it."""
    settings = Settings(engine="sqlite", database_path=str(tmp_path / "t.db"), dispatch_queue_urls=("q",))
    assert (
        Components(settings, clock, lambda _: None, RecordingMetrics()).planner()._config.shard_threads == 1
    )
    dynamo = Components(replace(settings, engine="dynamodb"), clock, lambda _: None, RecordingMetrics())
    assert dynamo.planner()._config.shard_threads == PLAN_SHARD_THREADS > 1

    store = SqliteStore(Database(tmp_path / "plans.db").open())
    service = JobService(store, RecordingDispatcher(), clock, JobServiceConfig(shard_count=4))
    for n in range(8):
        service.create("alice", JobSpec(name=f"j{n}", schedule=parse_schedule("5 12 * * *"), target=HTTP))
    threads: set[int] = set()
    query_due = store.query_due

    def noted(*args: Any, **kwargs: Any) -> Any:
        threads.add(threading.get_ident())
        return query_due(*args, **kwargs)

    store.query_due = noted  # type: ignore[method-assign]
    planner = Planner(store, RecordingDispatcher(), clock, replace(TOGETHER, shard_threads=1))
    tick = planner.plan_shards(range(4), TICK)
    assert len(threads) == 1 and len(tick.reports) == 4
    assert sum(r.runs_planned for r in tick.reports) == 8
    with pytest.raises(ValueError, match="at least 1"):
        PlannerConfig(shard_threads=0)


def test_commits_go_together_or_on_threads_not_both() -> None:
    with pytest.raises(ValueError, match="together or on threads"):
        PlannerConfig(commit_together=True, commit_threads=2)


class SlowSends(RecordingDispatcher):
    """Each send takes longer than the messages' commit window (a store or queue crawling)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock

    def dispatch(self, runs: Sequence[Run], now: datetime, *, commit_by: datetime | None = None) -> None:
        super().dispatch(runs, now, commit_by=commit_by)
        self.clock.advance(COMMIT_WINDOW.total_seconds() + 1)


def test_a_round_past_its_commit_window_is_deferred_whole_and_the_next_tick_plans_it(
    engine: Any, clock: FakeClock
) -> None:
    jobs = jobs_due(engine, clock)
    together = Together(engine)
    clock.set(TICK)

    late = Planner(together, SlowSends(clock), clock, TOGETHER).plan(0, TICK)

    assert late.runs_planned == 0 and not late.complete and together.rounds == []  # no empty transaction
    assert sorted(late.deferred_jobs) == sorted(job.job_id for job in jobs)
    held = engine.get_watermark(0)
    assert held is None or held < FOUR_PAST
    assert all(run_times(engine, job) == [] for job in jobs)

    again = Planner(together, RecordingDispatcher(), clock, TOGETHER).plan(0, TICK + timedelta(seconds=20))

    assert again.complete and again.runs_planned == len(jobs)
    assert planned_once(engine, jobs)


class BreaksAfterWriting(SqliteStore):
    """The SQLite store, raising `error` for one job after its plan's writes are done (as a failure late in
    the job's statements would)."""

    def __init__(self, db: Database, breaking: str, error: Exception) -> None:
        super().__init__(db)
        self.breaking = breaking
        self.error = error

    def _plan(self, connection: Any, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        super()._plan(connection, job, runs, next_fire_at)
        if job.job_id == self.breaking:
            raise self.error


def sqlite_round(
    tmp_path: Path, clock: FakeClock, error: Exception
) -> tuple[BreaksAfterWriting, list[JobPlan]]:
    db = Database(tmp_path / "tickwork.db").open()
    jobs = one_shard_jobs(SqliteStore(db), clock, ["4 12 * * *"] * 3)
    store = BreaksAfterWriting(db, jobs[1].job_id, error)
    plans = [
        JobPlan(
            job,
            (Run.for_fire(job, FOUR_PAST, now=TICK, trigger=Trigger.SCHEDULE, state=RunState.PLANNED),),
            FIVE_PAST,
        )
        for job in jobs
    ]
    return store, plans


def test_a_refusal_after_a_jobs_writes_undoes_that_jobs_writes_alone(
    tmp_path: Path, clock: FakeClock
) -> None:
    store, plans = sqlite_round(tmp_path, clock, PlanConflictError(run_exists=False, job_changed=True))

    outcomes = store.commit_plans(plans)

    assert outcomes[0] is None and outcomes[2] is None and isinstance(outcomes[1], PlanConflictError)
    for n, plan in enumerate(plans):
        stored = store.get_job(plan.job.job_id)
        assert stored is not None
        assert stored.next_fire_at == (FOUR_PAST if n == 1 else FIVE_PAST)
        assert run_times(store, plan.job) == ([] if n == 1 else [FOUR_PAST])


def test_an_error_in_the_middle_of_a_round_commits_none_of_it(tmp_path: Path, clock: FakeClock) -> None:
    store, plans = sqlite_round(tmp_path, clock, RuntimeError("disk full"))

    with pytest.raises(RuntimeError, match="disk full"):
        store.commit_plans(plans)

    for plan in plans:
        stored = store.get_job(plan.job.job_id)
        assert stored is not None and stored.next_fire_at == FOUR_PAST
        assert run_times(store, plan.job) == []
