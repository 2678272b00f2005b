"""SQLite records of runs on request (run now, retry, backfill) and of the failed-runs index: the same
conditions and refusals as adapters/dynamodb/requests.py, each request one immediate transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickwork.adapters.conditions import apply_changes, run_still_at, stored_run
from tickwork.adapters.records import (
    failed_keys,
    request_from_item,
    request_to_item,
    run_from_item,
    run_to_item,
    run_update_base,
)
from tickwork.adapters.sqlite.base import SqliteBase, load, put
from tickwork.domain.errors import NotFoundError, RequestConflictError, StaleRunError, VersionMismatchError
from tickwork.domain.models import Job, Run
from tickwork.domain.requests import RunRequest
from tickwork.domain.timekeys import format_instant, format_instant_ms
from tickwork.resources import JOBS, REQUESTS, RUNS


class SqliteRequestRecords(SqliteBase):
    def get_request(self, request_key: str) -> RunRequest | None:
        with self.db.read() as connection:
            row = connection.execute(
                "SELECT item FROM requests WHERE request_key = ?", (request_key,)
            ).fetchone()
        return None if row is None else request_from_item(load(row[0]))

    def request_runs(
        self,
        job: Job,
        created: Sequence[Run],
        retried: Sequence[tuple[Run, Run]] = (),
        record: RunRequest | None = None,
    ) -> None:
        with self.db.write() as connection:
            stored = self._job_item(connection, job.job_id)
            if stored is None:
                raise NotFoundError(f"job {job.job_id} not found")
            if stored.get("version") != job.version or stored.get("run_requests", 0) != job.run_requests:
                raise VersionMismatchError(f"job {job.job_id} changed since version {job.version}")
            run_exists = any(
                self._run_item(connection, run.job_id, format_instant(run.scheduled_for)) is not None
                for run in created
            )
            request_exists = record is not None and (
                connection.execute(
                    "SELECT 1 FROM requests WHERE request_key = ?", (record.request_key,)
                ).fetchone()
                is not None
            )
            current: list[dict[str, Any]] = []
            for expected, _ in retried:
                item = self._run_item(connection, expected.job_id, format_instant(expected.scheduled_for))
                if item is None or not run_still_at(item, expected):
                    raise StaleRunError(f"run {expected.run_id} moved on", current=stored_run(item))
                current.append(item)
            if run_exists or request_exists:
                raise RequestConflictError(
                    f"job {job.job_id}: a requested run exists already",
                    run_exists=run_exists,
                    request_exists=request_exists,
                )
            put(connection, JOBS, {**stored, "run_requests": job.run_requests + 1})
            for run in created:
                put(connection, RUNS, run_to_item(run))
            for item, (expected, updated) in zip(current, retried, strict=True):
                put(connection, RUNS, apply_changes(item, run_update_base(expected), run_to_item(updated)))
            if record is not None:
                put(connection, REQUESTS, request_to_item(record))

    def failed_runs(
        self, owner: str, *, since: datetime | None, before: str | None, limit: int
    ) -> tuple[list[Run], str | None]:
        keys = failed_keys(owner)
        sql = f"SELECT failed_order, item FROM runs WHERE failed_key IN ({', '.join('?' for _ in keys)})"
        parameters: list[Any] = list(keys)
        if since is not None:
            sql += " AND failed_order >= ?"
            parameters.append(format_instant_ms(since))
        if before is not None:
            sql += " AND failed_order < ?"
            parameters.append(before)
        sql += " ORDER BY failed_order DESC LIMIT ?"
        parameters.append(limit + 1)
        with self.db.read() as connection:
            rows = connection.execute(sql, parameters).fetchall()
        page = rows[:limit]
        more = len(rows) > limit
        return [run_from_item(load(item)) for _, item in page], (str(page[-1][0]) if more and page else None)

    def delete_expired_requests(self, now: datetime) -> int:
        """Idempotency-Key records past their retention (DynamoDB's TTL does this in AWS)."""
        with self.db.write() as connection:
            cursor = connection.execute(
                "DELETE FROM requests WHERE expires_at IS NOT NULL AND expires_at < ?",
                (int(now.timestamp()),),
            )
            return int(cursor.rowcount)
