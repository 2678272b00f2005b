"""A templated target gets the run's context, on both engines (issue 33, part 4): a run planned late (a
catch-up) still carries the slot it stands for, not the wall clock; the slots either side are stored with
the run and read back; the revision is the job's version that planned it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from random import Random
from typing import Any

import pytest

from tests.conftest import NAMES
from tests.fakes import RecordingDispatcher, RecordingMetrics, ScriptedInvoker
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import RunState, Trigger
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.targets import validate_target
from tickwork.services.executing import Executor, ExecutorConfig
from tickwork.services.jobs import JobService, JobServiceConfig
from tickwork.services.planning import Planner

FIRST = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)
BODY = json.dumps(
    {
        "slot": "{{ scheduled_for }}",
        "interval": ["{{ previous_slot }}", "{{ next_slot }}"],
        "day": "{{ scheduled_for.date }}",
        "attempt": "{{ attempt }}",
        "revision": "{{ revision }}",
        "trigger": "{{ trigger }}",
        "run": "{{ run_id }}",
    }
)


@pytest.fixture(params=["sqlite", "moto"])
def engine_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        db = Database(tmp_path / "tickwork.db").open()
        yield SqliteStore(db)
        db.close()
        return
    yield DynamoStore(request.getfixturevalue("dynamodb"), TableNames.from_resources(NAMES))


def test_a_catch_up_run_sends_the_slot_it_stands_for_not_the_wall_clock(engine_store: Any) -> None:
    store, clock, dispatcher = (
        engine_store,
        FakeClock(FIRST - timedelta(minutes=8, seconds=30)),
        RecordingDispatcher(),
    )
    target = validate_target(
        "http",
        {"url": "http://127.0.0.1:9/hook", "method": "POST", "body": BODY,
         "headers": {"X-Slot": "{{ scheduled_for }}"}, "templated": True},
    )  # fmt: skip
    jobs = JobService(store, dispatcher, clock, JobServiceConfig(shard_count=2))
    job = jobs.create("alice", JobSpec(name="report", schedule=parse_schedule("*/5 * * * *"), target=target))
    planner = Planner(store, dispatcher, clock)
    planner.plan(job.shard)  # 11:56:30: nothing due yet
    # The ticker was down until 12:16: it plans 12:00 to 12:15 late, one run each.
    clock.set(FIRST + timedelta(minutes=11))
    planner.plan(job.shard)
    run = store.get_run(job.job_id, FIRST)
    assert run is not None and run.trigger is Trigger.CATCH_UP and run.state is RunState.PLANNED
    assert (run.previous_slot, run.next_slot) == (FIRST - timedelta(minutes=5), FIRST + timedelta(minutes=5))
    invoker = ScriptedInvoker()

    Executor(
        store, invoker, dispatcher, clock, RecordingMetrics(), ExecutorConfig(worker_id="w"), Random(1)
    ).execute(RunMessage.for_run(run))

    [(called, invocation)] = invoker.calls
    assert json.loads(called.config["body"]) == {
        "slot": "2026-12-02T12:05:00Z",
        "interval": ["2026-12-02T12:00:00Z", "2026-12-02T12:10:00Z"],
        "day": "2026-12-02",
        "attempt": "1",
        "revision": str(job.version),
        "trigger": "catch-up",
        "run": run.run_id,
    }
    assert called.config["headers"] == {"X-Slot": "2026-12-02T12:05:00Z"}
    assert (invocation.previous_slot, invocation.next_slot, invocation.revision) == (
        run.previous_slot,
        run.next_slot,
        job.version,
    )
    stored = store.get_job(job.job_id)
    assert stored is not None and stored.target == target  # the job keeps its template; each call fills it
