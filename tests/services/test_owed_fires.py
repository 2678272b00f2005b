"""Fires a job owes (it was behind, or paused) survive edits and resumes, whatever the index lag."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from tests.fakes import FaultyPlanStore, RecordingDispatcher
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.jobs import JobPatch, JobSpec, SchedulePatch
from tickwork.domain.models import Job, Target
from tickwork.domain.schedule import parse_schedule
from tickwork.services.jobs import Author, JobService, JobServiceConfig
from tickwork.services.planning import Planner


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def minutely(store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher) -> tuple[JobService, Job]:
    service = JobService(store, dispatcher, clock, JobServiceConfig(shard_count=2))
    spec = JobSpec(
        name="m", schedule=parse_schedule("* * * * *"), target=Target("http", {"url": "http://h/"})
    )
    return service, service.create("alice", spec)


def slots(store: MemoryStore, job: Job) -> list[datetime]:
    return [r.scheduled_for for r in store.list_runs(job.job_id, newest_first=False)]


def test_a_long_pause_resumed_just_before_a_tick_it_cannot_see_is_planned_in_full(
    store: MemoryStore, clock: FakeClock
) -> None:
    dispatcher = RecordingDispatcher()
    service, job = minutely(store, clock, dispatcher)  # created 12:00:30
    planner = Planner(store, dispatcher, clock)
    planner.plan(job.shard, at("2026-12-02T12:00:40"))
    clock.set(at("2026-12-02T12:01:00"))
    service.pause("alice", job.job_id, by=Author("alice", "a test"))

    clock.set(at("2026-12-02T15:00:59.900"))
    service.resume("alice", job.job_id)  # 180 paused fires: more than the resume's own transaction holds
    lagging = FaultyPlanStore(store)
    lagging.hidden_from_index.add(job.job_id)  # the first tick after the resume does not see it yet
    Planner(lagging, dispatcher, clock).plan(job.shard, at("2026-12-02T15:01:00.100"))
    for minute in range(2, 6):
        planner.plan(job.shard, at(f"2026-12-02T15:0{minute}:00"))

    times = slots(store, job)
    assert times[0] == at("2026-12-02T12:01:00") and times[-1] == at("2026-12-02T15:07:00")
    assert all(b - a == timedelta(minutes=1) for a, b in pairwise(times))  # every slot, none twice


def test_editing_a_job_that_is_behind_keeps_the_fires_it_owes(store: MemoryStore, clock: FakeClock) -> None:
    dispatcher = RecordingDispatcher()
    service, job = minutely(store, clock, dispatcher)
    planner = Planner(store, dispatcher, clock)
    planner.plan(job.shard, at("2026-12-02T12:00:40"))  # 12:01, 12:02 planned; then the ticker is down
    clock.set(at("2026-12-02T12:10:30"))

    service.update("alice", job.job_id, JobPatch(schedule=SchedulePatch(jitter_seconds=5)))
    planner.plan(job.shard, at("2026-12-02T12:11:00"))

    times = slots(store, job)
    assert times[:3] == [at("2026-12-02T12:01:00"), at("2026-12-02T12:02:00"), at("2026-12-02T12:03:00")]
    assert all(b - a == timedelta(minutes=1) for a, b in pairwise(times))
    assert times[-1] == at("2026-12-02T12:13:00")
