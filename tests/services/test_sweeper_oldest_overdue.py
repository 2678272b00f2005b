"""The sweeper reports its own safety net's health: the age of the oldest overdue open run (frozen clock)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.fakes import RecordingDispatcher, RecordingMetrics
from tests.services.test_executing import FIRE, NoDeadLetters, World
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.execution import claimed
from tickwork.domain.models import Job, Run, RunState, Trigger
from tickwork.services.sweeping import Sweeper


@pytest.fixture
def world(store: MemoryStore, clock: FakeClock) -> World:
    return World(store, clock).sweeper_carried()  # the sweeper's own work list


def test_nothing_overdue_reports_zero(world: World) -> None:
    world.clock.set(FIRE + timedelta(seconds=30))  # the message may still be on its way (grace: 90 s)

    report = world.sweeper().sweep()

    assert (report.redispatched, report.oldest_overdue_seconds) == (0, 0.0)


def test_a_lost_message_ages_from_its_due_time_and_the_re_send_does_not_reset_it(world: World) -> None:
    assert world.run().due_at == FIRE  # no jitter on this job
    world.clock.set(FIRE + timedelta(minutes=10))

    first = world.sweeper().sweep()
    world.clock.set(FIRE + timedelta(minutes=20))  # the re-send pushed the next check to +20 min
    second = world.sweeper().sweep()

    assert (first.redispatched, first.oldest_overdue_seconds) == (1, 600.0)
    assert (second.redispatched, second.oldest_overdue_seconds) == (1, 1200.0)


def test_a_silent_worker_ages_from_its_lease_expiry(world: World) -> None:
    run = world.run()
    running = claimed(run, world.job, worker="gone", now=FIRE)
    world.store.transition_run(run, running)
    assert running.lease_expires_at is not None
    world.clock.set(running.lease_expires_at + timedelta(seconds=45))

    report = world.sweeper().sweep()

    assert report.expired_leases == 1 and report.oldest_overdue_seconds == 45.0


class OpenRuns:
    """A run store that only lists open runs per shard and accepts the sweeper's writes."""

    def __init__(self, by_shard: dict[int, list[Run]]) -> None:
        self.by_shard = by_shard
        self.writes: list[Run] = []

    def open_runs(self, shard: int, through: datetime) -> Iterator[Run]:
        yield from self.by_shard.get(shard, [])

    def transition_run(self, expected: Run, updated: Run) -> None:
        self.writes.append(updated)

    def get_job(self, job_id: str) -> Job | None:
        return None

    def get_run(self, job_id: str, scheduled_for: datetime) -> Run | None:
        return None


def an_open_run(job_id: str, state: RunState, due: datetime, **changes: Any) -> Run:
    run = Run(
        job_id=job_id,
        scheduled_for=due,
        due_at=due,
        state=state,
        trigger=Trigger.SCHEDULE,
        job_version=1,
        planned_at=due - timedelta(minutes=2),
        expires_at=due + timedelta(days=30),
        shard=0,
    )
    return replace(run, **changes)


def test_the_oldest_overdue_run_of_all_shards_is_reported(clock: FakeClock) -> None:
    now = FIRE + timedelta(hours=1)
    store = OpenRuns(
        {
            0: [an_open_run("job_a", RunState.PLANNED, now - timedelta(minutes=3))],
            # A retry counts from its retry time, not from its long-past fire time.
            1: [
                an_open_run(
                    "job_b", RunState.RETRY_WAIT, FIRE, attempt=1, retry_at=now - timedelta(minutes=2)
                ),
                an_open_run("job_c", RunState.QUEUED, now - timedelta(minutes=7, seconds=30)),
            ],
        }
    )
    sweeper = Sweeper(store, RecordingDispatcher(), NoDeadLetters(), clock, RecordingMetrics(), 2)  # type: ignore[arg-type]

    report = sweeper.sweep(now)

    assert report.redispatched == 3 and report.oldest_overdue_seconds == 450.0
