"""Planner throughput: fires planned per second, one commit (TransactWriteItems) per due job, on moto and on
the embedded MiniStack emulator.

moto deep-copies its tables on every transaction, so its figure is mostly moto's own cost and falls as the
tables grow; MiniStack is the local stand-in for DynamoDB.

    python benchmarks/bench_planner.py [jobs] [moto|ministack|both]
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from moto import mock_aws

from tickwork.adapters.dynamodb.items import job_to_item, serialize
from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.domain.clock import FakeClock
from tickwork.domain.models import Job, Run, Target, shard_of
from tickwork.domain.schedule import next_fire_after, parse_schedule
from tickwork.local.emulator import Emulator, EmulatorConfig
from tickwork.resources import ResourceNames
from tickwork.services.planning import Planner

SHARDS = 8
NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


class CountingDispatcher:
    def __init__(self) -> None:
        self.sent = 0

    def dispatch(self, runs: Sequence[Run], now: datetime) -> None:
        self.sent += len(runs)

    def redispatch(self, message: object, shard: int, now: datetime) -> None:
        self.sent += 1


def seed(client: Any, tables: TableNames, jobs: int, fire: datetime) -> None:
    schedule = parse_schedule("0 * * * *")
    for start in range(0, jobs, 25):
        batch = []
        for n in range(start, min(jobs, start + 25)):
            job_id = f"job_{n:07d}"
            job = Job(
                job_id=job_id,
                owner="bench",
                name="b",
                schedule=schedule,
                target=Target("http", {"url": "https://example.com/"}),
                shard=shard_of(job_id, SHARDS),
                created_at=NOW,
                updated_at=NOW,
                next_fire_at=fire,
            )
            batch.append({"PutRequest": {"Item": serialize(job_to_item(job))}})
        client.batch_write_item(RequestItems={tables.jobs: batch})


def bench(client: Any, jobs: int, engine: str) -> None:
    names = ResourceNames(prefix="bench")
    ensure_tables(client, names)
    tables = TableNames.from_resources(names)
    fire = next_fire_after(parse_schedule("0 * * * *"), NOW)  # every job fires at 13:00: a top-of-hour burst
    assert fire is not None
    seed(client, tables, jobs, fire)
    dispatcher = CountingDispatcher()
    tick_at = fire - timedelta(seconds=90)
    planner = Planner(DynamoStore(client, tables), dispatcher, FakeClock(tick_at))
    started = time.perf_counter()
    planned = sum(planner.plan(shard, tick_at).runs_planned for shard in range(SHARDS))
    elapsed = time.perf_counter() - started
    print(f"planner on {engine}: {jobs} jobs due in the same minute, {SHARDS} shards, 1 thread")
    print(f"  fires planned: {planned} (dispatched {dispatcher.sent}) in {elapsed:.2f} s")
    print(f"  throughput:    {planned / elapsed:.0f} fires/s  ({elapsed / planned * 1000:.2f} ms per commit)")


def main(jobs: int, engines: list[str]) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(key, "test")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.pop("AWS_ENDPOINT_URL", None)
    if "moto" in engines:
        with mock_aws():
            bench(boto3.client("dynamodb", region_name="us-east-1"), jobs, "moto")
    if "ministack" in engines:
        with Emulator(EmulatorConfig()) as emulator:
            client = boto3.client("dynamodb", endpoint_url=emulator.endpoint_url, region_name="us-east-1")
            bench(client, jobs, "MiniStack")


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    which = sys.argv[2] if len(sys.argv) > 2 else "both"
    main(count, ["moto", "ministack"] if which == "both" else [which])
