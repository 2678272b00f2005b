"""One shard's share of a top-of-the-hour burst, planned at AWS-like latencies: the planner's rounds as they
were (one SQS batch of 10 messages a round, commits one after another) beside rounds that fill a batch per
queue and commit on threads (issue 29), in one run on this machine.

The real planner, the real SQS dispatcher (its batching and routing) and the in-memory store run; every call
that would cross the network sleeps first, drawn from a stated latency range:

- TransactWriteItems (the plan's commit): uniform 10-20 ms; SendMessageBatch: uniform 5-15 ms; a `due` index
  query page: uniform 5-10 ms. These are the in-region ranges the issue states as its assumption; they are
  not measured here (no AWS account). Pass other ranges with --commit-ms, --send-ms, --query-ms.

What it reports, per shape: the tick's wall time for all the shard's fires (every job due in the same second),
commits and sends per second, and whether the tick fits the ticker's budget (its 50 s timeout less the 10 s
it keeps for the last round, the watermark and the metrics) and, twice over, the lead time the two ticks
before a fire have (50 s at the least).

    python benchmarks/bench_plan_latency.py                 # 3,750 fires: 60,000 at :00 over 16 shards
    python benchmarks/bench_plan_latency.py --fires 1000 --queues 10
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import NOW, concurrency_note, machine, make_job
from tickwork.adapters.memory.store import MemoryStore
from tickwork.adapters.sqs import SqsDispatcher
from tickwork.domain.clock import SystemClock
from tickwork.domain.models import Job, Run
from tickwork.domain.schedule import parse_schedule
from tickwork.services.planning import DISPATCH_BATCH, PLAN_COMMIT_THREADS, Planner, PlannerConfig

TICKER_TIMEOUT_S = 50.0  # infra/constructs/scheduler.py
TICK_RESERVE_S = 10.0  # handlers/ticker.py
LEAD_TIME_S = 50.0  # the least the two ticks before a fire have (docs/design.md, "The tick")


class Latency:
    """A uniform range in milliseconds; sleeps a draw from it (per thread: no shared random state)."""

    def __init__(self, spec: str) -> None:
        low, _, high = spec.partition("-")
        self.low, self.high = float(low), float(high or low)
        self._local = threading.local()

    def wait(self) -> None:
        rng = getattr(self._local, "rng", None)
        if rng is None:
            rng = self._local.rng = random.Random(threading.get_ident())
        time.sleep(rng.uniform(self.low, self.high) / 1000)


class SlowStore:
    """The in-memory store behind a network: commits and `due` queries wait their latency first."""

    def __init__(self, inner: MemoryStore, commit: Latency, query: Latency) -> None:
        self._inner = inner
        self._commit = commit
        self._query = query
        self.commits = 0
        self._lock = threading.Lock()

    def commit_plan(self, job: Job, runs: Sequence[Run], next_fire_at: Any) -> None:
        self._commit.wait()
        with self._lock:
            self.commits += 1
        self._inner.commit_plan(job, runs, next_fire_at)

    def query_due(self, due_key: str, through: Any) -> list[Job]:
        self._query.wait()
        return list(self._inner.query_due(due_key, through))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class SlowSqs:
    """SendMessageBatch behind a network: accepts every entry after its latency."""

    def __init__(self, latency: Latency) -> None:
        self._latency = latency
        self.calls = 0
        self._lock = threading.Lock()

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self._latency.wait()
        with self._lock:
            self.calls += 1
        return {"Successful": [{"Id": entry["Id"]} for entry in Entries], "Failed": []}


def one_shape(
    name: str, config: PlannerConfig, send_threads: int, args: argparse.Namespace
) -> dict[str, Any]:
    store = MemoryStore()
    schedule = parse_schedule("0 * * * *")
    fire = NOW + timedelta(hours=1)
    jobs = [make_job(n, 1, schedule, fire) for n in range(args.fires)]
    for job in jobs:
        store.create_job(job, [])
    slow = SlowStore(store, Latency(args.commit_ms), Latency(args.query_ms))
    sqs = SlowSqs(Latency(args.send_ms))
    urls = [f"https://sqs.example/q{i}" for i in range(args.queues)]
    dispatcher = SqsDispatcher(sqs, urls, send_threads=send_threads)  # type: ignore[arg-type]
    planner = Planner(slow, dispatcher, SystemClock(), config)
    # The tick runs 90 s before the fire: the whole burst is inside its 120 s horizon.
    tick = fire - timedelta(seconds=90)
    started = time.perf_counter()
    report = planner.plan(0, tick)
    elapsed = time.perf_counter() - started
    return {
        "name": name,
        "elapsed": elapsed,
        "planned": report.runs_planned,
        "complete": report.complete,
        "commits": slow.commits,
        "sends": sqs.calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fires", type=int, default=3750, help="jobs due in the same second, in one shard")
    parser.add_argument("--queues", type=int, default=10, help="dispatch queues (the stack's default)")
    parser.add_argument("--commit-ms", default="10-20", help="TransactWriteItems latency range, ms")
    parser.add_argument("--send-ms", default="5-15", help="SendMessageBatch latency range, ms")
    parser.add_argument("--query-ms", default="5-10", help="due-index query latency range, ms")
    args = parser.parse_args()

    print(machine())
    print(concurrency_note())
    shapes = [
        ("rounds of 10 messages, sends and commits in order (before)", PlannerConfig(), 1),
        (
            f"rounds of {DISPATCH_BATCH * args.queues} messages, sends side by side, {PLAN_COMMIT_THREADS} "
            "commit threads (after)",
            PlannerConfig(round_messages=DISPATCH_BATCH * args.queues, commit_threads=PLAN_COMMIT_THREADS),
            args.queues,
        ),
    ]
    print(
        f"{args.fires} fires in one shard, {args.queues} queues; latencies: commit {args.commit_ms} ms, "
        f"send {args.send_ms} ms, query {args.query_ms} ms"
    )
    budget = TICKER_TIMEOUT_S - TICK_RESERVE_S
    results = [one_shape(name, config, threads, args) for name, config, threads in shapes]
    for r in results:
        print(
            f"  {r['name']}\n"
            f"    planned {r['planned']} (complete: {r['complete']}) in {r['elapsed']:.1f} s: "
            f"{r['planned'] / r['elapsed']:.0f} runs/s; {r['commits']} commits, "
            f"{r['sends']} SendMessageBatch\n"
            f"    fits the tick's budget ({budget:.0f} s): {r['elapsed'] <= budget}; "
            f"twice inside the lead time ({LEAD_TIME_S:.0f} s): {2 * r['elapsed'] <= LEAD_TIME_S}"
        )
    before, after = results
    print(f"  after / before: {after['elapsed'] / before['elapsed']:.2f}x the time")


if __name__ == "__main__":
    main()
