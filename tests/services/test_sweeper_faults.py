"""The sweeper's isolation beyond one run or shard (issue 11): an unexpected failure leaves its traceback in
the log, a failing re-send batch or dead letter is counted and skipped, and the time budget is a hard limit
(a zero budget is zero, and the dead-letter drain stops at the deadline too)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.fakes import RecordingDispatcher, RecordingMetrics
from tests.services.test_executing import NoDeadLetters
from tests.services.test_sweeper_isolation import NOW, SHARDS, Backlog
from tickwork.adapters.sqs import SqsDispatcher
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import DeadLetter, RunMessage
from tickwork.domain.models import Run
from tickwork.services.sweeping import REPAIR_BATCH, Sweeper, SweeperConfig


class BrokenBatches(RecordingDispatcher):
    """Its first `broken` batch sends raise something no one expected (a bug, not a DispatchError)."""

    broken: int = 1

    def redispatch_many(self, messages: Sequence[RunMessage], now: datetime) -> None:
        if self.broken > 0:
            self.broken -= 1
            raise TypeError("Object of type datetime is not JSON serializable")
        super().redispatch_many(messages, now)


class LetterStore(Backlog):
    """Dead letters' runs: reading one named in `poison` raises; each read takes `read_seconds`."""

    def __init__(self, clock: FakeClock, read_seconds: float = 0.0) -> None:
        super().__init__(clock, {})
        self.read_seconds = read_seconds
        self.poison_jobs: set[str] = set()

    def get_run(self, job_id: str, scheduled_for: datetime) -> Run | None:
        if job_id in self.poison_jobs:
            raise ValueError(f"cannot decode the run of {job_id}")
        self.clock.advance(self.read_seconds)
        return None  # the run is gone (TTL): the letter is deleted


def letters(n: int) -> list[DeadLetter]:
    return [
        DeadLetter(
            receipt=f"r{i}",
            message=RunMessage(f"job_dl_{i}", NOW - timedelta(hours=1), 1, NOW - timedelta(hours=1)),
            body="{}",
            receive_count=5,
        )
        for i in range(n)
    ]


def make(
    store: Backlog,
    dispatcher: RecordingDispatcher,
    metrics: RecordingMetrics,
    dead: NoDeadLetters | None = None,
    budget: timedelta = timedelta(seconds=50),
    repair_batch: int = REPAIR_BATCH,
) -> Sweeper:
    return Sweeper(
        store,  # type: ignore[arg-type]
        dispatcher,
        dead or NoDeadLetters(),
        store.clock,
        metrics,
        SHARDS,
        config=SweeperConfig(budget=budget, repair_batch=repair_batch),
    )


