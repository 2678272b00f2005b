"""The SQS dispatcher routes by the domain rule: a run's first message and its re-sends share one queue."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tickwork.adapters.sqs import SqsDispatcher
from tickwork.domain.dispatch import RunMessage, queue_index
from tickwork.domain.errors import DispatchError
from tickwork.domain.lanes import LONG_CALL_SECONDS
from tickwork.domain.models import Run, RunState, Trigger

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
URLS = [f"https://sqs.example/q{i}" for i in range(10)]


class RecordingSqs:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []  # (queue url, body)

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.sent.extend((QueueUrl, entry["MessageBody"]) for entry in Entries)
        return {"Successful": [{"Id": entry["Id"]} for entry in Entries], "Failed": []}


def a_run(job_id: str, shard: int) -> Run:
    return Run(
        job_id=job_id,
        scheduled_for=NOW,
        due_at=NOW,
        state=RunState.PLANNED,
        trigger=Trigger.SCHEDULE,
        job_version=1,
        planned_at=NOW,
        expires_at=NOW + timedelta(days=30),
        shard=shard,
    )


def test_runs_of_one_shard_spread_over_every_queue_and_resends_follow_them() -> None:
    sqs = RecordingSqs()
    dispatcher = SqsDispatcher(sqs, URLS)  # type: ignore[arg-type]
    runs = [a_run(f"job_{i:04d}", shard=3) for i in range(2_000)]  # one shard: the old rule used one queue

    dispatcher.dispatch(runs, NOW)
    first = dict((RunMessage.from_json(body).run_id, url) for url, body in sqs.sent)
    sqs.sent.clear()
    for run in runs[:50]:
        dispatcher.redispatch(RunMessage.for_run(run), shard=run.shard, now=NOW)

    per_queue = Counter(first.values())
    assert set(per_queue) == set(URLS) and max(per_queue.values()) < 2 * min(per_queue.values())
    assert all(url == first[RunMessage.from_json(body).run_id] for url, body in sqs.sent)
    assert all(first[r.run_id] == URLS[queue_index(r.run_id, 10)] for r in runs)


LONG_CALLS = "https://sqs.example/long-call"


def test_runs_whose_call_may_take_minutes_travel_in_the_long_call_lane_with_their_resends() -> None:
    """A batch ends when its slowest run ends: a run whose call may outlast LONG_CALL_SECONDS goes to the
    long-call queue (read one message per invocation), so it holds no batch-mates; its re-sends follow it."""
    sqs = RecordingSqs()
    dispatcher = SqsDispatcher(sqs, URLS, LONG_CALLS)  # type: ignore[arg-type]
    runs = [a_run(f"job_{i:04d}", shard=1) for i in range(40)]
    timeouts = {
        r.run_id: (LONG_CALL_SECONDS + 1 if i % 4 == 0 else LONG_CALL_SECONDS) for i, r in enumerate(runs)
    }
    messages = [replace(RunMessage.for_run(r), timeout_seconds=timeouts[r.run_id]) for r in runs]

    dispatcher.redispatch_many(messages, NOW)
    dispatcher.redispatch(replace(messages[0], attempt=1), shard=1, now=NOW)
    dispatcher.redispatch(replace(messages[1], attempt=1), shard=1, now=NOW)

    lanes = [(url == LONG_CALLS, timeouts[RunMessage.from_json(body).run_id]) for url, body in sqs.sent]
    assert lanes.count((True, LONG_CALL_SECONDS + 1)) == 10 + 1
    assert lanes.count((False, LONG_CALL_SECONDS)) == 30 + 1
    assert len(lanes) == 42


def test_without_a_long_call_queue_and_for_messages_without_a_timeout_the_batched_lane() -> None:
    sqs = RecordingSqs()
    long_call = replace(RunMessage.for_run(a_run("job_a", 1)), timeout_seconds=840)
    unknown = replace(RunMessage.for_run(a_run("job_b", 1)), timeout_seconds=None)

    SqsDispatcher(sqs, URLS).redispatch_many([long_call], NOW)  # type: ignore[arg-type]
    SqsDispatcher(sqs, URLS, LONG_CALLS).redispatch_many([unknown], NOW)  # type: ignore[arg-type]

    assert [url for url, _ in sqs.sent] == [
        URLS[queue_index(long_call.run_id, 10)],
        URLS[queue_index(unknown.run_id, 10)],
    ]


class FlakySqs(RecordingSqs):
    """Refuses every entry sent to one queue."""

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused = refused
        self.lock = threading.Lock()

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        if QueueUrl == self.refused:
            failed = [{"Id": e["Id"], "Code": "InternalError", "Message": "injected"} for e in Entries]
            return {"Successful": [], "Failed": failed}
        with self.lock:
            return super().send_message_batch(QueueUrl, Entries)


def test_batches_sent_side_by_side_arrive_as_in_order_and_report_every_failed_message() -> None:
    runs = [a_run(f"job_{i:04d}", shard=2) for i in range(300)]
    in_order, side_by_side = RecordingSqs(), RecordingSqs()
    SqsDispatcher(in_order, URLS).dispatch(runs, NOW)  # type: ignore[arg-type]
    SqsDispatcher(side_by_side, URLS, send_threads=10).dispatch(runs, NOW)  # type: ignore[arg-type]
    assert sorted(side_by_side.sent) == sorted(in_order.sent) and len(in_order.sent) == 300

    flaky = FlakySqs(URLS[3])
    with pytest.raises(DispatchError) as refused:
        SqsDispatcher(flaky, URLS, send_threads=10).dispatch(runs, NOW)  # type: ignore[arg-type]
    on_the_refused_queue = {RunMessage.for_run(r).dedupe_id for r in runs if queue_index(r.run_id, 10) == 3}
    assert set(refused.value.failed_run_ids) == on_the_refused_queue
    assert len(flaky.sent) == 300 - len(on_the_refused_queue)
