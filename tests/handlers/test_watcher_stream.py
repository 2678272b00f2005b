"""The watcher Lambda over real DynamoDB stream records (moto's stream of the runs table, in the shape the
event source mapping hands the function): a run's failure becomes an event in the events table and one
signed POST to the job's webhook; the same batch delivered again sends nothing more."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from aws_lambda_powertools import Metrics

from tests.conftest import build_components
from tests.scans import stream_records
from tickwork.adapters.metrics import PowertoolsMetrics
from tickwork.composition import Components
from tickwork.domain.alert_rules import AlertRules, Channel, ChannelKind
from tickwork.domain.clock import FakeClock
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Run, RunState, Target, Trigger
from tickwork.domain.schedule import parse_schedule
from tickwork.handlers import runtime, watcher
from tickwork.resources import RUNS
from tickwork.signing import SIGNATURE_HEADER

NOW = datetime(2026, 12, 2, 12, 0, 30, tzinfo=UTC)


class LambdaContext:
    function_name = "tickwork-watcher"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tickwork-watcher"
    aws_request_id = "req-1"


@pytest.fixture
def deployed(dynamodb: Any) -> Iterator[Components]:
    parts = build_components(dynamodb, FakeClock(NOW))
    runtime.reset_for_tests(parts)
    yield parts
    runtime.reset_for_tests(None)


def test_a_failed_run_in_the_stream_is_one_event_and_one_signed_message(
    deployed: Components, receiver: tuple[str, list[dict[str, str]]], dynamodb: Any
) -> None:
    url, received = receiver
    spec = JobSpec(
        name="nightly",
        schedule=parse_schedule("0 3 * * *", "UTC"),
        target=Target("http", {"url": "https://example.com/x", "method": "POST", "body": ""}),
        alerts=AlertRules(channels=(Channel(ChannelKind.WEBHOOK, url),)),
    )
    job = deployed.job_service().create("alice", spec)
    fire = NOW.replace(second=0) + timedelta(minutes=1)
    run = Run.for_fire(job, fire, now=NOW, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
    deployed.store.restore_runs([run])
    running = replace(run, state=RunState.RUNNING, attempt=1, started_at=fire, start_delay_ms=0)
    deployed.store.transition_run(run, running)
    failed = replace(
        running, state=RunState.FAILED, finished_at=fire + timedelta(seconds=3), reason="HTTP 500"
    )
    deployed.store.transition_run(running, failed)
    assert isinstance(deployed.clock, FakeClock)
    deployed.clock.set(fire + timedelta(seconds=4))

    streams = boto3.client("dynamodbstreams", region_name="us-east-1")
    records = stream_records(dynamodb, streams, deployed.settings.resource_names.table(RUNS))
    assert [r["eventName"] for r in records] == ["INSERT", "MODIFY", "MODIFY"]
    report = watcher.handler({"Records": records}, LambdaContext())  # type: ignore[arg-type]
    assert report["observed"]["events"] == 1 and report["delivered"]["sent"] == 1
    events, _ = deployed.event_log.job_events(job.job_id, 10, None)
    assert [(str(e.kind), e.run_id, e.detail) for e in events] == [("run_failed", run.run_id, "HTTP 500")]
    assert len(received) == 1
    assert received[0]["X-Tickwork-Run-Id"] == events[0].dedupe_key
    assert SIGNATURE_HEADER in received[0]

    again = watcher.handler({"Records": records}, LambdaContext())  # type: ignore[arg-type]
    assert again["observed"]["events"] == 0 and again["delivered"]["sent"] == 0
    assert len(received) == 1


def test_a_skip_is_counted_per_job_with_the_services_dimension(capsys: pytest.CaptureFixture[str]) -> None:
    """Which job skipped (issue 32): its own EMF line, JobId and service as dimensions."""
    metrics = PowertoolsMetrics(Metrics(namespace="Tickwork", service="tickwork-test"))
    metrics.count_for_job("SlotsSkipped", "job_a")
    [line] = [json.loads(line) for line in capsys.readouterr().out.splitlines() if "SlotsSkipped" in line]
    [directive] = line["_aws"]["CloudWatchMetrics"]
    assert set(directive["Dimensions"][0]) == {"service", "JobId"}
    assert line["JobId"] == "job_a" and line["service"] == "tickwork-test" and line["SlotsSkipped"] == [1.0]
