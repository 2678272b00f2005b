"""In-memory records of the shards aggregate: each shard's planning watermark."""

from __future__ import annotations

from datetime import datetime

from tickwork.adapters.memory.base import MemoryBase
from tickwork.domain.timekeys import format_instant_ms, parse_instant


def _shard_id(shard: int) -> str:
    return f"{shard:04d}"


class MemoryShardRecords(MemoryBase):
    def get_watermark(self, shard: int) -> datetime | None:
        with self.tables.lock:
            item = self.tables.shards.get(_shard_id(shard))
            planned = None if item is None else str(item["planned_through"])
        return None if planned is None else parse_instant(planned)

    def set_watermark(self, shard: int, planned_through: datetime) -> None:
        """Forward only: a slower ticker must not rewind a faster one."""
        value = format_instant_ms(planned_through)
        with self.tables.lock:
            item = self.tables.shards.get(_shard_id(shard))
            if item is not None and str(item["planned_through"]) >= value:
                return
            self.tables.shards[_shard_id(shard)] = {"shard_id": _shard_id(shard), "planned_through": value}
