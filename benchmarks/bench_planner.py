"""Planner throughput: fires planned per second, one commit (TransactWriteItems) per due job, on moto and on
the embedded MiniStack emulator.

moto deep-copies its tables on every transaction, so its figure is mostly moto's own cost and falls as the
tables grow; MiniStack is the local stand-in for DynamoDB. On MiniStack the benchmark runs a matrix:

- shard count 4 and 16, every job due in the same minute (a top-of-hour burst);
- "race": N Planner instances plan the SAME shard at once (shards one after another). They race for every
  job; the losers' transactions are cancelled (conflicts) and the runs stay exactly-once;
- "parallel": N threads, each planning different shards (one thread per shard at a time, up to N);
- afterwards a full Scan of the runs table checks exactly one run per job.

The dispatcher only counts (no SQS): this measures the commit path. bench_cost.py measures dispatch.

    python benchmarks/bench_planner.py [jobs] [moto|ministack|both] [shard counts, e.g. 4,16]
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3
from infra.config import DeploymentConfig
from moto import mock_aws

from _common import (
    NOW,
    client,
    concurrency_note,
    delete_tables,
    dummy_aws_env,
    machine,
    make_job,
    next_fire,
    percentile,
    scan_values,
    seed_jobs,
)
from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.domain.clock import FakeClock
from tickwork.domain.models import Job, Run
from tickwork.domain.schedule import parse_schedule
from tickwork.local.emulator import Emulator, EmulatorConfig
from tickwork.resources import ResourceNames
from tickwork.services.planning import Planner, TickReport

MOTO_SHARDS = 8
SCHEDULE = parse_schedule("0 * * * *")
FIRE = next_fire(SCHEDULE, NOW)  # every job fires at 13:00: a top-of-hour burst
TICK_AT = FIRE - timedelta(seconds=90)
SHARD_COUNTS = (4, 16)
THREADS = (1, 2, 4)


class CountingDispatcher:
    def __init__(self) -> None:
        self.sent = 0
        self._lock = threading.Lock()

    def dispatch(self, runs: Sequence[Run], now: datetime, *, commit_by: datetime | None = None) -> None:
        with self._lock:
            self.sent += len(runs)

    def redispatch(self, message: object, shard: int, now: datetime) -> None:
        with self._lock:
            self.sent += 1


class TimedStore(DynamoStore):
    """DynamoStore that records how long every commit (TransactWriteItems) took, won or lost."""

    def __init__(self, dynamodb: Any, tables: TableNames) -> None:
        super().__init__(dynamodb, tables)
        self.commit_seconds: list[float] = []
        self._lock = threading.Lock()

    def commit_plan(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        started = time.perf_counter()
        try:
            super().commit_plan(job, runs, next_fire_at)
        finally:
            elapsed = time.perf_counter() - started
            with self._lock:
                self.commit_seconds.append(elapsed)


@dataclass
class Row:
    mode: str
    shards: int
    threads: int
    fires: int
    seconds: float
    commits: int
    conflicts: int
    commit_p50_ms: float
    commit_p99_ms: float
    runs_in_table: int
    distinct_jobs: int
    dispatched: int
    cpu_seconds: float  # this process's CPU (the ticker's side: planning, serialization, boto3)

    @property
    def fires_per_second(self) -> float:
        return self.fires / self.seconds

    @property
    def ms_per_commit(self) -> float:
        return self.seconds / max(1, self.commits) * 1000

    @property
    def cpu_ms_per_fire(self) -> float:
        return self.cpu_seconds / max(1, self.fires) * 1000


def seed(dynamodb: Any, tables: TableNames, jobs: int, shards: int) -> None:
    seed_jobs(dynamodb, tables.jobs, (make_job(n, shards, SCHEDULE, FIRE) for n in range(jobs)))


def plan_all(
    store: TimedStore, dispatcher: CountingDispatcher, shards: int, threads: int, mode: str
) -> list[TickReport]:
    def planner() -> Planner:
        return Planner(store, dispatcher, FakeClock(TICK_AT))

    reports: list[TickReport] = []
    if mode == "race":
        with ThreadPoolExecutor(max_workers=threads) as pool:
            for shard in range(shards):
                # All N planners start on the shard together; the next shard starts when all are done.
                racers: list[Callable[[], TickReport]] = [
                    partial(planner().plan, shard, TICK_AT) for _ in range(threads)
                ]
                reports.extend(pool.map(lambda f: f(), racers))
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            reports.extend(pool.map(lambda s: planner().plan(s, TICK_AT), range(shards)))
    return reports


def bench_ministack(dynamodb: Any, jobs: int, shards: int, threads: int, mode: str, index: int) -> Row:
    names = ResourceNames(prefix=f"plan{index}")
    ensure_tables(dynamodb, names)
    tables = TableNames.from_resources(names)
    try:
        seed(dynamodb, tables, jobs, shards)
        store = TimedStore(dynamodb, tables)
        dispatcher = CountingDispatcher()
        started, cpu_started = time.perf_counter(), time.process_time()
        reports = plan_all(store, dispatcher, shards, threads, mode)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        run_jobs = scan_values(dynamodb, tables.runs, "job_id")
        return Row(
            mode=mode,
            shards=shards,
            threads=threads,
            fires=sum(r.runs_planned for r in reports),
            seconds=elapsed,
            commits=sum(r.commits for r in reports),
            conflicts=sum(r.conflicts for r in reports),
            commit_p50_ms=percentile(store.commit_seconds, 0.5) * 1000,
            commit_p99_ms=percentile(store.commit_seconds, 0.99) * 1000,
            runs_in_table=len(run_jobs),
            distinct_jobs=len(Counter(run_jobs)),
            dispatched=dispatcher.sent,
            cpu_seconds=cpu,
        )
    finally:
        delete_tables(dynamodb, [tables.jobs, tables.runs, tables.shards])


def print_table(jobs: int, rows: list[Row]) -> None:
    print(
        f"\nplanner on MiniStack: {jobs} jobs due in the same minute "
        "(fires/s = runs committed per wall second)"
    )
    header = (
        f"{'mode':<9}{'shards':>6}{'threads':>8}{'fires':>7}{'wall s':>8}{'fires/s':>9}"
        f"{'ms/commit':>10}{'p50 ms':>8}{'p99 ms':>8}{'cpu ms/fire':>12}{'conflicts':>10}"
        "  exactly-once check (Scan of runs)"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        # Every planner sends before it commits, so a racer that loses has sent too: a run has at least one
        # message, and one per racer that tried it at most (the claim lets one delivery call the target).
        sent_ok = jobs <= r.dispatched <= jobs * r.threads if r.mode == "race" else r.dispatched == jobs
        ok = r.runs_in_table == jobs and r.distinct_jobs == jobs and r.fires == jobs and sent_ok
        check = (
            f"{'OK' if ok else 'FAILED'}: {r.runs_in_table} runs, {r.distinct_jobs} distinct jobs, "
            f"{r.dispatched} messages"
        )
        print(
            f"{r.mode:<9}{r.shards:>6}{r.threads:>8}{r.fires:>7}{r.seconds:>8.2f}{r.fires_per_second:>9.0f}"
            f"{r.ms_per_commit:>10.2f}{r.commit_p50_ms:>8.2f}{r.commit_p99_ms:>8.2f}{r.cpu_ms_per_fire:>12.2f}"
            f"{r.conflicts:>10}"
            f"  {check}"
        )
    print(
        "ms/commit = wall time / winning commits (throughput view); p50/p99 = latency of one "
        "TransactWriteItems, won or cancelled."
    )


def run_ministack(jobs: int, shard_counts: Sequence[int] = SHARD_COUNTS) -> None:
    print(f"machine: {machine()}")
    print(f"other benchmarks running at start: {concurrency_note()}")
    rows: list[Row] = []
    with Emulator(EmulatorConfig()) as emulator:
        dynamodb = client("dynamodb", emulator.endpoint_url)
        index = 0
        for shards in shard_counts:
            for threads in THREADS:
                for mode in ("single",) if threads == 1 else ("race", "parallel"):
                    index += 1
                    row = bench_ministack(dynamodb, jobs, shards, threads, mode, index)
                    rows.append(row)
                    print(
                        f"  {mode:<8} shards={shards:<3} threads={threads}: "
                        f"{row.fires_per_second:.0f} fires/s, {row.conflicts} conflicts",
                        flush=True,
                    )
    print_table(jobs, rows)
    print_top_of_hour_fit([r for r in rows if r.mode == "single"])
    print(f"other benchmarks running at the end: {concurrency_note()}")


# The deployment's ticker, as infra/config.py and infra/constructs/scheduler.py set it.
TOP_OF_HOUR_FIRES = 60_000
TICKER_MEMORY_MB = 1024
TICKER_TIMEOUT_S = 50.0
LAMBDA_MB_PER_VCPU = 1769  # Lambda gives one full vCPU at 1,769 MB, in proportion below it
TICKER_THREADS = 16  # handlers/ticker.py MAX_THREADS: one thread per shard of the invocation


def print_top_of_hour_fit(singles: list[Row]) -> None:
    """Whether a 60,000-fire top-of-hour burst is planned inside the ticker's timeout and lookahead, from the
    ticker's CPU per fire measured here (one thread, so the figure is the planner's own) and the commit
    latency measured here (MiniStack on loopback; DynamoDB's is of the same order), for the fan-outs the
    deployment can use. Needed = max(CPU at Lambda's share of a vCPU, commits in flight one per shard)."""
    config = DeploymentConfig()
    cpu_per_fire = max(r.cpu_ms_per_fire for r in singles) / 1000  # the worse of the measured rows
    commit_s = max(r.commit_p50_ms for r in singles) / 1000
    share = min(1.0, TICKER_MEMORY_MB / LAMBDA_MB_PER_VCPU)
    print(
        f"\ntop-of-hour fit: {TOP_OF_HOUR_FIRES:,} fires over {config.shard_count} shards; ticker CPU "
        f"{cpu_per_fire * 1000:.2f} ms per fire (measured, 1 thread), commit p50 {commit_s * 1000:.2f} ms; "
        f"Lambda at {TICKER_MEMORY_MB} MB has {share:.2f} vCPU; timeout {TICKER_TIMEOUT_S:.0f} s, "
        f"lookahead {config.lookahead_seconds} s"
    )
    for per_invocation in sorted({config.ticker_shards_per_invocation, 1}, reverse=True):
        invocations = config.shard_count // per_invocation
        fires = TOP_OF_HOUR_FIRES / invocations
        cpu_s = fires * cpu_per_fire / share
        io_s = fires / min(per_invocation, TICKER_THREADS) * commit_s
        needed = max(cpu_s, io_s)
        verdict = "fits with 2x margin" if needed * 2 <= TICKER_TIMEOUT_S else "does NOT fit with 2x margin"
        configured = " (configured)" if per_invocation == config.ticker_shards_per_invocation else ""
        print(
            f"  {per_invocation} shard(s) per invocation{configured}: {invocations} invocations x "
            f"{fires:,.0f} fires: CPU {cpu_s:.1f} s, commits {io_s:.1f} s -> {needed:.1f} s; "
            f"x{TICKER_TIMEOUT_S / needed:.1f} inside the timeout, "
            f"x{config.lookahead_seconds / needed:.1f} inside the lookahead: {verdict}"
        )


def bench_moto(jobs: int) -> None:
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    names = ResourceNames(prefix="bench")
    ensure_tables(dynamodb, names)
    tables = TableNames.from_resources(names)
    seed_jobs(
        dynamodb, tables.jobs, (make_job(n, MOTO_SHARDS, SCHEDULE, FIRE) for n in range(jobs)), threads=1
    )
    dispatcher = CountingDispatcher()
    planner = Planner(DynamoStore(dynamodb, tables), dispatcher, FakeClock(TICK_AT))
    started = time.perf_counter()
    planned = sum(planner.plan(shard, TICK_AT).runs_planned for shard in range(MOTO_SHARDS))
    elapsed = time.perf_counter() - started
    print(f"planner on moto: {jobs} jobs due in the same minute, {MOTO_SHARDS} shards, 1 thread")
    print(f"  fires planned: {planned} (dispatched {dispatcher.sent}) in {elapsed:.2f} s")
    print(f"  throughput:    {planned / elapsed:.0f} fires/s  ({elapsed / planned * 1000:.2f} ms per commit)")


def main(jobs: int | None, engines: list[str], shard_counts: Sequence[int] = SHARD_COUNTS) -> None:
    dummy_aws_env()
    if "moto" in engines:
        with mock_aws():
            bench_moto(jobs or 300)
    if "ministack" in engines:
        run_ministack(jobs or 4000, shard_counts)


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else None
    which = sys.argv[2] if len(sys.argv) > 2 else "both"
    counts = [int(c) for c in sys.argv[3].split(",")] if len(sys.argv) > 3 else list(SHARD_COUNTS)
    main(count, ["moto", "ministack"] if which == "both" else [which], counts)