def test_an_unexpected_failure_is_logged_with_its_traceback(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = Backlog(clock, {0: 2})
    poison = store.by_shard[0][0]
    store.poison.add(poison.run_id)

    with caplog.at_level(logging.ERROR, logger="tickwork.services.sweeping"):
        make(store, RecordingDispatcher(), RecordingMetrics()).sweep(NOW)

    [record] = [r for r in caplog.records if poison.run_id in r.getMessage()]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.exc_info[0] is ValueError


def test_a_re_send_batch_that_fails_unexpectedly_is_counted_and_the_sweep_goes_on(clock: FakeClock) -> None:
    """5 runs: their one batch is the sweep's last flush. It fails with a bug; the DLQ is still drained,
    the metrics are still counted, and the runs keep their redispatched_at for the next sweeps."""
    store = Backlog(clock, {0: 5})
    dispatcher, metrics = BrokenBatches(), RecordingMetrics()
    dead = NoDeadLetters(letters(3))

    report = make(store, dispatcher, metrics, dead).sweep(NOW)

    assert report.failures == 1 and "TypeError" in report.errors[0] and "re-send of" in report.errors[0]
    assert len(store.writes) == 5 and dispatcher.messages == []
    assert dead.deleted == ["r0", "r1", "r2"]  # the drain after the failed flush still ran
    assert metrics.counts["SweepFailures"] == 1


def test_a_failing_batch_in_the_middle_does_not_stop_the_next_ones(clock: FakeClock) -> None:
    store = Backlog(clock, {0: 25})
    dispatcher = BrokenBatches()

    report = make(store, dispatcher, RecordingMetrics(), repair_batch=10).sweep(NOW)

    assert report.failures == 1 and dispatcher.batches == [10, 5]  # the first 10 failed, as one failure
    assert sorted(m.run_id for m in dispatcher.messages) == sorted(r.run_id for r in store.by_shard[0][10:])


def test_a_dead_letter_that_fails_unexpectedly_is_counted_kept_and_the_others_are_drained(
    clock: FakeClock,
) -> None:
    store = LetterStore(clock)
    store.poison_jobs.add("job_dl_3")
    dead, metrics = NoDeadLetters(letters(25)), RecordingMetrics()

    report = make(store, RecordingDispatcher(), metrics, dead).sweep(NOW)

    assert report.failures == 1 and "dead letter r3" in report.errors[0]
    assert sorted(dead.deleted) == sorted(f"r{i}" for i in range(25) if i != 3)  # r3 stays in the DLQ
    assert metrics.counts["SweepFailures"] == 1


def test_a_zero_budget_is_zero_not_the_default(clock: FakeClock) -> None:
    """The Lambda passes its remaining time less 5 s, which is 0 when it is nearly out of time: the sweep
    must then repair nothing (and read no DLQ) rather than take the default 50 s and be killed mid-way."""
    store = Backlog(clock, {0: 3, 1: 3, 2: 3, 3: 3}, write_seconds=0.1)
    dead = NoDeadLetters(letters(3))
    started = clock.now()

    report = make(store, RecordingDispatcher(), RecordingMetrics(), dead).sweep(NOW, budget=timedelta(0))

    assert report.redispatched == 0 and sorted(report.shards_cut_short) == [0, 1, 2, 3]
    assert dead.deleted == [] and clock.now() == started


def test_a_longer_budget_than_the_config_is_capped(clock: FakeClock) -> None:
    store = Backlog(clock, {0: 1000}, write_seconds=0.1)
    started = clock.now()

    make(store, RecordingDispatcher(), RecordingMetrics(), budget=timedelta(seconds=5)).sweep(
        NOW, budget=timedelta(minutes=10)
    )

    assert clock.now() - started <= timedelta(seconds=5.1)


def test_the_dead_letter_drain_stops_at_the_deadline(clock: FakeClock) -> None:
    """1,000 dead letters at 0.1 s each do not fit a 10 s sweep: it stops, the rest wait in the DLQ."""
    store = LetterStore(clock, read_seconds=0.1)
    dead = NoDeadLetters(letters(1000))
    started = clock.now()

    make(store, RecordingDispatcher(), RecordingMetrics(), dead, budget=timedelta(seconds=10)).sweep(NOW)

    assert 90 <= len(dead.deleted) <= 110 and len(dead.letters) >= 890
    assert clock.now() - started <= timedelta(seconds=11)


def test_the_dead_letter_drain_keeps_a_share_under_a_backlog(clock: FakeClock) -> None:
    """Every shard has more overdue runs than the budget holds; the drain, last, still gets its slot."""
    store = LetterStore(clock, read_seconds=0.1)
    store.write_seconds = 0.1
    for shard in range(SHARDS):
        store.by_shard[shard] = Backlog(clock, {shard: 500}).by_shard[shard]
    dead = NoDeadLetters(letters(100))

    make(store, RecordingDispatcher(), RecordingMetrics(), dead, budget=timedelta(seconds=20)).sweep(NOW)

    assert len(dead.deleted) >= 30  # about a fifth of 20 s at 0.1 s a letter


class CountingSqs:
    """SendMessageBatch requests per queue, every entry accepted."""

    def __init__(self) -> None:
        self.requests: list[int] = []  # entries per request

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.requests.append(len(Entries))
        return {"Successful": [{"Id": entry["Id"]} for entry in Entries], "Failed": []}


def test_re_sends_fill_sqs_batches_across_the_dispatch_queues(clock: FakeClock) -> None:
    """200 repairs over 4 queues: full batches of 10 (about 20 requests), not a flush of 10 split into one
    small request per queue (about 80)."""
    store = Backlog(clock, {0: 200})
    sqs = CountingSqs()
    dispatcher = SqsDispatcher(sqs, [f"https://sqs.example/q{i}" for i in range(4)])  # type: ignore[arg-type]

    report = Sweeper(
        store,  # type: ignore[arg-type]
        dispatcher,
        NoDeadLetters(),
        clock,
        RecordingMetrics(),
        SHARDS,
    ).sweep(NOW)

    assert report.redispatched == 200 and sum(sqs.requests) == 200
    assert len(sqs.requests) <= 28, sqs.requests  # 2 flushes x 4 queues x ceil(~25 / 10)
