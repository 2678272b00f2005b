"""The watcher (services/watching.py) over a real engine's change feed, with a frozen clock: each rule gives
its event from the runs table's changes, N failures pause the job, a deadline passes with no scan, a storm
folds into a digest, a failing channel is retried then recorded unhealthy, and a re-delivered change sends
nothing twice (the message id is the event's dedupe key on every attempt).

Each test runs on both engines: SQLite (the trigger on `runs` is its change feed) and DynamoDB on moto (the
runs table's stream, read as `tickwork local --engine emulator` reads it); the storm runs on SQLite only
(moto's calls make 1,000 jobs a minute). tests/handlers/test_watcher_stream.py feeds the Lambda handler
the stream's records."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.conftest import ANCHOR, NAMES
from tests.fakes import RecordingDispatcher, RecordingMetrics, ScriptedInvoker, failure
from tickwork.adapters.dynamodb.events import DynamoEventLog
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.adapters.dynamodb.stream import DynamoStreamFeed
from tickwork.adapters.metrics import InMemoryMetrics
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.events import SqliteEventLog, SqliteRunChangeFeed
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.domain.alert_rules import AlertRules, Channel, ChannelKind
from tickwork.domain.alerts import RunBefore, SeenChange, WatchedJob
from tickwork.domain.clock import FakeClock
from tickwork.domain.grants import GrantedTargets, TargetGrants
from tickwork.domain.jobs import JobPatch, JobSpec
from tickwork.domain.models import Job, JobState, Run, RunState, Target, Trigger
from tickwork.domain.notify import MAX_SEND_ATTEMPTS, Message
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.targets import TargetResult
from tickwork.resources import RUNS
from tickwork.services.jobs import Author, JobService, JobServiceConfig
from tickwork.services.ports import EventLog, RunChangeFeed
from tickwork.services.watching import Watcher

HOOK = Channel(ChannelKind.WEBHOOK, "https://hooks.example.com/tickwork")
SLACK = Channel(ChannelKind.SLACK, "https://hooks.slack.example.com/T000/B000")


@dataclass
class RecordingEmail:
    """The stack's e-mail channel as the services see it: subscriptions and sends, recorded."""

    subscribed: list[str] = field(default_factory=list)
    sent: list[tuple[str, str, str, str]] = field(default_factory=list)

    def subscribe(self, owner: str, address: str) -> None:
        self.subscribed.append(address)

    def send(self, address: str, subject: str, body: str, message_id: str) -> TargetResult:
        self.sent.append((address, subject, body, message_id))
        return TargetResult(True, False, "200", 1, "published")


