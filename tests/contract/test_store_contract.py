"""One contract suite for the storage and queue adapters, run against moto, MiniStack, the embedded SQLite
engine and the in-memory engine: any difference between them shows up here as a failing test, not as a
surprise in `tickwork local` or in a service test on the in-memory store. Every storage port method
(services/ports.py) has a test here, and so do the Dispatcher and DeadLetterSource ports over each engine's
queues. (The embedded queues' own semantics in depth: tests/contract/test_sqlite_queue.py.)"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.conftest import ANCHOR, ministack_client
from tickwork.adapters.dynamodb.items import deserialize
from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.adapters.memory.base import copied
from tickwork.adapters.memory.queue import MemoryQueues
from tickwork.adapters.memory.store import MemoryStore
from tickwork.adapters.queue_api import queue_configs
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.queue import SqliteQueues
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.adapters.sqs import SqsDeadLetters, SqsDispatcher
from tickwork.adapters.sqs_provision import ensure_queues
from tickwork.domain.alert_rules import NO_ALERTS, AlertRules, parse_channel
from tickwork.domain.alerts import WatchedJob
from tickwork.domain.audit import AuditedJob, RecordedRuns
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.errors import (
    ConflictError,
    NotFoundError,
    PlanConflictError,
    RequestConflictError,
    RunsMovedError,
    StaleRunError,
    VersionMismatchError,
)
from tickwork.domain.execution import Claim, claimed, is_own_write, lease_until, rewritten_views, view_for
from tickwork.domain.models import (
    Job,
    JobState,
    OverlapPolicy,
    Policies,
    Run,
    RunState,
    Standing,
    Target,
    Trigger,
)
from tickwork.domain.planning import JobPlan
from tickwork.domain.requests import (
    REQUEST_RETENTION,
    RequestKind,
    RunRequest,
    manual_run,
    request_key,
    retried,
)
from tickwork.domain.schedule import parse_schedule
from tickwork.local.emulator import Emulator
from tickwork.resources import DISPATCH_DLQ, ResourceNames

FIRE = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)


class Backend:
    def __init__(self, name: str, clients: dict[str, Any], names: ResourceNames) -> None:
        self.name = name
        self.clients = clients
        self.names = names
        self.store: Any = DynamoStore(clients["dynamodb"], TableNames.from_resources(names))

    def raw_job(self, job_id: str) -> dict[str, Any]:
        """The job's stored record, with the attributes the job model does not carry (the overlap slot)."""
        raw = self.clients["dynamodb"].get_item(
            TableName=self.store.tables.jobs, Key={"job_id": {"S": job_id}}
        )
        return deserialize(raw["Item"])

    def queues(self, now: datetime) -> tuple[Any, list[str], str]:
        """The engine's queues as the SQS API reaches them, two dispatch queues and the DLQ (their URLs)."""
        sqs = self.clients["sqs"]
        urls, dlq_url = ensure_queues(sqs, self.names, dispatch_queues=2)
        return sqs, urls, dlq_url

    def redrive(self, queue: str) -> tuple[int, str]:
        """A dispatch queue's redrive rule: after how many receives, and to which queue (its name)."""
        attributes = self.clients["sqs"].get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])
        redrive = json.loads(attributes["Attributes"]["RedrivePolicy"])
        return int(redrive["maxReceiveCount"]), str(redrive["deadLetterTargetArn"]).split(":")[-1]


