"""`reread` below the due index's lag strands a job forever; settings refuse it at start (issue 11)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.fakes import FaultyPlanStore, RecordingDispatcher
from tests.services.test_planning import HTTP, at, run_times
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.jobs import JobSpec
from tickwork.domain.planning import INDEX_LAG_ALLOWANCE_SECONDS, MIN_REREAD_SECONDS
from tickwork.domain.schedule import parse_schedule
from tickwork.services.jobs import JobService, JobServiceConfig
from tickwork.services.planning import Planner, PlannerConfig
from tickwork.settings import Settings, SettingsError


def _job_the_index_shows_late(store: MemoryStore, clock: FakeClock, reread_seconds: int) -> list[datetime]:
    """A job firing every 10 s, created at 12:00:30, plans itself up to 12:02:30 and is filed under its next
    fire's minute, 12:02. The due index shows it only after the lag allowance, so the tick at 12:01:00 does
    not see it and moves the watermark to 12:03:00. Ticks every minute after that."""
    service = JobService(store, RecordingDispatcher(), clock, JobServiceConfig(shard_count=1))
    job = service.create("alice", JobSpec(name="j", schedule=parse_schedule("*/10 * * * * *"), target=HTTP))
    lagging = FaultyPlanStore(store)
    lagging.hidden_from_index.add(job.job_id)
    config = PlannerConfig(reread=timedelta(seconds=reread_seconds))
    planner = Planner(lagging, RecordingDispatcher(), clock, config)
    visible_at = clock.now() + timedelta(seconds=INDEX_LAG_ALLOWANCE_SECONDS)
    tick = at("2026-12-02T12:01:00")
    for _ in range(4):
        if tick > visible_at:
            lagging.hidden_from_index.clear()
        planner.plan(0, tick)
        tick += timedelta(minutes=1)
    return run_times(store, job)


def test_a_reread_below_the_floor_strands_a_job_the_index_showed_late(
    store: MemoryStore, clock: FakeClock
) -> None:
    # Only the runs the job planned itself, ever: every later tick starts reading after its bucket.
    assert _job_the_index_shows_late(store, clock, 0)[-1] == at("2026-12-02T12:02:30")


def test_the_floor_plans_it(store: MemoryStore, clock: FakeClock) -> None:
    planned = _job_the_index_shows_late(store, clock, MIN_REREAD_SECONDS)
    assert at("2026-12-02T12:02:40") in planned and planned[-1] >= at("2026-12-02T12:05:00")


@pytest.mark.parametrize("value", ["0", "30", str(MIN_REREAD_SECONDS - 1)])
def test_settings_refuse_a_reread_below_the_floor(value: str) -> None:
    with pytest.raises(SettingsError, match=f"TICKWORK_REREAD_SECONDS={value} is below {MIN_REREAD_SECONDS}"):
        Settings.from_env({"TICKWORK_REREAD_SECONDS": value})


def test_settings_accept_the_floor() -> None:
    settings = Settings.from_env({"TICKWORK_REREAD_SECONDS": str(MIN_REREAD_SECONDS)})
    assert settings.reread_seconds == MIN_REREAD_SECONDS
