"""Groups and bulk actions on both engines (issue 33, part 1): a pause by group, a resume by tags, one
request each, idempotent under its key and as an action (a job already as wanted is unchanged); a worker
that stops mid-way leaves the next one its cursor; a maintenance window resumes only what it paused; failed
runs retried over a window; the groups counted by state."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NAMES
from tests.fakes import RecordingDispatcher
from tickwork.adapters.dynamodb.bulk import DynamoBulkActions
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.adapters.sqlite.bulk import SqliteBulkActions
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.domain.bulk import BulkKind, BulkState, Selector
from tickwork.domain.clock import FakeClock
from tickwork.domain.errors import ConflictError, TransientStoreError, ValidationError
from tickwork.domain.jobs import JobPatch, JobSpec
from tickwork.domain.models import Job, JobState, Run, RunState, Trigger
from tickwork.domain.revisions import Action
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.targets import validate_target
from tickwork.services.bulk import BulkRequest, BulkService
from tickwork.services.jobs import Author, JobService, JobServiceConfig
from tickwork.services.requests import RunRequests

NOW = datetime(2026, 12, 5, 12, 0, 30, tzinfo=UTC)
FIRE = datetime(2026, 12, 5, 3, tzinfo=UTC)  # a fire of the fleet's schedule, 0 3 * * *
TARGET = validate_target("http", {"url": "http://127.0.0.1:9/hook", "method": "POST"})


@dataclass
class World:
    store: Any
    actions: Any
    revisions: Any
    clock: FakeClock

    def jobs(self) -> JobService:
        return JobService(self.store, RecordingDispatcher(), self.clock, JobServiceConfig(shard_count=2))

    def bulk(self, monotonic: Any = None) -> BulkService:
        requests = RunRequests(self.store, RecordingDispatcher(), self.clock)
        extra = {} if monotonic is None else {"monotonic": monotonic}
        return BulkService(self.actions, self.jobs(), self.store, self.store, requests, self.clock, **extra)

    def job(self, job_id: str) -> Job:
        found = self.store.get_job(job_id)
        assert found is not None
        return found


@pytest.fixture(params=["sqlite", "moto"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    clock = FakeClock(NOW)
    if request.param == "sqlite":
        from tickwork.adapters.sqlite.events import SqliteRevisions

        db = Database(tmp_path / "tickwork.db").open()
        yield World(SqliteStore(db), SqliteBulkActions(db), SqliteRevisions(db), clock)
        db.close()
        return
    from tickwork.adapters.dynamodb.events import DynamoRevisions

    client, tables = request.getfixturevalue("dynamodb"), TableNames.from_resources(NAMES)
    yield World(
        DynamoStore(client, tables), DynamoBulkActions(client, tables), DynamoRevisions(client, tables), clock
    )


def fleet(world: World, owner: str = "alice") -> dict[str, list[str]]:
    """20 jobs in group nightly (10 of them tagged team=a), 10 in the default group, 5 of bob's nightly."""
    jobs = world.jobs()
    made: dict[str, list[str]] = {"nightly": [], "team-a": [], "default": [], "bob": []}
    schedule = parse_schedule("0 3 * * *")
    for i in range(20):
        tags = {"team": "a"} if i % 2 else {"team": "b"}
        job = jobs.create(
            owner, JobSpec(name=f"n{i}", schedule=schedule, target=TARGET, tags=tags, group="nightly")
        )
        made["nightly"].append(job.job_id)
        if i % 2:
            made["team-a"].append(job.job_id)
    for i in range(10):
        made["default"].append(
            jobs.create(owner, JobSpec(name=f"d{i}", schedule=schedule, target=TARGET)).job_id
        )
    for i in range(5):
        spec = JobSpec(name=f"b{i}", schedule=schedule, target=TARGET, group="nightly")
        made["bob"].append(jobs.create("bob", spec).job_id)
    return made


def pause_nightly(note: str = "db migration") -> BulkRequest:
    return BulkRequest(BulkKind.PAUSE, Selector(group="nightly"), note)