class EmbeddedBackend(Backend):
    """An engine in this process (SQLite, memory): its queues' redrive rule is their configuration, from
    resources.py."""

    def __init__(self, name: str, store: Any) -> None:
        self.name = name
        self.clients = {}
        self.names = ResourceNames()
        self.store = store
        _, _, self.configs = queue_configs(self.names, 2)

    def queues(self, now: datetime) -> tuple[Any, list[str], str]:
        urls, dlq, configs = queue_configs(self.names, 2)
        now_ms = lambda: int(now.timestamp() * 1000)  # noqa: E731 - the queue's clock, stopped at `now`
        if self.name == "sqlite":
            return SqliteQueues(self.store.db, configs, now_ms), urls, dlq
        return MemoryQueues(configs, now_ms), urls, dlq

    def redrive(self, queue: str) -> tuple[int, str]:
        config = self.configs[queue]
        assert config.max_receive_count is not None and config.dead_letter is not None
        return config.max_receive_count, config.dead_letter

    def raw_job(self, job_id: str) -> dict[str, Any]:
        if self.name == "memory":
            with self.store.tables.lock:
                return copied(self.store.tables.jobs[job_id])
        with self.store.db.read() as connection:
            row = connection.execute("SELECT item FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return dict(json.loads(row[0]))


@pytest.fixture(
    params=[
        pytest.param("moto", marks=pytest.mark.moto),
        pytest.param("ministack", marks=pytest.mark.ministack),
        "sqlite",
        "memory",
    ]
)
def backend(request: pytest.FixtureRequest, aws_env: None, tmp_path: Path) -> Iterator[Backend]:
    names = ResourceNames(prefix=f"c{time.monotonic_ns() % 10**9}")
    if request.param == "sqlite":
        yield EmbeddedBackend("sqlite", SqliteStore(Database(tmp_path / "tickwork.db").open()))
    elif request.param == "memory":
        yield EmbeddedBackend("memory", MemoryStore())
    elif request.param == "moto":
        with mock_aws():
            clients = {s: boto3.client(s, region_name="us-east-1") for s in ("dynamodb", "sqs")}
            ensure_tables(clients["dynamodb"], names)
            yield Backend("moto", clients, names)
    else:
        emulator: Emulator = request.getfixturevalue("ministack")
        clients = {s: ministack_client(emulator, s) for s in ("dynamodb", "sqs")}
        ensure_tables(clients["dynamodb"], names)
        yield Backend("ministack", clients, names)


def a_job(job_id: str = "job_contract", **changes: Any) -> Job:
    job = Job(
        job_id=job_id,
        owner="alice",
        name="contract",
        schedule=parse_schedule("*/5 * * * *"),
        target=Target("http", {"url": "http://127.0.0.1:9/"}),
        shard=1,
        created_at=ANCHOR,
        updated_at=ANCHOR,
        next_fire_at=FIRE,
    )
    return replace(job, **changes)


def a_run(job: Job, fire: datetime = FIRE) -> Run:
    return Run.for_fire(job, fire, now=ANCHOR, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)


def test_commit_plan_creates_the_run_and_moves_the_job_and_its_due_key(backend: Backend) -> None:
    store, job = backend.store, a_job()
    store.create_job(job, ())
    following = FIRE + timedelta(minutes=5)

    store.commit_plan(job, [a_run(job)], following)

    stored = store.get_job(job.job_id)
    assert stored is not None and stored.next_fire_at == following
    assert [j.job_id for j in store.query_due(job.due_key or "", FIRE + timedelta(hours=1))] == []
    moved = stored.due_key or ""
    assert [j.job_id for j in store.query_due(moved, following)] == [job.job_id]
    assert store.get_run(job.job_id, FIRE) == a_run(job)


@pytest.mark.parametrize(
    ("setup", "run_exists", "job_changed"),
    [
        pytest.param("other_ticker_won", True, True, id="another_ticker_committed_first"),
        pytest.param("job_edited", False, True, id="job_edited_since_read"),
        pytest.param("run_only", True, False, id="run_already_created_by_the_jobs_write"),
    ],
)
def test_commit_plan_names_the_conditions_that_failed(
    backend: Backend, setup: str, run_exists: bool, job_changed: bool
) -> None:
    store, job = backend.store, a_job()
    store.create_job(job, [a_run(job)] if setup == "run_only" else [])
    if setup == "other_ticker_won":
        store.commit_plan(job, [a_run(job)], FIRE + timedelta(minutes=5))
    elif setup == "job_edited":
        store.replace_job(job, replace(job, name="edited", version=2), ())

    with pytest.raises(PlanConflictError) as raised:
        store.commit_plan(job, [a_run(job)], FIRE + timedelta(minutes=5))

    assert (raised.value.run_exists, raised.value.job_changed) == (run_exists, job_changed)


def test_commit_plans_commits_each_job_on_its_own_and_returns_each_refusal(backend: Backend) -> None:
    store = backend.store
    first, edited, last = (a_job(f"job_contract_{n}") for n in range(3))
    for job in (first, edited, last):
        store.create_job(job, ())
    store.replace_job(edited, replace(edited, name="edited", version=2), ())
    following = FIRE + timedelta(minutes=5)

    outcomes = store.commit_plans([JobPlan(job, (a_run(job),), following) for job in (first, edited, last)])

    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], PlanConflictError) and outcomes[1].job_changed
    for job in (first, last):
        stored = store.get_job(job.job_id)
        assert stored is not None and stored.next_fire_at == following
        assert store.get_run(job.job_id, FIRE) == a_run(job)
    kept = store.get_job(edited.job_id)
    assert kept is not None and kept.next_fire_at == FIRE and store.get_run(edited.job_id, FIRE) is None


def test_the_due_index_is_sparse(backend: Backend) -> None:
    store, job = backend.store, a_job()
    store.create_job(replace(job, state=JobState.PAUSED), ())
    assert list(store.query_due(job.due_key or "", FIRE + timedelta(hours=1))) == []


def test_watermarks_only_move_forward(backend: Backend) -> None:
    store = backend.store
    assert store.get_watermark(3) is None
    store.set_watermark(3, FIRE)
    store.set_watermark(3, FIRE - timedelta(minutes=1))  # a slower ticker: ignored
    assert store.get_watermark(3) == FIRE


def test_replace_job_is_conditional_and_keeps_the_overlap_slot(backend: Backend) -> None:
    store, job = backend.store, a_job(policies=Policies(overlap=OverlapPolicy.SKIP))
    store.create_job(job, ())
    run = a_run(job)
    store.commit_plan(job, [run], FIRE + timedelta(minutes=5))
    mine = claimed(run, job, worker="w", now=FIRE)
    assert store.claim_exclusive(run, mine, FIRE)
    current = store.get_job(job.job_id)
    assert current is not None

    store.replace_job(current, replace(current, name="renamed", version=current.version + 1), ())

    raw = backend.raw_job(job.job_id)
    assert raw["active_run"] == run.run_id and raw["name"] == "renamed"
    with pytest.raises(VersionMismatchError):
        store.replace_job(current, replace(current, name="stale write"), ())


def test_create_job_twice_conflicts(backend: Backend) -> None:
    backend.store.create_job(a_job(), ())
    with pytest.raises(ConflictError):
        backend.store.create_job(a_job(), ())


def test_run_transitions_are_fenced_by_state_attempt_and_lease(backend: Backend) -> None:
    store, job = backend.store, a_job()
    store.create_job(job, [a_run(job)])
    run = a_run(job)
    first = claimed(run, job, worker="a", now=FIRE)
    store.transition_run(run, first)
    with pytest.raises(StaleRunError):
        store.transition_run(run, claimed(run, job, worker="b", now=FIRE))  # a second claim of attempt 0
    second = claimed(first, job, worker="b", now=FIRE + timedelta(minutes=2))  # lease takeover
    store.transition_run(first, second)
    with pytest.raises(StaleRunError):
        store.transition_run(first, replace(first, state=RunState.SUCCEEDED))  # the slow worker's result
    stored = store.get_run(job.job_id, FIRE)
    assert stored is not None and (stored.attempt, stored.lease_owner) == (2, "b")


