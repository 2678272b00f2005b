"""DynamoDB records of the jobs aggregate."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from tickwork.adapters.dynamodb.items import deserialize, serialize
from tickwork.adapters.event_records import without_fingerprint, written_revision
from tickwork.adapters.plans import commit_each
from tickwork.adapters.records import (
    REMOVABLE_JOB_ATTRIBUTES,
    WATCHED_JOB_ATTRIBUTES,
    filed_under,
    job_from_item,
    job_to_item,
    watched_job_from_item,
)
from tickwork.domain.alerts import WatchedJob
from tickwork.domain.audit import AuditedJob
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

if TYPE_CHECKING:
    pass

from tickwork.adapters.dynamodb.base import (
    MAX_TRANSACTION_ITEMS,
    REQUEST_FINGERPRINT,
    StoreBase,
    _Cancelled,
    _job_condition,
)


class JobRecords(StoreBase):
    """The job aggregate: job items, the indexes over them (`due`, `by_owner`), and the writes that change
    a job together with its runs (the plan commit, create, edit, delete; the job item leads each)."""

    def get_job(self, job_id: str) -> Job | None:
        item = self._get(self.tables.jobs, {"job_id": job_id})
        return None if item is None else job_from_item(item)

    def query_due(self, due_key: str, through: datetime) -> list[Job]:
        request: dict[str, Any] = {
            "TableName": self.tables.jobs,
            "IndexName": "due",
            "KeyConditionExpression": "due_key = :k AND next_fire_at <= :t",
            "ExpressionAttributeValues": serialize({":k": due_key, ":t": format_instant(through)}),
        }
        return [job_from_item(item) for item in self._query_items(request)]

    def owner_job_ids(
        self, owner: str, *, limit: int, after_job_id: str | None = None
    ) -> tuple[list[str], bool]:
        """Up to `limit` of an owner's job ids in id order, after `after_job_id`; True if more may follow.
        Reads the keys-only `by_owner` index (eventually consistent)."""
        request: dict[str, Any] = {
            "TableName": self.tables.jobs,
            "IndexName": "by_owner",
            "KeyConditionExpression": "#o = :o",
            "ExpressionAttributeNames": {"#o": "owner"},
            "ExpressionAttributeValues": serialize({":o": owner}),
            "Limit": limit,
        }
        if after_job_id is not None:
            request["ExclusiveStartKey"] = serialize({"owner": owner, "job_id": after_job_id})
        try:
            page = self._client.query(**request)
        except ClientError as error:
            raise self._translate(error) from error
        ids = [str(deserialize(item)["job_id"]) for item in page.get("Items", [])]
        return ids, bool(page.get("LastEvaluatedKey"))

    def audit_jobs(
        self, segment: int, segments: int, *, after: str | None, limit: int
    ) -> tuple[list[AuditedJob], str | None]:
        """One page of a parallel Scan's segment (eventually consistent: half the read units)."""
        request: dict[str, Any] = {
            "TableName": self.tables.jobs,
            "Segment": segment,
            "TotalSegments": segments,
            "Limit": limit,
        }
        if after is not None:
            request["ExclusiveStartKey"] = serialize({"job_id": after})
        try:
            page = self._client.scan(**request)
        except ClientError as error:
            raise self._translate(error) from error
        items = [deserialize(item) for item in page.get("Items", [])]
        jobs = [AuditedJob.of(job_from_item(item), filed_under(item)) for item in items]
        last = page.get("LastEvaluatedKey")
        return jobs, None if not last else str(deserialize(last)["job_id"])

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        """The jobs that exist among `job_ids` (BatchGetItem, strongly consistent), by id."""
        keys = [{"job_id": job_id} for job_id in dict.fromkeys(job_ids)]
        jobs = (job_from_item(item) for item in self._batch_get(self.tables.jobs, keys))
        return {job.job_id: job for job in jobs}

    def get_watched_jobs(self, job_ids: Sequence[str]) -> dict[str, WatchedJob]:
        """What the watcher reads of the jobs that exist among `job_ids` (BatchGetItem of those attributes
        alone: less to send and to deserialize; the read units are the whole item's all the same)."""
        keys = [{"job_id": job_id} for job_id in dict.fromkeys(job_ids)]
        items = self._batch_get(self.tables.jobs, keys, attributes=WATCHED_JOB_ATTRIBUTES)
        return {job.job_id: job for job in map(watched_job_from_item, items)}

    def get_job_fingerprint(self, job_id: str) -> tuple[Job, str | None] | None:
        """The job and the fingerprint of the request that created it (None if created without one)."""
        item = self._get(self.tables.jobs, {"job_id": job_id})
        if item is None:
            return None
        fingerprint = item.get(REQUEST_FINGERPRINT)
        return job_from_item(item), None if fingerprint is None else str(fingerprint)

    def commit_plan(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        if job.next_fire_at is None:
            raise ValueError("a job without a next fire has nothing to plan")
        names: dict[str, str] = {"#s": "state", "#v": "version", "#n": "next_fire_at"}
        values: dict[str, Any] = {
            ":v": job.version,
            ":fire": format_instant(job.next_fire_at),
            ":active": "active",
        }
        if next_fire_at is None:
            update = "REMOVE #n, due_key"
        else:
            update = "SET #n = :next, due_key = :due"
            values[":next"] = format_instant(next_fire_at)
            values[":due"] = job.due_key_at(next_fire_at)
        items: list[dict[str, Any]] = [self._put_new_run(run) for run in runs]
        items.append(
            {
                "Update": {
                    "TableName": self.tables.jobs,
                    "Key": serialize({"job_id": job.job_id}),
                    "UpdateExpression": update,
                    "ConditionExpression": "#s = :active AND #v = :v AND #n = :fire",
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": serialize(values),
                }
            }
        )
        try:
            self._transact(items)
        except _Cancelled as cancelled:
            raise PlanConflictError(
                run_exists=cancelled.failed(0, len(runs)), job_changed=cancelled.failed(len(runs))
            ) from cancelled.error

    def commit_plans(self, plans: Sequence[JobPlan]) -> list[Exception | None]:
        return commit_each(self.commit_plan, plans)

    def create_job(self, job: Job, runs: Sequence[Run], authored: Authored | None = None) -> None:
        self._create(job_to_item(job), runs, authored)

    def create_job_with_fingerprint(
        self, job: Job, runs: Sequence[Run], fingerprint: str, authored: Authored | None = None
    ) -> None:
        """create_job, also recording the fingerprint of the request that created the job (an idempotent
        create compares a retry against it). ConflictError if the job exists."""
        self._create({**job_to_item(job), REQUEST_FINGERPRINT: fingerprint}, runs, authored)

    def _create(self, job_item: dict[str, Any], runs: Sequence[Run], authored: Authored | None) -> None:
        """Put a new job (it must not exist) with the runs it plans for itself, in one transaction."""
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.tables.jobs,
                    "Item": serialize(job_item),
                    "ConditionExpression": "attribute_not_exists(job_id)",
                }
            }
        ]
        items.extend(self._put_new_run(run) for run in runs)
        items.extend(self._revision(authored, None, without_fingerprint(job_item)))
        try:
            self._transact(items)
        except _Cancelled as cancelled:
            raise ConflictError(f"job {job_item['job_id']} already exists") from cancelled.error

    def replace_job(
        self,
        expected: Job,
        updated: Job,
        runs: Sequence[Run],
        refreshed: Sequence[tuple[Run, JobView]] = (),
        authored: Authored | None = None,
    ) -> None:
        # An update of the fields job management owns, never a whole-item put: the executors' overlap slot
        # (active_run, queued_run) lives on the same item and must survive an edit.
        condition, values = _job_condition(expected)
        item = job_to_item(updated)
        owned = [k for k in item if k != "job_id"]
        names = {f"#f{i}": k for i, k in enumerate(owned)}
        values.update({f":f{i}": item[k] for i, k in enumerate(owned)})
        sets = ", ".join(f"#f{i} = :f{i}" for i in range(len(owned)))
        removable = [a for a in REMOVABLE_JOB_ATTRIBUTES if a not in item]
        update = f"SET {sets}" + (f" REMOVE {', '.join(removable)}" if removable else "")
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.tables.jobs,
                    "Key": serialize({"job_id": expected.job_id}),
                    "UpdateExpression": update,
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": serialize(values),
                }
            }
        ]
        items.extend(self._put_new_run(run) for run in runs)
        items.extend(self._refresh_view(run, view) for run, view in refreshed)
        items.extend(self._revision(authored, job_to_item(expected), item))
        self._transact_job_change(expected, items, new_runs=len(runs), views=len(refreshed))

    def delete_job(
        self, expected: Job, refreshed: Sequence[tuple[Run, JobView]] = (), authored: Authored | None = None
    ) -> None:
        # The next fire too, as for replace_job: a run the ticker planned after the views were read would
        # otherwise keep an active view and run after the delete.
        condition, values = _job_condition(expected)
        items: list[dict[str, Any]] = [
            {
                "Delete": {
                    "TableName": self.tables.jobs,
                    "Key": serialize({"job_id": expected.job_id}),
                    "ConditionExpression": condition,
                    "ExpressionAttributeValues": serialize(values),
                }
            }
        ]
        items.extend(self._refresh_view(run, view) for run, view in refreshed)
        items.extend(self._revision(authored, job_to_item(expected), None))
        self._transact_job_change(expected, items, new_runs=0, views=len(refreshed))

    def _revision(
        self, authored: Authored | None, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        """The puts of a job write's revision and audit entry (none for a write no one authored: the
        ticker's, the audit's)."""
        if authored is None:
            return []
        return [self._put_revision(item) for item in written_revision(authored, before, after)]

    def _transact_job_change(
        self, expected: Job, items: list[dict[str, Any]], *, new_runs: int, views: int
    ) -> None:
        """A job write: items[0] is the job, then `new_runs` runs it plans, then the `views` it rewrites,
        then its revision's two items."""
        if len(items) > MAX_TRANSACTION_ITEMS:
            raise ValueError(f"a job write of {len(items)} items does not fit in one transaction")
        try:
            self._transact(items)
        except _Cancelled as cancelled:
            if cancelled.failed(0):
                if self.get_job(expected.job_id) is None:
                    raise NotFoundError(f"job {expected.job_id} not found") from cancelled.error
                raise VersionMismatchError(
                    f"job {expected.job_id} changed since version {expected.version}"
                ) from cancelled.error
            if cancelled.failed(1 + new_runs, 1 + new_runs + views):
                raise RunsMovedError(
                    f"job {expected.job_id}: a run it rewrites was claimed meanwhile; read it again"
                ) from cancelled.error
            raise ConflictError(
                f"job {expected.job_id}: a run it plans already exists ({cancelled.codes})"
            ) from cancelled.error
