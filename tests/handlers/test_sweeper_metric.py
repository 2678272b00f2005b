"""The sweeper Lambda emits OldestOverdueRunAge (Seconds) on every sweep, for the safety-net alarm."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.handlers.test_lambda_handlers import LambdaContext, deployed, load
from tickwork.composition import Components
from tickwork.domain.clock import FakeClock
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Target
from tickwork.domain.schedule import parse_schedule
from tickwork.handlers import sweeper
from tickwork.services.jobs import JobService, JobServiceConfig

__all__ = ["deployed"]  # fixtures used here
FIRE = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)


def emitted(out: str, name: str) -> tuple[str, float]:
    """(unit, value) of one metric in the EMF lines Powertools printed."""
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        blob: dict[str, Any] = json.loads(line)
        for directive in blob.get("_aws", {}).get("CloudWatchMetrics", []):
            for metric in directive["Metrics"]:
                if metric["Name"] == name:
                    values = blob[name] if isinstance(blob[name], list) else [blob[name]]
                    assert len(values) == 1, values  # one data point per sweep
                    return str(metric["Unit"]), float(values[0])
    raise AssertionError(f"{name} not emitted in {out!r}")


def test_no_overdue_run_emits_zero(deployed: Components, capsys: pytest.CaptureFixture[str]) -> None:
    report = sweeper.handler(load("sweeper.json"), LambdaContext())

    assert report["oldest_overdue_seconds"] == 0.0
    assert emitted(capsys.readouterr().out, "OldestOverdueRunAge") == ("Seconds", 0.0)


def test_a_run_whose_message_was_lost_is_reported_by_its_age(
    deployed: Components, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = deployed.clock
    assert isinstance(clock, FakeClock)
    clock.set(FIRE - timedelta(seconds=60))  # the 12:05 fire is within the API's planning lookahead
    jobs = JobService(
        deployed.store, deployed.dispatcher, clock, JobServiceConfig(shard_count=2), new_id=lambda: "job_lost"
    )
    jobs.create(
        "alice",
        JobSpec(
            name="lost",
            schedule=parse_schedule("*/5 * * * *"),
            target=Target("http", {"url": "http://127.0.0.1:9/hook"}),
        ),
    )
    run = deployed.store.get_run("job_lost", FIRE)
    assert run is not None and run.due_at == FIRE  # planned at creation, its message never consumed
    clock.set(FIRE + timedelta(minutes=4, seconds=30))

    sweeper.handler(load("sweeper.json"), LambdaContext())

    assert emitted(capsys.readouterr().out, "OldestOverdueRunAge") == ("Seconds", 270.0)