def test_a_refused_write_returns_the_stored_run_so_a_lost_response_is_recognised(backend: Backend) -> None:
    store, job = backend.store, a_job()
    store.create_job(job, [a_run(job)])
    run = a_run(job)
    mine = claimed(run, job, worker="a#1", now=FIRE)
    store.transition_run(run, mine)
    with pytest.raises(StaleRunError) as again:  # the same write sent again (its response was lost)
        store.transition_run(run, mine)
    assert is_own_write(again.value.current, mine)
    with pytest.raises(StaleRunError) as other:
        store.transition_run(run, claimed(run, job, worker="b#2", now=FIRE))
    assert other.value.current is not None and not is_own_write(
        other.value.current, claimed(run, job, worker="b#2", now=FIRE)
    )

    exclusive = replace(job, job_id="job_exclusive", policies=Policies(overlap=OverlapPolicy.SKIP))
    store.create_job(exclusive, [a_run(exclusive)])
    queued_run = a_run(exclusive)
    held = claimed(queued_run, exclusive, worker="a#3", now=FIRE)
    assert store.claim_exclusive(queued_run, held, FIRE)
    with pytest.raises(StaleRunError) as slot_again:
        store.claim_exclusive(queued_run, held, FIRE)
    assert is_own_write(slot_again.value.current, held)


def test_the_overlap_slot_admits_one_run_and_one_waiter(backend: Backend) -> None:
    store, job = backend.store, a_job()
    fires = [FIRE, FIRE + timedelta(minutes=5), FIRE + timedelta(minutes=10)]
    runs = [a_run(job, f) for f in fires]
    store.create_job(job, runs)
    holder = claimed(runs[0], job, worker="a", now=FIRE)
    assert store.claim_exclusive(runs[0], holder, FIRE)
    assert not store.claim_exclusive(runs[1], claimed(runs[1], job, worker="b", now=FIRE), FIRE)
    waiting = replace(runs[1], state=RunState.QUEUED)
    assert store.enqueue_behind(runs[1], waiting)
    assert not store.enqueue_behind(runs[2], replace(runs[2], state=RunState.QUEUED))

    released = store.finish_exclusive(holder, replace(holder, state=RunState.SUCCEEDED, finished_at=FIRE))

    assert released == waiting.run_id
    assert store.claim_exclusive(waiting, claimed(waiting, job, worker="c", now=FIRE), FIRE)


def test_open_runs_lists_what_is_overdue_and_drops_finished_runs(backend: Backend) -> None:
    store, job = backend.store, a_job()
    run = a_run(job)
    store.create_job(job, [run])
    assert list(store.open_runs(job.shard, FIRE)) == []  # not overdue before due + grace
    assert [r.run_id for r in store.open_runs(job.shard, FIRE + timedelta(minutes=2))] == [run.run_id]
    store.transition_run(run, replace(run, state=RunState.SUCCEEDED, finished_at=FIRE))
    assert list(store.open_runs(job.shard, FIRE + timedelta(hours=1))) == []


def test_a_queue_carried_run_is_in_the_sweepers_list_only_while_it_waits_to_retry(backend: Backend) -> None:
    """A run the ticker planned (its message sent first) has no open-runs entry while planned or running;
    waiting to retry it has one, and the write that finishes its retry removes it again, although the
    retry's claim left it in place."""
    store, job = backend.store, a_job()
    run = replace(a_run(job), queue_carried=True)
    store.create_job(job, [run])
    late = FIRE + timedelta(days=1)
    assert list(store.open_runs(job.shard, late)) == []
    first = store.claim(a_claim(job))
    assert first.queue_carried and list(store.open_runs(job.shard, late)) == []
    waiting = replace(first, state=RunState.RETRY_WAIT, retry_at=FIRE + timedelta(seconds=30))
    store.transition_run(first, waiting)
    assert [r.run_id for r in store.open_runs(job.shard, late)] == [run.run_id]
    second = store.claim(a_claim(job, attempt=1, worker="w#3", now=FIRE + timedelta(seconds=31)))
    store.transition_run(second, replace(second, state=RunState.SUCCEEDED, finished_at=FIRE))
    assert list(store.open_runs(job.shard, late)) == []
    stored = store.get_run(job.job_id, FIRE)
    assert stored is not None and stored.state is RunState.SUCCEEDED and stored.queue_carried


def test_list_runs_is_time_ordered(backend: Backend) -> None:
    store, job = backend.store, a_job()
    fires = [FIRE + timedelta(minutes=5 * i) for i in range(4)]
    store.create_job(job, [a_run(job, f) for f in reversed(fires)])
    assert [r.scheduled_for for r in store.list_runs(job.job_id)] == list(reversed(fires))
    assert [r.scheduled_for for r in store.list_runs(job.job_id, newest_first=False)] == fires


def test_dispatch_delays_messages_and_dead_letters_are_read_back(backend: Backend) -> None:
    now = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
    sqs, urls, dlq_url = backend.queues(now)
    job = a_job()
    due_now, due_later = a_run(job, now), a_run(job, now + timedelta(seconds=30))
    dispatcher = SqsDispatcher(sqs, urls)
    dispatcher.dispatch([due_now, due_later], now)

    # Routing is the dispatcher's (a hash of the run id), so each run is looked for on its own queue.
    queue = dispatcher.queue_for(RunMessage.for_run(due_now))
    received = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
        "Messages", []
    )
    assert [RunMessage.from_json(m["Body"]).scheduled_for for m in received] == [due_now.scheduled_for]
    later = sqs.get_queue_attributes(
        QueueUrl=dispatcher.queue_for(RunMessage.for_run(due_later)),
        AttributeNames=["ApproximateNumberOfMessagesDelayed"],
    )["Attributes"]
    assert later["ApproximateNumberOfMessagesDelayed"] == "1"
    assert backend.redrive(queue) == (5, backend.names.queue(DISPATCH_DLQ))

    sqs.send_message(QueueUrl=dlq_url, MessageBody=RunMessage.for_run(due_now).to_json())
    sqs.send_message(QueueUrl=dlq_url, MessageBody="not a run message")
    letters = SqsDeadLetters(sqs, dlq_url).receive(10)
    assert sorted(letter.message is None for letter in letters) == [False, True]


