"""The sweeper under faults and backlogs (issue 11): one bad run or shard does not stop the sweep, shards
take turns and share the time budget, and re-sends go out in batches."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from tests.fakes import RecordingDispatcher, RecordingMetrics
from tests.services.test_executing import FIRE, NoDeadLetters
from tests.services.test_sweeper_oldest_overdue import an_open_run
from tickwork.domain.clock import FakeClock
from tickwork.domain.models import Job, Run, RunState
from tickwork.services.sweeping import Sweeper, SweeperConfig

NOW = FIRE + timedelta(hours=1)
SHARDS = 4


class Backlog:
    """Open runs per shard in memory; faults where a test puts them. Each write takes `write_seconds` of
    the clock (DynamoDB's latency), so budgets can be exercised."""

    def __init__(self, clock: FakeClock, runs_per_shard: dict[int, int], write_seconds: float = 0.0) -> None:
        self.clock = clock
        self.write_seconds = write_seconds
        self.by_shard = {
            shard: [
                an_open_run(f"job_{shard}_{n}", RunState.PLANNED, NOW - timedelta(minutes=10), shard=shard)
                for n in range(count)
            ]
            for shard, count in runs_per_shard.items()
        }
        self.poison: set[str] = set()
        self.broken_shards: set[int] = set()
        self.writes: list[Run] = []

    def open_runs(self, shard: int, through: datetime) -> Iterator[Run]:
        if shard in self.broken_shards:
            raise KeyError(f"index page of shard {shard} is unreadable")
        yield from self.by_shard.get(shard, [])

    def transition_run(self, expected: Run, updated: Run) -> None:
        if expected.run_id in self.poison:
            raise ValueError(f"cannot encode {expected.run_id}")
        self.clock.advance(self.write_seconds)
        self.writes.append(updated)

    def get_job(self, job_id: str) -> Job | None:
        return None

    def get_run(self, job_id: str, scheduled_for: datetime) -> Run | None:
        return None


def sweeper(
    store: Backlog, dispatcher: RecordingDispatcher, metrics: RecordingMetrics, **config: object
) -> Sweeper:
    return Sweeper(
        store,  # type: ignore[arg-type]
        dispatcher,
        NoDeadLetters(),
        store.clock,
        metrics,
        SHARDS,
        config=SweeperConfig(**config),  # type: ignore[arg-type]
    )


def test_one_run_that_fails_unexpectedly_is_counted_and_the_rest_are_repaired(clock: FakeClock) -> None:
    store = Backlog(clock, {0: 3, 1: 3, 2: 3, 3: 3})
    poison = store.by_shard[1][1]
    store.poison.add(poison.run_id)
    dispatcher, metrics = RecordingDispatcher(), RecordingMetrics()

    report = sweeper(store, dispatcher, metrics).sweep(NOW)

    assert report.failures == 1 and "ValueError" in report.errors[0] and poison.run_id in report.errors[0]
    assert report.redispatched == 11
    assert sorted(m.run_id for m in dispatcher.messages) == sorted(
        r.run_id for runs in store.by_shard.values() for r in runs if r.run_id != poison.run_id
    )
    assert metrics.counts["SweepFailures"] == 1


def test_a_shard_that_fails_is_counted_and_the_other_shards_are_swept(clock: FakeClock) -> None:
    store = Backlog(clock, {0: 2, 1: 2, 2: 2, 3: 2})
    store.broken_shards.add(2)
    dispatcher, metrics = RecordingDispatcher(), RecordingMetrics()

    report = sweeper(store, dispatcher, metrics).sweep(NOW)

    assert report.failures == 1 and "shard 2" in report.errors[0]
    assert {m.job_id.split("_")[1] for m in dispatcher.messages} == {"0", "1", "3"}
    assert report.redispatched == 6


def test_repairs_are_sent_in_batches(clock: FakeClock) -> None:
    store = Backlog(clock, {0: 25})
    dispatcher = RecordingDispatcher()

    report = sweeper(store, dispatcher, RecordingMetrics(), repair_batch=10).sweep(NOW)

    assert report.redispatched == 25 and dispatcher.batches == [10, 10, 5]


def test_a_backlog_in_one_shard_does_not_starve_the_others(clock: FakeClock) -> None:
    """Shard 0 holds 1,000 overdue runs, the others 5 each; every write takes 0.1 s and the sweep has 20 s.
    Serially, shard 0 alone would eat the whole budget (100 s of writes)."""
    store = Backlog(clock, {0: 1000, 1: 5, 2: 5, 3: 5}, write_seconds=0.1)
    dispatcher = RecordingDispatcher()
    first_minute = datetime(2026, 12, 2, 13, 0, tzinfo=NOW.tzinfo)  # minute 0 mod 4: starts at shard 0
    started = clock.now()

    report = sweeper(store, dispatcher, RecordingMetrics(), budget=timedelta(seconds=20)).sweep(first_minute)

    assert report.first_shard == 0 and report.shards_cut_short == [0]
    per_shard = {s: sum(1 for m in dispatcher.messages if m.job_id.startswith(f"job_{s}_")) for s in range(4)}
    assert per_shard[1] == per_shard[2] == per_shard[3] == 5  # every small shard fully repaired
    assert 40 <= per_shard[0] <= 60  # shard 0 got its share (20 s / 4 shards at 0.1 s a write)
    assert clock.now() - started <= timedelta(seconds=20.5)


def test_the_start_shard_moves_every_minute(clock: FakeClock) -> None:
    store = Backlog(clock, {})
    starts = [
        sweeper(store, RecordingDispatcher(), RecordingMetrics())
        .sweep(NOW + timedelta(minutes=m))
        .first_shard
        for m in range(SHARDS)
    ]
    assert sorted(starts) == list(range(SHARDS))
