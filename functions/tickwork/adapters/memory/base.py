"""What the in-memory record classes share: the tables, one lock, and records in and out.

A record is kept as the plain item adapters/records.py maps (what the SQLite engine stores as JSON), put in
and handed out as a copy made through JSON, so a caller never holds a reference into the store and values
compare as they do in the other engines. Every conditional write is a read-check-write under the one lock,
with the conditions of adapters/conditions.py: the same refusals as the other engines, atomic against
every other thread."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tickwork.domain.models import Run
from tickwork.domain.timekeys import format_instant

Record = dict[str, Any]


def copied(item: Mapping[str, Any]) -> Record:
    """A copy of a record sharing nothing with it, its values as JSON gives them back."""
    return dict(json.loads(json.dumps(item, separators=(",", ":"))))


@dataclass
class MemoryTables:
    """The engine's state: the four tables (runs by job, then by fire time: the runs table's key) and the
    lock every read and write takes. Stores given the same tables see one database."""

    jobs: dict[str, Record] = field(default_factory=dict)
    runs: dict[str, dict[str, Record]] = field(default_factory=dict)
    shards: dict[str, Record] = field(default_factory=dict)
    requests: dict[str, Record] = field(default_factory=dict)
    # The events table's revisions and audit entries, by (scope, key) (the job writes record them).
    events: dict[tuple[str, str], Record] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)


class MemoryBase:
    """The tables, and the record reads and writes every record class uses (callers hold the lock)."""

    def __init__(self, tables: MemoryTables | None = None) -> None:
        self.tables = tables or MemoryTables()

    def _job_item(self, job_id: str) -> Record | None:
        item = self.tables.jobs.get(job_id)
        return None if item is None else copied(item)

    def _put_job(self, item: Mapping[str, Any]) -> None:
        self.tables.jobs[str(item["job_id"])] = copied(item)

    def _run_item(self, job_id: str, fire: str) -> Record | None:
        item = self.tables.runs.get(job_id, {}).get(fire)
        return None if item is None else copied(item)

    def _run_exists(self, run: Run) -> bool:
        return format_instant(run.scheduled_for) in self.tables.runs.get(run.job_id, {})

    def _put_run(self, item: Mapping[str, Any]) -> None:
        self.tables.runs.setdefault(str(item["job_id"]), {})[str(item["scheduled_for"])] = copied(item)

    def _job_runs(self, job_id: str, *, newest_first: bool = False) -> Iterator[Record]:
        """A job's stored run records in fire-time order (the runs table's sort key, a fixed-width time):
        the stored records themselves, for reads that filter before they copy."""
        runs = self.tables.runs.get(job_id, {})
        for fire in sorted(runs, reverse=newest_first):
            yield runs[fire]

    def _every_run(self) -> Iterator[Record]:
        """Every stored run record (what a sparse index is read from here: the records carrying its key)."""
        for runs in self.tables.runs.values():
            yield from runs.values()