def test_a_stale_waiting_slot_is_taken_over(backend: Backend) -> None:
    """The waiting run left the queue another way (cancelled when its job was paused): the slot it still
    names must not block the job's queue forever."""
    store, job = backend.store, a_job()
    fires = [FIRE, FIRE + timedelta(minutes=5), FIRE + timedelta(minutes=10)]
    runs = [a_run(job, f) for f in fires]
    store.create_job(job, runs)
    assert store.claim_exclusive(runs[0], claimed(runs[0], job, worker="a", now=FIRE), FIRE)
    waiting = replace(runs[1], state=RunState.QUEUED)
    assert store.enqueue_behind(runs[1], waiting)
    store.transition_run(waiting, replace(waiting, state=RunState.CANCELLED, finished_at=FIRE))

    assert store.enqueue_behind(runs[2], replace(runs[2], state=RunState.QUEUED))

    assert backend.raw_job(job.job_id)["queued_run"] == runs[2].run_id


def a_claim(job: Job, *, attempt: int = 0, worker: str = "w#1", now: datetime = FIRE) -> Claim:
    return Claim(
        job_id=job.job_id,
        scheduled_for=FIRE,
        expected_attempt=attempt,
        worker=worker,
        now=now,
        timeout_seconds=job.timeout_seconds,
        lease_expires_at=lease_until(job.timeout_seconds, now),
        dispatched_at=now - timedelta(seconds=2),
    )


def test_a_claim_is_one_conditional_write_that_returns_the_run(backend: Backend) -> None:
    store, job = backend.store, a_job()
    store.create_job(job, [a_run(job)])
    claim = a_claim(job, now=FIRE + timedelta(milliseconds=250))

    mine = store.claim(claim)

    assert (mine.state, mine.attempt, mine.lease_owner) == (RunState.RUNNING, 1, "w#1")
    assert mine.started_at == claim.now and mine.start_delay_ms == 250
    assert mine.dispatched_at == FIRE - timedelta(seconds=2) + timedelta(milliseconds=250)
    assert store.get_run(job.job_id, FIRE) == mine
    # The claim leaves the open-runs index alone: the run is listed at its first check, lease or not.
    assert [r.run_id for r in store.open_runs(job.shard, FIRE + timedelta(minutes=2))] == [mine.run_id]


def test_a_claim_is_refused_at_another_attempt_and_a_lost_response_is_recognised(backend: Backend) -> None:
    store, job = backend.store, a_job()
    store.create_job(job, [a_run(job)])
    claim = a_claim(job)
    store.claim(claim)

    with pytest.raises(StaleRunError) as again:  # the same claim sent again: its response was lost
        store.claim(claim)
    assert claim.is_own(again.value.current)
    with pytest.raises(StaleRunError) as other:  # another delivery of the same message
        store.claim(a_claim(job, worker="w#2"))
    assert other.value.current is not None and not a_claim(job, worker="w#2").is_own(other.value.current)
    with pytest.raises(StaleRunError) as missing:  # no run at all: the store says so with no current run
        store.claim(replace(claim, scheduled_for=FIRE + timedelta(minutes=1)))
    assert missing.value.current is None


def test_a_retry_is_claimed_at_its_attempt_and_keeps_its_first_start(backend: Backend) -> None:
    store, job = backend.store, a_job()
    store.create_job(job, [a_run(job)])
    first = store.claim(a_claim(job))
    waiting = replace(first, state=RunState.RETRY_WAIT, retry_at=FIRE + timedelta(seconds=30))
    store.transition_run(first, waiting)

    second = store.claim(a_claim(job, attempt=1, worker="w#3", now=FIRE + timedelta(seconds=31)))

    assert (second.attempt, second.retry_at, second.started_at) == (2, None, first.started_at)


def test_existing_run_times_reads_the_fires_range_once(backend: Backend) -> None:
    store, job = backend.store, a_job()
    fires = [FIRE + timedelta(minutes=5 * i) for i in range(4)]
    store.create_job(job, [a_run(job, fires[0]), a_run(job, fires[2])])

    assert store.existing_run_times(job.job_id, fires) == {fires[0], fires[2]}
    assert store.existing_run_times(job.job_id, [fires[1], fires[3]]) == set()
    assert store.existing_run_times(job.job_id, []) == set()


def test_a_claim_on_the_view_is_refused_when_the_view_stops_the_run_and_says_why(backend: Backend) -> None:
    store, job = backend.store, a_job()
    run = a_run(job)
    store.create_job(job, [run])
    paused = replace(job, state=JobState.PAUSED, version=2)
    store.replace_job(job, paused, (), [(run, view_for(paused, run))])

    with pytest.raises(StaleRunError) as refused:
        store.claim(replace(a_claim(job), trusting_view=True))

    current = refused.value.current
    assert current is not None and current.state is RunState.PLANNED
    assert current.job_view is not None and current.job_view.standing is Standing.PAUSED
    # The same claim without trusting the view (the executor read the job and decided) goes through.
    assert store.claim(a_claim(job)).state is RunState.RUNNING


def test_a_claim_on_the_view_checks_the_timeout_it_leased_for(backend: Backend) -> None:
    store, job = backend.store, a_job(timeout_seconds=60)
    store.create_job(job, [a_run(job)])
    stale = replace(a_claim(job), trusting_view=True, timeout_seconds=30)

    with pytest.raises(StaleRunError):
        store.claim(stale)
    assert store.claim(replace(a_claim(job), trusting_view=True)).attempt == 1


