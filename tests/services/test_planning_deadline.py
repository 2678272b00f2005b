"""The ticker's deadline: no round starts after it; the jobs not planned by then stay behind the watermark
(never skipped) and the next tick plans them, each fire exactly once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.fakes import RecordingDispatcher
from tests.services.test_planning import at, create, run_times
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.models import Job, Run
from tickwork.services.planning import COMMIT_GRACE, Planner, PlannerConfig

JOBS = 60
COMMIT_SECONDS = 0.5  # each transaction takes this long on the fake clock: a slow region


class SlowCommits:
    """The store, each plan commit taking COMMIT_SECONDS of the clock's time."""

    def __init__(self, inner: MemoryStore, clock: FakeClock) -> None:
        self._inner = inner
        self._clock = clock
        self.commits = 0

    def commit_plan(self, job: Job, runs: Any, next_fire_at: Any) -> None:
        self._clock.advance(COMMIT_SECONDS)
        self.commits += 1
        self._inner.commit_plan(job, runs, next_fire_at)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_tick_out_of_time_leaves_the_rest_behind_the_watermark_and_the_next_tick_plans_it(
    store: MemoryStore, clock: FakeClock
) -> None:
    dispatcher = RecordingDispatcher()
    jobs = [create(store, clock, dispatcher, "*/5 * * * *") for _ in range(JOBS * 4)]
    shard = jobs[0].shard
    mine = [j for j in jobs if j.shard == shard]
    slow = SlowCommits(store, clock)
    tick = at("2026-12-02T12:03:10")
    clock.set(tick)

    first = Planner(slow, dispatcher, clock).plan(shard, tick, deadline=tick + timedelta(seconds=5))

    assert first.out_of_time and not first.complete
    assert 0 < first.commits < len(mine) and first.jobs_left_at_deadline == len(mine) - first.commits
    # No round started after the deadline: the last one began before it and finished its commits.
    assert clock.now() <= tick + timedelta(seconds=5) + timedelta(seconds=COMMIT_SECONDS * 25)
    watermark = store.get_watermark(shard)
    assert watermark is not None and watermark < at("2026-12-02T12:05:00")

    second = Planner(slow, dispatcher, clock).plan(shard, clock.now())

    assert second.complete and not second.out_of_time
    assert first.runs_planned + second.runs_planned == len(mine)
    assert all(run_times(store, job) == [at("2026-12-02T12:05:00")] for job in mine)
    sent: list[Run] = dispatcher.sent
    assert len({r.run_id for r in sent if r.job_id in {j.job_id for j in mine}}) == len(mine)


def test_without_a_deadline_or_before_it_a_tick_plans_everything(
    store: MemoryStore, clock: FakeClock
) -> None:
    dispatcher = RecordingDispatcher()
    jobs = [create(store, clock, dispatcher, "*/5 * * * *") for _ in range(40)]
    tick = at("2026-12-02T12:03:10")
    clock.set(tick)

    report = Planner(store, dispatcher, clock).plan(
        jobs[0].shard, tick, deadline=tick + timedelta(seconds=50)
    )

    assert report.complete and not report.out_of_time and report.jobs_left_at_deadline == 0
    assert report.runs_planned == sum(1 for j in jobs if j.shard == jobs[0].shard)


class OneJobBroken:
    """The store, refusing one job's commits with an error the planner does not expect."""

    def __init__(self, inner: MemoryStore, broken: str) -> None:
        self._inner = inner
        self._broken = broken

    def commit_plan(self, job: Job, runs: Any, next_fire_at: Any) -> None:
        if job.job_id == self._broken:
            raise RuntimeError("a record the code cannot write")
        self._inner.commit_plan(job, runs, next_fire_at)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_commits_on_threads_plan_what_commits_in_order_plan_and_isolate_a_broken_job(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Parallel commits inside a shard (issue 29): the same runs, counts and watermark as one commit after
    another; one job that cannot be committed is isolated on its thread as it is in order."""
    dispatcher = RecordingDispatcher()
    jobs = [create(store, clock, dispatcher, "*/5 * * * *") for _ in range(JOBS * 4)]
    shard = jobs[0].shard
    mine = [j for j in jobs if j.shard == shard]
    tick = at("2026-12-02T12:03:10")
    config = PlannerConfig(commit_threads=8, round_messages=40)

    report = Planner(OneJobBroken(store, mine[3].job_id), dispatcher, clock, config).plan(shard, tick)

    assert report.failed_jobs == [mine[3].job_id] and not report.complete
    assert report.runs_planned == report.commits == len(mine) - 1
    assert all(run_times(store, job) == [at("2026-12-02T12:05:00")] for job in mine if job is not mine[3])
    assert run_times(store, mine[3]) == []
    watermark = store.get_watermark(shard)
    assert watermark is not None and watermark < at("2026-12-02T12:05:00")  # held for the broken job's fire


def test_no_commit_starts_past_the_deadlines_grace_even_inside_a_started_round(
    store: MemoryStore, clock: FakeClock
) -> None:
    """A round of 40 commits started before the deadline, each taking 0.5 s: the commits that would start
    later than COMMIT_GRACE after the deadline are deferred (their messages went: they find no run), and
    their fires stay behind the watermark for the next tick."""
    dispatcher = RecordingDispatcher()
    jobs = [create(store, clock, dispatcher, "*/5 * * * *") for _ in range(JOBS * 4)]
    shard = jobs[0].shard
    mine = [j for j in jobs if j.shard == shard]
    slow = SlowCommits(store, clock)
    tick = at("2026-12-02T12:03:10")
    clock.set(tick)
    deadline = tick + timedelta(seconds=5)

    first = Planner(slow, dispatcher, clock, PlannerConfig(round_messages=40)).plan(shard, tick, deadline)

    assert clock.now() <= deadline + COMMIT_GRACE + timedelta(seconds=COMMIT_SECONDS)
    assert first.commits == (deadline + COMMIT_GRACE - tick) / timedelta(seconds=COMMIT_SECONDS)
    assert first.deferred_jobs and not first.complete

    second = Planner(slow, dispatcher, clock).plan(shard, clock.now())

    assert second.complete
    assert first.runs_planned + second.runs_planned == len(mine)
    assert all(run_times(store, job) == [at("2026-12-02T12:05:00")] for job in mine)
