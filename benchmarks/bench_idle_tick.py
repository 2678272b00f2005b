"""Idle tick: DynamoDB calls, items read and wall time of one tick over every shard, with 1,000 / 10,000 /
100,000 registered jobs and none due, on the embedded MiniStack emulator. The reads must stay flat: the
ticker reads the sparse `due` index by shard x minute, never the job definitions.

The jobs fire tomorrow, spread over the day's minutes and over 16 shards. The table grows in place (1k, then
+9k, then +90k); after each step a first tick sets the watermarks, then several ticks a minute apart are
measured (the table below shows the median tick).

    python benchmarks/bench_idle_tick.py [max_jobs]
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

from _common import (
    NOW,
    CallCounter,
    client,
    concurrency_note,
    dummy_aws_env,
    machine,
    make_job,
    seed_jobs,
)
from bench_planner import CountingDispatcher
from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.domain.clock import FakeClock
from tickwork.domain.schedule import parse_schedule
from tickwork.local.emulator import Emulator, EmulatorConfig
from tickwork.resources import ResourceNames
from tickwork.services.planning import Planner

SHARDS = 16
SIZES = (1_000, 10_000, 100_000)
MEASURED_TICKS = 5
SEED_THREADS = 4
SCHEDULE = parse_schedule("0 3 * * *")  # daily; what matters is that the next fire is hours away
TOMORROW = NOW.replace(hour=0) + timedelta(days=1)


@dataclass
class Step:
    jobs: int
    seeded: int
    seed_seconds: float
    calls: int
    calls_by_op: dict[str, int]
    items_read: int
    jobs_seen: int
    tick_ms: float
    tick_ms_all: list[float]


def tick_all(planner: Planner, at_minute: int) -> tuple[int, float]:
    at = NOW + timedelta(minutes=at_minute)
    started = time.perf_counter()
    seen = sum(planner.plan(shard, at).jobs_seen for shard in range(SHARDS))
    return seen, (time.perf_counter() - started) * 1000


def main(max_jobs: int) -> None:
    dummy_aws_env()
    print(f"machine: {machine()}")
    print(f"other benchmarks running at start: {concurrency_note()}")
    steps: list[Step] = []
    minute = 0
    with Emulator(EmulatorConfig()) as emulator:
        dynamodb = client("dynamodb", emulator.endpoint_url)
        names = ResourceNames(prefix="idle")
        ensure_tables(dynamodb, names)
        tables = TableNames.from_resources(names)
        planner = Planner(DynamoStore(dynamodb, tables), CountingDispatcher(), FakeClock(NOW))
        registered = 0
        for size in (s for s in SIZES if s <= max_jobs):
            jobs = (
                # Next fire tomorrow, spread over the day's 1,440 minutes: due-index partitions stay small.
                make_job(n, SHARDS, SCHEDULE, TOMORROW + timedelta(minutes=n % 1440))
                for n in range(registered, size)
            )
            started = time.perf_counter()
            seeded = seed_jobs(dynamodb, tables.jobs, jobs, threads=SEED_THREADS)
            seed_seconds = time.perf_counter() - started
            registered = size
            print(
                f"  seeded {seeded} jobs (total {size}) in {seed_seconds:.1f} s "
                f"({seeded / seed_seconds:.0f} items/s, BatchWriteItem x25, {SEED_THREADS} threads)",
                flush=True,
            )
            minute += 1
            tick_all(planner, minute)  # first tick after the jobs arrived: (re)sets the watermarks
            counter = CallCounter()
            counter.attach(dynamodb)
            walls: list[float] = []
            seen = 0
            for _ in range(MEASURED_TICKS):
                minute += 1
                counter.reset()
                seen, wall = tick_all(planner, minute)
                walls.append(wall)
            counter.detach(dynamodb)
            steps.append(
                Step(
                    jobs=size,
                    seeded=seeded,
                    seed_seconds=seed_seconds,
                    calls=counter.total,
                    calls_by_op=dict(counter.calls),
                    items_read=counter.items_read,
                    jobs_seen=seen,
                    tick_ms=statistics.median(walls),
                    tick_ms_all=walls,
                )
            )
    print(f"\nidle tick on MiniStack: {SHARDS} shards, no job due; one tick = every shard planned once")
    header = (
        f"{'jobs':>8}{'seed s':>8}{'items/s':>9}{'calls/tick':>11}{'items read':>11}{'jobs seen':>10}"
        f"{'tick ms (median)':>17}  calls by operation; all ticks (ms)"
    )
    print(header)
    print("-" * len(header))
    for s in steps:
        ops = ", ".join(f"{k} {v}" for k, v in sorted(s.calls_by_op.items()))
        each = " ".join(f"{w:.0f}" for w in s.tick_ms_all)
        print(
            f"{s.jobs:>8}{s.seed_seconds:>8.1f}{s.seeded / s.seed_seconds:>9.0f}{s.calls:>11}"
            f"{s.items_read:>11}{s.jobs_seen:>10}{s.tick_ms:>17.1f}  {ops}; {each}"
        )
    if len(steps) > 1:
        first, last = steps[0], steps[-1]
        print(
            f"ratio {last.jobs // 1000}k / {first.jobs // 1000}k: calls {last.calls / first.calls:.2f}, "
            f"items read {last.items_read / max(1, first.items_read):.2f}, "
            f"tick wall time {last.tick_ms / first.tick_ms:.2f}"
        )
    print(f"other benchmarks running at the end: {concurrency_note()}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else SIZES[-1])