def test_a_job_write_rewrites_the_views_of_unclaimed_runs_or_fails_if_one_was_claimed(
    backend: Backend,
) -> None:
    store, job = backend.store, a_job()
    fires = [FIRE, FIRE + timedelta(minutes=5)]
    store.create_job(job, [a_run(job, f) for f in fires])
    unclaimed = store.claimable_runs(job.job_id, FIRE - timedelta(minutes=5))
    assert [r.scheduled_for for r in unclaimed] == fires
    store.claim(a_claim(job))  # the first run is claimed after the write read it
    edited = replace(job, target=Target("http", {"url": "http://127.0.0.1:9/v2"}), version=2)

    with pytest.raises(RunsMovedError):
        store.replace_job(job, edited, (), [(r, view_for(edited, r)) for r in unclaimed])
    stored_job = store.get_job(job.job_id)
    assert stored_job is not None and stored_job.version == 1  # all or nothing

    again = store.claimable_runs(job.job_id, FIRE - timedelta(minutes=5))
    assert [r.scheduled_for for r in again] == fires[1:]
    store.replace_job(job, edited, (), [(r, view_for(edited, r)) for r in again])
    later = store.get_run(job.job_id, fires[1])
    assert later is not None and later.job_view == view_for(edited, later)
    assert later.job_view.target.config["url"].endswith("/v2")


def test_a_delete_marks_the_views_deleted_with_it(backend: Backend) -> None:
    store, job = backend.store, a_job()
    store.create_job(job, [a_run(job)])
    unclaimed = store.claimable_runs(job.job_id, FIRE - timedelta(minutes=5))

    store.delete_job(job, rewritten_views(None, unclaimed))

    run = store.get_run(job.job_id, FIRE)
    assert store.get_job(job.job_id) is None
    assert run is not None and run.job_view is not None and run.job_view.standing is Standing.DELETED


def test_a_delete_that_raced_a_ticker_commit_is_refused(backend: Backend) -> None:
    """The ticker moves the next fire without a new version: a delete read before that commit must not
    land after it, or the run it planned (with an active view) would run after the delete."""
    store, job = backend.store, a_job()
    store.create_job(job, ())
    store.commit_plan(job, [a_run(job)], FIRE + timedelta(minutes=5))

    with pytest.raises(VersionMismatchError):
        store.delete_job(job)
    assert store.get_job(job.job_id) is not None


def test_a_run_write_read_before_its_view_was_rewritten_is_refused(backend: Backend) -> None:
    """A resume that rewrote a run's view between an executor's read and its cancel wins: the cancel is
    refused (the run is looked at again), not applied over the resume."""
    store, job = backend.store, a_job()
    run = a_run(job)
    store.create_job(job, [run])
    resumed = replace(job, version=2)
    store.replace_job(job, resumed, (), [(run, view_for(resumed, run))])

    with pytest.raises(StaleRunError):
        store.transition_run(
            run, replace(run, state=RunState.CANCELLED, finished_at=FIRE, reason="job paused")
        )
    stored = store.get_run(job.job_id, FIRE)
    assert stored is not None and stored.state is RunState.PLANNED


# --- the job writes and reads job management and the API use ----------------------------------------------


def test_job_writes_on_a_deleted_job_say_it_is_not_found(backend: Backend) -> None:
    store, job = backend.store, a_job()
    store.create_job(job, ())
    store.delete_job(job)

    with pytest.raises(NotFoundError):
        store.replace_job(job, replace(job, name="edited", version=2), ())
    with pytest.raises(NotFoundError):
        store.delete_job(job)
    assert store.get_job(job.job_id) is None


def test_a_create_with_a_fingerprint_keeps_it_through_edits(backend: Backend) -> None:
    store, job = backend.store, a_job()
    store.create_job_with_fingerprint(job, [a_run(job)], "sha256-of-the-request")
    plain = a_job("job_plain")
    store.create_job(plain, ())

    assert store.get_job_fingerprint(job.job_id) == (job, "sha256-of-the-request")
    assert store.get_run(job.job_id, FIRE) == a_run(job)  # created with the job, in the same write
    assert store.get_job_fingerprint(plain.job_id) == (plain, None)
    assert store.get_job_fingerprint("job_missing") is None
    edited = replace(job, name="edited", version=2)
    store.replace_job(job, edited, ())
    assert store.get_job_fingerprint(job.job_id) == (edited, "sha256-of-the-request")
    with pytest.raises(ConflictError):  # an idempotent create retried after it landed
        store.create_job_with_fingerprint(job, (), "sha256-of-the-request")


def test_owner_job_ids_pages_through_one_owners_jobs_in_id_order(backend: Backend) -> None:
    store = backend.store
    alice = [f"job_a{n}" for n in range(5)]
    for job_id in [alice[3], alice[0], alice[4], alice[1], alice[2]]:
        store.create_job(a_job(job_id), ())
    for job_id in ("job_b0", "job_b1"):
        store.create_job(a_job(job_id, owner="bob"), ())

    pages: list[tuple[list[str], bool]] = []
    after: str | None = None
    for _ in range(5):  # bounded: a store that always says "more" fails the assertion below
        ids, more = store.owner_job_ids("alice", limit=2, after_job_id=after)
        pages.append((ids, more))
        if not more or not ids:
            break
        after = ids[-1]

    assert pages == [(alice[0:2], True), (alice[2:4], True), (alice[4:], False)]
    assert store.owner_job_ids("bob", limit=10) == (["job_b0", "job_b1"], False)
    assert store.owner_job_ids("carol", limit=10) == ([], False)