def test_a_group_is_paused_in_one_request_and_again_changes_nothing(world: World) -> None:
    made = fleet(world)
    bulk = world.bulk()
    started = bulk.start("alice", "alice-sso", pause_nightly(), "key-1", lambda: "x")
    assert not started.replayed and started.action.state is BulkState.RUNNING
    assert bulk.work(started.action, "w1", budget_seconds=60) == 20
    done = bulk.get("alice", started.action.action_id)
    assert done.state is BulkState.DONE and done.finished_at is not None
    progress = done.progress
    assert (progress.scanned, progress.matched, progress.changed, progress.unchanged, progress.failed) == (
        30,
        20,
        20,
        0,
        0,
    )
    assert all(world.job(j).state is JobState.PAUSED for j in made["nightly"])
    assert all(
        world.job(j).state is JobState.ACTIVE for j in made["default"] + made["bob"]
    )  # bob's untouched
    [revision, *_] = world.revisions.job_revisions(made["nightly"][0], 5, None)[0]
    assert (revision.action, revision.actor, revision.note) == (Action.PAUSE, "alice-sso", "db migration")

    again = bulk.start("alice", "alice-sso", pause_nightly(), "key-1", lambda: "y")
    assert again.replayed and again.action.action_id == started.action.action_id
    with pytest.raises(ConflictError):
        bulk.start("alice", "alice-sso", pause_nightly("another reason"), "key-1", lambda: "z")
    second = bulk.start("alice", "alice-sso", pause_nightly(), "key-2", lambda: "w")
    bulk.work(second.action, "w1", budget_seconds=60)
    assert bulk.get("alice", second.action.action_id).progress.unchanged == 20  # idempotent as an action
    assert [a.action_id for a in bulk.list("alice")] == [
        second.action.action_id,
        started.action.action_id,
    ] or {a.action_id for a in bulk.list("alice")} == {second.action.action_id, started.action.action_id}
    assert bulk.list("bob") == []


def test_tags_select_across_groups_and_a_note_and_a_selector_are_required(world: World) -> None:
    made = fleet(world)
    bulk = world.bulk()
    bulk.work(bulk.start("alice", "alice", pause_nightly(), None, lambda: "p1").action, "w", 60)
    resume = BulkRequest(BulkKind.RESUME, Selector(tags={"team": "a"}), "team a is back")
    action = bulk.start("alice", "alice", resume, None, lambda: "r1").action
    bulk.work(action, "w", 60)
    assert bulk.get("alice", action.action_id).progress.changed == 10
    assert {j for j in made["nightly"] if world.job(j).state is JobState.ACTIVE} == set(made["team-a"])
    with pytest.raises(ValidationError) as no_note:
        bulk.start("alice", "alice", pause_nightly(note=" "), None, lambda: "n")
    assert no_note.value.field == "note"
    with pytest.raises(ValidationError) as everything:
        Selector()
    assert everything.value.field == "group"


