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
from tickwork.adapters.sqlite.base import SqliteBase, put
from tickwork.adapters.sqlite.events import SCOPE_RANGE, _delete, _get
from tickwork.domain.calendars import Calendar
from tickwork.domain.errors import VersionMismatchError
from tickwork.resources import EVENTS


class SqliteCalendars(SqliteBase):
    def get_calendars(self, owner: str, names: Sequence[str]) -> dict[str, Calendar]:
        found = {}
        with self.db.read() as connection:
            for name in names:
                item = _get(connection, owner_scope(owner), calendar_key(name))
                if item is not None:
                    found[name] = calendar_from_item(item)
        return found

    def list_calendars(self, owner: str) -> list[Calendar]:
        items = self._select_items(SCOPE_RANGE, (owner_scope(owner), CALENDARS_FROM, CALENDARS_TO))
        return [calendar_from_item(item) for item in items]

    def put_calendar(self, calendar: Calendar) -> None:
        with self.db.write() as connection:
            item = _get(connection, owner_scope(calendar.owner), calendar_key(calendar.name))
            stored = 0 if item is None else int(item["version"])
            if stored != calendar.version - 1:
                raise VersionMismatchError(
                    f"calendar {calendar.name} is at version {stored}, not {calendar.version - 1}"
                )
            put(connection, EVENTS, calendar_to_item(calendar))

    def delete_calendar(self, owner: str, name: str) -> bool:
        with self.db.write() as connection:
            return _delete(connection, owner_scope(owner), calendar_key(name))