def test_get_jobs_reads_the_jobs_that_exist_by_id(backend: Backend) -> None:
    store = backend.store
    jobs = [a_job(f"job_{n}", name=f"job {n}") for n in range(3)]
    for job in jobs:
        store.create_job(job, ())

    found = store.get_jobs([jobs[2].job_id, "job_missing", jobs[0].job_id, jobs[2].job_id])

    assert found == {jobs[0].job_id: jobs[0], jobs[2].job_id: jobs[2]}
    assert store.get_jobs([]) == {}


def test_an_integer_past_64_bits_in_a_job_survives_its_writes_and_plans(backend: Backend) -> None:
    """The API stores integers up to 38 digits in a target's payload (DynamoDB's numbers): every engine
    gives them back exactly, after the plan's write of the job too."""
    huge = 12345678901234567890123
    store = backend.store
    job = a_job(target=Target("http", {"url": "http://127.0.0.1:9/", "n": huge, "nested": [huge + 1]}))
    store.create_job(job, ())

    store.commit_plan(job, [a_run(job)], FIRE + timedelta(minutes=5))

    stored = store.get_job(job.job_id)
    assert stored is not None
    assert stored.target.config["n"] == huge and type(stored.target.config["n"]) is int
    assert list(stored.target.config["nested"]) == [huge + 1]


def test_get_watched_jobs_reads_what_the_watcher_reads_of_the_jobs_that_exist(backend: Backend) -> None:
    """Each engine may read the few attributes alone: what it answers is what the whole record says."""
    store = backend.store
    rules = AlertRules(
        on_skip=True,
        deadline_seconds=300,
        duration_max_seconds=12.5,
        auto_pause_after=3,
        channels=(parse_channel({"kind": "webhook", "url": "https://hooks.example.com/t"}, 0),),
        window_seconds=600,
    )
    plain = a_job("job_plain")
    watched = a_job(
        "job_watched",
        owner="bob",
        alerts=rules,
        retention_days=7,
        resumed_at=ANCHOR + timedelta(seconds=1, milliseconds=250),
    )
    for job in (plain, watched):
        store.create_job(job, ())

    found = store.get_watched_jobs([watched.job_id, "job_missing", plain.job_id, watched.job_id])

    assert found == {plain.job_id: WatchedJob.of(plain), watched.job_id: WatchedJob.of(watched)}
    assert found[watched.job_id].alerts == rules and found[plain.job_id].alerts == NO_ALERTS
    assert store.get_watched_jobs([]) == {}


def test_run_times_and_states_between_read_one_jobs_closed_range(backend: Backend) -> None:
    store, job, other = backend.store, a_job(), a_job("job_other")
    fires = [FIRE + timedelta(minutes=5 * i) for i in range(4)]
    store.create_job(job, [a_run(job, f) for f in fires])
    store.create_job(other, [a_run(other, f) for f in fires])
    cancelled = a_run(job, fires[2])
    store.transition_run(cancelled, replace(cancelled, state=RunState.CANCELLED, finished_at=FIRE))

    assert store.run_times_between(job.job_id, fires[1], fires[2]) == {fires[1], fires[2]}
    assert (
        store.run_times_between(job.job_id, fires[3] + timedelta(seconds=1), FIRE + timedelta(days=1))
        == set()
    )
    assert store.run_states_between(job.job_id, fires[0], fires[3]) == {
        fires[0]: RunState.PLANNED,
        fires[1]: RunState.PLANNED,
        fires[2]: RunState.CANCELLED,
        fires[3]: RunState.PLANNED,
    }


def test_query_runs_pages_a_range_either_way_and_filters_states_after_the_limit(backend: Backend) -> None:
    store, job = backend.store, a_job()
    fires = [FIRE + timedelta(minutes=5 * i) for i in range(5)]
    store.create_job(job, [a_run(job, f) for f in fires])
    for fire in (fires[1], fires[4]):
        run = a_run(job, fire)
        store.transition_run(run, replace(run, state=RunState.CANCELLED, finished_at=FIRE))

    def page(**query: Any) -> tuple[list[datetime], datetime | None]:
        runs, position = store.query_runs(job.job_id, **{"start": None, "end": None, **query})
        return [r.scheduled_for for r in runs], position

    # Newest first, `limit` at a time; the position to continue after, until a page comes back short.
    assert page(limit=2) == ([fires[4], fires[3]], fires[3])
    assert page(limit=2, after=fires[3]) == ([fires[2], fires[1]], fires[1])
    assert page(limit=2, after=fires[1]) == ([fires[0]], None)
    # A closed range, or one open at either end, oldest first.
    assert page(start=fires[1], end=fires[3], limit=10, newest_first=False) == (fires[1:4], None)
    assert page(start=fires[3], limit=10) == ([fires[4], fires[3]], None)
    assert page(end=fires[1], limit=10, newest_first=False) == (fires[:2], None)
    # `limit` bounds the runs read; the state filter drops some of them, so a page can hold fewer.
    cancelled = [RunState.CANCELLED]
    assert page(states=cancelled, limit=2) == ([fires[4]], fires[3])
    assert page(states=cancelled, limit=2, after=fires[3]) == ([fires[1]], fires[1])
    assert page(states=cancelled, limit=2, after=fires[1]) == ([], None)
    runs, _ = store.query_runs(job.job_id, start=fires[4], end=fires[4], limit=1)
    assert runs == [store.get_run(job.job_id, fires[4])]  # whole runs, as stored


# --- runs on request and the failed-runs index -------------------------------------------------------------


def a_failed_run(job: Job, fire: datetime, finished_at: datetime) -> Run:
    return replace(a_run(job, fire), state=RunState.FAILED, finished_at=finished_at, reason="HTTP 500")


