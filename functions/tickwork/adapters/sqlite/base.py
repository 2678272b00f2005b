"""What the SQLite record classes share: the database, and rows to and from records.

Every conditional write is a read-check-write inside one `BEGIN IMMEDIATE` transaction (see db.py): SQLite
admits one writer at a time across every process, so the check and the write cannot be interleaved
with another writer's. The conditions are the DynamoDB adapter's, spelled as Python over the stored record,
and their refusals are the same domain errors."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from tickwork.adapters.records import run_from_item
from tickwork.adapters.sqlite.db import Database, key_columns
from tickwork.domain.execution import CLAIMABLE_STATES
from tickwork.domain.models import Job, Run
from tickwork.domain.timekeys import format_instant, format_instant_ms
from tickwork.resources import TABLES, TableDef

_COLUMNS = {table.logical_name: key_columns(table) for table in TABLES}


def _upsert_sql(table: TableDef) -> str:
    columns = [*_COLUMNS[table.logical_name], "item"]
    return (
        f"INSERT OR REPLACE INTO {table.logical_name} ({', '.join(columns)}) "
        f"VALUES ({', '.join('?' for _ in columns)})"
    )


_UPSERT = {table.logical_name: _upsert_sql(table) for table in TABLES}


def row_values(table: TableDef, item: Mapping[str, Any]) -> list[Any]:
    """A record as the table's row: its key and index-key columns (None where absent: out of a sparse
    index), then the record itself as JSON."""
    return [item.get(name) for name in _COLUMNS[table.logical_name]] + [
        json.dumps(item, separators=(",", ":"))
    ]


def put(connection: sqlite3.Connection, table: TableDef, item: Mapping[str, Any]) -> None:
    connection.execute(_UPSERT[table.logical_name], row_values(table, item))


def load(raw: str) -> dict[str, Any]:
    return dict(json.loads(raw))


def job_still_at(item: Mapping[str, Any] | None, expected: Job) -> bool:
    """The job write's condition: the stored job is at the version and next fire it was read at."""
    if item is None or item.get("version") != expected.version:
        return False
    if item.get("run_requests", 0) != expected.run_requests:
        return False
    expected_fire = None if expected.next_fire_at is None else format_instant(expected.next_fire_at)
    return item.get("next_fire_at") == expected_fire


def run_still_at(item: Mapping[str, Any] | None, expected: Run) -> bool:
    """A run write's fence: the run is still in the state, attempt, lease and job view it was read in."""
    if item is None or item.get("state") != str(expected.state) or item.get("attempt") != expected.attempt:
        return False
    if expected.lease_expires_at is not None and item.get("lease_expires_at") != format_instant_ms(
        expected.lease_expires_at
    ):
        return False
    if expected.job_view is not None:
        view = item.get("job_view") or {}
        if view.get("version") != expected.job_view.version:
            return False
    return True


def claimable(item: Mapping[str, Any] | None, attempt: int) -> bool:
    return (
        item is not None
        and item.get("state") in {str(s) for s in CLAIMABLE_STATES}
        and item.get("attempt") == attempt
    )


def apply_changes(
    stored: dict[str, Any], before: Mapping[str, Any], after: Mapping[str, Any]
) -> dict[str, Any]:
    """The DynamoDB adapter's update diff on the stored record: set what `after` changed from `before`,
    remove what it dropped, leave the rest (attributes other writers own) alone."""
    updated = dict(stored)
    for key, value in after.items():
        if before.get(key) != value:
            updated[key] = value
    for key in before:
        if key not in after:
            updated.pop(key, None)
    return updated


def stored_run(item: Mapping[str, Any] | None) -> Run | None:
    return None if item is None else run_from_item(item)


class SqliteBase:
    """The database, and the reads every record class uses."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _job_item(self, connection: sqlite3.Connection, job_id: str) -> dict[str, Any] | None:
        row = connection.execute("SELECT item FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None else load(row[0])

    def _run_item(self, connection: sqlite3.Connection, job_id: str, fire: str) -> dict[str, Any] | None:
        row = connection.execute(
            "SELECT item FROM runs WHERE job_id = ? AND scheduled_for = ?", (job_id, fire)
        ).fetchone()
        return None if row is None else load(row[0])

    def _select_items(self, sql: str, parameters: Iterable[Any]) -> list[dict[str, Any]]:
        with self.db.read() as connection:
            return [load(row[0]) for row in connection.execute(sql, tuple(parameters))]
