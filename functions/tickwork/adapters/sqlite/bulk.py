"""Bulk actions on SQLite (adapters/bulk_records.py): items of the events table, each write a
read-check-write in one immediate transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tickwork.adapters.bulk_records import (
    BULK_FROM,
    BULK_OUTBOX,
    BULK_TO,
    bulk_from_item,
    bulk_key,
    bulk_to_item,
)
from tickwork.adapters.event_records import owner_scope
from tickwork.adapters.sqlite.base import SqliteBase, put
from tickwork.adapters.sqlite.events import SCOPE_RANGE, _get
from tickwork.domain.bulk import BulkAction
from tickwork.domain.errors import ConflictError, VersionMismatchError
from tickwork.domain.timekeys import format_instant_ms
from tickwork.resources import EVENTS


class SqliteBulkActions(SqliteBase):
    def create_actions(self, actions: Sequence[BulkAction]) -> None:
        with self.db.write() as connection:
            for action in actions:
                if _get(connection, owner_scope(action.owner), bulk_key(action.action_id)) is not None:
                    raise ConflictError(f"bulk action {action.action_id} exists")
                put(connection, EVENTS, bulk_to_item(action))

    def get_action(self, owner: str, action_id: str) -> BulkAction | None:
        with self.db.read() as connection:
            item = _get(connection, owner_scope(owner), bulk_key(action_id))
        return None if item is None else bulk_from_item(item)

    def list_actions(self, owner: str) -> list[BulkAction]:
        items = self._select_items(SCOPE_RANGE, (owner_scope(owner), BULK_FROM, BULK_TO))
        return [bulk_from_item(item) for item in items]

    def due_actions(self, now: datetime, limit: int) -> list[BulkAction]:
        items = self._select_items(
            "SELECT item FROM events WHERE outbox_key = ? AND send_at <= ? ORDER BY send_at LIMIT ?",
            (BULK_OUTBOX, format_instant_ms(now), limit),
        )
        return [bulk_from_item(item) for item in items]

    def save_action(self, expected: BulkAction, action: BulkAction) -> None:
        with self.db.write() as connection:
            stored = _get(connection, owner_scope(expected.owner), bulk_key(expected.action_id))
            if stored is None or int(stored["version"]) != expected.version:
                raise VersionMismatchError(
                    f"bulk action {expected.action_id} moved since version {expected.version}"
                )
            put(connection, EVENTS, bulk_to_item(action))
