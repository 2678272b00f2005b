"""In-memory implementation of the storage ports: the aggregates' records (jobs, runs, shards, runs on
request) over one set of tables (adapters/memory/base.py), composed as adapters/sqlite/store.py is."""

from __future__ import annotations

from tickwork.adapters.memory.base import MemoryTables
from tickwork.adapters.memory.jobs import MemoryJobRecords
from tickwork.adapters.memory.requests import MemoryRequestRecords
from tickwork.adapters.memory.runs import MemoryRunRecords
from tickwork.adapters.memory.shards import MemoryShardRecords

__all__ = ["MemoryStore", "MemoryTables"]


class MemoryStore(MemoryJobRecords, MemoryRunRecords, MemoryShardRecords, MemoryRequestRecords):
    """Jobs, runs, shard watermarks and Idempotency-Key records in memory: what the services' ports ask
    of storage."""
