"""The reconciliation audit (issue 30) on the in-memory store, single-threaded: what it repairs (a lost
message, a lost run record, a stranded job), and what it must leave alone (anything still progressing)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from random import Random
from typing import Any

import pytest

from tests.fakes import RecordingDispatcher, RecordingMetrics, ScriptedInvoker
from tests.services.test_executing import NoDeadLetters
from tests.services.test_queue_carried import a_job
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.audit import AUDIT_GRACE, RECOVERED_REASON, AuditedJob, audit_segment
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.errors import TransientStoreError
from tickwork.domain.jobs import JobPatch
from tickwork.domain.models import Job, MissedFirePolicy, Policies, RunState, Trigger
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.timekeys import format_instant
from tickwork.services.auditing import AuditConfig, Auditor, AuditReport
from tickwork.services.executing import Executor, ExecutorConfig
from tickwork.services.jobs import JobService, JobServiceConfig
from tickwork.services.planning import Planner
from tickwork.services.sweeping import Sweeper

FIRE = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)
TICK = FIRE - timedelta(seconds=110)
ONE_SEGMENT = AuditConfig(segments=1)


@pytest.fixture(autouse=True, params=[False, True], ids=["runs-job-by-job", "runs-read-together"])
def runs_read(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test twice: each job's runs read on their own (DynamoDB), and a page's in one read (SQLite)."""
    monkeypatch.setattr(
        sys.modules[__name__], "ONE_SEGMENT", replace(ONE_SEGMENT, read_together=request.param)
    )


