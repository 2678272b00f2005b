"""One job must not stop its shard, and a long tick must not send its messages late (issue 11)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from tests.fakes import FaultyPlanStore, RecordingDispatcher
from tests.services.test_planning import HTTP, at, run_times
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import delay_seconds
from tickwork.domain.errors import TransientStoreError
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Job, Run
from tickwork.domain.schedule import parse_schedule
from tickwork.services.jobs import JobService, JobServiceConfig
from tickwork.services.planning import Planner

TICK = at("2026-12-02T12:03:10")  # plans fires up to 12:05:10 (lookahead 120 s)
MS = timedelta(milliseconds=1)


def one_shard_jobs(store: MemoryStore, clock: FakeClock, expressions: Sequence[str]) -> list[Job]:
    """Jobs that all land on shard 0, created before the tick (their fires are beyond the API's own plan)."""
    service = JobService(store, RecordingDispatcher(), clock, JobServiceConfig(shard_count=1))
    return [
        service.create("alice", JobSpec(name=f"job-{n}", schedule=parse_schedule(e), target=HTTP))
        for n, e in enumerate(expressions)
    ]


class PoisonStore(FaultyPlanStore):
    """A store whose commit of one chosen job raises what no one planned for (a bug, a record the code
    cannot write), and whose conflict-handling read can be made to throttle forever."""

    def __init__(self, inner: MemoryStore, poison: str | None = None) -> None:
        super().__init__(inner)
        self.poison = poison
        self.throttle_existing_reads = False

    def commit_plan(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        if job.job_id == self.poison:
            raise ValueError(f"cannot encode job {job.job_id}")
        super().commit_plan(job, runs, next_fire_at)

    def existing_run_times(self, job_id: str, scheduled_fors: Sequence[datetime]) -> set[datetime]:
        if self.throttle_existing_reads:
            raise TransientStoreError("ThrottlingException: injected")
        return super().existing_run_times(job_id, scheduled_fors)


def test_a_poison_job_is_recorded_and_skipped_while_the_rest_of_its_shard_is_planned(
    store: MemoryStore, clock: FakeClock
) -> None:
    early, poison, late = one_shard_jobs(store, clock, ["4 12 * * *", "5 12 * * *", "5 12 * * *"])
    faulty = PoisonStore(store, poison=poison.job_id)

    report = Planner(faulty, RecordingDispatcher(), clock).plan(0, TICK)

    assert report.failed_jobs == [poison.job_id] and "ValueError" in report.errors[0]
    assert run_times(store, early) == [at("2026-12-02T12:04:00")]
    assert run_times(store, late) == [at("2026-12-02T12:05:00")]
    assert run_times(store, poison) == []
    # Honest: the shard is planned through just before the poison job's fire, not through the horizon.
    assert not report.complete
    assert store.get_watermark(0) == at("2026-12-02T12:05:00") - MS

    faulty.poison = None  # fixed (or the job edited): the next tick reads its bucket again and plans it
    later = Planner(faulty, RecordingDispatcher(), clock).plan(0, TICK + timedelta(minutes=1))

    assert later.failed_jobs == [] and later.complete
    assert run_times(store, poison) == [at("2026-12-02T12:05:00")]
    assert store.get_watermark(0) == later.horizon


def test_throttling_inside_the_conflict_handler_defers_only_that_job(
    store: MemoryStore, clock: FakeClock
) -> None:
    conflicted, other = one_shard_jobs(store, clock, ["5 12 * * *", "5 12 * * *"])
    # The fire already has its run (as if the job's own write had created it), so planning it conflicts
    # and the handler reads which runs exist: that read throttles past every retry.
    first = Planner(store, RecordingDispatcher(), clock).plan(0, TICK)
    stale = store.get_job(conflicted.job_id)
    assert stale is not None
    faulty = PoisonStore(store)
    faulty.throttle_existing_reads = True
    rewound = stale.advanced_to(at("2026-12-02T12:05:00"))
    # Rewind the job's next fire so the same fire is planned again (the run exists: a run-only conflict).
    store.replace_job(stale, rewound, [])
    third = one_shard_jobs(store, clock, ["5 12 * * *"])[0]

    report = Planner(faulty, RecordingDispatcher(), clock).plan(0, TICK + timedelta(seconds=20))

    assert report.deferred_jobs == [conflicted.job_id] and report.failed_jobs == []
    assert run_times(store, third) == [at("2026-12-02T12:05:00")]
    assert run_times(store, other) == [at("2026-12-02T12:05:00")]
    assert store.get_watermark(0) == first.horizon  # held: not moved on to this tick's horizon
    assert not report.complete


class SlowCommits(FaultyPlanStore):
    """Each commit takes `seconds` of the clock, as DynamoDB's latency does under a burst."""

    def __init__(self, inner: MemoryStore, clock: FakeClock, seconds: float) -> None:
        super().__init__(inner)
        self._clock = clock
        self._seconds = seconds

    def commit_plan(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        self._clock.advance(self._seconds)
        super().commit_plan(job, runs, next_fire_at)


def test_each_message_delay_is_computed_when_it_is_sent(store: MemoryStore, clock: FakeClock) -> None:
    jobs = one_shard_jobs(store, clock, ["5 12 * * *"] * 40)
    clock.set(TICK)
    dispatcher = RecordingDispatcher()

    report = Planner(SlowCommits(store, clock, 0.5), dispatcher, clock).plan(0)

    assert report.runs_planned == len(jobs) and len(dispatcher.sends) == 4
    assert dispatcher.sends[-1][0] >= TICK + timedelta(seconds=15)  # the tick ran for 20 s
    for sent_at, runs in dispatcher.sends:
        assert sent_at <= clock.now()
        for run in runs:
            visible_at = sent_at + timedelta(seconds=delay_seconds(run.due_at, sent_at))
            # Visible within the second before it is due (the executor holds the remainder), never after.
            assert run.due_at - timedelta(seconds=1) < visible_at <= run.due_at


class BrokenShardStore(FaultyPlanStore):
    """The watermark of one shard cannot be read at all (not throttling: something nobody planned for)."""

    def __init__(self, inner: MemoryStore, broken_shard: int) -> None:
        super().__init__(inner)
        self._broken = broken_shard

    def get_watermark(self, shard: int) -> datetime | None:
        if shard == self._broken:
            raise KeyError(f"shard {shard}")
        return super().get_watermark(shard)


def test_a_shard_that_fails_is_counted_and_the_other_shards_are_planned(
    store: MemoryStore, clock: FakeClock
) -> None:
    service = JobService(store, RecordingDispatcher(), clock, JobServiceConfig(shard_count=4))
    jobs = [
        service.create("alice", JobSpec(name=f"j{n}", schedule=parse_schedule("5 12 * * *"), target=HTTP))
        for n in range(12)
    ]
    broken = jobs[0].shard
    planner = Planner(BrokenShardStore(store, broken), RecordingDispatcher(), clock)

    tick = planner.plan_shards(range(4), TICK, max_threads=1)  # one thread: the shards in order

    assert list(tick.failed_shards) == [broken] and "KeyError" in tick.failed_shards[broken]
    assert tick.counts()["PlanFailures"] == 1 and broken in tick.incomplete_shards
    for job in jobs:
        assert run_times(store, job) == ([] if job.shard == broken else [at("2026-12-02T12:05:00")])
