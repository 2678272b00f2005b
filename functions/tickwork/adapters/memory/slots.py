"""In-memory concurrency slots (services/ports.SlotStore): each pool's holders and their leases, every
acquire a count and a write under one lock. The same rule as the other engines: a pool admits a new holder
while it has fewer holders than its size, or while some of them have leases that ended (they are then
removed: taken over)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tickwork.domain.slots import Pool, SlotHold, holder_key, is_live, lease_ms


@dataclass
class MemorySlotTables:
    """The engine's slot state: pool name -> holder (`<run id>/<attempt>`) -> lease end (epoch ms), and the
    lock every read and write takes. Slot stores given the same tables see one set of pools."""

    holds: dict[str, dict[str, int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemorySlots:
    def __init__(self, tables: MemorySlotTables | None = None) -> None:
        self.tables = tables or MemorySlotTables()

    def acquire(self, pools: Sequence[Pool], hold: SlotHold, now: datetime) -> bool:
        holder = holder_key(hold.run_id, hold.attempt)
        now_ms = lease_ms(now)
        with self.tables.lock:
            if not all(self._admits(pool, holder, now_ms) for pool in pools):
                for pool in pools:
                    self.tables.holds.get(pool.name, {}).pop(holder, None)
                return False
            for pool in pools:
                holders = self.tables.holds.setdefault(pool.name, {})
                if holder not in holders and len(holders) >= pool.size:
                    for ended in [name for name, lease in holders.items() if not is_live(lease, now_ms)]:
                        del holders[ended]
                holders[holder] = lease_ms(hold.lease_expires_at)
            return True

    def _admits(self, pool: Pool, holder: str, now_ms: int) -> bool:
        holders = self.tables.holds.get(pool.name, {})
        if holder in holders or len(holders) < pool.size:
            return True
        return sum(1 for lease in holders.values() if is_live(lease, now_ms)) < pool.size

    def extend(self, pools: Sequence[Pool], hold: SlotHold) -> bool:
        holder = holder_key(hold.run_id, hold.attempt)
        with self.tables.lock:
            for pool in pools:
                holders = self.tables.holds.get(pool.name, {})
                if holder not in holders:
                    return False
                holders[holder] = lease_ms(hold.lease_expires_at)
            return True

    def release(self, pools: Sequence[Pool], run_id: str, attempt: int) -> None:
        holder = holder_key(run_id, attempt)
        with self.tables.lock:
            for pool in pools:
                self.tables.holds.get(pool.name, {}).pop(holder, None)

    def in_flight(self, pool: Pool, now: datetime) -> int:
        now_ms = lease_ms(now)
        with self.tables.lock:
            return sum(1 for lease in self.tables.holds.get(pool.name, {}).values() if is_live(lease, now_ms))
