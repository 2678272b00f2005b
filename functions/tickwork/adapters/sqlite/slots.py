"""SQLite concurrency slots (services/ports.SlotStore): one row per hold in `slot_holds` (adapters/sqlite/
db.py), each acquire a count and an insert inside one `BEGIN IMMEDIATE` transaction, so no other writer,
in this process or another, comes between the count and the insert. The same rule as the other engines: a
pool admits a new holder while it has fewer holders than its size, or while some of them have leases that
ended (they are then removed: taken over)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from tickwork.adapters.sqlite.db import Database
from tickwork.domain.slots import Pool, SlotHold, holder_key, lease_ms


def _live(connection: sqlite3.Connection, pool: str, after: int) -> int:
    """The pool's holders whose lease ends after that instant (ms)."""
    row = connection.execute(
        "SELECT COUNT(*) FROM slot_holds WHERE pool = ? AND lease_ms > ?", (pool, after)
    ).fetchone()
    return int(row[0])


def _holders(connection: sqlite3.Connection, pool: str, holder: str) -> tuple[int, bool]:
    """The pool's holders, and whether `holder` is one of them: one statement."""
    row = connection.execute(
        "SELECT COUNT(*), COUNT(CASE WHEN holder = ? THEN 1 END) FROM slot_holds WHERE pool = ?",
        (holder, pool),
    ).fetchone()
    return int(row[0]), int(row[1]) > 0


class SqliteSlots:
    def __init__(self, db: Database) -> None:
        self.db = db

    def acquire(self, pools: Sequence[Pool], hold: SlotHold, now: datetime) -> bool:
        holder = holder_key(hold.run_id, hold.attempt)
        now_ms = lease_ms(now)
        # No savepoint: only SQLite raises here, and should it after a change, the whole transaction fails
        # (Database.write).
        with self.db.write(savepoint=False) as connection:
            # Per pool, whether it must first drop its holders whose leases ended; no room in one: none.
            take_over: list[bool] = []
            for pool in pools:
                holders, holds = _holders(connection, pool.name, holder)
                if holds or holders < pool.size:
                    take_over.append(False)
                elif _live(connection, pool.name, now_ms) < pool.size:
                    take_over.append(True)
                else:
                    connection.executemany(
                        "DELETE FROM slot_holds WHERE pool = ? AND holder = ?",
                        [(p.name, holder) for p in pools],
                    )
                    return False
            for pool, ended in zip(pools, take_over, strict=True):
                if ended:
                    connection.execute(
                        "DELETE FROM slot_holds WHERE pool = ? AND lease_ms <= ?", (pool.name, now_ms)
                    )
                connection.execute(
                    "INSERT OR REPLACE INTO slot_holds (pool, holder, lease_ms) VALUES (?, ?, ?)",
                    (pool.name, holder, lease_ms(hold.lease_expires_at)),
                )
            return True

    def extend(self, pools: Sequence[Pool], hold: SlotHold) -> bool:
        holder = holder_key(hold.run_id, hold.attempt)
        with self.db.write() as connection:
            for pool in pools:
                moved = connection.execute(
                    "UPDATE slot_holds SET lease_ms = ? WHERE pool = ? AND holder = ?",
                    (lease_ms(hold.lease_expires_at), pool.name, holder),
                )
                if moved.rowcount == 0:
                    return False
            return True

    def release(self, pools: Sequence[Pool], run_id: str, attempt: int) -> None:
        holder = holder_key(run_id, attempt)
        with self.db.write(savepoint=False) as connection:  # as `acquire`
            connection.executemany(
                "DELETE FROM slot_holds WHERE pool = ? AND holder = ?", [(p.name, holder) for p in pools]
            )

    def in_flight(self, pool: Pool, now: datetime) -> int:
        with self.db.read() as connection:
            return _live(connection, pool.name, lease_ms(now))