@pytest.fixture(autouse=True, params=[False, True], ids=["jobs-read-whole", "jobs-read-in-part"])
def jobs_read_in_part(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Every test twice more: the page's jobs read whole (DynamoDB, memory), and only their audited
    attributes (SQLite), so that a repair reads the job whole first."""
    if request.param:
        read_whole = MemoryStore.audit_jobs

        def read_in_part(
            self: MemoryStore, segment: int, segments: int, *, after: str | None, limit: int
        ) -> tuple[list[AuditedJob], str | None]:
            page, position = read_whole(self, segment, segments, after=after, limit=limit)
            return [replace(audited, whole=None) for audited in page], position

        monkeypatch.setattr(MemoryStore, "audit_jobs", read_in_part)
    return bool(request.param)


@pytest.fixture
def dispatcher() -> RecordingDispatcher:
    return RecordingDispatcher()


def auditor(store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher) -> Auditor:
    metrics = RecordingMetrics()
    sweeper = Sweeper(store, dispatcher, NoDeadLetters(), clock, metrics, shard_count=2, rng=Random(3))
    return Auditor(store, sweeper, dispatcher, clock, metrics, ONE_SEGMENT)


def audit_at(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher, now: datetime
) -> AuditReport:
    clock.set(now)
    return auditor(store, clock, dispatcher).audit(now, budget=timedelta(seconds=30), segment=0)


def planned_job(store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher, **spec: Any) -> Job:
    """A */5 job whose 12:05 fire the ticker planned (queue-carried), its message since lost."""
    clock.set(TICK - timedelta(minutes=1))  # created just before the tick that plans its first fire
    job = a_job(store, clock, dispatcher, **spec)
    Planner(store, dispatcher, clock).plan(job.shard, TICK)
    run = store.get_run(job.job_id, FIRE)
    assert run is not None and run.queue_carried and run.state is RunState.PLANNED
    dispatcher.sent.clear()  # the messages the ticker sent are gone (a purged queue)
    return job


def test_a_planned_run_whose_message_is_gone_is_sent_again_after_the_grace_and_then_backs_off(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    job = planned_job(store, clock, dispatcher)

    early = audit_at(store, clock, dispatcher, FIRE + AUDIT_GRACE - timedelta(seconds=1))
    assert early.repairs == 0 and dispatcher.messages == []  # a slow queue is not a lost one

    due = audit_at(store, clock, dispatcher, FIRE + AUDIT_GRACE)
    assert due.runs_resent == 1 and due.repairs == 1
    assert [m.run_id for m in dispatcher.messages] == [f"{job.job_id}:{FIRE:%Y%m%dT%H%M%SZ}"]
    assert dispatcher.messages[0].attempt == 0  # the same attempt: a duplicate is fenced at the claim

    again = audit_at(store, clock, dispatcher, FIRE + AUDIT_GRACE + timedelta(minutes=5))
    assert again.repairs == 0 and len(dispatcher.messages) == 1  # backs off like the sweeper's re-sends


def test_a_resent_message_runs_the_target_once_even_when_the_original_turns_up(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    job = planned_job(store, clock, dispatcher)
    audit_at(store, clock, dispatcher, FIRE + AUDIT_GRACE)
    run = store.get_run(job.job_id, FIRE)
    assert run is not None
    invoker = ScriptedInvoker()
    executor = Executor(
        store, invoker, dispatcher, clock, RecordingMetrics(), ExecutorConfig(worker_id="w"), Random(7)
    )

    executor.execute(dispatcher.messages[0])  # the audit's re-send
    executor.execute(RunMessage.for_run(replace(run, redispatched_at=None)))  # the original, late

    stored = store.get_run(job.job_id, FIRE)
    assert stored is not None and stored.state is RunState.SUCCEEDED
    assert len(invoker.calls) == 1


def test_a_run_that_is_progressing_is_left_alone(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    job = planned_job(store, clock, dispatcher)
    run = store.get_run(job.job_id, FIRE)
    assert run is not None
    # Claimed, its lease (a heartbeat's, say) running far beyond the grace.
    running = replace(
        run, state=RunState.RUNNING, attempt=1, lease_owner="w", lease_expires_at=FIRE + timedelta(hours=2)
    )
    store.transition_run(run, running)

    report = audit_at(store, clock, dispatcher, FIRE + timedelta(hours=1))

    assert report.repairs == 0 and dispatcher.messages == []
    assert store.get_run(job.job_id, FIRE) == running


def test_a_running_attempt_silent_past_its_lease_and_the_grace_is_ended_by_its_retry_policy(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    job = planned_job(store, clock, dispatcher)
    run = store.get_run(job.job_id, FIRE)
    assert run is not None
    lease = FIRE + timedelta(seconds=90)
    store.transition_run(
        run, replace(run, state=RunState.RUNNING, attempt=1, lease_owner="w", lease_expires_at=lease)
    )

    assert audit_at(store, clock, dispatcher, lease + AUDIT_GRACE - timedelta(seconds=1)).repairs == 0
    report = audit_at(store, clock, dispatcher, lease + AUDIT_GRACE)

    ended = store.get_run(job.job_id, FIRE)
    assert report.attempts_ended == 1 and ended is not None
    assert ended.state is RunState.RETRY_WAIT  # the job's default retry policy: another attempt
    assert [m.attempt for m in dispatcher.messages] == [1]


def test_fires_whose_run_records_were_lost_are_recorded_again_and_sent(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    job = planned_job(store, clock, dispatcher)
    for minutes in (5, 10):  # two more ticks: the 12:10 and 12:15 fires
        Planner(store, dispatcher, clock).plan(job.shard, TICK + timedelta(minutes=minutes))
    with store.tables.lock:  # the runs table restored from before them
        for fire in (FIRE, FIRE + timedelta(minutes=5)):
            del store.tables.runs[job.job_id][format_instant(fire)]
    dispatcher.sent.clear()

    report = audit_at(store, clock, dispatcher, FIRE + timedelta(minutes=8))

    assert report.runs_recovered == 2
    recovered = [store.get_run(job.job_id, FIRE), store.get_run(job.job_id, FIRE + timedelta(minutes=5))]
    assert all(r is not None and r.reason == RECOVERED_REASON for r in recovered)
    assert [(r.state, r.trigger) for r in recovered if r is not None] == [
        (RunState.PLANNED, Trigger.CATCH_UP)
    ] * 2  # run late, by the job's missed-fire policy (run_all)
    assert sorted(r.run_id for r in dispatcher.sent) == sorted(r.run_id for r in recovered if r is not None)
    assert audit_at(store, clock, dispatcher, FIRE + timedelta(minutes=9)).runs_recovered == 0  # once


def test_a_lost_record_under_a_skip_policy_is_recorded_missed_not_silently_absent(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    job = planned_job(store, clock, dispatcher, policies=Policies(missed_fire=MissedFirePolicy.SKIP))
    with store.tables.lock:
        del store.tables.runs[job.job_id][format_instant(FIRE)]

    report = audit_at(store, clock, dispatcher, FIRE + timedelta(minutes=3))

    run = store.get_run(job.job_id, FIRE)
    assert report.runs_recovered == 1 and run is not None and run.state is RunState.MISSED
    assert dispatcher.sent == []


def test_a_job_filed_behind_every_ticks_read_is_filed_again_and_planned(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    job = planned_job(store, clock, dispatcher)
    planner = Planner(store, dispatcher, clock)
    with store.tables.lock:  # its due entry points at a minute long gone (lag, or a write from outside)
        item = store.tables.jobs[job.job_id]
        item["due_key"] = f"{job.shard}#2026-12-02T11:00"
    for minutes in range(5, 40, 1):
        planner.plan(job.shard, TICK + timedelta(minutes=minutes))
    stuck = store.get_job(job.job_id)
    assert stuck is not None and stuck.next_fire_at == FIRE + timedelta(minutes=5)  # never planned again

    now = TICK + timedelta(minutes=40)
    report = audit_at(store, clock, dispatcher, now)
    assert report.jobs_refiled == 1
    planner.plan(job.shard, now + timedelta(minutes=1))

    after = store.get_job(job.job_id)
    assert after is not None and after.next_fire_at is not None and after.next_fire_at > now
    owed = [FIRE + timedelta(minutes=m) for m in range(5, 40, 5)]
    assert all(store.get_run(job.job_id, fire) is not None for fire in owed)  # every fire has its record


def test_a_healthy_instance_gets_no_repairs(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    job = planned_job(store, clock, dispatcher)
    run = store.get_run(job.job_id, FIRE)
    assert run is not None
    store.transition_run(run, replace(run, state=RunState.SUCCEEDED, finished_at=FIRE))

    report = audit_at(store, clock, dispatcher, FIRE + timedelta(minutes=20))

    assert (report.jobs, report.repairs, report.failures) == (1, 0, 0)


def test_the_segments_cover_every_job_exactly_once(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    clock.set(TICK)
    jobs = [a_job(store, clock, dispatcher, name=f"j{i}") for i in range(40)]
    seen: list[str] = []
    for segment in range(4):
        after = None
        while True:
            page, after = store.audit_jobs(segment, 4, after=after, limit=3)
            assert all(audit_segment(a.job_id, 4) == segment for a in page)
            assert all(a.filed_under == a.due_key for a in page)
            seen.extend(a.job_id for a in page)
            if after is None:
                break
    assert sorted(seen) == sorted(j.job_id for j in jobs)


def test_a_stuck_run_is_repaired_even_after_its_job_was_edited(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    job = planned_job(store, clock, dispatcher)
    clock.set(FIRE + timedelta(minutes=1))
    JobService(store, dispatcher, clock, JobServiceConfig(shard_count=2)).update(
        "alice", job.job_id, JobPatch(name="renamed"), if_match=job.version
    )

    report = audit_at(store, clock, dispatcher, FIRE + AUDIT_GRACE)

    assert report.runs_resent == 1 and report.runs_recovered == 0


def test_a_job_created_in_a_fires_own_millisecond_owes_no_record_of_it(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    created_at = FIRE + timedelta(microseconds=400)  # stored to the millisecond: 12:05:00.000
    clock.set(created_at)
    job = a_job(store, clock, dispatcher, schedule=parse_schedule("* * * * *"))
    assert job.next_fire_at is not None and job.next_fire_at > FIRE  # 12:05 was not its fire

    report = audit_at(store, clock, dispatcher, FIRE + timedelta(minutes=5))

    assert report.runs_recovered == 0 and store.get_run(job.job_id, FIRE) is None


def test_a_job_whose_due_entry_was_removed_is_filed_again_before_its_next_fire(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    job = planned_job(store, clock, dispatcher)  # next fire 12:10, the 12:05 fire planned
    with store.tables.lock:
        store.tables.jobs[job.job_id].pop("due_key")

    report = audit_at(store, clock, dispatcher, FIRE)
    assert report.jobs_refiled == 1
    Planner(store, dispatcher, clock).plan(job.shard, FIRE + timedelta(minutes=4))

    run = store.get_run(job.job_id, FIRE + timedelta(minutes=5))
    assert run is not None and run.trigger is Trigger.SCHEDULE  # planned ahead, on time


def test_a_segment_the_store_cannot_read_is_counted_and_left_for_the_next_pass(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    planned_job(store, clock, dispatcher)

    class Unreadable(MemoryStore):
        def audit_jobs(self, segment: int, segments: int, *, after: str | None, limit: int) -> Any:
            raise KeyError("schedule")  # an item the code cannot read

    broken = Unreadable(store.tables)
    metrics = RecordingMetrics()
    sweeper = Sweeper(broken, dispatcher, NoDeadLetters(), clock, metrics, shard_count=2, rng=Random(3))
    report = Auditor(broken, sweeper, dispatcher, clock, metrics, ONE_SEGMENT).audit(
        FIRE, budget=timedelta(seconds=30), segment=0
    )

    assert (report.failures, report.cut_short, report.jobs) == (1, True, 0)
    assert metrics.counts["AuditFailures"] == 1 and metrics.counts["AuditCutShort"] == 1


@pytest.mark.parametrize("error", [TransientStoreError("busy"), ValueError("a run the code cannot read")])
def test_a_page_whose_runs_cannot_be_read_together_is_read_job_by_job(
    store: MemoryStore,
    clock: FakeClock,
    dispatcher: RecordingDispatcher,
    error: Exception,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One bad read of the page's runs does not cut the segment short: each job reads its own, so the
    trouble stays with its job (as when read job by job)."""
    job = planned_job(store, clock, dispatcher)

    def broken(firsts: Any, last: datetime) -> dict[str, Any]:
        raise error

    monkeypatch.setattr(store, "recorded_runs_of_jobs", broken)
    monkeypatch.setattr(sys.modules[__name__], "ONE_SEGMENT", replace(ONE_SEGMENT, read_together=True))

    report = audit_at(store, clock, dispatcher, FIRE + AUDIT_GRACE)

    assert report.runs_resent == 1 and not report.cut_short and report.failures == 0
    assert [m.job_id for m in dispatcher.messages] == [job.job_id]
    assert "reading them job by job" in caplog.text


def test_a_jobs_findings_fold_into_the_segments_every_count_and_error() -> None:
    from dataclasses import fields

    counts = [f.name for f in fields(AuditReport) if f.type == "int" and f.name != "segment"]
    segment = AuditReport(segment=3, **{name: 1 for name in counts}, errors=["a"])
    found = AuditReport(**{name: position + 2 for position, name in enumerate(counts)}, errors=["b"])

    segment.add(found)

    assert {name: getattr(segment, name) for name in counts} == {
        name: position + 3 for position, name in enumerate(counts)
    }
    assert (segment.segment, segment.errors, segment.cut_short) == (3, ["a", "b"], False)


@contextmanager
def _after_each_read(action: Callable[[], None]) -> Iterator[None]:
    """`action` runs right after each page of jobs the audit reads (a write landing meanwhile)."""
    read = MemoryStore.audit_jobs

    def then_act(
        self: MemoryStore, segment: int, segments: int, *, after: str | None, limit: int
    ) -> tuple[list[AuditedJob], str | None]:
        page = read(self, segment, segments, after=after, limit=limit)
        action()
        return page

    MemoryStore.audit_jobs = then_act  # type: ignore[method-assign]
    try:
        yield
    finally:
        MemoryStore.audit_jobs = read  # type: ignore[method-assign]


def test_a_stranded_job_edited_between_its_read_and_its_refiling_is_left_for_the_next_pass(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    """Not what the audit found: nothing is written from it (a lost race). Read whole, the write's condition
    refuses it; read in part, the job read whole for the repair is not the one found stranded."""
    job = planned_job(store, clock, dispatcher)
    with store.tables.lock:
        store.tables.jobs[job.job_id].pop("due_key")  # stranded: filed under no minute

    def edit() -> None:
        with store.tables.lock:
            store.tables.jobs[job.job_id]["version"] = job.version + 1

    with _after_each_read(edit):
        report = audit_at(store, clock, dispatcher, FIRE)

    assert (report.jobs_refiled, report.lost_races) == (0, 1)
    with store.tables.lock:
        assert "due_key" not in store.tables.jobs[job.job_id]  # nothing written from what it was
        assert store.tables.jobs[job.job_id]["version"] == job.version + 1


def test_lost_records_are_recorded_again_though_a_tick_moved_the_job_since_its_read(
    store: MemoryStore, clock: FakeClock, dispatcher: RecordingDispatcher
) -> None:
    """A tick moves the job's next fire, not its version, and may well land between the audit's read and
    its repair (both start on the minute): the fires owed before it are recorded all the same."""
    job = planned_job(store, clock, dispatcher)
    planner = Planner(store, dispatcher, clock)
    for minutes in (5, 10):
        planner.plan(job.shard, TICK + timedelta(minutes=minutes))
    with store.tables.lock:  # the runs table restored from before the 12:05 and 12:10 fires
        for fire in (FIRE, FIRE + timedelta(minutes=5)):
            del store.tables.runs[job.job_id][format_instant(fire)]
    moved_from = store.get_job(job.job_id)
    assert moved_from is not None

    with _after_each_read(lambda: planner.plan(job.shard, TICK + timedelta(minutes=15))):
        report = audit_at(store, clock, dispatcher, FIRE + timedelta(minutes=8))

    moved = store.get_job(job.job_id)
    assert moved is not None and moved.next_fire_at != moved_from.next_fire_at  # the tick landed
    assert (report.runs_recovered, report.lost_races) == (2, 0)
    for fire in (FIRE, FIRE + timedelta(minutes=5)):
        run = store.get_run(job.job_id, fire)
        assert run is not None and run.reason == RECOVERED_REASON
