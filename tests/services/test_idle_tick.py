"""An idle tick's reads do not grow with the number of registered jobs: the DynamoDB requests and items a
tick costs, counted on the DynamoDB store itself (moto), so it stays there."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import ANCHOR
from tests.fakes import RecordingDispatcher
from tickwork.adapters.dynamodb.items import serialize
from tickwork.adapters.dynamodb.store import DynamoStore
from tickwork.adapters.records import job_to_item
from tickwork.domain.clock import FakeClock
from tickwork.domain.models import Job, Target, shard_of
from tickwork.domain.schedule import parse_schedule
from tickwork.services.planning import Planner

SHARDS = 4


@dataclass
class CallCounter:
    """Counts DynamoDB API calls and the items they returned, from botocore's event hooks."""

    calls: int = 0
    items_read: int = 0

    def __call__(self, parsed: dict[str, Any], **_: Any) -> None:
        self.calls += 1
        self.items_read += len(parsed.get("Items", [])) + (1 if "Item" in parsed else 0)


def seed_jobs(client: Any, table: str, count: int) -> None:
    """Registered jobs, none due in the next hours: daily at 03:00 UTC, spread over every shard."""
    schedule = parse_schedule("0 3 * * *")
    items = []
    for n in range(count):
        job_id = f"job_{n:06d}"
        items.append(
            Job(
                job_id=job_id,
                owner="alice",
                name=f"seed {n}",
                schedule=schedule,
                target=Target(kind="http", config={"url": "http://127.0.0.1:9/"}),
                shard=shard_of(job_id, SHARDS),
                created_at=ANCHOR,
                updated_at=ANCHOR,
                next_fire_at=datetime(2026, 12, 3, 3, 0, tzinfo=UTC),
            )
        )
    for start in range(0, len(items), 25):
        batch = [{"PutRequest": {"Item": serialize(job_to_item(j))}} for j in items[start : start + 25]]
        client.batch_write_item(RequestItems={table: batch})


def idle_tick_cost(dynamodb: Any, store: DynamoStore, clock: FakeClock, registered: int) -> CallCounter:
    seed_jobs(dynamodb, store.tables.jobs, registered)
    planner = Planner(store, RecordingDispatcher(), clock)
    for shard in range(SHARDS):
        planner.plan(shard, ANCHOR)  # first tick: sets the watermarks
    counter = CallCounter()
    dynamodb.meta.events.register("after-call.dynamodb.*", counter)
    for shard in range(SHARDS):
        report = planner.plan(shard, ANCHOR + timedelta(minutes=1))
        assert report.jobs_seen == 0
    dynamodb.meta.events.unregister("after-call.dynamodb.*", counter)
    return counter


@pytest.mark.parametrize("registered", [10, 2000])
def test_an_idle_tick_reads_the_same_whatever_the_number_of_jobs(
    dynamodb: Any, dynamo_store: DynamoStore, clock: FakeClock, registered: int
) -> None:
    cost = idle_tick_cost(dynamodb, dynamo_store, clock, registered)
    # Per shard: 1 watermark read + 4 bucket queries (reread 2 min .. horizon) + 1 watermark write.
    assert cost.calls == SHARDS * 6
    assert cost.items_read == SHARDS * 1  # only the watermark items, never a job
