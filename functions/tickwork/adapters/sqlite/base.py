"""What the SQLite record classes share: the database, and rows to and from records.

Every conditional write is a read-check-write inside one `BEGIN IMMEDIATE` transaction (see db.py): SQLite
admits one writer at a time across every process, so the check and the write cannot be interleaved
with another writer's. The conditions are the DynamoDB adapter's, spelled as Python over the stored record
(adapters/conditions.py), and their refusals are the same domain errors."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from tickwork.adapters.sqlite.db import Database, key_columns
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
