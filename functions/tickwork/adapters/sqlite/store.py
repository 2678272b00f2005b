"""SQLite implementation of the storage ports, for one machine: the three aggregates' records (jobs, runs,
shards) over one database file (adapters/sqlite/db.py)."""

from __future__ import annotations

from tickwork.adapters.sqlite.jobs import SqliteJobRecords
from tickwork.adapters.sqlite.requests import SqliteRequestRecords
from tickwork.adapters.sqlite.runs import SqliteRunRecords
from tickwork.adapters.sqlite.shards import SqliteShardRecords

__all__ = ["SqliteStore"]

# Every job has an owner (`job_to_item` always writes it), so the owners' index holds each once: counting its
# keys does not read the records (the status line counts after every commit).
JOB_COUNT_SQL = "SELECT COUNT(*) FROM jobs WHERE owner IS NOT NULL"


class SqliteStore(SqliteJobRecords, SqliteRunRecords, SqliteShardRecords, SqliteRequestRecords):
    """Jobs, runs and shard watermarks in SQLite: what the services' ports ask of storage."""

    def job_count(self) -> int:
        with self.db.read() as connection:
            return int(connection.execute(JOB_COUNT_SQL).fetchone()[0])
