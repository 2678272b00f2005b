"""SQLite records of the jobs aggregate: the same writes as adapters/dynamodb/jobs.py, each one immediate
transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickwork.adapters.conditions import (
    REQUEST_FINGERPRINT,
    claimable,
    job_still_at,
    plannable,
    rewritten_job,
)
from tickwork.adapters.event_records import without_fingerprint, written_revision
from tickwork.adapters.records import (
    AUDITED_JOB_ATTRIBUTES,
    WATCHED_JOB_ATTRIBUTES,
    audited_job_from_item,
    job_from_item,
    job_to_item,
    job_view_to_item,
    run_to_item,
    watched_job_from_item,
)
from tickwork.adapters.sqlite.base import SqliteBase, load, put, rewrite, stored_columns
from tickwork.domain.alerts import WatchedJob
from tickwork.domain.audit import AuditedJob, audit_segment
from tickwork.domain.errors import (
    ConflictError,
    NotFoundError,
    PlanConflictError,
    RunsMovedError,
    VersionMismatchError,
)
from tickwork.domain.models import Job, JobView, Run
from tickwork.domain.planning import JobPlan
from tickwork.domain.revisions import Authored
from tickwork.domain.timekeys import format_instant
from tickwork.resources import EVENTS, JOBS, RUNS

# The watched attributes of a record as one JSON array (an absent one null): SQLite parses the record once.
_WATCHED_PATHS = "json_extract(item, {})".format(", ".join(f"'$.{name}'" for name in WATCHED_JOB_ATTRIBUTES))


def _watched_job(values: str) -> WatchedJob:
    named = zip(WATCHED_JOB_ATTRIBUTES, json.loads(values), strict=True)
    return watched_job_from_item({name: value for name, value in named if value is not None})


_AUDITED_PATHS = "json_extract(item, {})".format(", ".join(f"'$.{name}'" for name in AUDITED_JOB_ATTRIBUTES))


def _audited_job(values: str) -> AuditedJob:
    named = zip(AUDITED_JOB_ATTRIBUTES, json.loads(values), strict=True)
    return audited_job_from_item({name: value for name, value in named if value is not None})


class SqliteJobRecords(SqliteBase):
    """Job records, the `due` and `by_owner` indexes over them, and the writes that change a job together
    with its runs."""

    def get_job(self, job_id: str) -> Job | None:
        with self.db.read() as connection:
            item = self._job_item(connection, job_id)
        return None if item is None else job_from_item(item)

    def query_due(self, due_key: str, through: datetime) -> list[Job]:
        items = self._select_items(
            "SELECT item FROM jobs WHERE due_key = ? AND next_fire_at <= ? ORDER BY next_fire_at",
            (due_key, format_instant(through)),
        )
        return [job_from_item(item) for item in items]

    def owner_job_ids(
        self, owner: str, *, limit: int, after_job_id: str | None = None
    ) -> tuple[list[str], bool]:
        with self.db.read() as connection:
            rows = connection.execute(
                "SELECT job_id FROM jobs WHERE owner = ? AND job_id > ? ORDER BY job_id LIMIT ?",
                (owner, after_job_id or "", limit + 1),
            ).fetchall()
        ids = [str(row[0]) for row in rows]
        return ids[:limit], len(ids) > limit

    def audit_jobs(
        self, segment: int, segments: int, *, after: str | None, limit: int
    ) -> tuple[list[AuditedJob], str | None]:
        """Keys first (cheap), then the segment's items: SQLite has no segments of its own, so a job's is
        the hash of its id (domain/audit.audit_segment), as in the in-memory engine."""
        page: list[str] = []
        more = False
        with self.db.read() as connection:
            rows = connection.execute(
                "SELECT job_id FROM jobs WHERE job_id > ? ORDER BY job_id", (after or "",)
            )
            for (job_id,) in rows:
                if audit_segment(str(job_id), segments) != segment:
                    continue
                if len(page) == limit:
                    more = True
                    break
                page.append(str(job_id))
        # The audited attributes alone (json_extract), not each record decoded whole: `Auditor` reads a job
        # whole only for a repair.
        extracted = self._job_rows(_AUDITED_PATHS, page)
        jobs = sorted((_audited_job(values) for (values,) in extracted), key=lambda audited: audited.job_id)
        return jobs, (page[-1] if more else None)

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        jobs = (job_from_item(load(item)) for (item,) in self._job_rows("item", job_ids))
        return {job.job_id: job for job in jobs}

    def get_watched_jobs(self, job_ids: Sequence[str]) -> dict[str, WatchedJob]:
        """What the watcher reads of the jobs that exist among `job_ids`: SQLite takes the few attributes
        out of each record (json_extract), so a burst's jobs are not decoded whole."""
        jobs = (_watched_job(values) for (values,) in self._job_rows(_WATCHED_PATHS, job_ids))
        return {job.job_id: job for job in jobs}

    def _job_rows(self, selected: str, job_ids: Sequence[str]) -> list[tuple[Any, ...]]:
        """`selected` of each job that exists among `job_ids` (each asked once), in no particular order."""
        wanted = list(dict.fromkeys(job_ids))
        rows: list[tuple[Any, ...]] = []
        for start in range(0, len(wanted), 500):  # below SQLite's host-parameter limit
            chunk = wanted[start : start + 500]
            sql = f"SELECT {selected} FROM jobs WHERE job_id IN ({', '.join('?' for _ in chunk)})"
            with self.db.read() as connection:
                rows.extend(connection.execute(sql, chunk))
        return rows

    def get_job_fingerprint(self, job_id: str) -> tuple[Job, str | None] | None:
        with self.db.read() as connection:
            item = self._job_item(connection, job_id)
        if item is None:
            return None
        fingerprint = item.get(REQUEST_FINGERPRINT)
        return job_from_item(item), None if fingerprint is None else str(fingerprint)

    def commit_plan(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        with self.db.write() as connection:
            self._plan(connection, job, runs, next_fire_at)

    def commit_plans(self, plans: Sequence[JobPlan]) -> list[Exception | None]:
        """The round's plans in one transaction, each job's a write inside it (a savepoint: db.py): a job's
        refusal undoes its writes alone, and the round pays one commit, not one per job."""
        outcomes: list[Exception | None] = []
        with self.db.write():
            for plan in plans:
                try:
                    with self.db.write() as connection:
                        self._plan(connection, plan.job, plan.runs, plan.next_fire_at)
                # A refusal is this job's alone; any other error undoes the whole round (nothing committed).
                except (PlanConflictError, ValueError) as refused:
                    outcomes.append(refused)
                else:
                    outcomes.append(None)
        return outcomes

    def _plan(
        self, connection: sqlite3.Connection, job: Job, runs: Sequence[Run], next_fire_at: datetime | None
    ) -> None:
        if job.next_fire_at is None:
            raise ValueError("a job without a next fire has nothing to plan")
        run_exists = any(self._exists(connection, run) for run in runs)
        item = plannable(self._job_item(connection, job.job_id), job, run_exists)
        columns = stored_columns(JOBS, item)
        self._insert_runs(connection, runs)
        item.pop("next_fire_at", None)
        item.pop("due_key", None)
        if next_fire_at is not None:
            item["next_fire_at"] = format_instant(next_fire_at)
            item["due_key"] = job.due_key_at(next_fire_at)
        # Written over its row (an UPDATE of the record and the due index's columns), not deleted and
        # inserted again with every index entry: each fire planned pays this once.
        rewrite(connection, JOBS, columns, item)

    def create_job(self, job: Job, runs: Sequence[Run], authored: Authored | None = None) -> None:
        self._create(job_to_item(job), runs, authored)

    def create_job_with_fingerprint(
        self, job: Job, runs: Sequence[Run], fingerprint: str, authored: Authored | None = None
    ) -> None:
        self._create({**job_to_item(job), REQUEST_FINGERPRINT: fingerprint}, runs, authored)

    def _create(self, job_item: dict[str, Any], runs: Sequence[Run], authored: Authored | None) -> None:
        with self.db.write() as connection:
            if self._job_item(connection, job_item["job_id"]) is not None or any(
                self._exists(connection, run) for run in runs
            ):
                raise ConflictError(f"job {job_item['job_id']} already exists")
            put(connection, JOBS, job_item)
            self._insert_runs(connection, runs)
            _record(connection, authored, None, without_fingerprint(job_item))

    def replace_job(
        self,
        expected: Job,
        updated: Job,
        runs: Sequence[Run],
        refreshed: Sequence[tuple[Run, JobView]] = (),
        authored: Authored | None = None,
    ) -> None:
        with self.db.write() as connection:
            stored = self._check_job_change(connection, expected, refreshed)
            if any(self._exists(connection, run) for run in runs):
                raise ConflictError(f"job {expected.job_id}: a run it plans already exists")
            put(connection, JOBS, rewritten_job(stored, updated))
            self._insert_runs(connection, runs)
            self._rewrite_views(connection, refreshed)
            _record(connection, authored, job_to_item(expected), job_to_item(updated))

    def delete_job(
        self, expected: Job, refreshed: Sequence[tuple[Run, JobView]] = (), authored: Authored | None = None
    ) -> None:
        with self.db.write() as connection:
            self._check_job_change(connection, expected, refreshed)
            connection.execute("DELETE FROM jobs WHERE job_id = ?", (expected.job_id,))
            self._rewrite_views(connection, refreshed)
            _record(connection, authored, job_to_item(expected), None)

    def _check_job_change(
        self, connection: sqlite3.Connection, expected: Job, refreshed: Sequence[tuple[Run, JobView]]
    ) -> dict[str, Any]:
        """The stored job, if a job write may go ahead: NotFoundError, VersionMismatchError or
        RunsMovedError (one of the runs it rewrites was claimed meanwhile) otherwise."""
        stored = self._job_item(connection, expected.job_id)
        if stored is None:
            raise NotFoundError(f"job {expected.job_id} not found")
        if not job_still_at(stored, expected):
            raise VersionMismatchError(f"job {expected.job_id} changed since version {expected.version}")
        for run, _ in refreshed:
            if not claimable(
                self._run_item(connection, run.job_id, format_instant(run.scheduled_for)), run.attempt
            ):
                raise RunsMovedError(
                    f"job {expected.job_id}: a run it rewrites was claimed meanwhile; read it again"
                )
        return stored

    def _rewrite_views(
        self, connection: sqlite3.Connection, refreshed: Sequence[tuple[Run, JobView]]
    ) -> None:
        for run, view in refreshed:
            item = self._run_item(connection, run.job_id, format_instant(run.scheduled_for))
            if item is not None:  # checked claimable in this transaction
                item["job_view"] = job_view_to_item(view)
                put(connection, RUNS, item)

    def _exists(self, connection: sqlite3.Connection, run: Run) -> bool:
        row = connection.execute(
            "SELECT 1 FROM runs WHERE job_id = ? AND scheduled_for = ?",
            (run.job_id, format_instant(run.scheduled_for)),
        ).fetchone()
        return row is not None

    @staticmethod
    def _insert_runs(connection: sqlite3.Connection, runs: Sequence[Run]) -> None:
        for run in runs:
            put(connection, RUNS, run_to_item(run))


def _record(
    connection: sqlite3.Connection,
    authored: Authored | None,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> None:
    """A job write's revision and audit entry, in the write's transaction (none for a write no one
    authored: the ticker's, the audit's)."""
    if authored is None:
        return
    items = written_revision(authored, before, after)
    for item in items:
        taken = connection.execute(
            "SELECT 1 FROM events WHERE scope = ? AND key = ?", (item["scope"], item["key"])
        ).fetchone()
        if taken is not None:  # an earlier job's history under a job id named again: never overwritten
            raise ConflictError(f"job {item['job_id']}: revision {item['revision']} is an earlier job's")
    for item in items:
        put(connection, EVENTS, item)