def test_failed_runs_lists_an_owners_failures_newest_first_a_page_at_a_time(backend: Backend) -> None:
    store = backend.store
    jobs = [a_job("job_a"), a_job("job_b"), a_job("job_c", owner="bob")]
    fires = [FIRE + timedelta(minutes=5 * i) for i in range(3)]
    for job in jobs:
        store.create_job(job, [a_run(job, f) for f in fires])
    # (job, fire) -> seconds after FIRE it failed: the jobs' failures interleave in time.
    finished = {(0, 0): 10, (1, 0): 20, (0, 1): 30, (1, 1): 40, (0, 2): 50, (2, 0): 45, (2, 1): 55}
    for (j, f), seconds in finished.items():
        store.transition_run(
            a_run(jobs[j], fires[f]), a_failed_run(jobs[j], fires[f], FIRE + timedelta(seconds=seconds))
        )
    succeeded = a_run(jobs[1], fires[2])
    store.transition_run(succeeded, replace(succeeded, state=RunState.SUCCEEDED, finished_at=FIRE))
    alice = [a_run(jobs[j], fires[f]).run_id for j, f in [(0, 2), (1, 1), (0, 1), (1, 0), (0, 0)]]

    pages: list[list[str]] = []
    before: str | None = None
    for _ in range(5):  # bounded: a store that always says "more" fails the assertion below
        runs, before = store.failed_runs("alice", since=None, before=before, limit=2)
        pages.append([r.run_id for r in runs])
        if before is None:
            break

    assert pages == [alice[0:2], alice[2:4], alice[4:]]
    runs, more = store.failed_runs("alice", since=FIRE + timedelta(seconds=30), before=None, limit=10)
    assert [r.run_id for r in runs] == alice[:3] and more is None  # finished at or after `since`
    assert runs[0] == store.get_run("job_a", fires[2])  # whole runs, as stored
    bob, _ = store.failed_runs("bob", since=None, before=None, limit=10)
    assert [r.run_id for r in bob] == [a_run(jobs[2], fires[f]).run_id for f in (1, 0)]


def test_a_retried_run_leaves_the_failed_runs(backend: Backend) -> None:
    store, job = backend.store, a_job()
    run = a_run(job)
    store.create_job(job, [run])
    failure = a_failed_run(job, FIRE, FIRE + timedelta(seconds=10))
    store.transition_run(run, failure)
    assert [r.run_id for r in store.failed_runs("alice", since=None, before=None, limit=10)[0]] == [
        run.run_id
    ]

    again = retried(failure, job, now=FIRE + timedelta(minutes=1))
    store.request_runs(job, [], retried=[(failure, again)])

    assert store.failed_runs("alice", since=None, before=None, limit=10) == ([], None)
    stored = store.get_run(job.job_id, FIRE)
    assert stored is not None and (stored.state, stored.attempt) == (RunState.RETRY_WAIT, failure.attempt)
    with pytest.raises(StaleRunError) as twice:  # the same retry again: the run moved on
        store.request_runs(store.get_job(job.job_id), [], retried=[(failure, again)])
    assert twice.value.current == stored


def test_request_runs_moves_the_counter_and_records_the_key_all_or_nothing(backend: Backend) -> None:
    store, job = backend.store, a_job()
    store.create_job(job, ())
    now = FIRE + timedelta(seconds=1, milliseconds=250)
    first, second = manual_run(job, now, now=now), manual_run(job, now + timedelta(seconds=1), now=now)
    key = request_key("alice", RequestKind.RUN_NOW, "nightly-1")
    record = RunRequest(
        request_key=key,
        owner="alice",
        kind=RequestKind.RUN_NOW,
        job_id=job.job_id,
        fingerprint="sha256-of-the-request",
        created_at=now,
        expires_at=FIRE + REQUEST_RETENTION,
        answer={"run_id": first.run_id},
    )
    assert store.get_request(key) is None

    store.request_runs(job, [first], record=record)

    assert store.get_request(key) == record
    created = store.get_run(job.job_id, first.scheduled_for)
    assert created is not None and (created.run_id, created.trigger) == (first.run_id, Trigger.MANUAL)
    moved = store.get_job(job.job_id)
    assert moved is not None and (moved.run_requests, moved.version) == (1, job.version)
    with pytest.raises(VersionMismatchError):  # read before the counter moved
        store.request_runs(job, [second])
    with pytest.raises(RequestConflictError) as both:
        store.request_runs(moved, [first], record=record)
    assert (both.value.run_exists, both.value.request_exists) == (True, True)
    with pytest.raises(RequestConflictError) as key_only:
        store.request_runs(moved, [second], record=record)
    assert (key_only.value.run_exists, key_only.value.request_exists) == (False, True)
    with pytest.raises(RequestConflictError) as run_only:
        store.request_runs(moved, [second, first])
    assert (run_only.value.run_exists, run_only.value.request_exists) == (True, False)
    assert store.get_run(job.job_id, second.scheduled_for) is None  # none of the refused writes landed
    assert store.get_job(job.job_id) == moved
    store.delete_job(moved)
    with pytest.raises(NotFoundError):
        store.request_runs(moved, [second])


# --- dispatch and dead letters over each engine's queues ---------------------------------------------------


