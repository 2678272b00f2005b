"""Exclusion calendars on both engines (issue 33, part 2): a holiday on the day New York springs forward is
previewed (23 hourly fires marked) and run (those 23 recorded `excluded`, the target never called for them,
every fire around them run); an edit to the calendar after a run was planned counts at its claim, both
ways; a run on request is never excluded; a deleted calendar excludes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from random import Random
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.conftest import NAMES
from tests.fakes import RecordingDispatcher, RecordingMetrics, ScriptedInvoker
from tickwork.adapters.dynamodb.calendars import DynamoCalendars
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.adapters.sqlite.calendars import SqliteCalendars
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.domain.calendars import Calendar, ExcludedDate
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.errors import NotFoundError, ValidationError, VersionMismatchError
from tickwork.domain.jobs import JobPatch, JobSpec
from tickwork.domain.models import Job, OverlapPolicy, Policies, Run, RunState
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.targets import validate_target
from tickwork.services.calendars import CalendarService
from tickwork.services.executing import Executor, ExecutorConfig
from tickwork.services.jobs import Author, JobService, JobServiceConfig
from tickwork.services.planning import Planner
from tickwork.services.requests import RunRequests

NEW_YORK = ZoneInfo("America/New_York")
HOLIDAY = date(2027, 3, 14)  # clocks go from 02:00 EST to 03:00 EDT: the local day is 23 hours long
# 22:00 local the evening before, to 02:00 local the morning after.
EVENING_BEFORE = datetime(2027, 3, 13, 22, tzinfo=NEW_YORK).astimezone(UTC)
MORNING_AFTER = datetime(2027, 3, 15, 2, tzinfo=NEW_YORK).astimezone(UTC)
TARGET = validate_target("http", {"url": "http://127.0.0.1:9/hook", "method": "POST"})


@dataclass
class Engine:
    store: Any
    calendars: Any
    clock: FakeClock
    dispatcher: RecordingDispatcher
    invoker: ScriptedInvoker

    def jobs(self) -> JobService:
        config = JobServiceConfig(shard_count=2)
        return JobService(self.store, self.dispatcher, self.clock, config, calendars=self.calendars)

    def executor(self) -> Executor:
        config = ExecutorConfig(worker_id="w")
        return Executor(
            self.store,
            self.invoker,
            self.dispatcher,
            self.clock,
            RecordingMetrics(),
            config,
            Random(1),
            calendars=self.calendars,
        )

    def run(self, job: Job, at: datetime) -> Run:
        found = self.store.get_run(job.job_id, at)
        assert found is not None, f"no run at {at}"
        return found

    def claim(self, job: Job, at: datetime) -> Run:
        """The run of `at` claimed and carried out at its fire time."""
        self.clock.set(at)
        self.executor().execute(RunMessage.for_run(self.run(job, at)))
        return self.run(job, at)


@pytest.fixture(params=["sqlite", "moto"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    clock, dispatcher = FakeClock(EVENING_BEFORE - timedelta(minutes=30)), RecordingDispatcher()
    if request.param == "sqlite":
        db = Database(tmp_path / "tickwork.db").open()
        yield Engine(SqliteStore(db), SqliteCalendars(db), clock, dispatcher, ScriptedInvoker())
        db.close()
        return
    client, tables = request.getfixturevalue("dynamodb"), TableNames.from_resources(NAMES)
    yield Engine(
        DynamoStore(client, tables), DynamoCalendars(client, tables), clock, dispatcher, ScriptedInvoker()
    )


def holidays(*days: date) -> Calendar:
    return Calendar(
        owner="alice",
        name="us-holidays",
        timezone="America/New_York",
        dates=tuple(ExcludedDate(day, "holiday") for day in days),
    )


def hourly(engine: Engine, owner: str = "alice", calendars: tuple[str, ...] = ("us-holidays",)) -> Job:
    schedule = parse_schedule("0 * * * *", "America/New_York")
    spec = JobSpec(name="hourly", schedule=schedule, target=TARGET, calendars=calendars)
    return engine.jobs().create(owner, spec)


def test_a_holiday_across_the_spring_forward_is_previewed_and_run(engine: Engine) -> None:
    CalendarService(engine.calendars, engine.clock).put(holidays(HOLIDAY))
    job = hourly(engine)

    preview = engine.jobs().preview("alice", job.job_id, 30, after=EVENING_BEFORE - timedelta(seconds=1))
    fires = [f.at for f in preview.fires if f.at <= MORNING_AFTER]
    excluded = [at for at in fires if at in preview.excluded]
    assert len(fires) == 28 and len(excluded) == 23  # 22:00 and 23:00, the holiday's 23 hours, 00:00-02:00
    assert {at.astimezone(NEW_YORK).date() for at in excluded} == {HOLIDAY}
    assert all(
        "us-holidays: holiday, 2027-03-14 (America/New_York)" in preview.excluded[at] for at in excluded
    )

    planner = Planner(engine.store, engine.dispatcher, engine.clock)
    for at in fires:
        engine.clock.set(at - timedelta(seconds=30))
        planner.plan(job.shard)
        engine.claim(job, at)

    states = {at: engine.run(job, at).state for at in fires}
    assert [at for at, state in states.items() if state is RunState.EXCLUDED] == excluded
    assert all(state is RunState.SUCCEEDED for at, state in states.items() if at not in excluded)
    assert sorted(invocation.scheduled_for for _, invocation in engine.invoker.calls) == sorted(
        set(fires) - set(excluded)
    )
    first = engine.run(job, excluded[0])
    assert first.reason is not None and "holiday" in first.reason and first.finished_at == excluded[0]


def test_an_edit_after_planning_counts_at_the_claim_both_ways(engine: Engine) -> None:
    service = CalendarService(engine.calendars, engine.clock)
    written = service.put(holidays(date(2027, 12, 25)))
    job = hourly(engine)
    planner = Planner(engine.store, engine.dispatcher, engine.clock)
    first, second = EVENING_BEFORE, EVENING_BEFORE + timedelta(hours=1)
    engine.clock.set(first - timedelta(seconds=30))
    planner.plan(job.shard)
    assert engine.run(job, first).state is RunState.PLANNED
    # Planned, then its day becomes a holiday: the claim excludes it.
    added = service.put(replace(holidays(date(2027, 3, 13)), version=0), if_match=written.calendar.version)
    assert engine.claim(job, first).state is RunState.EXCLUDED
    engine.clock.set(second - timedelta(seconds=30))
    planner.plan(job.shard)
    assert engine.run(job, second).state is RunState.PLANNED
    # Planned on a holiday, then the holiday is taken back: the claim runs it.
    service.put(holidays(date(2027, 12, 25)), if_match=added.calendar.version)
    assert engine.claim(job, second).state is RunState.SUCCEEDED
    assert [invocation.scheduled_for for _, invocation in engine.invoker.calls] == [second]


def test_a_run_asked_for_is_not_excluded_and_a_deleted_calendar_excludes_nothing(engine: Engine) -> None:
    service = CalendarService(engine.calendars, engine.clock)
    service.put(holidays(date(2027, 3, 13)))
    job = hourly(engine)
    engine.clock.set(EVENING_BEFORE - timedelta(minutes=10))  # 21:50 on the holiday: run now all the same
    [asked] = RunRequests(engine.store, engine.dispatcher, engine.clock).run_now("alice", job.job_id).runs
    engine.executor().execute(RunMessage.for_run(asked))
    assert engine.run(job, asked.scheduled_for).state is RunState.SUCCEEDED
    engine.clock.set(EVENING_BEFORE - timedelta(seconds=30))
    Planner(engine.store, engine.dispatcher, engine.clock).plan(job.shard)
    service.delete("alice", "us-holidays")
    assert engine.claim(job, EVENING_BEFORE).state is RunState.SUCCEEDED
    with pytest.raises(NotFoundError):
        service.delete("alice", "us-holidays")


def test_a_job_names_only_calendars_its_owner_has(engine: Engine) -> None:
    CalendarService(engine.calendars, engine.clock).put(holidays(HOLIDAY))
    with pytest.raises(ValidationError) as refused:
        hourly(engine, owner="mallory")  # alice's calendar is not mallory's
    assert refused.value.field == "calendars[0]"
    job = hourly(engine, calendars=())
    with pytest.raises(ValidationError):
        engine.jobs().update("alice", job.job_id, JobPatch(calendars=("no-such",)))
    edited = engine.jobs().update("alice", job.job_id, JobPatch(calendars=("us-holidays",)))
    assert edited.calendars == ("us-holidays",)
    engine.jobs().update("alice", job.job_id, JobPatch(calendars=()))
    assert engine.store.get_job(job.job_id).calendars == ()  # an emptied list is removed from the record


def test_a_calendar_write_is_fenced_by_its_version(engine: Engine) -> None:
    service = CalendarService(engine.calendars, engine.clock)
    first = service.put(holidays(HOLIDAY))
    assert first.created and first.calendar.version == 1
    again = service.put(holidays(HOLIDAY, date(2027, 12, 25)), if_match=1)
    assert not again.created and again.calendar.version == 2
    with pytest.raises(VersionMismatchError):
        service.put(holidays(HOLIDAY), if_match=1)
    with pytest.raises(VersionMismatchError):  # a write that lost the race after its read
        engine.calendars.put_calendar(replace(holidays(HOLIDAY), version=2))
    assert [c.name for c in service.list("alice")] == ["us-holidays"] and service.list("bob") == []
    assert service.get("alice", "us-holidays").dates[1].day == date(2027, 12, 25)


def test_an_excluded_fire_of_an_overlap_queue_job_takes_no_slot(engine: Engine) -> None:
    """The run before the holiday is still running when the holiday's first fire comes: that fire is
    excluded without waiting behind it, so the fire after the holiday is not skipped for it."""
    CalendarService(engine.calendars, engine.clock).put(holidays(HOLIDAY))
    schedule = parse_schedule("0 * * * *", "America/New_York")
    spec = JobSpec(name="queued", schedule=schedule, target=TARGET, calendars=("us-holidays",),
                   policies=Policies(overlap=OverlapPolicy.QUEUE))  # fmt: skip
    job = engine.jobs().create("alice", spec)
    planner = Planner(engine.store, engine.dispatcher, engine.clock)
    before = datetime(2027, 3, 13, 23, tzinfo=NEW_YORK).astimezone(UTC)  # the hour before the holiday
    for tick in (EVENING_BEFORE, before):  # the ticker's passes: 22:00 is planned, then 23:00
        engine.clock.set(tick - timedelta(seconds=30))
        planner.plan(job.shard)
    engine.clock.set(before)
    executor = engine.executor()
    engine.invoker.during_call = lambda: claim_during(engine, executor, job, before + timedelta(hours=1))
    executor.execute(RunMessage.for_run(engine.run(job, before)))
    assert engine.run(job, before).state is RunState.SUCCEEDED
    excluded = engine.run(job, before + timedelta(hours=1))
    assert excluded.state is RunState.EXCLUDED and excluded.attempt == 0  # unclaimed: no slot taken


def claim_during(engine: Engine, executor: Executor, job: Job, fire: datetime) -> None:
    """While the first run holds the job's slot: plan the next fire and deliver it."""
    engine.clock.set(fire - timedelta(seconds=30))
    Planner(engine.store, engine.dispatcher, engine.clock).plan(job.shard)
    engine.clock.set(fire)
    executor.execute(RunMessage.for_run(engine.run(job, fire)))


def test_a_retry_its_owner_asks_for_is_not_excluded(engine: Engine) -> None:
    service = CalendarService(engine.calendars, engine.clock)
    job = hourly(engine, calendars=())
    engine.clock.set(EVENING_BEFORE - timedelta(seconds=30))
    Planner(engine.store, engine.dispatcher, engine.clock).plan(job.shard)
    engine.jobs().pause("alice", job.job_id, by=Author("alice", "quiet"))
    assert engine.claim(job, EVENING_BEFORE).state is RunState.CANCELLED  # paused: cancelled at the claim
    engine.jobs().resume("alice", job.job_id)
    service.put(holidays(date(2027, 3, 13)))
    engine.jobs().update("alice", job.job_id, JobPatch(calendars=("us-holidays",)))
    [asked] = (
        RunRequests(engine.store, engine.dispatcher, engine.clock)
        .retry("alice", job.job_id, engine.run(job, EVENING_BEFORE).run_id)
        .runs
    )
    engine.executor().execute(RunMessage.for_run(asked))
    assert engine.run(job, EVENING_BEFORE).state is RunState.SUCCEEDED  # asked for: never excluded
