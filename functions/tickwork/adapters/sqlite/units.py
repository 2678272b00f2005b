"""Write units on SQLite (services/ports.WriteUnits): the writes a block makes through any record class of
the same `Database` are savepoints of one immediate transaction (db.py), so they cost one commit, and they
land together or not at all."""

from __future__ import annotations

from contextlib import AbstractContextManager

from tickwork.adapters.sqlite.db import Database


class SqliteWriteUnits:
    """Only for record classes on this same `Database`: a write through another one (another connection)
    would wait for this unit's own write lock."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def together(self) -> AbstractContextManager[object]:
        return self.db.write()
