"""The runs table's DynamoDB stream (NEW_AND_OLD_IMAGES) as run changes: what the watcher Lambda's event
source mapping hands it, in the same form the embedded engine's change feed gives."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.adapters.dynamodb.items import deserialize
from tickwork.adapters.records import run_before_from_item, run_from_item
from tickwork.domain.alerts import RunChange
from tickwork.domain.errors import StoreError, TransientStoreError


def run_changes(records: Iterable[Mapping[str, Any]]) -> list[RunChange]:
    """The inserts and modifications among a batch of stream records (a removal is a run's retention
    ending, nothing an owner is told about)."""
    changes = []
    for record in records:
        if record.get("eventName") not in ("INSERT", "MODIFY"):
            continue
        images = record.get("dynamodb") or {}
        new = images.get("NewImage")
        if not new:
            continue
        old = images.get("OldImage")
        before = run_before_from_item(deserialize(old)) if old else None
        changes.append(RunChange(before, run_from_item(deserialize(new))))
    return changes


# A position that is no longer any good (an iterator older than 15 minutes, records trimmed, a shard gone).
_READ_AGAIN = ("ExpiredIteratorException", "TrimmedDataAccessException", "ResourceNotFoundException")


class DynamoStreamFeed:
    """The runs table's stream read with the DynamoDB Streams API, for `tickwork local --engine emulator`
    (on AWS the event source mapping reads it for the watcher Lambda). From the oldest record kept (the
    stream keeps 24 h): a restart sees changes again, which record nothing twice. A shard's position moves
    only when the changes read from it are forgotten (handled)."""

    def __init__(self, dynamodb: Any, streams: Any, runs_table: str) -> None:
        self._dynamodb = dynamodb
        self._streams = streams
        self._table = runs_table
        self._positions: dict[str, str | None] = {}  # shard id -> iterator (None: the shard is closed, read)
        self._pending: dict[str, str | None] = {}
        self._taken = 0

    def _shards(self) -> list[str]:
        arn = self._dynamodb.describe_table(TableName=self._table)["Table"].get("LatestStreamArn")
        if not arn:
            raise StoreError(f"table {self._table} has no stream: the watcher needs one", code="NoStream")
        shards = self._streams.describe_stream(StreamArn=arn)["StreamDescription"].get("Shards", [])
        for shard in shards:
            shard_id = str(shard["ShardId"])
            if shard_id not in self._positions:
                self._positions[shard_id] = self._streams.get_shard_iterator(
                    StreamArn=arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
        return list(self._positions)

    def take_changes(self, limit: int) -> list[tuple[int, RunChange]]:
        taken: list[tuple[int, RunChange]] = []
        self._pending = {}
        try:
            for shard_id in self._shards():
                iterator = self._positions.get(shard_id)
                if iterator is None or len(taken) >= limit:
                    continue
                page = self._streams.get_records(ShardIterator=iterator, Limit=min(1000, limit - len(taken)))
                self._pending[shard_id] = page.get("NextShardIterator")
                for change in run_changes(page.get("Records", [])):
                    self._taken += 1
                    taken.append((self._taken, change))
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            if code in _READ_AGAIN:
                # Read again from the oldest record kept: what was told before records nothing twice.
                self._positions.clear()
                raise TransientStoreError(f"DynamoDB Streams: {code}; reading the stream again") from error
            raise StoreError(f"DynamoDB Streams: {error}", code="StreamRead") from error
        except BotoCoreError as error:
            raise TransientStoreError(f"DynamoDB Streams: {error}") from error
        if not taken:
            self._positions.update(self._pending)  # nothing to handle: move past the empty pages
        return taken

    def forget_changes(self, through: int) -> None:
        self._positions.update(self._pending)
        self._pending = {}
