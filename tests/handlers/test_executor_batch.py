"""The executor handler on Powertools' BatchProcessor: the batch's runs at once, failures reported per
message in the batch's order, an all-failed batch reported (not raised)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.handlers import executor
from tickwork.services.executing import Outcome
from tickwork.settings import Settings

FIRE = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)


class LambdaContext:
    function_name = "tickwork-executor"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tickwork-executor"
    aws_request_id = "req-batch"


def record(index: int, body: str | None = None) -> dict[str, Any]:
    message = RunMessage(f"job_{index:02d}", FIRE, 0, FIRE)
    return {
        "messageId": f"m-{index:02d}",
        "receiptHandle": f"r-{index:02d}",
        "body": body if body is not None else message.to_json(),
        "attributes": {"SentTimestamp": "1796212980000", "ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tickwork-dispatch-0",
        "awsRegion": "us-east-1",
    }


@dataclass
class FakeExecutor:
    """Stands for the executor service: waits on a barrier (so only a concurrent batch gets through), fails
    chosen jobs, and finishes them in reverse order."""

    barrier: threading.Barrier | None = None
    failing: set[str] = field(default_factory=set)
    seen: list[RunMessage] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def execute(self, message: RunMessage, carrier: object = None) -> Outcome:
        with self.lock:
            self.seen.append(message)
        if self.barrier is not None:
            self.barrier.wait()
        time.sleep(0.01 * (20 - int(message.job_id[-2:])))  # later records finish first
        if message.job_id in self.failing:
            raise RuntimeError(f"target of {message.job_id} exploded")
        return Outcome.SUCCEEDED


@dataclass
class FakeComponents:
    service: FakeExecutor
    worker_ids: list[str | None] = field(default_factory=list)
    # What the handler's InvocationCarrier reads (tests/handlers/test_executor_carrier.py covers it).
    queues: object = None
    settings: Settings = field(default_factory=Settings)
    clock: FakeClock = field(default_factory=lambda: FakeClock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC)))

    def executor(self, worker_id: str | None = None) -> FakeExecutor:
        self.worker_ids.append(worker_id)
        return self.service


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeComponents:
    parts = FakeComponents(FakeExecutor())
    monkeypatch.setattr(executor, "components", lambda: parts)
    return parts


def handle(records: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(executor.handler({"Records": records}, LambdaContext()))


def test_a_batch_of_ten_runs_concurrently(fake: FakeComponents) -> None:
    """All ten wait for each other: one after another, the first would time out alone."""
    fake.service.barrier = threading.Barrier(10, timeout=5)

    started = time.monotonic()
    assert handle([record(i) for i in range(10)]) == {"batchItemFailures": []}

    assert len(fake.service.seen) == 10 and time.monotonic() - started < 4
    assert fake.worker_ids == ["req-batch"]
    assert {m.sent_at for m in fake.service.seen} == {datetime(2026, 12, 2, 12, 3, tzinfo=UTC)}


def test_failures_are_reported_per_message_in_the_batch_order(fake: FakeComponents) -> None:
    fake.service.failing = {"job_01", "job_04", "job_07"}
    records = [record(i) for i in range(9)] + [record(9, body="not a run message")]

    response = handle(records)

    assert response == {"batchItemFailures": [{"itemIdentifier": f"m-{i:02d}"} for i in (1, 4, 7, 9)]}


def test_an_all_failed_batch_reports_every_message_instead_of_raising(fake: FakeComponents) -> None:
    fake.service.failing = {f"job_{i:02d}" for i in range(3)}

    response = handle([record(i) for i in range(3)])

    assert response == {"batchItemFailures": [{"itemIdentifier": f"m-{i:02d}"} for i in range(3)]}


def test_an_empty_event_builds_nothing(fake: FakeComponents) -> None:
    assert handle([]) == {"batchItemFailures": []}
    assert fake.worker_ids == []
