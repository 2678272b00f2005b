"""In-memory records of runs on request (run now, retry, backfill) and of the failed-runs index: the same
conditions and refusals as adapters/sqlite/requests.py and adapters/dynamodb/requests.py, each request one
step under the lock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickwork.adapters.conditions import apply_changes, run_still_at, stored_run
from tickwork.adapters.memory.base import MemoryBase, copied
from tickwork.adapters.records import (
    failed_keys,
    request_from_item,
    request_to_item,
    run_from_item,
    run_to_item,
    run_update_base,
)
from tickwork.domain.errors import NotFoundError, RequestConflictError, StaleRunError, VersionMismatchError
from tickwork.domain.models import Job, Run
from tickwork.domain.requests import RunRequest
from tickwork.domain.timekeys import format_instant, format_instant_ms


class MemoryRequestRecords(MemoryBase):
    def get_request(self, request_key: str) -> RunRequest | None:
        with self.tables.lock:
            item = self.tables.requests.get(request_key)
            record = None if item is None else copied(item)
        return None if record is None else request_from_item(record)

    def request_runs(
        self,
        job: Job,
        created: Sequence[Run],
        retried: Sequence[tuple[Run, Run]] = (),
        record: RunRequest | None = None,
    ) -> None:
        with self.tables.lock:
            stored = self._job_item(job.job_id)
            if stored is None:
                raise NotFoundError(f"job {job.job_id} not found")
            if stored.get("version") != job.version or stored.get("run_requests", 0) != job.run_requests:
                raise VersionMismatchError(f"job {job.job_id} changed since version {job.version}")
            run_exists = any(self._run_exists(run) for run in created)
            request_exists = record is not None and record.request_key in self.tables.requests
            current: list[dict[str, Any]] = []
            for expected, _ in retried:
                item = self._run_item(expected.job_id, format_instant(expected.scheduled_for))
                if item is None or not run_still_at(item, expected):
                    raise StaleRunError(f"run {expected.run_id} moved on", current=stored_run(item))
                current.append(item)
            if run_exists or request_exists:
                raise RequestConflictError(
                    f"job {job.job_id}: a requested run exists already",
                    run_exists=run_exists,
                    request_exists=request_exists,
                )
            self._put_job({**stored, "run_requests": job.run_requests + 1})
            for run in created:
                self._put_run(run_to_item(run))
            for item, (expected, updated) in zip(current, retried, strict=True):
                self._put_run(apply_changes(item, run_update_base(expected), run_to_item(updated)))
            if record is not None:
                self.tables.requests[record.request_key] = copied(request_to_item(record))

    def failed_runs(
        self, owner: str, *, since: datetime | None, before: str | None, limit: int
    ) -> tuple[list[Run], str | None]:
        keys = set(failed_keys(owner))
        low = None if since is None else format_instant_ms(since)

        def listed(order: str) -> bool:
            return (low is None or order >= low) and (before is None or order < before)

        with self.tables.lock:
            found = [
                (str(item["failed_order"]), copied(item))
                for item in self._every_run()
                if item.get("failed_key") in keys and listed(str(item["failed_order"]))
            ]
        found.sort(key=lambda pair: pair[0], reverse=True)
        page = found[:limit]
        more = len(found) > limit
        return [run_from_item(item) for _, item in page], (page[-1][0] if more and page else None)