def test_re_sends_go_to_the_runs_own_queue_and_a_dead_letter_read_is_deleted(backend: Backend) -> None:
    now = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
    sqs, urls, dlq_url = backend.queues(now)
    dispatcher = SqsDispatcher(sqs, urls)
    messages = [
        RunMessage("job_contract", now + timedelta(minutes=5 * i), 0, not_before=now) for i in range(5)
    ]

    dispatcher.redispatch(messages[0], 1, now)
    dispatcher.redispatch_many(messages[1:], now)

    received: dict[str, str] = {}
    for url in urls:
        for _ in range(5):  # until the queue answers empty
            batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            if not batch:
                break
            received.update((RunMessage.from_json(m["Body"]).run_id, url) for m in batch)
    assert received == {m.run_id: dispatcher.queue_for_run_id(m.run_id) for m in messages}

    for message in messages[:2]:
        sqs.send_message(QueueUrl=dlq_url, MessageBody=message.to_json())
    dead_letters = SqsDeadLetters(sqs, dlq_url)
    letters = dead_letters.receive(10)
    assert sorted(letter.message.run_id for letter in letters if letter.message) == sorted(
        m.run_id for m in messages[:2]
    )
    for letter in letters:
        dead_letters.delete(letter.receipt)
    counts = sqs.get_queue_attributes(
        QueueUrl=dlq_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == (
        "0",
        "0",
    )


def test_the_audits_segments_page_through_every_job_exactly_once(backend: Backend) -> None:
    store = backend.store
    ids = [f"job_audit_{i:02d}" for i in range(12)]
    for job_id in ids:
        store.create_job(a_job(job_id), [])
    seen: list[str] = []
    for segment in range(3):
        after = None
        for _ in range(20):  # a page of 2 at a time; far more pages than any segment needs
            page, after = store.audit_jobs(segment, 3, after=after, limit=2)
            assert len(page) <= 2
            assert all(audited.filed_under == audited.due_key for audited in page)
            seen.extend(audited.job_id for audited in page)
            if after is None:
                break
        assert after is None
    assert sorted(seen) == ids


def test_the_audit_reads_of_each_job_what_the_whole_job_says(backend: Backend) -> None:
    """SQLite reads only the audited attributes (json_extract); every engine gives what the whole job
    says of them, defaults included, and the `due` key its record is filed under."""
    store = backend.store
    jobs = [
        a_job("job_audit_plain"),
        a_job(
            "job_audit_rich",
            schedule=parse_schedule("30 9 * * 1-5", timezone="Europe/Berlin"),
            state=JobState.PAUSED,
            version=7,
            run_requests=3,
            next_fire_at=None,
            due_floor=FIRE + timedelta(minutes=2, milliseconds=250),
            created_at=ANCHOR - timedelta(days=3, milliseconds=5),
            timeout_seconds=900,
            shard=3,
        ),
        a_job("job_audit_floored", due_floor=FIRE + timedelta(minutes=30)),
    ]
    for job in jobs:
        store.create_job(job, [])
    audited: list[AuditedJob] = []
    for segment in range(2):
        after = None
        while True:
            page, after = store.audit_jobs(segment, 2, after=after, limit=10)
            audited.extend(page)
            if after is None:
                break

    assert sorted(a.job_id for a in audited) == sorted(job.job_id for job in jobs)
    for read in audited:
        whole = store.get_job(read.job_id)
        assert whole is not None
        assert replace(read, whole=None) == replace(AuditedJob.of(whole, whole.due_key), whole=None)
        assert read.whole is None or read.whole == whole  # an engine that read it whole hands it on


def test_runs_between_reads_whole_runs_and_restore_runs_creates_only_the_missing(backend: Backend) -> None:
    store, job = backend.store, a_job()
    fires = [FIRE - timedelta(minutes=5), FIRE, FIRE + timedelta(minutes=5)]
    store.create_job(job, [a_run(job, FIRE)])
    claimed_run = store.claim(a_claim(job))

    created = store.restore_runs([a_run(job, fire) for fire in fires])

    assert [run.scheduled_for for run in created] == [fires[0], fires[2]]
    runs = store.runs_between(job.job_id, fires[0], fires[2])
    assert [run.scheduled_for for run in runs] == fires
    assert runs[1] == claimed_run  # the existing run left exactly as it was
    assert (
        store.runs_between(job.job_id, fires[2] + timedelta(seconds=1), fires[2] + timedelta(hours=1)) == []
    )


def test_recorded_runs_of_jobs_reads_each_jobs_own_window(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As runs_between job by job: each job's fires from its own first to the shared last, and no fires for a
    job with none (or one that does not exist); of the runs, only the unfinished ones, whole. SQLite reads in
    chunks of two here."""
    monkeypatch.setattr("tickwork.adapters.sqlite.runs.RUNS_OF_JOBS_CHUNK", 2)
    store = backend.store
    early, late, idle = a_job("job_early"), a_job("job_late"), a_job("job_idle")
    fires = [FIRE - timedelta(minutes=10), FIRE - timedelta(minutes=5), FIRE, FIRE + timedelta(minutes=5)]
    early_runs = [a_run(early, fire) for fire in fires]
    # Of early's runs in the window, the first succeeded and the second failed: only the third is unfinished.
    early_runs[0] = replace(early_runs[0], state=RunState.SUCCEEDED, finished_at=fires[0])
    early_runs[1] = replace(early_runs[1], state=RunState.FAILED, finished_at=fires[1])
    store.create_job(early, list(reversed(early_runs)))
    store.create_job(late, [a_run(late, fire) for fire in fires])
    store.create_job(idle, ())

    found = store.recorded_runs_of_jobs(
        {early.job_id: fires[0], late.job_id: fires[2], idle.job_id: fires[0], "job_missing": fires[0]},
        fires[2],
    )

    assert {job_id: sorted(recorded.fires) for job_id, recorded in found.items()} == {
        early.job_id: fires[:3],
        late.job_id: fires[2:3],
        idle.job_id: [],
        "job_missing": [],
    }
    assert found[early.job_id].unfinished == tuple(store.runs_between(early.job_id, fires[2], fires[2]))
    assert [run.state for run in found[early.job_id].unfinished] == [RunState.PLANNED]
    assert found[late.job_id] == RecordedRuns.of(store.runs_between(late.job_id, fires[2], fires[2]))
    assert found[idle.job_id] == RecordedRuns(frozenset(), ())
    assert store.recorded_runs_of_jobs({}, fires[2]) == {}