def test_a_worker_that_stops_leaves_its_cursor_to_the_next(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = fleet(world)
    monkeypatch.setattr("tickwork.services.bulk.PAGE", 7)  # 30 jobs: 5 pages
    ticks = iter(float(n) for n in range(1000))  # each look at the clock is a second later
    bulk = world.bulk(monotonic=lambda: next(ticks))
    action = bulk.start("alice", "alice", pause_nightly(), None, lambda: "c1").action
    bulk.work(action, "w1", budget_seconds=1.5)  # one page, then out of time
    first = bulk.get("alice", action.action_id)
    assert first.state is BulkState.RUNNING and first.progress.scanned == 7 and first.lease_owner is None
    assert first.cursor is not None
    passes = 0
    while first.state is not BulkState.DONE:
        world.bulk().work_due("w2", budget_seconds=60)
        first, passes = bulk.get("alice", action.action_id), passes + 1
    assert passes == 1 and first.progress.scanned == 30  # the next worker went on from the cursor
    assert first.progress.changed == 20 and all(
        world.job(j).state is JobState.PAUSED for j in made["nightly"]
    )


def test_a_leased_action_is_left_to_its_worker(world: World) -> None:
    fleet(world)
    bulk = world.bulk()
    action = bulk.start("alice", "alice", pause_nightly(), None, lambda: "l1").action
    held = action.leased("w1", NOW + timedelta(minutes=5))
    world.actions.save_action(action, held)
    assert bulk.work(held, "w2", 60) == 0 and bulk.work_due("w2", 60) == 0
    world.clock.set(NOW + timedelta(minutes=6))  # its worker went silent: the lease ended
    assert bulk.work_due("w2", 60) == 20


def test_a_maintenance_window_resumes_only_what_it_paused(world: World) -> None:
    made = fleet(world)
    jobs = world.jobs()
    kept = made["nightly"][0]
    jobs.pause("alice", kept, by=Author("alice", "broken, fixing it"))  # paused before the window
    bulk = world.bulk()
    end = NOW + timedelta(hours=2)
    request = BulkRequest(BulkKind.PAUSE, Selector(group="nightly"), "datacenter move", resume_at=end)
    action = bulk.start("alice", "alice", request, "maint-1", lambda: "m").action
    bulk.work(action, "w", 60)
    paused = bulk.get("alice", action.action_id)
    assert paused.progress.changed == 19 and paused.progress.unchanged == 1 and paused.resume_action
    resume = bulk.get("alice", paused.resume_action)
    assert resume.state is BulkState.SCHEDULED and resume.not_before == end
    assert "until" in (world.job(made["nightly"][1]).paused_reason or "")
    assert bulk.work_due("w", 60) == 0  # not due yet
    world.clock.set(end + timedelta(seconds=1))
    bulk.work_due("w", 60)
    resumed = bulk.get("alice", resume.action_id)
    assert resumed.state is BulkState.DONE and resumed.progress.changed == 19
    assert world.job(kept).state is JobState.PAUSED  # paused for another reason: left paused
    assert all(world.job(j).state is JobState.ACTIVE for j in made["nightly"][1:])
    with pytest.raises(ValidationError) as too_far:
        bulk.start("alice", "alice", replace(request, resume_at=NOW + timedelta(days=31)), None, lambda: "f")
    assert too_far.value.field == "resume_at"


def test_failed_runs_are_retried_over_a_window(world: World) -> None:
    made = fleet(world)
    failed_at = NOW - timedelta(minutes=30)
    for job_id in made["nightly"][:4] + made["default"][:2]:
        job = world.job(job_id)
        fire = FIRE
        run = Run.for_fire(job, fire, now=fire, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
        world.store.restore_runs([run])
        running = replace(run, state=RunState.RUNNING, attempt=1, started_at=fire, lease_owner="w")
        world.store.transition_run(run, running)
        ended = replace(
            running, state=RunState.FAILED, finished_at=failed_at, reason="HTTP 500", lease_owner=None
        )
        world.store.transition_run(running, ended)
    bulk = world.bulk()
    request = BulkRequest(
        BulkKind.RETRY_FAILED, Selector(group="nightly"), "the database is back",
        runs_from=NOW - timedelta(hours=1), runs_to=NOW,
    )  # fmt: skip
    action = bulk.start("alice", "alice", request, None, lambda: "rt").action
    bulk.work(action, "w", 60)
    done = bulk.get("alice", action.action_id)
    assert (done.progress.matched, done.progress.changed, done.progress.failed) == (4, 4, 0), done.progress
    states = [world.store.get_run(j, FIRE).state for j in made["nightly"][:4]]
    assert states == [RunState.RETRY_WAIT] * 4
    others = [world.store.get_run(j, FIRE).state for j in made["default"][:2]]
    assert others == [RunState.FAILED] * 2  # not in the group


def test_groups_are_counted_by_state(world: World) -> None:
    made = fleet(world)
    world.jobs().pause("alice", made["nightly"][0], by=Author("alice", "x"))
    counts = world.jobs().groups("alice")
    assert counts.complete and counts.scanned == 30
    assert dict(counts.groups["nightly"]) == {JobState.ACTIVE: 19, JobState.PAUSED: 1}
    assert dict(counts.groups["default"]) == {JobState.ACTIVE: 10}
    assert list(world.jobs().groups("bob").groups) == ["nightly"]


def test_a_maintenance_window_holds_through_edits_long_notes_and_a_slow_pause(world: World) -> None:
    """What the review found: an end given below the millisecond, a note at its longest, a job moved to
    another group during the window, a resume due while its pause still runs: every job it paused is
    resumed, and no job is paused after its end."""
    made = fleet(world)
    bulk = world.bulk()
    end = NOW + timedelta(hours=2, microseconds=250)
    request = BulkRequest(BulkKind.PAUSE, Selector(group="nightly"), "x" * 1000, resume_at=end)
    action = bulk.start("alice", "alice", request, None, lambda: "long").action
    # The pause is still held by a worker (a slow page) when the window's end comes.
    held = action.leased("slow", NOW + timedelta(hours=3))
    world.actions.save_action(action, held)
    world.clock.set(NOW + timedelta(hours=2, seconds=1))
    assert bulk.work_due("w", 60) == 0  # the resume waits for its pause
    resume = bulk.get("alice", f"{action.action_id}_resume")
    assert resume.not_before > NOW + timedelta(hours=2, seconds=1) and resume.state is BulkState.SCHEDULED
    # Its worker gone, the pause is taken over after the window's end: it pauses nothing more.
    world.clock.set(NOW + timedelta(hours=3, seconds=1))
    bulk.work_due("w", 60)
    assert bulk.get("alice", action.action_id).state is BulkState.DONE
    assert all(world.job(j).state is JobState.ACTIVE for j in made["nightly"])

    # Again, worked at once this time; one job moves to another group during the window.
    request = replace(request, resume_at=NOW + timedelta(hours=5, microseconds=250))
    second = bulk.start("alice", "alice", request, None, lambda: "again").action
    bulk.work(second, "w", 60)
    moved = made["nightly"][3]
    world.jobs().update("alice", moved, JobPatch(group="weekly"))
    manual = world.jobs().resume("alice", made["nightly"][4], by=Author("alice", "needed it"))
    assert manual.cleared_auto_pause is None  # a maintenance pause is not Tickwork's own
    world.clock.set(NOW + timedelta(hours=5, seconds=1))
    bulk.work_due("w", 60)
    resumed = bulk.get("alice", f"{second.action_id}_resume")
    assert resumed.state is BulkState.DONE and resumed.progress.changed == 19, resumed.progress
    assert all(world.job(j).state is JobState.ACTIVE for j in made["nightly"])  # the moved one too


class FlakyJobs(JobService):
    """A job service whose first pause of one job is throttled past the store's retries."""

    flaky: str = ""

    def pause(self, owner: str, job_id: str, if_match: int | None = None, **kwargs: Any) -> Job:
        if job_id == self.flaky:
            self.flaky = ""
            raise TransientStoreError("throttled")
        return super().pause(owner, job_id, if_match, **kwargs)


def test_a_throttled_job_is_tried_again_not_failed(world: World) -> None:
    made = fleet(world)
    jobs = FlakyJobs(world.store, RecordingDispatcher(), world.clock, JobServiceConfig(shard_count=2))
    jobs.flaky = sorted(made["nightly"])[5]
    requests = RunRequests(world.store, RecordingDispatcher(), world.clock)
    bulk = BulkService(world.actions, jobs, world.store, world.store, requests, world.clock)
    action = bulk.start("alice", "alice", pause_nightly(), None, lambda: "t").action
    bulk.work(action, "w", 60)  # stops before the throttled job
    stopped = bulk.get("alice", action.action_id)
    assert stopped.state is BulkState.RUNNING and stopped.progress.failed == 0 and stopped.lease_owner is None
    bulk.work_due("w", 60)
    done = bulk.get("alice", action.action_id)
    assert done.state is BulkState.DONE and done.progress.changed == 20 and done.progress.failed == 0
    assert all(world.job(j).state is JobState.PAUSED for j in made["nightly"])
