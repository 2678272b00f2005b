"""How fast the sweeper repairs a lost top-of-hour dispatch, on the embedded MiniStack: N planned runs whose
messages never reached the queue (the ticker committed them, then died before sending), all overdue.

Side by side in one run, on the same emulator: re-sends one message per request (repair_batch=1, as the
sweeper did before batching) and batched (the default: flushes of 100, sent as SQS batches of 10 per queue).
Each side has its own fresh tables and queues; their sweeps alternate (so a change in the machine's load
hits both alike) until every run is repaired; repairs/minute = runs re-sent / its sweep seconds * 60.
"first sweep" is what one real sweep repairs within its 50 s budget (the sweeper runs once a minute, so
this is the per-minute capacity once N is large enough to fill the budget: N >= ~5,000).

    python benchmarks/bench_sweeper.py [N]        # default 10000 per side
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import NOW, client, dummy_aws_env, machine, other_benchmarks
from tickwork.adapters.dynamodb.items import serialize
from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.adapters.records import run_to_item
from tickwork.adapters.sqs import SqsDispatcher
from tickwork.adapters.sqs_provision import ensure_queues
from tickwork.domain.clock import SystemClock
from tickwork.domain.dispatch import DeadLetter
from tickwork.domain.models import Run, RunState, Trigger, shard_of
from tickwork.local.emulator import Emulator, EmulatorConfig
from tickwork.resources import ResourceNames
from tickwork.services.sweeping import REPAIR_BATCH, Sweeper, SweeperConfig

SHARDS = 16


class _NoDeadLetters:
    def receive(self, max_messages: int) -> list[DeadLetter]:
        return []

    def delete(self, receipt: str) -> None:
        raise AssertionError("no dead letters in this benchmark")


class _NoMetrics:
    def count(self, name: str, value: float = 1.0) -> None:
        pass

    def timing_ms(self, name: str, value_ms: float) -> None:
        pass


def _seed(dynamodb: object, table: str, n: int) -> None:
    """N runs of N jobs due at the top of the hour, planned 2 minutes before it, never sent."""
    due = NOW.replace(minute=0, second=0, microsecond=0)
    runs = []
    for i in range(n):
        job_id = f"job_{i:07d}"
        runs.append(
            Run(
                job_id=job_id,
                scheduled_for=due,
                due_at=due,
                state=RunState.PLANNED,
                trigger=Trigger.SCHEDULE,
                job_version=1,
                planned_at=due - timedelta(minutes=2),
                expires_at=due + timedelta(days=30),
                shard=shard_of(job_id, SHARDS),
            )
        )

    def write(chunk: list[Run]) -> None:
        items = [{"PutRequest": {"Item": serialize(run_to_item(r))}} for r in chunk]
        while items:
            left = dynamodb.batch_write_item(RequestItems={table: items})  # type: ignore[attr-defined]
            items = left.get("UnprocessedItems", {}).get(table, [])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, [runs[i : i + 25] for i in range(0, n, 25)]))


class Side:
    def __init__(self, emulator: Emulator, n: int, batch: int) -> None:
        self.n = n
        self.sweeper, self.sqs, self.urls = _side(emulator, n, batch)
        self.repaired, self.seconds, self.done = 0, 0.0, False
        self.first: tuple[int, float] | None = None

    def sweep_once(self, as_of: datetime) -> None:
        started = time.perf_counter()
        report = self.sweeper.sweep(as_of)
        took = time.perf_counter() - started
        self.seconds += took
        self.repaired += report.redispatched
        if self.first is None:
            self.first = (report.redispatched, took)
        self.done = self.repaired >= self.n or report.redispatched == 0

    def queued(self) -> int:
        return sum(
            int(
                self.sqs.get_queue_attributes(QueueUrl=u, AttributeNames=["ApproximateNumberOfMessages"])[
                    "Attributes"
                ]["ApproximateNumberOfMessages"]
            )
            for u in self.urls
        )


def _side(emulator: Emulator, n: int, batch: int) -> tuple[Sweeper, Any, list[str]]:
    names = ResourceNames(prefix=f"b{uuid.uuid4().hex[:8]}")
    dynamodb, sqs = client("dynamodb", emulator.endpoint_url), client("sqs", emulator.endpoint_url)
    ensure_tables(dynamodb, names)
    urls, _ = ensure_queues(sqs, names, dispatch_queues=4)
    tables = TableNames.from_resources(names)
    _seed(dynamodb, tables.runs, n)
    store = DynamoStore(dynamodb, tables)
    return (
        Sweeper(
            store,
            SqsDispatcher(sqs, urls),
            _NoDeadLetters(),
            SystemClock(),
            _NoMetrics(),
            SHARDS,
            config=SweeperConfig(budget=timedelta(seconds=50), repair_batch=batch),
        ),
        sqs,
        urls,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=10000)
    args = parser.parse_args()
    dummy_aws_env()
    print(f"machine: {machine()}")
    if others := other_benchmarks():
        print(f"note: other benchmarks running: {others}")
    emulator = Emulator(EmulatorConfig())
    emulator.start()
    try:
        labels = ("one per request", "batched")
        sides = [Side(emulator, args.n, 1), Side(emulator, args.n, REPAIR_BATCH)]
        # The runs are an hour overdue as far as the sweeper can tell: sweep "as of" an hour after their due.
        as_of = NOW.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        while not all(side.done for side in sides):
            for side in sides:
                if not side.done:
                    side.sweep_once(as_of)
        rows = []
        for label, side in zip(labels, sides, strict=True):
            assert side.first is not None
            rate = side.repaired / side.seconds * 60
            rows.append((label, side.repaired, side.seconds, rate, side.queued(), *side.first))
        print(
            f"\nsweeper repairs of a lost dispatch: {args.n} overdue planned runs, {SHARDS} shards, MiniStack"
        )
        print(
            f"  {'':16} {'repaired':>9} {'seconds':>8} {'repairs/min':>12} {'in queues':>10}"
            f" {'first sweep':>12} {'its seconds':>12}"
        )
        for label, repaired, seconds, rate, queued, first, first_seconds in rows:
            print(
                f"  {label:16} {repaired:9d} {seconds:8.1f} {rate:12.0f} {queued:10d}"
                f" {first:12d} {first_seconds:12.1f}"
            )
        print(f"  ratio batched / one per request: {rows[1][3] / rows[0][3]:.2f}x")
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
