"""SQLite records of the shards aggregate: each shard's planning watermark."""

from __future__ import annotations

from datetime import datetime

from tickwork.adapters.sqlite.base import SqliteBase, load, put
from tickwork.domain.timekeys import format_instant_ms, parse_instant
from tickwork.resources import SHARDS


def _shard_id(shard: int) -> str:
    return f"{shard:04d}"


class SqliteShardRecords(SqliteBase):
    def get_watermark(self, shard: int) -> datetime | None:
        items = self._select_items("SELECT item FROM shards WHERE shard_id = ?", (_shard_id(shard),))
        return parse_instant(items[0]["planned_through"]) if items else None

    def set_watermark(self, shard: int, planned_through: datetime) -> None:
        """Forward only: a slower ticker must not rewind a faster one."""
        value = format_instant_ms(planned_through)
        with self.db.write() as connection:
            row = connection.execute(
                "SELECT item FROM shards WHERE shard_id = ?", (_shard_id(shard),)
            ).fetchone()
            if row is not None and str(load(row[0])["planned_through"]) >= value:
                return
            put(connection, SHARDS, {"shard_id": _shard_id(shard), "planned_through": value})
