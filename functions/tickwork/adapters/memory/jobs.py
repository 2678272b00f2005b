"""In-memory records of the jobs aggregate: the same writes as adapters/sqlite/jobs.py and
adapters/dynamodb/jobs.py, each one step under the lock."""

from __future__ import annotations

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
from tickwork.adapters.memory.base import MemoryBase, Record, copied
from tickwork.adapters.plans import commit_each
from tickwork.adapters.records import (
    filed_under,
    job_from_item,
    job_to_item,
    job_view_to_item,
    run_to_item,
    watched_job_from_item,
)
from tickwork.domain.alerts import WatchedJob
from tickwork.domain.audit import AuditedJob, audit_segment
from tickwork.domain.errors import (
    ConflictError,
    NotFoundError,
    RunsMovedError,
    VersionMismatchError,
)
from tickwork.domain.models import Job, JobView, Run
from tickwork.domain.planning import JobPlan
from tickwork.domain.revisions import Authored
from tickwork.domain.timekeys import format_instant


class MemoryJobRecords(MemoryBase):
    """Job records, the `due` and `by_owner` indexes over them (read from the records that carry their
    keys: sparse, as in the other engines), and the writes that change a job together with its runs."""

    def get_job(self, job_id: str) -> Job | None:
        with self.tables.lock:
            item = self._job_item(job_id)
        return None if item is None else job_from_item(item)

    def query_due(self, due_key: str, through: datetime) -> list[Job]:
        until = format_instant(through)
        with self.tables.lock:
            due = [
                copied(item)
                for item in self.tables.jobs.values()
                if item.get("due_key") == due_key and str(item.get("next_fire_at", "")) <= until
            ]
        due.sort(key=lambda item: (str(item["next_fire_at"]), str(item["job_id"])))
        return [job_from_item(item) for item in due]

    def owner_job_ids(
        self, owner: str, *, limit: int, after_job_id: str | None = None
    ) -> tuple[list[str], bool]:
        with self.tables.lock:
            ids = sorted(
                job_id
                for job_id, item in self.tables.jobs.items()
                if item.get("owner") == owner and job_id > (after_job_id or "")
            )
        return ids[:limit], len(ids) > limit

    def audit_jobs(
        self, segment: int, segments: int, *, after: str | None, limit: int
    ) -> tuple[list[AuditedJob], str | None]:
        with self.tables.lock:
            ids = sorted(
                job_id
                for job_id in self.tables.jobs
                if (after is None or job_id > after) and audit_segment(job_id, segments) == segment
            )
            page = [copied(self.tables.jobs[job_id]) for job_id in ids[:limit]]
        audited = [AuditedJob.of(job_from_item(item), filed_under(item)) for item in page]
        return audited, (ids[limit - 1] if len(ids) > limit else None)

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        return {job.job_id: job for job in map(job_from_item, self._job_items(job_ids))}

    def get_watched_jobs(self, job_ids: Sequence[str]) -> dict[str, WatchedJob]:
        return {job.job_id: job for job in map(watched_job_from_item, self._job_items(job_ids))}

    def _job_items(self, job_ids: Sequence[str]) -> list[Record]:
        """Copies of the records of the jobs that exist among `job_ids`, each asked once."""
        with self.tables.lock:
            return [item for job_id in dict.fromkeys(job_ids) if (item := self._job_item(job_id))]

    def get_job_fingerprint(self, job_id: str) -> tuple[Job, str | None] | None:
        with self.tables.lock:
            item = self._job_item(job_id)
        if item is None:
            return None
        fingerprint = item.get(REQUEST_FINGERPRINT)
        return job_from_item(item), None if fingerprint is None else str(fingerprint)

    def commit_plan(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        if job.next_fire_at is None:
            raise ValueError("a job without a next fire has nothing to plan")
        with self.tables.lock:
            run_exists = any(self._run_exists(run) for run in runs)
            item = plannable(self._job_item(job.job_id), job, run_exists)
            item.pop("next_fire_at", None)
            item.pop("due_key", None)
            if next_fire_at is not None:
                item["next_fire_at"] = format_instant(next_fire_at)
                item["due_key"] = job.due_key_at(next_fire_at)
            self._put_runs(runs)
            self._put_job(item)

    def commit_plans(self, plans: Sequence[JobPlan]) -> list[Exception | None]:
        return commit_each(self.commit_plan, plans)

    def create_job(self, job: Job, runs: Sequence[Run], authored: Authored | None = None) -> None:
        self._create(job_to_item(job), runs, authored)

    def create_job_with_fingerprint(
        self, job: Job, runs: Sequence[Run], fingerprint: str, authored: Authored | None = None
    ) -> None:
        self._create({**job_to_item(job), REQUEST_FINGERPRINT: fingerprint}, runs, authored)

    def _create(self, job_item: dict[str, Any], runs: Sequence[Run], authored: Authored | None) -> None:
        with self.tables.lock:
            if job_item["job_id"] in self.tables.jobs or any(self._run_exists(run) for run in runs):
                raise ConflictError(f"job {job_item['job_id']} already exists")
            self._put_job(job_item)
            self._put_runs(runs)
            self._record(authored, None, without_fingerprint(job_item))

    def replace_job(
        self,
        expected: Job,
        updated: Job,
        runs: Sequence[Run],
        refreshed: Sequence[tuple[Run, JobView]] = (),
        authored: Authored | None = None,
    ) -> None:
        with self.tables.lock:
            stored = self._check_job_change(expected, refreshed)
            if any(self._run_exists(run) for run in runs):
                raise ConflictError(f"job {expected.job_id}: a run it plans already exists")
            self._put_job(rewritten_job(stored, updated))
            self._put_runs(runs)
            self._rewrite_views(refreshed)
            self._record(authored, job_to_item(expected), job_to_item(updated))

    def delete_job(
        self, expected: Job, refreshed: Sequence[tuple[Run, JobView]] = (), authored: Authored | None = None
    ) -> None:
        with self.tables.lock:
            self._check_job_change(expected, refreshed)
            del self.tables.jobs[expected.job_id]
            self._rewrite_views(refreshed)
            self._record(authored, job_to_item(expected), None)

    def _record(
        self, authored: Authored | None, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> None:
        if authored is None:
            return
        items = written_revision(authored, before, after)
        if any((item["scope"], item["key"]) in self.tables.events for item in items):
            raise ConflictError(
                f"job {items[0]['job_id']}: revision {items[0]['revision']} is an earlier job's"
            )
        for item in items:
            self.tables.events[(item["scope"], item["key"])] = copied(item)

    def _check_job_change(self, expected: Job, refreshed: Sequence[tuple[Run, JobView]]) -> dict[str, Any]:
        """The stored job, if a job write may go ahead: NotFoundError, VersionMismatchError or
        RunsMovedError (one of the runs it rewrites was claimed meanwhile) otherwise."""
        stored = self._job_item(expected.job_id)
        if stored is None:
            raise NotFoundError(f"job {expected.job_id} not found")
        if not job_still_at(stored, expected):
            raise VersionMismatchError(f"job {expected.job_id} changed since version {expected.version}")
        for run, _ in refreshed:
            if not claimable(self._run_item(run.job_id, format_instant(run.scheduled_for)), run.attempt):
                raise RunsMovedError(
                    f"job {expected.job_id}: a run it rewrites was claimed meanwhile; read it again"
                )
        return stored

    def _rewrite_views(self, refreshed: Sequence[tuple[Run, JobView]]) -> None:
        for run, view in refreshed:
            item = self._run_item(run.job_id, format_instant(run.scheduled_for))
            if item is not None:  # checked claimable under the same lock
                item["job_view"] = job_view_to_item(view)
                self._put_run(item)

    def _put_runs(self, runs: Sequence[Run]) -> None:
        for run in runs:
            self._put_run(run_to_item(run))
