"""The local executor pool's own rules, with a fake SQS: messages are held for a short visibility that a
heartbeat extends while they are handled, a failing receive backs off instead of crashing the process,
handled messages are deleted in batches, and every queue has its own receive loop under one cap."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest
from botocore.exceptions import EndpointConnectionError

from tickwork.domain.dispatch import RunMessage
from tickwork.local.executor_pool import WRITE_BATCH, ExecutorPool
from tickwork.services.executing import Outcome

# A deadline for what takes milliseconds: only reached when the behaviour under test is missing.
GENEROUS_SECONDS = 30.0


class FakeSqs:
    """Queues of message bodies by url. Receipts and message ids are unique across queues and receives."""

    def __init__(
        self,
        queues: dict[str, list[str]],
        receive_failures: int = 0,
        failing_deletes: frozenset[str] = frozenset(),
        rendezvous: threading.Barrier | None = None,
    ) -> None:
        self.queues = {url: list(bodies) for url, bodies in queues.items()}
        self.receive_failures = receive_failures
        self.failing_deletes = failing_deletes
        # When given, the first receive on each queue waits there for the first receive on the others.
        self.rendezvous = rendezvous
        self.rendezvous_broken = False
        self.receives: list[dict[str, Any]] = []
        self.beats: list[list[str]] = []
        self.delete_batches: list[tuple[str, list[str]]] = []  # (queue url, receipts) per call
        self.deleted: list[str] = []
        self.handed_back: list[str] = []  # receipts made visible again after their processing raised
        self.queue_of: dict[str, str] = {}  # receipt -> queue url
        self.lock = threading.Lock()
        self._next = 0

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        url = kwargs["QueueUrl"]
        with self.lock:
            first = all(r["QueueUrl"] != url for r in self.receives)
            self.receives.append({**kwargs, "at": time.monotonic()})
            if self.receive_failures:
                self.receive_failures -= 1
                raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
        if first and self.rendezvous is not None:
            try:
                self.rendezvous.wait()
            except threading.BrokenBarrierError:
                self.rendezvous_broken = True
        with self.lock:
            count = kwargs["MaxNumberOfMessages"]
            batch, self.queues[url] = self.queues[url][:count], self.queues[url][count:]
            messages = []
            for b in batch:
                receipt = f"r{self._next}"
                self.queue_of[receipt] = url
                messages.append({"Body": b, "ReceiptHandle": receipt, "MessageId": f"m{self._next}"})
                self._next += 1
        if not messages:
            time.sleep(0.01)  # a long poll's stand-in: an empty queue does not answer at once
        return {"Messages": messages}

    def change_message_visibility(self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int) -> None:
        with self.lock:
            self.handed_back.append(ReceiptHandle)

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> None:
        with self.lock:
            self.beats.append([e["ReceiptHandle"] for e in Entries if e["VisibilityTimeout"] == 2])

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        ok = [e for e in Entries if e["ReceiptHandle"] not in self.failing_deletes]
        failed = [e for e in Entries if e["ReceiptHandle"] in self.failing_deletes]
        with self.lock:
            self.delete_batches.append((QueueUrl, [e["ReceiptHandle"] for e in Entries]))
            self.deleted.extend(e["ReceiptHandle"] for e in ok)
        return {
            "Successful": [{"Id": e["Id"]} for e in ok],
            "Failed": [
                {"Id": e["Id"], "SenderFault": True, "Code": "ReceiptHandleIsInvalid", "Message": "gone"}
                for e in failed
            ],
        }


class SlowExecutor:
    """Takes `seconds` per run and counts the runs executing at once. With `gather`, the first runs wait
    there for each other (the barrier's size of them executing at once)."""

    def __init__(self, seconds: float, gather: threading.Barrier | None = None) -> None:
        self.seconds = seconds
        self.gather = gather
        self.gather_broken = False
        self.running = 0
        self.peak = 0
        self.started = 0
        self.lock = threading.Lock()

    def execute(self, message: RunMessage) -> Outcome:
        with self.lock:
            self.running += 1
            self.started += 1
            self.peak = max(self.peak, self.running)
            gathering = self.gather is not None and self.started <= self.gather.parties
        if gathering and self.gather is not None:
            try:
                self.gather.wait()
            except threading.BrokenBarrierError:
                self.gather_broken = True
        time.sleep(self.seconds)
        with self.lock:
            self.running -= 1
        return Outcome.SUCCEEDED

    def begin_together(self, messages: list[RunMessage]) -> None:
        return None  # no write units: each message is executed alone

    def start(self, message: RunMessage) -> FakeBegun:
        return FakeBegun(message)

    def advance(self, begun: FakeBegun) -> Outcome:
        """No write units: a delivery is carried to its end, as a real executor without them does."""
        return self.execute(begun.message)


@dataclass(frozen=True)
class FakeBegun:
    """What the pool hands back to `advance` or `resume` untouched (a real Begun carries what is known of
    it). `begun_together`: its first writes were in a receive's batch; `at`: the step it is at."""

    message: RunMessage
    begun_together: bool = False
    at: str = "start"

    @property
    def done(self) -> bool:
        return self.at == "done"


class BatchingExecutor(SlowExecutor):
    """Begins the messages of a receive together (as the SQLite engine's executor does) and records each
    batch; resuming a begun delivery executes it. With `failing`, a batch with that job in it raises."""

    def __init__(self, failing: str | None = None) -> None:
        super().__init__(0.0)
        self.failing = failing
        self.batches: list[list[str]] = []
        self.resumed: list[str] = []
        self.alone: list[str] = []

    def begin_together(self, messages: list[RunMessage]) -> list[FakeBegun]:
        with self.lock:
            self.batches.append([m.job_id for m in messages])
        if any(m.job_id == self.failing for m in messages):
            raise RuntimeError("injected: a delivery's writes broke")
        return [FakeBegun(m, begun_together=True) for m in messages]

    def advance(self, begun: FakeBegun) -> Outcome:
        if not begun.begun_together:
            return self.execute(begun.message)
        with self.lock:
            self.resumed.append(begun.message.job_id)
        return super().execute(begun.message)

    def execute(self, message: RunMessage) -> Outcome:
        with self.lock:
            self.alone.append(message.job_id)
        return super().execute(message)


class WritingExecutor(SlowExecutor):
    """Each delivery stops at two writes (its claim, its finish) for the pool's shared commits, each commit
    taking `commit_seconds`. Records every commit's deliveries. With `failing`, a commit holding that job
    raises and so does its resume alone; with `refusing`, no commit lands (busy)."""

    NEXT: ClassVar[dict[str, str]] = {"claim": "called", "finish": "done"}

    def __init__(
        self,
        commit_seconds: float = 0.0,
        failing: str | None = None,
        failing_at: str = "claim",
        refusing: bool = False,
        ending_fails: str | None = None,
    ) -> None:
        super().__init__(0.0)
        self.commit_seconds, self.refusing = commit_seconds, refusing
        self.failing, self.failing_at, self.ending_fails = failing, failing_at, ending_fails
        self.commits: list[list[tuple[str, str]]] = []
        self.alone: list[str] = []

    def advance(self, begun: FakeBegun) -> FakeBegun | Outcome:
        if begun.at == "start":
            return replace(begun, at="claim")
        if begun.at == "called":
            self.execute(begun.message)  # the target's call
            return replace(begun, at="finish")
        assert begun.at == "done", begun
        return Outcome.SUCCEEDED

    def carry_together(self, begun: list[FakeBegun]) -> list[FakeBegun] | None:
        assert all(b.at in self.NEXT for b in begun), begun
        with self.lock:
            self.commits.append([(b.message.job_id, b.at) for b in begun])
        time.sleep(self.commit_seconds)
        if any(b.message.job_id == self.failing and b.at == self.failing_at for b in begun):
            raise RuntimeError("injected: a delivery's writes broke")
        if self.refusing:
            return None
        return [replace(b, at=self.NEXT[b.at]) for b in begun]

    def resume(self, begun: FakeBegun) -> Outcome:
        if begun.done:  # its commit landed: only its end is recorded
            if begun.message.job_id == self.ending_fails:
                raise RuntimeError("injected: recording its end broke")
            return Outcome.SUCCEEDED
        with self.lock:
            self.alone.append(begun.message.job_id)
        if begun.message.job_id == self.failing:
            raise RuntimeError("injected: its writes broke alone too")
        if begun.at == "claim":
            self.execute(begun.message)
        return Outcome.SUCCEEDED

    def carried(self) -> list[tuple[str, str]]:
        return sorted(one for commit in self.commits for one in commit)


def make_pool(sqs: FakeSqs, executor: SlowExecutor, cap: int, **options: Any) -> ExecutorPool:
    return ExecutorPool(
        sqs,
        list(sqs.queues),
        lambda: executor,  # type: ignore[arg-type,return-value]
        cap=cap,
        visibility_seconds=2,
        heartbeat_seconds=0.1,
        **options,
    )


def run_pool(sqs: FakeSqs, executor: SlowExecutor, seconds: float) -> None:
    pool = make_pool(sqs, executor, cap=2)
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    pool.run(stop)


def run_pool_until(pool: ExecutorPool, done: Callable[[], bool]) -> None:
    """Run the pool until `done` (checked while it runs), then stop it and wait until it has stopped."""
    stop = threading.Event()
    worker = threading.Thread(target=pool.run, args=(stop,))
    worker.start()
    deadline = time.monotonic() + GENEROUS_SECONDS
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    worker.join(GENEROUS_SECONDS)
    assert not worker.is_alive(), "the pool did not stop"
    assert done(), "timed out"


def body(i: int) -> str:
    at = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    return RunMessage(job_id=f"job_{i}", scheduled_for=at, attempt=1, not_before=at).to_json()


def bodies(count: int) -> list[str]:
    return [body(i) for i in range(count)]


def test_a_message_being_handled_is_kept_invisible_by_the_heartbeat_until_it_is_done() -> None:
    sqs = FakeSqs({"q": [body(0)]})

    # Beats every 0.1 s over a 1.5 s run: at least 3 even on a loaded machine (0.5 s saw one beat under load).
    run_pool(sqs, SlowExecutor(1.5), seconds=0.3)  # stops while the run executes: the pool waits for it

    assert sqs.receives[0]["VisibilityTimeout"] == 2  # not the queue's 960 s
    assert sum(beat == ["r0"] for beat in sqs.beats) >= 3, sqs.beats
    assert sqs.deleted == ["r0"]


def test_a_failing_receive_backs_off_instead_of_crashing_the_executor() -> None:
    sqs = FakeSqs({"q": [body(0)]}, receive_failures=2)

    run_pool(sqs, SlowExecutor(0.0), seconds=2.5)  # backoff 0.5 s then 1 s, then the message

    assert sqs.deleted == ["r0"]
    gaps = [b["at"] - a["at"] for a, b in zip(sqs.receives, sqs.receives[1:], strict=False)][:2]
    assert gaps[0] >= 0.45 and gaps[1] >= 0.95, gaps


def test_handled_messages_are_deleted_in_batches_of_at_most_ten() -> None:
    sqs = FakeSqs({"q": bodies(25)})
    # A linger longer than the test: only full batches go out while it runs, the rest on stop.
    pool = make_pool(sqs, SlowExecutor(0.0), cap=10, delete_linger_seconds=600)

    run_pool_until(pool, lambda: pool.stats.processed == 25)

    assert sorted(len(receipts) for _, receipts in sqs.delete_batches) == [5, 10, 10]
    assert sorted(sqs.deleted) == sorted(f"r{i}" for i in range(25))


def test_a_lone_handled_message_is_deleted_after_the_linger_without_waiting_for_a_full_batch() -> None:
    sqs = FakeSqs({"q": bodies(3)})
    pool = make_pool(sqs, SlowExecutor(0.0), cap=10)  # the default linger, well under a second

    run_pool_until(pool, lambda: len(sqs.deleted) == 3)  # deleted while the pool still runs

    assert all(len(receipts) <= 3 for _, receipts in sqs.delete_batches)


def test_a_pool_stopped_right_after_handling_messages_has_deleted_all_of_them() -> None:
    sqs = FakeSqs({"a": bodies(7), "b": bodies(4)})
    pool = make_pool(sqs, SlowExecutor(0.0), cap=4, delete_linger_seconds=600)

    run_pool_until(pool, lambda: pool.stats.processed == 11)

    assert sorted(sqs.deleted) == sorted(f"r{i}" for i in range(11))
    for url, receipts in sqs.delete_batches:  # each from the queue it was received from
        assert {sqs.queue_of[r] for r in receipts} == {url}


def test_a_failed_delete_is_logged_and_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    sqs = FakeSqs({"q": bodies(3)}, failing_deletes=frozenset({"r1"}))
    pool = make_pool(sqs, SlowExecutor(0.0), cap=3)

    with caplog.at_level(logging.WARNING, logger="tickwork.local.executor_pool"):
        run_pool_until(pool, lambda: pool.stats.processed == 3)

    # It comes back after its visibility timeout instead (a duplicate, recognised by the fenced claim).
    assert sum("r1" in receipts for _, receipts in sqs.delete_batches) == 1
    assert sorted(sqs.deleted) == ["r0", "r2"]
    [record] = [r for r in caplog.records if "deleting handled message" in r.getMessage()]
    assert "m1" in record.getMessage() and "ReceiptHandleIsInvalid" in record.getMessage()


def test_every_queue_has_its_own_receive_loop() -> None:
    # The first receive on each queue waits for the first on the other: one loop for both would stall.
    sqs = FakeSqs({"a": bodies(3), "b": bodies(3)}, rendezvous=threading.Barrier(2, timeout=GENEROUS_SECONDS))
    pool = make_pool(sqs, SlowExecutor(0.0), cap=4)

    run_pool_until(pool, lambda: pool.stats.processed == 6)

    assert not sqs.rendezvous_broken
    assert len(sqs.deleted) == 6


def test_two_queues_together_run_exactly_the_cap_at_once_and_never_more() -> None:
    cap = 3
    sqs = FakeSqs({"a": bodies(15), "b": bodies(15)})
    # The first `cap` runs wait for each other: the pool must let that many execute at once.
    executor = SlowExecutor(0.01, gather=threading.Barrier(cap, timeout=GENEROUS_SECONDS))
    pool = make_pool(sqs, executor, cap=cap)

    run_pool_until(pool, lambda: pool.stats.processed == 30)

    assert not executor.gather_broken
    assert executor.peak == cap
    assert pool.stats.peak_in_flight == cap
    assert all(r["MaxNumberOfMessages"] <= cap for r in sqs.receives)
    assert len(sqs.deleted) == 30


def test_a_cap_smaller_than_the_number_of_queues_still_serves_every_queue() -> None:
    # Two idle queues keep giving their one slot back and asking again: the busy queue gets its turn.
    sqs = FakeSqs({"idle-1": [], "busy": bodies(5), "idle-2": []})
    pool = make_pool(sqs, SlowExecutor(0.0), cap=1)

    run_pool_until(pool, lambda: pool.stats.processed == 5)

    assert pool.stats.peak_in_flight == 1
    assert len(sqs.deleted) == 5


def test_a_crashed_receive_loop_ends_the_pool_with_its_error_without_a_stop() -> None:
    """Nothing polls for a crash: the crashed loop halts the others, and run() raises its error."""

    class Broken(FakeSqs):
        def receive_message(self, **kwargs: Any) -> dict[str, Any]:
            if kwargs["QueueUrl"] == "b":
                raise RuntimeError("a bug in the loop")
            return super().receive_message(**kwargs)

    pool = make_pool(Broken({"a": [], "b": []}), SlowExecutor(0.0), cap=2)
    stop = threading.Event()  # never set
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            pool.run(stop)
        except RuntimeError as error:
            outcome.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(GENEROUS_SECONDS)
    assert not worker.is_alive(), "the pool went on after a loop crashed"
    assert [str(error) for error in outcome] == ["a bug in the loop"]


def test_a_message_received_after_an_idle_spell_is_kept_invisible_too() -> None:
    """The heartbeat sleeps while nothing is held and wakes for the first message held."""
    sqs = FakeSqs({"q": []})
    stop = threading.Event()
    pool = make_pool(sqs, SlowExecutor(1.5), cap=2)
    worker = threading.Thread(target=pool.run, args=(stop,), daemon=True)
    worker.start()
    time.sleep(0.3)  # idle: nothing held
    with sqs.lock:
        sqs.queues["q"].append(body(0))
    deadline = time.monotonic() + GENEROUS_SECONDS
    while pool.stats.in_flight == 0 and pool.stats.processed == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    worker.join(GENEROUS_SECONDS)
    assert not worker.is_alive(), "the pool did not stop"
    assert sqs.deleted == ["r0"]
    assert sum(beat == ["r0"] for beat in sqs.beats) >= 3, sqs.beats


def test_a_pool_long_polling_sqlite_queues_stops_at_once(tmp_path: Any) -> None:
    """Its receives wait up to 20 s, and the stop interrupts them: the pool does not wait them out."""
    from tickwork.adapters.sqlite.db import Database
    from tickwork.adapters.sqlite.queue import SqliteQueues, queue_configs
    from tickwork.resources import ResourceNames

    urls, _, configs = queue_configs(ResourceNames(prefix="t"), dispatch_queues=2)
    db = Database(tmp_path / "tickwork.db").open()
    queues = SqliteQueues(db, configs, lambda: int(time.time() * 1000))
    pool = ExecutorPool(
        queues,
        urls,
        lambda: SlowExecutor(0.0),  # type: ignore[arg-type,return-value]
        cap=2,
        poll_wait_seconds=20,
        stop_waiting=queues.stop_waiting,
    )
    stop = threading.Event()
    worker = threading.Thread(target=pool.run, args=(stop,), daemon=True)
    worker.start()
    time.sleep(0.5)  # both receives asleep in their long polls
    stopped_at = time.monotonic()
    stop.set()
    worker.join(GENEROUS_SECONDS)
    assert not worker.is_alive()
    assert time.monotonic() - stopped_at < 5  # not the 10-20 s a long poll would hold it
    queues.close()
    db.close()


def test_the_messages_of_one_receive_are_begun_together_and_each_is_resumed_once() -> None:
    sqs = FakeSqs({"q": [*bodies(24), "not a run message"]})
    executor = BatchingExecutor()
    pool = make_pool(sqs, executor, cap=10)

    run_pool_until(pool, lambda: pool.stats.processed == 25)

    begun = [job for batch in executor.batches for job in batch]
    assert sorted(begun) == sorted(executor.resumed)  # every delivery begun was carried on, once
    # A receive of one message (the first, after an empty queue) is executed alone: nothing to batch.
    assert sorted(executor.resumed + executor.alone) == sorted(f"job_{i}" for i in range(24))
    assert max(len(batch) for batch in executor.batches) > 1  # several in one batch, not one by one
    # The body that is no run message is not begun: its worker meets the error and hands it back.
    assert pool.stats.errors == 1
    assert sqs.handed_back == ["r24"] and len(sqs.deleted) == 24


def test_a_batch_that_raised_is_executed_message_by_message(caplog: pytest.LogCaptureFixture) -> None:
    sqs = FakeSqs({"q": bodies(10)})
    executor = BatchingExecutor(failing="job_3")
    pool = make_pool(sqs, executor, cap=10)

    with caplog.at_level(logging.ERROR):
        run_pool_until(pool, lambda: pool.stats.processed == 10)

    assert any("each is executed alone" in r.getMessage() for r in caplog.records)
    batched = {job for batch in executor.batches for job in batch}
    # The batch holding job_3 went message by message; any other batch was resumed.
    assert sorted(executor.alone + executor.resumed) == sorted(f"job_{i}" for i in range(10))
    assert "job_3" in executor.alone and "job_3" in batched
    assert pool.stats.errors == 0 and len(sqs.deleted) == 10


def test_deliveries_at_a_write_at_the_same_time_share_a_commit() -> None:
    """Nobody waits for a commit: while one is made, the deliveries reaching a write gather for the next."""
    jobs = 40
    sqs = FakeSqs({"q": bodies(jobs)})
    executor = WritingExecutor(commit_seconds=0.02)
    pool = make_pool(sqs, executor, cap=20)

    run_pool_until(pool, lambda: pool.stats.processed == jobs)

    names = [f"job_{i}" for i in range(jobs)]
    assert executor.carried() == sorted([(n, "claim") for n in names] + [(n, "finish") for n in names])
    assert max(len(commit) for commit in executor.commits) > 1  # several in one commit, not one by one
    assert max(len(commit) for commit in executor.commits) <= WRITE_BATCH
    assert executor.alone == [] and pool.stats.errors == 0
    assert executor.started == jobs  # each target called once
    assert sorted(sqs.deleted) == sorted(f"r{i}" for i in range(jobs))


@pytest.mark.parametrize("failing_at", ["claim", "finish"])
def test_a_shared_commit_that_raised_leaves_each_delivery_to_go_alone(
    caplog: pytest.LogCaptureFixture, failing_at: str
) -> None:
    jobs = 12
    sqs = FakeSqs({"q": bodies(jobs)})
    executor = WritingExecutor(commit_seconds=0.01, failing="job_3", failing_at=failing_at)
    pool = make_pool(sqs, executor, cap=6)

    with caplog.at_level(logging.ERROR):
        run_pool_until(pool, lambda: pool.stats.processed == jobs)

    assert any("carrying out the writes of" in r.getMessage() for r in caplog.records)
    # Every delivery of the commit that held job_3's failing write went alone, once; job_3 failed alone
    # and was handed back.
    [failed] = [commit for commit in executor.commits if ("job_3", failing_at) in commit]
    assert sorted(executor.alone) == sorted(job for job, _ in failed)
    assert pool.stats.errors == 1 and sqs.handed_back == ["r3"]
    assert sorted(sqs.deleted) == sorted(f"r{i}" for i in range(jobs) if i != 3)
    # A target is called once per delivery: the claims that went alone call it alone, the finishes not again.
    assert executor.started == (jobs - 1 if failing_at == "claim" else jobs)


def test_a_delivery_whose_end_fails_after_its_commit_is_handed_back_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = 6
    sqs = FakeSqs({"q": bodies(jobs)})
    executor = WritingExecutor(ending_fails="job_2")
    pool = make_pool(sqs, executor, cap=3)

    with caplog.at_level(logging.ERROR):
        run_pool_until(pool, lambda: pool.stats.processed == jobs)

    assert any("handing on a delivery after its writes" in r.getMessage() for r in caplog.records)
    assert pool.stats.errors == 1 and sqs.handed_back == ["r2"] and pool.stats.in_flight == 0
    assert sorted(sqs.deleted) == sorted(f"r{i}" for i in range(jobs) if i != 2)
    assert executor.alone == []


def test_a_shared_commit_that_did_not_land_leaves_each_delivery_to_go_alone() -> None:
    jobs = 8
    sqs = FakeSqs({"q": bodies(jobs)})
    executor = WritingExecutor(refusing=True)
    pool = make_pool(sqs, executor, cap=4)

    run_pool_until(pool, lambda: pool.stats.processed == jobs)

    assert sorted(executor.alone) == sorted(f"job_{i}" for i in range(jobs))
    assert executor.started == jobs and pool.stats.errors == 0
    assert sorted(sqs.deleted) == sorted(f"r{i}" for i in range(jobs))


def test_a_pool_stopped_while_writes_wait_for_their_commit_ends_every_delivery_first() -> None:
    jobs = 10
    sqs = FakeSqs({"q": bodies(jobs)})
    executor = WritingExecutor(commit_seconds=0.15)
    pool = make_pool(sqs, executor, cap=jobs)
    stop = threading.Event()
    worker = threading.Thread(target=pool.run, args=(stop,))
    worker.start()
    deadline = time.monotonic() + GENEROUS_SECONDS
    while pool.stats.in_flight < jobs and time.monotonic() < deadline:
        time.sleep(0.005)

    stop.set()  # the claims are being committed or waiting to be: the pool ends each delivery first
    worker.join(GENEROUS_SECONDS)

    assert not worker.is_alive(), "the pool did not stop"
    assert pool.stats.processed == jobs and pool.stats.in_flight == 0
    assert executor.started == jobs
    assert sorted(sqs.deleted) == sorted(f"r{i}" for i in range(jobs))
