"""The local executor pool's own rules, with a fake SQS: messages are held for a short visibility that a
heartbeat extends while they are handled, and a failing receive backs off instead of crashing the process."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import EndpointConnectionError

from tickwork.domain.dispatch import RunMessage
from tickwork.local.executor_pool import ExecutorPool
from tickwork.services.executing import Outcome


class FakeSqs:
    def __init__(self, bodies: list[str], receive_failures: int = 0) -> None:
        self.bodies = bodies
        self.receive_failures = receive_failures
        self.receives: list[dict[str, Any]] = []
        self.beats: list[list[str]] = []
        self.deleted: list[str] = []
        self.lock = threading.Lock()

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        with self.lock:
            self.receives.append({**kwargs, "at": time.monotonic()})
            if self.receive_failures:
                self.receive_failures -= 1
                raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
            count = kwargs["MaxNumberOfMessages"]
            batch, self.bodies = self.bodies[:count], self.bodies[count:]
        return {
            "Messages": [
                {"Body": b, "ReceiptHandle": f"r{i}", "MessageId": str(i)} for i, b in enumerate(batch)
            ]
        }

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> None:
        with self.lock:
            self.beats.append([e["ReceiptHandle"] for e in Entries if e["VisibilityTimeout"] == 2])

    def delete_message(self, QueueUrl: str, ReceiptHandle: str) -> None:
        with self.lock:
            self.deleted.append(ReceiptHandle)


class SlowExecutor:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def execute(self, message: RunMessage) -> Outcome:
        time.sleep(self.seconds)
        return Outcome.SUCCEEDED


def run_pool(sqs: FakeSqs, executor: SlowExecutor, seconds: float) -> None:
    pool = ExecutorPool(sqs, ["q"], lambda: executor, cap=2, visibility_seconds=2, heartbeat_seconds=0.1)  # type: ignore[arg-type,return-value]
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    pool.run(stop)


def body(i: int) -> str:
    at = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    return RunMessage(job_id=f"job_{i}", scheduled_for=at, attempt=1, not_before=at).to_json()


def test_a_message_being_handled_is_kept_invisible_by_the_heartbeat_until_it_is_done() -> None:
    sqs = FakeSqs([body(0)])

    # Beats every 0.1 s over a 1.5 s run: at least 3 even on a loaded machine (0.5 s saw one beat under load).
    run_pool(sqs, SlowExecutor(1.5), seconds=0.3)  # stops while the run executes: the pool waits for it

    assert sqs.receives[0]["VisibilityTimeout"] == 2  # not the queue's 960 s
    assert sum(beat == ["r0"] for beat in sqs.beats) >= 3, sqs.beats
    assert sqs.deleted == ["r0"]


def test_a_failing_receive_backs_off_instead_of_crashing_the_executor() -> None:
    sqs = FakeSqs([body(0)], receive_failures=2)

    run_pool(sqs, SlowExecutor(0.0), seconds=2.5)  # backoff 0.5 s then 1 s, then the message

    assert sqs.deleted == ["r0"]
    gaps = [b["at"] - a["at"] for a, b in zip(sqs.receives, sqs.receives[1:], strict=False)][:2]
    assert gaps[0] >= 0.45 and gaps[1] >= 0.95, gaps
