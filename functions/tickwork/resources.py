"""The one definition of every table, index and queue. The CDK stack and the local bootstrap both read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

AttrType = Literal["S", "N"]


@dataclass(frozen=True, slots=True)
class KeyAttr:
    name: str
    type: AttrType = "S"


@dataclass(frozen=True, slots=True)
class IndexDef:
    name: str
    partition: KeyAttr
    sort: KeyAttr | None = None
    projection: Literal["ALL", "KEYS_ONLY"] = "ALL"


@dataclass(frozen=True, slots=True)
class TableDef:
    logical_name: str
    partition: KeyAttr
    sort: KeyAttr | None = None
    indexes: tuple[IndexDef, ...] = ()
    ttl_attribute: str | None = None
    purpose: str = ""
    # Its changes, old and new item, feed the watcher (a DynamoDB stream; the embedded engine's trigger).
    change_feed: bool = False


@dataclass(frozen=True, slots=True)
class QueueDef:
    logical_name: str
    visibility_timeout_seconds: int = 30
    retention_seconds: int = 4 * 24 * 3600
    dead_letter: QueueDef | None = None
    max_receive_count: int = 5
    purpose: str = ""


JOBS = TableDef(
    logical_name="jobs",
    partition=KeyAttr("job_id"),
    indexes=(
        # Sparse: only active jobs carry `due_key` (shard x minute of next fire), so "what is due?"
        # reads a handful of small partitions, never the 100,000 definitions.
        IndexDef("due", KeyAttr("due_key"), KeyAttr("next_fire_at")),
        # Keys only: an index write happens only when its keys change, so advancing a job costs it nothing.
        IndexDef("by_owner", KeyAttr("owner"), KeyAttr("job_id"), projection="KEYS_ONLY"),
    ),
    purpose="job definitions: schedule, target, policies, state, version, next fire",
)

RUNS = TableDef(
    logical_name="runs",
    partition=KeyAttr("job_id"),
    sort=KeyAttr("scheduled_for"),  # fixed-width UTC: sort order is time order
    indexes=(
        # Sparse: only unfinished runs carry `open_key` (shard x write shard); `check_at` is when the sweeper
        # should look, and a claim does not move it. Keys only, so a claim writes nothing to the index:
        # planning adds the run's entry, finishing drops it, and the sweeper reads the runs it lists.
        IndexDef("open_runs", KeyAttr("open_key"), KeyAttr("check_at"), projection="KEYS_ONLY"),
        # Sparse: only failed runs carry `failed_key` (owner x write shard); `failed_order` is the finish
        # time then the run id, so "what broke in the last hour, across my jobs" is one read per write
        # shard, newest first. A retry of the run takes it out again.
        IndexDef("failed_runs", KeyAttr("failed_key"), KeyAttr("failed_order")),
    ),
    ttl_attribute="expires_at",
    purpose="one record per scheduled fire: state, attempts, timings, outcome",
    # The watcher (services/watching.py) learns of every run's change from here: nothing on the run's own
    # path waits for, or can fail because of, what its owner is told.
    change_feed=True,
)

SHARDS = TableDef(
    logical_name="shards",
    partition=KeyAttr("shard_id"),
    purpose="per-shard ticker watermark: how far the shard is fully planned",
)

REQUESTS = TableDef(
    logical_name="requests",
    partition=KeyAttr("request_key"),
    ttl_attribute="expires_at",
    purpose="Idempotency-Key records of run requests (run now, retry, backfill) and what each answered",
)

SLOTS = TableDef(
    logical_name="slots",
    # `<pool>#<stripe>`: a pool of N slots is ceil(N / 12) stripes, each its own partition key (so a busy
    # pool spreads its writes), each one item holding a map of its holders and their leases. A run takes a
    # slot with one conditional write on one stripe (adapters/dynamodb/slots.py).
    partition=KeyAttr("slot_key"),
    purpose="concurrency slots: the run attempts holding a slot of each pool (all, owner, key), with leases",
)

EVENTS = TableDef(
    logical_name="events",
    # `scope`: the job's id for its events, deadline timers and revisions (`r#<number>`), `owner#<owner>`
    # for the owner's channel windows, messages owed, channel health and audit log (`a#<time>#...`). `key`
    # orders a job's events by time (domain/notify.py).
    partition=KeyAttr("scope"),
    sort=KeyAttr("key"),
    indexes=(
        # Sparse: only events carry `event_owner`; "what happened across my jobs", newest first.
        IndexDef("by_owner", KeyAttr("event_owner"), KeyAttr("owner_order")),
        # Sparse: only what is owed later carries `outbox_key` (one of a few partitions): messages to send or
        # retry, windows owing a digest, deadline timers. Read by time, so nothing scans jobs.
        IndexDef("outbox", KeyAttr("outbox_key"), KeyAttr("send_at")),
    ),
    ttl_attribute="expires_at",
    purpose="what each job's owner is told: events (run failed, late, deadline missed...), messages owed, "
    "channel windows and health; and what was done to each job: its revisions and its owner's audit log",
)

TABLES: tuple[TableDef, ...] = (JOBS, RUNS, SHARDS, REQUESTS, SLOTS, EVENTS)

DISPATCH_DLQ = QueueDef(
    logical_name="dispatch-dlq",
    retention_seconds=14 * 24 * 3600,
    purpose="dispatch messages that failed max_receive_count times; the sweeper marks their runs failed",
)

DISPATCH = QueueDef(
    logical_name="dispatch",
    visibility_timeout_seconds=960,  # above the executor's 900 s maximum timeout
    dead_letter=DISPATCH_DLQ,
    max_receive_count=5,
    # SQS's longest: a run's message outlives an executor outage of up to two weeks (the reconciliation
    # audit re-sends it after that, from the run record).
    retention_seconds=14 * 24 * 3600,
    purpose="one small message per run attempt (run key + attempt), delayed to its fire time",
)

DISPATCH_LONG_CALL = QueueDef(
    logical_name="dispatch-long-call",
    visibility_timeout_seconds=DISPATCH.visibility_timeout_seconds,
    dead_letter=DISPATCH_DLQ,
    max_receive_count=DISPATCH.max_receive_count,
    retention_seconds=DISPATCH.retention_seconds,
    purpose="messages of runs whose call may take minutes (domain/lanes.py): one per executor invocation",
)

QUEUES: tuple[QueueDef, ...] = (DISPATCH, DISPATCH_LONG_CALL, DISPATCH_DLQ)


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """Physical names: `<prefix>-<logical name>`."""

    prefix: str = "tickwork"
    overrides: dict[str, str] = field(default_factory=dict)

    def table(self, table: TableDef) -> str:
        return self.overrides.get(table.logical_name, f"{self.prefix}-{table.logical_name}")

    def queue(self, queue: QueueDef) -> str:
        return self.overrides.get(queue.logical_name, f"{self.prefix}-{queue.logical_name}")


def create_table_request(table: TableDef, physical_name: str) -> dict[str, Any]:
    """boto3 `create_table` arguments (on-demand billing) for a table definition."""
    attributes: dict[str, AttrType] = {}
    key_schema = [{"AttributeName": table.partition.name, "KeyType": "HASH"}]
    attributes[table.partition.name] = table.partition.type
    if table.sort is not None:
        key_schema.append({"AttributeName": table.sort.name, "KeyType": "RANGE"})
        attributes[table.sort.name] = table.sort.type
    request: dict[str, Any] = {
        "TableName": physical_name,
        "KeySchema": key_schema,
        "BillingMode": "PAY_PER_REQUEST",
    }
    indexes = []
    for index in table.indexes:
        index_keys = [{"AttributeName": index.partition.name, "KeyType": "HASH"}]
        attributes[index.partition.name] = index.partition.type
        if index.sort is not None:
            index_keys.append({"AttributeName": index.sort.name, "KeyType": "RANGE"})
            attributes[index.sort.name] = index.sort.type
        indexes.append(
            {
                "IndexName": index.name,
                "KeySchema": index_keys,
                "Projection": {"ProjectionType": index.projection},
            }
        )
    if indexes:
        request["GlobalSecondaryIndexes"] = indexes
    if table.change_feed:
        request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    request["AttributeDefinitions"] = [
        {"AttributeName": n, "AttributeType": t} for n, t in attributes.items()
    ]
    return request
