"""Tickers racing on one shard, against MiniStack and SQLite (moto lets racing transactions both win)."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import ANCHOR, RacingEngine
from tests.fakes import RecordingDispatcher
from tickwork.domain.clock import FakeClock
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Target, Trigger, split_run_id
from tickwork.domain.schedule import parse_schedule
from tickwork.services.jobs import JobService, JobServiceConfig
from tickwork.services.planning import Planner, PlannerConfig, TickReport
from tickwork.services.requests import RunRequests

SHARDS = 2
JOBS = 40
TICKERS = 4


@pytest.mark.parametrize("together", [False, True], ids=["commit_by_commit", "rounds_together"])
def test_tickers_racing_on_one_shard_create_each_run_exactly_once(
    racing_engine: RacingEngine, together: bool
) -> None:
    clock = FakeClock(ANCHOR)
    seeding = JobService(
        racing_engine.store(),
        RecordingDispatcher(),
        clock,
        JobServiceConfig(shard_count=SHARDS),
    )
    spec = JobSpec(
        name="race",
        schedule=parse_schedule("*/30 * * * * *"),
        target=Target("http", {"url": "http://127.0.0.1/"}),
    )
    jobs = [seeding.create("alice", spec) for _ in range(JOBS)]
    shard = 0
    on_shard = [j for j in jobs if j.shard == shard]
    assert len(on_shard) >= 5

    now = datetime(2026, 12, 2, 12, 3, 0, tzinfo=UTC)  # 3 minutes on: each job has 5 fires to plan
    dispatchers = [RecordingDispatcher() for _ in range(TICKERS)]
    barrier = threading.Barrier(TICKERS)

    def tick(index: int) -> TickReport:
        # Each ticker is its own instance with its own client, as separate Lambda invocations would be.
        config = PlannerConfig(commit_together=together)
        planner = Planner(racing_engine.store(), dispatchers[index], FakeClock(now), config)
        barrier.wait()
        return planner.plan(shard, now)

    with ThreadPoolExecutor(TICKERS) as pool:
        reports = list(pool.map(tick, range(TICKERS)))
    planned = [r.runs_planned for r in reports]
    print("runs planned per ticker:", planned, "lost races:", [r.conflicts for r in reports])

    store = racing_engine.store()
    for job in on_shard:
        times = [r.scheduled_for for r in store.list_runs(job.job_id, newest_first=False)]
        assert len(times) == len(set(times)), f"{job.job_id} has a duplicate run"
        assert len(times) == 4 + 5  # 4 planned by the create (..12:02:30), 5 by the tick (12:03:00..12:05:00)
    dispatched = Counter(r.run_id for d in dispatchers for r in d.sent)
    assert sum(planned) == len(on_shard) * 5 == len(dispatched)  # each run committed by one ticker
    # Every ticker sends before it commits, so a ticker that loses the race has sent too: a run has one
    # message per ticker that tried it, all for attempt 0, and its claim lets exactly one call the target.
    assert max(dispatched.values()) <= TICKERS
    assert all(r.attempt == 0 and r.queue_carried for d in dispatchers for r in d.sent)


def test_runs_now_racing_the_ticker_on_the_same_second_are_their_own_runs(
    racing_engine: RacingEngine,
) -> None:
    """Runs now asked at the very second a fire is planned: each is a run of its own (keyed off the slot),
    the slot's run is planned exactly once, and the job's next fire moves only with the ticker."""
    clock = FakeClock(ANCHOR)
    seeding = JobService(racing_engine.store(), RecordingDispatcher(), clock, JobServiceConfig(shard_count=1))
    spec = JobSpec(
        name="race", schedule=parse_schedule("0 * * * *"), target=Target("http", {"url": "http://127.0.0.1/"})
    )
    job = seeding.create("alice", spec)
    fire = datetime(2026, 12, 2, 13, 0, 0, tzinfo=UTC)
    assert job.next_fire_at == fire
    requesters = 3
    barrier = threading.Barrier(requesters + 1)

    def run_now(_: int) -> str:
        requests = RunRequests(racing_engine.store(), RecordingDispatcher(), FakeClock(fire))
        barrier.wait()
        return requests.run_now("alice", job.job_id).runs[0].run_id

    def tick() -> TickReport:
        planner = Planner(racing_engine.store(), RecordingDispatcher(), FakeClock(fire))
        barrier.wait()
        return planner.plan(job.shard, fire)

    with ThreadPoolExecutor(requesters + 1) as pool:
        ticked = pool.submit(tick)
        manual = list(pool.map(run_now, range(requesters)))
    report = ticked.result()
    store = racing_engine.store()
    runs = store.list_runs(job.job_id, newest_first=False)
    slot = [r for r in runs if r.scheduled_for == fire]
    assert len(slot) == 1 and slot[0].trigger is Trigger.SCHEDULE
    assert sorted(manual) == sorted(r.run_id for r in runs if r.trigger is Trigger.MANUAL)
    assert len(set(manual)) == requesters and slot[0].run_id not in manual
    assert all(split_run_id(m)[1] - fire < timedelta(milliseconds=1) for m in manual), "at the fire's second"
    assert report.runs_planned == 1
    after = store.get_job(job.job_id)
    assert after is not None and after.next_fire_at == datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
    assert after.run_requests == requesters
