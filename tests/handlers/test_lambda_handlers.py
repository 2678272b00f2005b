"""Each Lambda handler driven by its sample event from events/, on moto, with a loopback HTTP target."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import build_components
from tickwork.composition import Components
from tickwork.domain.clock import FakeClock
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import RunState, Target
from tickwork.domain.schedule import parse_schedule
from tickwork.handlers import executor, runtime, sweeper, ticker
from tickwork.services.jobs import JobService, JobServiceConfig

EVENTS = Path(__file__).resolve().parents[2] / "events"


class LambdaContext:
    function_name = "tickwork-test"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tickwork-test"
    aws_request_id = "req-1"


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((EVENTS / name).read_text()))


@pytest.fixture
def deployed(dynamodb: Any, receiver: tuple[str, list[dict[str, str]]]) -> Iterator[Components]:
    parts = build_components(dynamodb, FakeClock(datetime(2026, 12, 2, 12, 0, 30, tzinfo=UTC)))
    runtime.reset_for_tests(parts)
    yield parts
    runtime.reset_for_tests(None)


def test_ticker_sweeper_and_executor_handlers_take_their_sample_events(
    deployed: Components, receiver: tuple[str, list[dict[str, str]]]
) -> None:
    url, received = receiver
    clock = deployed.clock
    assert isinstance(clock, FakeClock)
    jobs = JobService(
        deployed.store,
        deployed.dispatcher,
        clock,
        JobServiceConfig(shard_count=2),
        new_id=lambda: "job_example",
    )
    jobs.create(
        "alice",
        JobSpec(name="ex", schedule=parse_schedule("*/5 * * * *"), target=Target("http", {"url": url})),
    )

    clock.set(datetime(2026, 12, 2, 12, 3, 0, 500000, tzinfo=UTC))
    summary = ticker.handler(load("ticker.json"), LambdaContext())  # type: ignore[arg-type]
    assert summary["RunsPlanned"] == 1 and summary["incomplete_shards"] == []

    clock.set(datetime(2026, 12, 2, 12, 5, 0, 100000, tzinfo=UTC))
    response = executor.handler(load("executor.json"), LambdaContext())  # type: ignore[arg-type]
    assert response == {"batchItemFailures": []}
    run = deployed.store.get_run("job_example", datetime(2026, 12, 2, 12, 5, tzinfo=UTC))
    assert run is not None and run.state is RunState.SUCCEEDED and run.start_delay_ms == 100
    # The queue's SentTimestamp in the event becomes the run's dispatch time.
    assert run.dispatched_at == datetime(2026, 12, 2, 12, 3, 0, 600000, tzinfo=UTC)
    assert [h["Idempotency-Key"] for h in received] == ["job_example:20261202T120500Z"]

    clock.set(datetime(2026, 12, 2, 12, 7, 0, tzinfo=UTC))
    report = sweeper.handler(load("sweeper.json"), LambdaContext())  # type: ignore[arg-type]
    assert report["redispatched"] == 0 and report["expired_leases"] == 0


def test_the_executor_reports_only_the_failed_messages_of_a_batch(deployed: Components) -> None:
    event = load("executor.json")
    good = dict(event["Records"][0])
    bad = {**good, "messageId": "poison-1", "body": "not json"}
    event["Records"] = [good, bad]

    response = executor.handler(event, LambdaContext())  # type: ignore[arg-type]

    # The good message names a run that does not exist here: acknowledged (nothing to do), not failed.
    assert response == {"batchItemFailures": [{"itemIdentifier": "poison-1"}]}


def test_the_ticker_refuses_shards_outside_its_range(deployed: Components) -> None:
    with pytest.raises(ValueError, match="shards"):
        ticker.handler({**load("ticker.json"), "shards": [7]}, LambdaContext())  # type: ignore[arg-type]
