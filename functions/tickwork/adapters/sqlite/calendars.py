"""Exclusion calendars on SQLite (adapters/calendar_records.py): items of the events table, each write a
read-check-write in one immediate transaction."""

from __future__ import annotations

from collections.abc import Sequence

from tickwork.adapters.calendar_records import (
    CALENDARS_FROM,
    CALENDARS_TO,
    calendar_from_item,
    calendar_key,
    calendar_to_item,
)
from tickwork.adapters.event_records import owner_scope
from tickwork.adapters.sqlite.base import SqliteBase, load, put
from tickwork.domain.calendars import Calendar
from tickwork.domain.errors import VersionMismatchError
from tickwork.resources import EVENTS

_ONE = "SELECT item FROM events WHERE scope = ? AND key = ?"


class SqliteCalendars(SqliteBase):
    def get_calendars(self, owner: str, names: Sequence[str]) -> dict[str, Calendar]:
        found = {}
        with self.db.read() as connection:
            for name in names:
                row = connection.execute(_ONE, (owner_scope(owner), calendar_key(name))).fetchone()
                if row is not None:
                    found[name] = calendar_from_item(load(row[0]))
        return found

    def list_calendars(self, owner: str) -> list[Calendar]:
        items = self._select_items(
            "SELECT item FROM events WHERE scope = ? AND key > ? AND key < ? ORDER BY key",
            (owner_scope(owner), CALENDARS_FROM, CALENDARS_TO),
        )
        return [calendar_from_item(item) for item in items]

    def put_calendar(self, calendar: Calendar) -> None:
        with self.db.write() as connection:
            row = connection.execute(
                _ONE, (owner_scope(calendar.owner), calendar_key(calendar.name))
            ).fetchone()
            stored = 0 if row is None else int(load(row[0])["version"])
            if stored != calendar.version - 1:
                raise VersionMismatchError(
                    f"calendar {calendar.name} is at version {stored}, not {calendar.version - 1}"
                )
            put(connection, EVENTS, calendar_to_item(calendar))

    def delete_calendar(self, owner: str, name: str) -> bool:
        with self.db.write() as connection:
            cursor = connection.execute(
                "DELETE FROM events WHERE scope = ? AND key = ?", (owner_scope(owner), calendar_key(name))
            )
            return cursor.rowcount > 0
