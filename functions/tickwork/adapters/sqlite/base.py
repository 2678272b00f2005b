"""What the SQLite record classes share: the database, and rows to and from records.

Every conditional write is a read-check-write inside one `BEGIN IMMEDIATE` transaction (see db.py): SQLite
admits one writer at a time across every process, so the check and the write cannot be interleaved
with another writer's. The conditions are the DynamoDB adapter's, spelled as Python over the stored record
(adapters/conditions.py), and their refusals are the same domain errors."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from tickwork.adapters.sqlite.db import Database, key_columns
from tickwork.domain.errors import StoreError
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
    return [item.get(name) for name in _COLUMNS[table.logical_name]] + [record_text(item)]


# orjson writes what json.dumps would, keys converted as json converts them. It refuses a datetime or a
# dataclass as json does (orjson would write its own format of a bug). It writes NaN and the infinities as
# null, where json wrote `NaN`, which is not JSON (SQLite's json_extract refuses it): the API refuses
# non-finite numbers, so only a bug would bring one.
_RECORD_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def record_text(item: Mapping[str, Any]) -> str:
    """A record as its row's JSON text: orjson's, about ten times json's speed on a run's record, which is
    written three times a run (docs/benchmarks.md, eighteenth session). What orjson refuses goes to json,
    which writes an integer past 64 bits exactly and raises for the rest, as before. (Records are read by
    json: orjson reads an integer past 64 bits as a float.)"""
    try:
        return orjson.dumps(item, option=_RECORD_OPTIONS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(item, separators=(",", ":"))


def put(connection: sqlite3.Connection, table: TableDef, item: Mapping[str, Any]) -> None:
    connection.execute(_UPSERT[table.logical_name], row_values(table, item))


def stored_columns(table: TableDef, item: Mapping[str, Any]) -> list[Any]:
    """The key and index-key columns of a stored record's row (`put` writes them from the record)."""
    return [item.get(name) for name in _COLUMNS[table.logical_name]]


def rewrite(
    connection: sqlite3.Connection, table: TableDef, columns: Sequence[Any], item: Mapping[str, Any]
) -> None:
    """Write `item` over the stored row whose columns were `columns` (`stored_columns` of the record read in
    this transaction): one UPDATE of the record and of the columns whose value changes. `put` would delete
    the row from the table and from every index it is in, and insert it again; a run's claim and its
    finish change no index key but the sweeper's. The row must be there, under the same key."""
    names = _COLUMNS[table.logical_name]
    keys = 2 if table.sort is not None else 1  # key_columns puts the table's own key first
    values = stored_columns(table, item)
    if values[:keys] != list(columns[:keys]):
        raise ValueError(f"a rewrite of {table.logical_name} cannot move a record to another key")
    changed = tuple(index for index in range(keys, len(names)) if values[index] != columns[index])
    cursor = connection.execute(
        _rewrite_sql(table.logical_name, keys, changed),
        [*(values[index] for index in changed), record_text(item), *values[:keys]],
    )
    if cursor.rowcount != 1:
        raise StoreError(f"the {table.logical_name} row to write over is gone", code="RowGone")


@functools.cache
def _rewrite_sql(table: str, keys: int, changed: tuple[int, ...]) -> str:
    names = _COLUMNS[table]
    assignments = [f"{names[index]} = ?" for index in changed] + ["item = ?"]
    return (
        f"UPDATE {table} SET {', '.join(assignments)} WHERE {' AND '.join(f'{k} = ?' for k in names[:keys])}"
    )


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
