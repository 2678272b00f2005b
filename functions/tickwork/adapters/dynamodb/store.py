"""DynamoDB implementation of the storage ports: the three aggregates' records (jobs, runs, shards), each
in its module over a shared base (`base.py`: the client, the transaction helper, error translation)."""

from __future__ import annotations

from tickwork.adapters.dynamodb.base import REQUEST_FINGERPRINT, TRANSIENT_CODES, TableNames
from tickwork.adapters.dynamodb.jobs import JobRecords
from tickwork.adapters.dynamodb.requests import RequestRecords
from tickwork.adapters.dynamodb.runs import RunRecords
from tickwork.adapters.dynamodb.shards import ShardRecords

__all__ = ["REQUEST_FINGERPRINT", "TRANSIENT_CODES", "DynamoStore", "TableNames"]


class DynamoStore(JobRecords, RunRecords, ShardRecords, RequestRecords):
    """Jobs, runs and shard watermarks in DynamoDB: what the services' ports ask of storage, from the three
    aggregates' records. One client, injected; no clients at import."""