@dataclass
class World:
    clock: FakeClock
    store: Any
    log: EventLog
    feed: RunChangeFeed
    jobs: JobService
    invoker: ScriptedInvoker
    watcher: Watcher
    job_metrics: InMemoryMetrics
    email: RecordingEmail

    def job(self, rules: AlertRules, owner: str = "alice", name: str = "nightly") -> Job:
        spec = JobSpec(
            name=name,
            schedule=parse_schedule("0 3 * * *", "UTC"),
            target=Target("http", {"url": "https://example.com/x", "method": "POST", "body": ""}),
            alerts=rules,
        )
        return self.jobs.create(owner, spec)

    def plan(self, job: Job, at_minutes: int) -> Run:
        """A run of the job `at_minutes` after the anchor, written as the ticker writes one."""
        fire = ANCHOR.replace(second=0) + timedelta(minutes=at_minutes)
        run = Run.for_fire(job, fire, now=self.clock.now(), trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
        self.store.restore_runs([run])
        return run

    def end(
        self, run: Run, state: RunState, *, late_s: float = 1.0, took_s: float = 2.0, reason: str = ""
    ) -> Run:
        started = run.due_at + timedelta(seconds=late_s)
        running = replace(
            run, state=RunState.RUNNING, attempt=1, started_at=started, start_delay_ms=int(late_s * 1000)
        )
        self.store.transition_run(run, running)
        ended = replace(
            running, state=state, finished_at=started + timedelta(seconds=took_s), reason=reason or None
        )
        self.store.transition_run(running, ended)
        if ended.finished_at is not None and ended.finished_at > self.clock.now():
            self.clock.set(ended.finished_at)  # the watcher sees a change after it happened
        return ended

    def watch(self) -> None:
        """Drain the change feed as the watcher role does, then one outbox pass."""
        changes = self.feed.take_changes(10_000)
        if changes:
            self.watcher.observe([change for _, change in changes])
            self.feed.forget_changes(changes[-1][0])
        self.watcher.deliver()

    def kinds(self, job_id: str) -> list[str]:
        return [str(e.kind) for e in self.log.job_events(job_id, 100, None)[0]]


@pytest.fixture(params=["sqlite", "moto"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, EventLog, RunChangeFeed]]:
    if request.param == "sqlite":
        db = Database(tmp_path / "tickwork.db").open()
        yield SqliteStore(db), SqliteEventLog(db), SqliteRunChangeFeed(db)
        db.close()
        return
    dynamodb = request.getfixturevalue("dynamodb")
    tables = TableNames.from_resources(NAMES)
    streams = boto3.client("dynamodbstreams", region_name="us-east-1")
    yield (
        DynamoStore(dynamodb, tables),
        DynamoEventLog(dynamodb, tables),
        DynamoStreamFeed(dynamodb, streams, NAMES.table(RUNS)),
    )


@pytest.fixture
def world(engine: tuple[Any, EventLog, RunChangeFeed]) -> World:
    store, log, feed = engine
    clock = FakeClock(ANCHOR)
    email = RecordingEmail()
    jobs = JobService(store, RecordingDispatcher(), clock, JobServiceConfig(shard_count=2), email=email)
    invoker = ScriptedInvoker()
    job_metrics = InMemoryMetrics()

    def pause(owner: str, job_id: str, reason: str, cause_at: datetime) -> bool:
        job = jobs.pause(owner, job_id, reason=reason, cause_at=cause_at)
        return job.state is JobState.PAUSED and job.paused_reason == reason

    watcher = Watcher(store, log, invoker, pause, clock, RecordingMetrics(), job_metrics, email=email)
    return World(clock, store, log, feed, jobs, invoker, watcher, job_metrics, email)


def test_a_failed_run_is_an_event_and_one_signed_message_per_channel(world: World) -> None:
    job = world.job(AlertRules(channels=(HOOK, SLACK)))
    world.end(world.plan(job, 1), RunState.FAILED, reason="HTTP 500")
    world.watch()
    assert world.kinds(job.job_id) == ["run_failed"]
    assert len(world.invoker.calls) == 2
    by_url = {target.config["url"]: (target, invocation) for target, invocation in world.invoker.calls}
    hook_target, hook_call = by_url[HOOK.address]
    body = json.loads(hook_target.config["body"])
    assert body["kind"] == "run_failed" and body["job_id"] == job.job_id and body["detail"] == "HTTP 500"
    # The idempotency key a receiver dedupes on is the event's, and the call is signed for the owner.
    assert hook_call.run_id == body["id"] and hook_call.owner == "alice"
    assert "HTTP 500" in json.loads(by_url[SLACK.address][0].config["body"])["text"]


def test_a_re_delivered_change_records_and_sends_nothing_twice(world: World) -> None:
    job = world.job(AlertRules(channels=(HOOK,)))
    world.end(world.plan(job, 1), RunState.FAILED, reason="boom")
    changes = [change for _, change in world.feed.take_changes(100)]
    world.watcher.observe(changes)
    world.watcher.observe(changes)  # the stream delivers the batch again
    world.watcher.deliver()
    assert world.kinds(job.job_id) == ["run_failed"]
    assert len(world.invoker.calls) == 1


def test_a_send_that_fails_is_retried_with_the_same_key_then_the_channel_is_unhealthy(world: World) -> None:
    job = world.job(AlertRules(channels=(HOOK,)))
    world.invoker.results = [failure(status="503")] * MAX_SEND_ATTEMPTS
    world.end(world.plan(job, 1), RunState.FAILED, reason="boom")
    world.watch()
    for _ in range(MAX_SEND_ATTEMPTS):
        world.clock.advance(20 * 60)
        world.watcher.deliver()
    keys = {invocation.run_id for _, invocation in world.invoker.calls}
    attempts = [invocation.attempt for _, invocation in world.invoker.calls]
    assert len(keys) == 1, "every retry carries the event's dedupe key"
    assert attempts == list(range(1, MAX_SEND_ATTEMPTS + 1))
    health = world.log.health("alice", (HOOK,))[HOOK.channel_id]
    assert not health.healthy and "503" in health.detail
    assert "channel_unhealthy" in world.kinds(job.job_id)
    # Recovered at its next success.
    world.end(world.plan(job, 2), RunState.FAILED, reason="again")
    world.clock.advance(3600)  # past the window: a message of its own
    world.watch()
    assert world.log.health("alice", (HOOK,))[HOOK.channel_id].healthy


def test_n_failures_in_a_row_pause_the_job_with_its_reason_and_resume_clears_it(world: World) -> None:
    job = world.job(AlertRules(failures_in_a_row=2, auto_pause_after=3, channels=(HOOK,)))
    world.end(world.plan(job, 1), RunState.SUCCEEDED)
    for minute in (2, 3):
        world.end(world.plan(job, minute), RunState.FAILED, reason=f"fail {minute}")
    world.watch()
    assert world.jobs.get("alice", job.job_id).state is JobState.ACTIVE
    assert "failures_in_a_row" in world.kinds(job.job_id)
    world.end(world.plan(job, 4), RunState.FAILED, reason="fail 4")
    world.watch()
    paused = world.jobs.get("alice", job.job_id)
    assert paused.state is JobState.PAUSED
    assert paused.paused_reason is not None and "3 failures in a row" in paused.paused_reason
    assert "auto_paused" in world.kinds(job.job_id)
    resumed = world.jobs.resume("alice", job.job_id)
    assert resumed.cleared_auto_pause == paused.paused_reason
    assert world.jobs.get("alice", job.job_id).paused_reason is None


def test_a_deadline_passes_for_a_run_still_running_and_not_for_one_that_finished(world: World) -> None:
    job = world.job(AlertRules(deadline_seconds=120))
    late, on_time = world.plan(job, 1), world.plan(job, 2)
    world.watch()  # the planned runs' timers
    running = replace(late, state=RunState.RUNNING, attempt=1, started_at=late.due_at)
    world.store.transition_run(late, running)
    world.end(on_time, RunState.SUCCEEDED, took_s=30)
    world.clock.set(late.scheduled_for + timedelta(seconds=119))
    world.watch()
    assert "deadline_missed" not in world.kinds(job.job_id)
    world.clock.set(on_time.scheduled_for + timedelta(seconds=121))
    world.watch()
    events = world.log.job_events(job.job_id, 10, None)[0]
    assert [(str(e.kind), e.run_id) for e in events] == [("deadline_missed", late.run_id)]
    world.watch()  # the timer is gone: nothing more
    assert len(world.log.job_events(job.job_id, 10, None)[0]) == 1


def test_durations_out_of_bounds_and_far_from_the_baseline(world: World) -> None:
    job = world.job(AlertRules(duration_max_seconds=60, anomaly_factor=3))
    for minute in range(1, 6):
        world.end(world.plan(job, minute), RunState.SUCCEEDED, took_s=10)
    world.end(world.plan(job, 6), RunState.SUCCEEDED, took_s=45)  # 4.5x the median, inside the bound
    world.end(world.plan(job, 7), RunState.SUCCEEDED, took_s=90)  # out of bounds and far off
    world.watch()
    kinds = world.kinds(job.job_id)
    assert kinds.count("duration_anomaly") == 2
    assert kinds.count("duration_out_of_bounds") == 1


def test_late_starts_and_skipped_slots_are_events_and_skips_counted_per_job(world: World) -> None:
    job = world.job(AlertRules(late_after_seconds=30, on_skip=True))
    world.end(world.plan(job, 1), RunState.SUCCEEDED, late_s=45)
    world.end(world.plan(job, 2), RunState.SUCCEEDED, late_s=5)
    skipped = world.plan(job, 3)
    world.store.transition_run(skipped, replace(skipped, state=RunState.SKIPPED, finished_at=skipped.due_at))
    world.watch()
    assert sorted(world.kinds(job.job_id)) == ["run_late", "slot_skipped"]
    assert world.job_metrics.counts[f"SlotsSkipped|{job.job_id}"] == 1


def test_a_skip_no_rule_reads_is_still_counted_per_job(world: World) -> None:
    """Under the default rules a skipped slot is no event, and its record is not read; it is counted."""
    job = world.job(AlertRules())
    skipped = world.plan(job, 1)
    world.store.transition_run(skipped, replace(skipped, state=RunState.SKIPPED, finished_at=skipped.due_at))
    reads: set[tuple[str, str]] = set()
    world.watcher.observe([CountedRecord(change, reads) for _, change in world.feed.take_changes(100)])
    assert reads == set() and world.kinds(job.job_id) == []
    assert world.job_metrics.counts[f"SlotsSkipped|{job.job_id}"] == 1


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_a_storm_of_1000_failing_jobs_is_two_messages_per_channel(world: World) -> None:
    jobs = [world.job(AlertRules(channels=(HOOK, SLACK)), name=f"j{n}") for n in range(1000)]
    for job in jobs:
        world.end(world.plan(job, 1), RunState.FAILED, reason="upstream down")
    world.watch()
    assert sum(len(world.log.job_events(j.job_id, 10, None)[0]) for j in jobs[:50]) == 50
    per_channel = {HOOK.address: 0, SLACK.address: 0}
    for target, _ in world.invoker.calls:
        per_channel[target.config["url"]] += 1
    assert per_channel == {HOOK.address: 1, SLACK.address: 1}, "the first event goes out at once"
    world.clock.advance(6 * 60)  # the window ends: one digest each, counting the rest
    world.watcher.deliver()
    calls = world.invoker.calls
    digests = [json.loads(t.config["body"]) for t, _ in calls if t.config["url"] == HOOK.address]
    assert len(digests) == 2 and digests[1]["type"] == "tickwork.digest"
    assert digests[1]["count"] == 999
    assert sum(digests[1]["jobs"].values()) == 999


def test_a_page_of_changes_reads_its_jobs_in_one_call_and_a_deleted_one_in_it_too(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [world.job(AlertRules(), name=f"j{n}") for n in range(5)]
    for job in jobs:
        world.end(world.plan(job, 1), RunState.FAILED, reason="upstream down")
    # The last job's runs' changes name a job that is gone by the time they are watched.
    world.jobs.delete("alice", jobs[4].job_id, by=Author("alice", "gone"))
    reads: list[int] = []
    get_watched_jobs = world.store.get_watched_jobs

    def many(job_ids: Any) -> dict[str, WatchedJob]:
        reads.append(len(job_ids))
        return get_watched_jobs(job_ids)  # type: ignore[no-any-return]

    monkeypatch.setattr(world.store, "get_watched_jobs", many)
    world.watch()
    assert reads == [5], "15 changes of 5 jobs: one read, no read a change"
    assert [world.kinds(j.job_id) for j in jobs] == [["run_failed"]] * 4 + [[]]


@dataclass
class CountedRecord:
    """A fed change that notes whose record (`after`) is read: its run and state."""

    change: SeenChange
    reads: set[tuple[str, str]]

    @property
    def before(self) -> RunBefore | None:
        return self.change.before

    @property
    def job_id(self) -> str:
        return self.change.job_id

    @property
    def state(self) -> RunState:
        return self.change.state

    @property
    def after(self) -> Run:
        run = self.change.after
        self.reads.add((run.run_id, str(run.state)))
        return run


def test_a_start_and_a_success_are_judged_without_their_record_and_a_failure_with_it(world: World) -> None:
    """Under the default rules a burst's changes (planned, running, succeeded) need only their state: the
    watcher reads none of their records and records nothing. A late rule reads the start, and a failure
    is read and recorded."""
    plain = world.job(AlertRules(), name="plain")
    late = world.job(AlertRules(late_after_seconds=30), name="late")
    world.end(world.plan(plain, 1), RunState.SUCCEEDED)
    slow = world.end(world.plan(late, 1), RunState.SUCCEEDED, late_s=45)
    failed = world.end(world.plan(plain, 2), RunState.FAILED, reason="upstream down")
    reads: set[tuple[str, str]] = set()
    changes = world.feed.take_changes(100)
    assert len(changes) == 9
    world.watcher.observe([CountedRecord(change, reads) for _, change in changes])
    # The late job's three changes (its rule reads each start), and the failure: no other record.
    expected = [(slow.run_id, state) for state in ("planned", "running", "succeeded")]
    assert sorted(reads) == sorted([*expected, (failed.run_id, "failed")])
    assert world.kinds(plain.job_id) == ["run_failed"] and world.kinds(late.job_id) == ["run_late"]


def test_an_edit_of_the_rules_applies_to_the_next_change(world: World) -> None:
    job = world.job(AlertRules(on_failure=False))
    world.end(world.plan(job, 1), RunState.FAILED)
    world.watch()
    assert world.kinds(job.job_id) == []
    world.jobs.update("alice", job.job_id, JobPatch(alerts=AlertRules()))
    world.watcher.recorder.forget()  # the 30 s cache of rules, as its expiry would
    world.end(world.plan(job, 2), RunState.FAILED)
    world.watch()
    assert world.kinds(job.job_id) == ["run_failed"]


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_a_streak_longer_than_the_baseline_window_still_pauses(world: World) -> None:
    job = world.job(AlertRules(auto_pause_after=35))
    for minute in range(1, 36):
        world.end(world.plan(job, minute), RunState.FAILED, reason=f"fail {minute}")
    world.watch()
    assert world.jobs.get("alice", job.job_id).state is JobState.PAUSED


def test_a_streak_starts_again_when_the_owner_resumes(world: World) -> None:
    job = world.job(AlertRules(auto_pause_after=2))
    for minute in (1, 2):
        world.end(world.plan(job, minute), RunState.FAILED)
    world.watch()
    assert world.jobs.get("alice", job.job_id).state is JobState.PAUSED
    world.jobs.resume("alice", job.job_id)
    world.watcher.recorder.forget()  # the rules' 30 s cache, as its expiry would
    world.end(world.plan(job, 3), RunState.FAILED)
    world.watch()
    assert world.jobs.get("alice", job.job_id).state is JobState.ACTIVE, "one failure since the resume"
    world.end(world.plan(job, 4), RunState.FAILED)
    world.watch()
    assert world.jobs.get("alice", job.job_id).state is JobState.PAUSED
    assert world.kinds(job.job_id).count("auto_paused") == 2


def test_a_run_that_fails_again_after_a_retry_is_a_second_event_with_its_own_key(world: World) -> None:
    job = world.job(AlertRules(channels=(HOOK,), window_seconds=60))
    failed = world.end(world.plan(job, 1), RunState.FAILED, reason="first")
    world.watch()
    retried = replace(failed, state=RunState.QUEUED, finished_at=None, reason=None)
    world.store.transition_run(failed, retried)
    world.clock.advance(120)  # past the window: its own message
    world.end(retried, RunState.FAILED, reason="again", late_s=130)
    world.watch()
    events = world.log.job_events(job.job_id, 10, None)[0]
    assert [e.detail for e in events] == ["again", "first"]
    keys = [invocation.run_id for _, invocation in world.invoker.calls]
    assert len(keys) == 2 and len(set(keys)) == 2


def test_a_backfilled_past_slot_is_not_late_when_planned_and_a_raised_deadline_is_looked_at_again(
    world: World,
) -> None:
    job = world.job(AlertRules(deadline_seconds=60))
    past = ANCHOR.replace(second=0) - timedelta(hours=3)
    backfill = Run.for_fire(
        job, past, now=world.clock.now(), trigger=Trigger.BACKFILL, state=RunState.PLANNED, due_at=ANCHOR
    )
    world.store.restore_runs([backfill])
    world.watch()
    assert world.kinds(job.job_id) == [], "due now: its deadline runs from now"
    world.jobs.update("alice", job.job_id, JobPatch(alerts=AlertRules(deadline_seconds=600)))
    world.watcher.recorder.forget()
    world.clock.set(ANCHOR + timedelta(seconds=61))
    world.watch()
    assert world.kinds(job.job_id) == [], "the deadline was raised: not missed yet"
    world.clock.set(ANCHOR + timedelta(seconds=601))
    world.watch()
    assert world.kinds(job.job_id) == ["deadline_missed"]


def test_two_watchers_passing_over_one_message_send_it_once(world: World) -> None:
    job = world.job(AlertRules(channels=(HOOK,)))
    world.end(world.plan(job, 1), RunState.FAILED)
    changes = [change for _, change in world.feed.take_changes(100)]
    world.watcher.observe(changes)
    [due] = world.log.due(world.clock.now(), 10)
    assert isinstance(due, Message)
    assert world.log.claim_message(due, world.clock.now() + timedelta(seconds=60)) is not None
    assert world.log.claim_message(due, world.clock.now() + timedelta(seconds=60)) is None
    world.watcher.deliver()  # the claim holds it: not sent again while it runs
    assert world.invoker.calls == []


def test_a_topic_no_longer_granted_is_not_published_to(world: World) -> None:
    topic = Channel(ChannelKind.SNS, "arn:aws:sns:us-east-1:123456789012:alice-alerts")
    job = world.job(AlertRules(channels=(topic,)))
    refusing = GrantedTargets(world.invoker, TargetGrants({"alice": ["sns:someone-else-*"]}))
    world.watcher._invoker = refusing
    world.end(world.plan(job, 1), RunState.FAILED)
    world.watch()
    assert world.invoker.calls == [], "refused before any request left"
    assert not world.log.health("alice", (topic,))[topic.channel_id].healthy


def test_an_email_channel_is_subscribed_when_set_and_gets_the_event_by_its_key(world: World) -> None:
    mail = Channel(ChannelKind.EMAIL, "ops@example.com")
    job = world.job(AlertRules(channels=(mail, HOOK)))
    assert world.email.subscribed == ["ops@example.com"]
    world.jobs.update("alice", job.job_id, JobPatch(alerts=AlertRules(channels=(mail,), on_skip=True)))
    assert world.email.subscribed == ["ops@example.com"], "an address already set is not subscribed again"
    world.watcher.recorder.forget()
    world.end(world.plan(job, 1), RunState.FAILED, reason="HTTP 500")
    world.watch()
    [(address, subject, body, message_id)] = world.email.sent
    [event] = world.log.job_events(job.job_id, 10, None)[0]
    assert address == "ops@example.com" and message_id == event.dedupe_key
    assert "run_failed" in subject and "HTTP 500" in subject and event.dedupe_key in body
    assert world.invoker.calls == [], "the webhook was taken off the job"
