"""The embedded engines' queues (SQLite's, and the in-memory one the fast tests run on) against the SQS
behaviour Tickwork relies on, through the same SQS-speaking code (SqsDispatcher, SqsDeadLetters) that runs
over them in `tickwork local` and in the service tests. Offline, on a fake clock, except the two-process
test, which runs on the real one; the last two tests are the SQLite engine's alone (its lock, its
processes)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tickwork.adapters.memory.queue import MemoryQueues
from tickwork.adapters.queue_api import MAX_WAIT_SECONDS
from tickwork.adapters.sqlite import db as sqlite_db
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.queue import (
    BATCH_LIMIT,
    NON_EXISTENT_QUEUE,
    POLL_SECONDS,
    RECEIPT_INVALID,
    THROTTLED,
    TOO_MANY_ENTRIES,
    QueueConfig,
    SqliteQueues,
    queue_configs,
)
from tickwork.adapters.sqs import SqsDeadLetters, SqsDispatcher
from tickwork.adapters.sqs_provision import dispatch_queue_name
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.errors import DispatchError
from tickwork.resources import DISPATCH, DISPATCH_DLQ, ResourceNames

NAMES = ResourceNames(prefix="t")
START = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
ALL_COUNTS = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesDelayed",
    "ApproximateNumberOfMessagesNotVisible",
]


class Queues:
    """The queues under test (one engine's), their names, and the clock they read."""

    def __init__(self, engine: str, path: Path, clock: FakeClock) -> None:
        self.clock = clock
        self.urls, self.dlq, configs = queue_configs(NAMES, dispatch_queues=2)
        self.url = self.urls[0]
        self.sqs: SqliteQueues | MemoryQueues
        if engine == "sqlite":
            self.db: Database | None = Database(path).open()
            self.sqs = SqliteQueues(self.db, configs, self.now_ms, clock.sleep)
            # A long poll looks again at least this often: another process's send wakes no one here.
            self.longest_sleep = POLL_SECONDS
        else:
            self.db = None
            self.sqs = MemoryQueues(configs, self.now_ms, clock.sleep)
            # Every send is this process's and wakes a long poll: it sleeps until a message is due.
            self.longest_sleep = float(MAX_WAIT_SECONDS)

    def now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    def receive(self, url: str | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        response = self.sqs.receive_message(
            QueueUrl=url or self.url, MessageSystemAttributeNames=["All"], **kwargs
        )
        messages: list[dict[str, Any]] = response.get("Messages", [])
        return messages

    def counts(self, url: str | None = None) -> dict[str, int]:
        attributes = self.sqs.get_queue_attributes(QueueUrl=url or self.url, AttributeNames=["All"])
        return {name: int(value) for name, value in attributes["Attributes"].items()}


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture(params=["sqlite", "memory"])
def queues(request: pytest.FixtureRequest, tmp_path: Path, fake_clock: FakeClock) -> Iterator[Queues]:
    world = Queues(request.param, tmp_path / "tickwork.db", fake_clock)
    yield world
    if world.db is not None:
        world.db.close()


def a_message(seconds_from_start: float = 0, job_id: str = "job_q") -> RunMessage:
    fire = START + timedelta(seconds=seconds_from_start)
    return RunMessage(job_id, fire.replace(microsecond=0), attempt=0, not_before=fire)


def error_code(error: pytest.ExceptionInfo[ClientError]) -> str:
    return str(error.value.response.get("Error", {}).get("Code"))


def test_queue_configs_follow_the_shared_definitions() -> None:
    urls, dlq, configs = queue_configs(NAMES, dispatch_queues=3)

    assert (
        urls
        == [dispatch_queue_name(NAMES, i) for i in range(3)]
        == ["t-dispatch-0", "t-dispatch-1", "t-dispatch-2"]
    )
    assert dlq == NAMES.queue(DISPATCH_DLQ) == "t-dispatch-dlq"
    assert configs[urls[1]] == QueueConfig(
        DISPATCH.visibility_timeout_seconds, DISPATCH.max_receive_count, dlq
    )
    assert configs[dlq] == QueueConfig(DISPATCH_DLQ.visibility_timeout_seconds)


def test_a_delayed_message_stays_hidden_until_its_delay_is_over(queues: Queues) -> None:
    sent = queues.sqs.send_message(QueueUrl=queues.url, MessageBody="later", DelaySeconds=30)

    assert queues.receive() == []
    assert queues.counts()["ApproximateNumberOfMessagesDelayed"] == 1
    queues.clock.advance(29.999)
    assert queues.receive() == []
    queues.clock.advance(0.001)
    [message] = queues.receive()
    assert (message["MessageId"], message["Body"]) == (sent["MessageId"], "later")
    assert message["Attributes"]["SentTimestamp"] == str(int(START.timestamp() * 1000))
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"


def test_the_visibility_timeout_hides_a_message_then_it_comes_back_counted(queues: Queues) -> None:
    queues.sqs.send_message(QueueUrl=queues.url, MessageBody="m")
    [first] = queues.receive(VisibilityTimeout=10)
    first_received = first["Attributes"]["ApproximateFirstReceiveTimestamp"]

    queues.clock.advance(9.999)
    assert queues.receive() == []
    queues.clock.advance(0.001)
    [again] = queues.receive()

    assert again["MessageId"] == first["MessageId"]
    assert again["ReceiptHandle"] != first["ReceiptHandle"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert again["Attributes"]["ApproximateFirstReceiveTimestamp"] == first_received


def test_a_receive_without_visibility_uses_the_queue_default(queues: Queues) -> None:
    queues.sqs.send_message(QueueUrl=queues.url, MessageBody="m")
    assert len(queues.receive()) == 1

    queues.clock.advance(DISPATCH.visibility_timeout_seconds - 1)
    assert queues.receive() == []
    queues.clock.advance(1)
    assert len(queues.receive()) == 1


def test_messages_come_oldest_visible_first_and_at_most_the_number_asked(queues: Queues) -> None:
    for delay in (3, 1, 2):
        queues.sqs.send_message(QueueUrl=queues.url, MessageBody=f"after {delay}", DelaySeconds=delay)
    queues.clock.advance(3)

    assert [m["Body"] for m in queues.receive(MaxNumberOfMessages=2)] == ["after 1", "after 2"]
    assert [m["Body"] for m in queues.receive(MaxNumberOfMessages=10)] == ["after 3"]


def test_a_message_is_dead_lettered_after_max_receive_count_and_read_back_by_the_sweeper(
    queues: Queues,
) -> None:
    message = a_message()
    sent = queues.sqs.send_message(QueueUrl=queues.url, MessageBody=message.to_json())
    for _ in range(DISPATCH.max_receive_count):
        assert len(queues.receive(VisibilityTimeout=5)) == 1
        queues.clock.advance(5)

    # The receive that would have delivered it a sixth time moves it instead.
    assert queues.receive() == []
    assert queues.counts() == dict.fromkeys(ALL_COUNTS, 0)
    assert queues.counts(queues.dlq)["ApproximateNumberOfMessages"] == 1
    [raw] = queues.receive(queues.dlq, VisibilityTimeout=0)
    assert raw["MessageId"] == sent["MessageId"]
    assert raw["Attributes"]["SentTimestamp"] == str(int(START.timestamp() * 1000))

    letters = SqsDeadLetters(queues.sqs, queues.dlq).receive(10)  # type: ignore[arg-type]

    assert [(letter.message, letter.body) for letter in letters] == [(message, message.to_json())]
    # The count carries over from the dispatch queue, as in SQS: 5 deliveries, then the two DLQ reads.
    assert letters[0].receive_count == DISPATCH.max_receive_count + 2
    SqsDeadLetters(queues.sqs, queues.dlq).delete(letters[0].receipt)  # type: ignore[arg-type]
    assert queues.counts(queues.dlq) == dict.fromkeys(ALL_COUNTS, 0)


def test_the_dispatcher_sends_each_run_delayed_to_its_due_time(queues: Queues) -> None:
    due_now, due_later = a_message(0, "job_now"), a_message(30, "job_later")
    dispatcher = SqsDispatcher(queues.sqs, queues.urls)  # type: ignore[arg-type]

    dispatcher.redispatch_many([due_now, due_later], START)

    assert [
        RunMessage.from_json(m["Body"]) for m in queues.receive(dispatcher.queue_for_run_id(due_now.run_id))
    ] == [due_now]
    later_queue = dispatcher.queue_for_run_id(due_later.run_id)
    assert queues.receive(later_queue) == []
    queues.clock.advance(30)
    [later] = queues.receive(later_queue)
    assert RunMessage.from_json(later["Body"]) == due_later
    assert later["Attributes"]["SentTimestamp"] == str(int(START.timestamp() * 1000))


def test_the_dispatcher_splits_more_than_ten_messages_into_batches(queues: Queues) -> None:
    messages = [a_message(i * 300) for i in range(25)]
    dispatcher = SqsDispatcher(queues.sqs, [queues.url])  # type: ignore[arg-type]

    dispatcher.redispatch_many(messages, START)

    assert queues.counts()["ApproximateNumberOfMessagesDelayed"] == 24
    assert queues.counts()["ApproximateNumberOfMessages"] == 1


def test_a_batch_of_more_than_ten_entries_is_refused_whole(queues: Queues) -> None:
    entries = [{"Id": str(i), "MessageBody": "m"} for i in range(BATCH_LIMIT + 1)]

    with pytest.raises(ClientError) as refused:
        queues.sqs.send_message_batch(QueueUrl=queues.url, Entries=entries)

    assert error_code(refused) == TOO_MANY_ENTRIES
    assert queues.counts()["ApproximateNumberOfMessages"] == 0
    response = queues.sqs.send_message_batch(QueueUrl=queues.url, Entries=entries[:BATCH_LIMIT])
    assert [ok["Id"] for ok in response["Successful"]] == [str(i) for i in range(BATCH_LIMIT)]
    assert len({ok["MessageId"] for ok in response["Successful"]}) == BATCH_LIMIT
    assert response["Failed"] == []


def test_a_stale_receipt_cannot_delete_the_message_while_the_fresh_one_can(queues: Queues) -> None:
    queues.sqs.send_message(QueueUrl=queues.url, MessageBody="m")
    [first] = queues.receive(VisibilityTimeout=1)
    queues.clock.advance(1)
    [second] = queues.receive(VisibilityTimeout=60)

    with pytest.raises(ClientError) as refused:
        queues.sqs.delete_message(QueueUrl=queues.url, ReceiptHandle=first["ReceiptHandle"])
    assert error_code(refused) == RECEIPT_INVALID
    assert queues.counts()["ApproximateNumberOfMessagesNotVisible"] == 1

    response = queues.sqs.delete_message_batch(
        QueueUrl=queues.url,
        Entries=[
            {"Id": "stale", "ReceiptHandle": first["ReceiptHandle"]},
            {"Id": "fresh", "ReceiptHandle": second["ReceiptHandle"]},
        ],
    )

    assert response["Successful"] == [{"Id": "fresh"}]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in response["Failed"]] == [
        ("stale", RECEIPT_INVALID, True)
    ]
    assert queues.counts() == dict.fromkeys(ALL_COUNTS, 0)
    with pytest.raises(ClientError) as again:  # deleted: its receipt is gone with it
        queues.sqs.delete_message(QueueUrl=queues.url, ReceiptHandle=second["ReceiptHandle"])
    assert error_code(again) == RECEIPT_INVALID


def test_a_batch_delete_deletes_every_message_it_names_and_refuses_a_receipt_named_twice(
    queues: Queues,
) -> None:
    """The SQLite engine deletes a batch whose receipts all match with one statement, and goes entry by
    entry only when one does not: the answers are the same either way."""
    queues.sqs.send_message_batch(
        QueueUrl=queues.url, Entries=[{"Id": m, "MessageBody": m} for m in ("a", "b", "c", "d")]
    )
    a, b, c, d = queues.receive(MaxNumberOfMessages=4, VisibilityTimeout=60)

    every = queues.sqs.delete_message_batch(
        QueueUrl=queues.url,
        Entries=[{"Id": m["Body"], "ReceiptHandle": m["ReceiptHandle"]} for m in (a, b, c)],
    )
    twice = queues.sqs.delete_message_batch(
        QueueUrl=queues.url,
        Entries=[
            {"Id": "first", "ReceiptHandle": d["ReceiptHandle"]},
            {"Id": "again", "ReceiptHandle": d["ReceiptHandle"]},
        ],
    )

    assert (every["Successful"], every["Failed"]) == ([{"Id": "a"}, {"Id": "b"}, {"Id": "c"}], [])
    assert twice["Successful"] == [{"Id": "first"}]
    assert [(f["Id"], f["Code"]) for f in twice["Failed"]] == [("again", RECEIPT_INVALID)]
    assert queues.counts() == dict.fromkeys(ALL_COUNTS, 0)


def test_changing_the_visibility_extends_or_ends_the_hiding(queues: Queues) -> None:
    queues.sqs.send_message_batch(
        QueueUrl=queues.url, Entries=[{"Id": "a", "MessageBody": "a"}, {"Id": "b", "MessageBody": "b"}]
    )
    a, b = queues.receive(MaxNumberOfMessages=2, VisibilityTimeout=10)
    queues.clock.advance(5)

    queues.sqs.change_message_visibility(
        QueueUrl=queues.url, ReceiptHandle=a["ReceiptHandle"], VisibilityTimeout=20
    )
    response = queues.sqs.change_message_visibility_batch(
        QueueUrl=queues.url,
        Entries=[
            {"Id": "b", "ReceiptHandle": b["ReceiptHandle"], "VisibilityTimeout": 0},
            {"Id": "bogus", "ReceiptHandle": "no-such-receipt", "VisibilityTimeout": 0},
        ],
    )

    assert response["Successful"] == [{"Id": "b"}]
    assert [(f["Id"], f["Code"]) for f in response["Failed"]] == [("bogus", RECEIPT_INVALID)]
    assert [m["Body"] for m in queues.receive(MaxNumberOfMessages=10)] == ["b"]  # visible again at once
    queues.clock.advance(19.999)  # 5 s in, extended by 20 s: not back at 10 s
    assert queues.receive() == []
    queues.clock.advance(0.001)
    assert [m["Body"] for m in queues.receive()] == ["a"]


def test_a_stale_receipt_cannot_change_the_visibility(queues: Queues) -> None:
    queues.sqs.send_message(QueueUrl=queues.url, MessageBody="m")
    [first] = queues.receive(VisibilityTimeout=1)
    queues.clock.advance(1)
    queues.receive(VisibilityTimeout=60)

    with pytest.raises(ClientError) as refused:
        queues.sqs.change_message_visibility(
            QueueUrl=queues.url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
        )

    assert error_code(refused) == RECEIPT_INVALID
    assert queues.receive() == []  # the new holder's visibility stands


def test_queue_attributes_count_visible_delayed_and_in_flight_messages(queues: Queues) -> None:
    for delay in (0, 0, 60):
        queues.sqs.send_message(QueueUrl=queues.url, MessageBody="m", DelaySeconds=delay)
    queues.receive()

    assert queues.counts() == {
        "ApproximateNumberOfMessages": 1,
        "ApproximateNumberOfMessagesDelayed": 1,
        "ApproximateNumberOfMessagesNotVisible": 1,
    }
    # Only what is asked for, as the status line asks.
    asked = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    assert queues.sqs.get_queue_attributes(QueueUrl=queues.url, AttributeNames=asked) == {
        "Attributes": {"ApproximateNumberOfMessages": "1", "ApproximateNumberOfMessagesDelayed": "1"}
    }
    assert queues.counts(queues.urls[1]) == dict.fromkeys(ALL_COUNTS, 0)  # queues are separate


def test_a_long_poll_sleeps_until_the_first_message_is_due(queues: Queues) -> None:
    queues.sqs.send_message(QueueUrl=queues.url, MessageBody="soon", DelaySeconds=3)

    [message] = queues.receive(WaitTimeSeconds=20)

    assert message["Body"] == "soon"
    assert queues.clock.now() - START == timedelta(seconds=3)
    assert max(queues.clock.slept) <= queues.longest_sleep


def test_an_empty_long_poll_returns_nothing_when_the_wait_is_over(queues: Queues) -> None:
    assert queues.sqs.receive_message(QueueUrl=queues.url, WaitTimeSeconds=2) == {"Messages": []}
    assert sum(queues.clock.slept) == pytest.approx(2.0)
    assert max(queues.clock.slept) <= queues.longest_sleep


@pytest.mark.parametrize("engine", ["sqlite", "memory"])
def test_a_long_poll_ends_even_on_a_clock_that_stands_still(engine: str, tmp_path: Path) -> None:
    slept: list[float] = []
    _, _, configs = queue_configs(NAMES, 1)
    sqs: SqliteQueues | MemoryQueues
    if engine == "sqlite":
        sqs = SqliteQueues(Database(tmp_path / "q.db").open(), configs, lambda: 0, slept.append)
    else:
        sqs = MemoryQueues(configs, lambda: 0, slept.append)

    assert sqs.receive_message(QueueUrl="t-dispatch-0", WaitTimeSeconds=1) == {"Messages": []}
    assert sum(slept) == pytest.approx(1.0)


def test_an_unknown_queue_is_an_sqs_error_the_callers_already_handle(queues: Queues) -> None:
    with pytest.raises(ClientError) as refused:
        queues.sqs.send_message(QueueUrl="t-no-such-queue", MessageBody="m")
    assert error_code(refused) == NON_EXISTENT_QUEUE

    with pytest.raises(DispatchError, match="NonExistentQueue"):
        SqsDeadLetters(queues.sqs, "t-no-such-queue").receive(10)  # type: ignore[arg-type]


def test_a_busy_database_is_throttling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "busy.db"
    monkeypatch.setattr(sqlite_db, "BUSY_TIMEOUT_MS", 50)
    database = Database(path).open()
    urls, _, configs = queue_configs(NAMES, 1)
    sqs = SqliteQueues(database, configs, lambda: 0)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    try:
        with pytest.raises(ClientError) as throttled:
            sqs.send_message(QueueUrl=urls[0], MessageBody="m")
        with pytest.raises(DispatchError, match=THROTTLED):
            SqsDispatcher(sqs, urls).redispatch_many([a_message()], START)  # type: ignore[arg-type]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert error_code(throttled) == THROTTLED
    sqs.send_message(QueueUrl=urls[0], MessageBody="m")  # free again
    assert sqs.get_queue_attributes(QueueUrl=urls[0], AttributeNames=["ApproximateNumberOfMessages"]) == {
        "Attributes": {"ApproximateNumberOfMessages": "1"}
    }


# A receiver in its own process, on the real clock: waits for the go file, then receives, works briefly and
# deletes until the queue is empty, and writes the bodies it received as JSON.
_RECEIVER = """
import json, sys, time
from pathlib import Path
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.queue import SqliteQueues, queue_configs
from tickwork.resources import ResourceNames

database, queue, out, ready, go = sys.argv[1:]
_, _, configs = queue_configs(ResourceNames(prefix="t"), 1)
sqs = SqliteQueues(Database(Path(database)).open(), configs, lambda: int(time.time() * 1000))
Path(ready).touch()
while not Path(go).exists():
    time.sleep(0.01)
received = []
while True:
    response = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=60)
    messages = response.get("Messages", [])
    if not messages:
        break
    received.extend(m["Body"] for m in messages)
    time.sleep(0.002)  # the work: without any, one process can hold the write lock until the queue is empty
    entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
    response = sqs.delete_message_batch(QueueUrl=queue, Entries=entries)
    assert not response["Failed"], response
Path(out).write_text(json.dumps(received))
"""


@pytest.mark.process
def test_two_processes_receiving_from_one_file_get_every_message_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    urls, _, configs = queue_configs(NAMES, 1)
    sqs = SqliteQueues(Database(path).open(), configs, lambda: int(time.time() * 1000))
    bodies = [f"m-{i}" for i in range(500)]
    for start in range(0, len(bodies), BATCH_LIMIT):
        chunk = bodies[start : start + BATCH_LIMIT]
        sqs.send_message_batch(QueueUrl=urls[0], Entries=[{"Id": b, "MessageBody": b} for b in chunk])
    go = tmp_path / "go"
    receivers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _RECEIVER,
                str(path),
                urls[0],
                str(tmp_path / f"out-{n}.json"),
                str(tmp_path / f"ready-{n}"),
                str(go),
            ]
        )
        for n in range(2)
    ]
    try:
        deadline = time.monotonic() + 20
        while not all((tmp_path / f"ready-{n}").exists() for n in range(2)) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()  # both start receiving together
        codes = [receiver.wait(timeout=20) for receiver in receivers]
    finally:
        for receiver in receivers:
            if receiver.poll() is None:
                receiver.kill()
                receiver.wait()

    assert codes == [0, 0]
    received = [json.loads((tmp_path / f"out-{n}.json").read_text()) for n in range(2)]
    assert all(received), "both processes should have received some of the messages"
    assert sorted(received[0] + received[1]) == sorted(bodies)  # every message, none twice
    assert sqs.get_queue_attributes(QueueUrl=urls[0], AttributeNames=["All"])["Attributes"] == dict.fromkeys(
        ALL_COUNTS, "0"
    )
