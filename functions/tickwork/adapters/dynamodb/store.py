"""DynamoDB implementation of the storage ports. Translates AWS errors into domain errors."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.adapters.dynamodb.items import (
    deserialize,
    job_from_item,
    job_to_item,
    job_view_to_item,
    open_keys,
    run_from_item,
    run_to_item,
    serialize,
)
from tickwork.domain.errors import (
    ConflictError,
    NotFoundError,
    PlanConflictError,
    RunsMovedError,
    StaleRunError,
    StoreError,
    TransientStoreError,
    VersionMismatchError,
)
from tickwork.domain.execution import CLAIMABLE_STATES, Claim, waiting_slot_is_stale
from tickwork.domain.models import Job, JobView, OverlapPolicy, Run, RunState, Standing, split_run_id
from tickwork.domain.timekeys import format_instant, format_instant_ms, parse_instant
from tickwork.resources import JOBS, RUNS, SHARDS, ResourceNames

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

logger = logging.getLogger(__name__)

# Error codes after which the same request may succeed: retried with backoff by the caller.
TRANSIENT_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TransactionConflictException",
        "TransactionInProgressException",
        "InternalServerError",
        "ServiceUnavailable",
    }
)
TRANSIENT_REASONS = frozenset({"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"})
# DynamoDB's limit on the items of one TransactWriteItems.
MAX_TRANSACTION_ITEMS = 100
# BatchGetItem may return part of a request unprocessed (throttling); it is asked again this many times.
_MAX_BATCH_ROUNDS = 5
# Attribute of a job item: sha256 of the create request that carried an Idempotency-Key. Written only at
# create; job updates never touch it.
REQUEST_FINGERPRINT = "request_fingerprint"


@dataclass(frozen=True, slots=True)
class TableNames:
    jobs: str
    runs: str
    shards: str

    @classmethod
    def from_resources(cls, names: ResourceNames) -> TableNames:
        return cls(jobs=names.table(JOBS), runs=names.table(RUNS), shards=names.table(SHARDS))


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _cancellation_codes(error: ClientError) -> list[str]:
    reasons = error.response.get("CancellationReasons") or []
    return [str(r.get("Code") or "None") for r in reasons]


def _transient(error: ClientError) -> TransientStoreError:
    return TransientStoreError(f"{_code(error)}: {error.response.get('Error', {}).get('Message', '')}")


class _Cancelled(Exception):
    """A transaction cancelled by its conditions: which items' conditions failed, and what they held."""

    def __init__(self, error: ClientError) -> None:
        super().__init__(str(error))
        self.error = error
        self.reasons: list[Any] = list(error.response.get("CancellationReasons") or [])
        self.codes = _cancellation_codes(error)

    def failed(self, start: int, stop: int | None = None) -> bool:
        """Whether a condition failed among items [start, stop) (only item `start` without a stop)."""
        end = start + 1 if stop is None else stop
        return "ConditionalCheckFailed" in self.codes[start:end]

    def item(self, index: int) -> Any:
        """The stored item a failed condition returned (ALL_OLD), if the store sent it."""
        return self.reasons[index].get("Item") if index < len(self.reasons) else None


def _job_condition(expected: Job) -> tuple[str, dict[str, Any]]:
    """A job write's condition: the job is still at the version and next fire it was read at (the ticker
    moves the next fire without a new version)."""
    if expected.next_fire_at is None:
        return "version = :expected_version AND attribute_not_exists(next_fire_at)", {
            ":expected_version": expected.version
        }
    return "version = :expected_version AND next_fire_at = :expected_fire", {
        ":expected_version": expected.version,
        ":expected_fire": format_instant(expected.next_fire_at),
    }


def _run_key(run: Run) -> dict[str, Any]:
    return {"job_id": run.job_id, "scheduled_for": format_instant(run.scheduled_for)}


def _changes(before: dict[str, Any], after: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    """An UpdateExpression that turns item `before` into item `after`: SET what is new or different,
    REMOVE what is gone; key attributes never change. Names and values are numbered placeholders."""
    keys = {"job_id", "scheduled_for"}
    changed = [k for k, v in after.items() if k not in keys and before.get(k) != v]
    gone = [k for k in before if k not in keys and k not in after]
    names = {f"#u{i}": k for i, k in enumerate(changed)}
    names.update({f"#r{i}": k for i, k in enumerate(gone)})
    values = {f":u{i}": after[k] for i, k in enumerate(changed)}
    clauses = []
    if changed:
        clauses.append("SET " + ", ".join(f"#u{i} = :u{i}" for i in range(len(changed))))
    if gone:
        clauses.append("REMOVE " + ", ".join(f"#r{i}" for i in range(len(gone))))
    if not clauses:
        # Nothing differs: still a conditional write, so the caller learns whether the run moved.
        clauses.append("SET #s = #s")
    return " ".join(clauses), names, values


def _stored_run(item: Any) -> Run | None:
    """The run a refused condition returned (ALL_OLD), if the store sent it."""
    return run_from_item(deserialize(item)) if item else None


class _NetworkErrorsAreTransient:
    """Client proxy: botocore's own errors (connection reset, read timeout, endpoint unreachable) become
    TransientStoreError, so callers retry them like throttling instead of dying mid-loop. Service errors
    (ClientError) pass through to the translations below."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attribute(*args, **kwargs)
            except BotoCoreError as error:
                raise TransientStoreError(f"{type(error).__name__}: {error}") from error

        return call


class DynamoStore:
    """Jobs, runs and shard watermarks in DynamoDB. One client, injected; no clients at import."""

    def __init__(self, client: DynamoDBClient, tables: TableNames) -> None:
        self._client = cast("DynamoDBClient", _NetworkErrorsAreTransient(client))
        self.tables = tables

    # --- reads -------------------------------------------------------------------------------------

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

    def existing_run_times(self, job_id: str, scheduled_fors: Sequence[datetime]) -> set[datetime]:
        """One strongly consistent Query over the fires' range (keys only), not one read per fire."""
        if not scheduled_fors:
            return set()
        wanted = {format_instant(fire): fire for fire in scheduled_fors}
        request: dict[str, Any] = {
            "TableName": self.tables.runs,
            "KeyConditionExpression": "job_id = :j AND scheduled_for BETWEEN :a AND :b",
            "ExpressionAttributeValues": serialize({":j": job_id, ":a": min(wanted), ":b": max(wanted)}),
            "ProjectionExpression": "scheduled_for",
            "ConsistentRead": True,
        }
        found = (str(item["scheduled_for"]) for item in self._query_items(request))
        return {wanted[key] for key in found if key in wanted}

    def claimable_runs(self, job_id: str, since: datetime) -> list[Run]:
        """The job's runs from `since` on that a claim could still take (planned, waiting to retry, queued):
        the ones a job write must rewrite the view of. One strongly consistent Query."""
        values: dict[str, Any] = {":j": job_id, ":since": format_instant(since)}
        values.update({f":c{i}": str(state) for i, state in enumerate(sorted(CLAIMABLE_STATES))})
        request: dict[str, Any] = {
            "TableName": self.tables.runs,
            "KeyConditionExpression": "job_id = :j AND scheduled_for >= :since",
            "FilterExpression": f"#s IN ({', '.join(f':c{i}' for i in range(len(CLAIMABLE_STATES)))})",
            "ExpressionAttributeNames": {"#s": "state"},
            "ExpressionAttributeValues": serialize(values),
            "ConsistentRead": True,
        }
        return [run_from_item(item) for item in self._query_items(request)]

    def get_run(self, job_id: str, scheduled_for: datetime) -> Run | None:
        item = self._get(self.tables.runs, {"job_id": job_id, "scheduled_for": format_instant(scheduled_for)})
        return None if item is None else run_from_item(item)

    def list_runs(self, job_id: str, *, newest_first: bool = True, limit: int = 1000) -> list[Run]:
        """A job's runs in time order (the runs table's sort key is the fixed-width fire time)."""
        request: dict[str, Any] = {
            "TableName": self.tables.runs,
            "KeyConditionExpression": "job_id = :j",
            "ExpressionAttributeValues": serialize({":j": job_id}),
            "ScanIndexForward": not newest_first,
            "ConsistentRead": True,
        }
        return [run_from_item(item) for item in islice(self._query_items(request), limit)]

    # --- the API's reads (pages with an opaque position) ------------------------------------------------

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

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        """The jobs that exist among `job_ids` (BatchGetItem, strongly consistent), by id."""
        keys = [{"job_id": job_id} for job_id in dict.fromkeys(job_ids)]
        jobs = (job_from_item(item) for item in self._batch_get(self.tables.jobs, keys))
        return {job.job_id: job for job in jobs}

    def _batch_get(self, table: str, keys: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The items that exist among `keys` (BatchGetItem, strongly consistent, 100 keys a request;
        unprocessed keys are asked again a few times), deserialized, in no particular order."""
        found: list[dict[str, Any]] = []
        pending = list(keys)
        while pending:
            chunk, pending = pending[:100], pending[100:]
            request: dict[str, Any] = {
                table: {"Keys": [serialize(key) for key in chunk], "ConsistentRead": True}
            }
            for _ in range(_MAX_BATCH_ROUNDS):
                try:
                    response = self._client.batch_get_item(RequestItems=request)
                except ClientError as error:
                    raise self._translate(error) from error
                found.extend(deserialize(item) for item in response.get("Responses", {}).get(table, []))
                request = dict(response.get("UnprocessedKeys") or {})
                if not request:
                    break
            else:
                raise TransientStoreError("BatchGetItem left keys unprocessed after retries")
        return found

    def query_runs(
        self,
        job_id: str,
        *,
        start: datetime | None,
        end: datetime | None,
        states: Sequence[RunState] = (),
        limit: int,
        after: datetime | None = None,
        newest_first: bool = True,
    ) -> tuple[list[Run], datetime | None]:
        """One page of a job's runs with `start <= scheduled_for <= end`, in time order, optionally only in
        `states`. Returns the runs and the position to continue after (None at the end). A page may hold
        fewer than `limit` runs when a state filter drops some; `limit` bounds the items read."""
        condition = "job_id = :j"
        values: dict[str, Any] = {":j": job_id}
        if start is not None and end is not None:
            condition += " AND scheduled_for BETWEEN :a AND :b"
            values.update({":a": format_instant(start), ":b": format_instant(end)})
        elif start is not None:
            condition += " AND scheduled_for >= :a"
            values[":a"] = format_instant(start)
        elif end is not None:
            condition += " AND scheduled_for <= :b"
            values[":b"] = format_instant(end)
        request: dict[str, Any] = {
            "TableName": self.tables.runs,
            "KeyConditionExpression": condition,
            "ScanIndexForward": not newest_first,
            "Limit": limit,
        }
        if states:
            names = {f":s{i}": str(state) for i, state in enumerate(states)}
            request["FilterExpression"] = f"#s IN ({', '.join(names)})"
            request["ExpressionAttributeNames"] = {"#s": "state"}
            values.update(names)
        request["ExpressionAttributeValues"] = serialize(values)
        if after is not None:
            request["ExclusiveStartKey"] = serialize(
                {"job_id": job_id, "scheduled_for": format_instant(after)}
            )
        try:
            page = self._client.query(**request)
        except ClientError as error:
            raise self._translate(error) from error
        runs = [run_from_item(deserialize(item)) for item in page.get("Items", [])]
        last = page.get("LastEvaluatedKey")
        return runs, None if not last else parse_instant(str(deserialize(last)["scheduled_for"]))

    def run_times_between(self, job_id: str, first: datetime, last: datetime) -> set[datetime]:
        """Fire times of the job's existing runs in [first, last] (strongly consistent, keys only)."""
        request: dict[str, Any] = {
            "TableName": self.tables.runs,
            "KeyConditionExpression": "job_id = :j AND scheduled_for BETWEEN :a AND :b",
            "ExpressionAttributeValues": serialize(
                {":j": job_id, ":a": format_instant(first), ":b": format_instant(last)}
            ),
            "ProjectionExpression": "scheduled_for",
            "ConsistentRead": True,
        }
        return {parse_instant(str(item["scheduled_for"])) for item in self._query_items(request)}

    def run_states_between(self, job_id: str, first: datetime, last: datetime) -> dict[datetime, RunState]:
        """The state of each of the job's runs in [first, last] (strongly consistent, two attributes)."""
        request: dict[str, Any] = {
            "TableName": self.tables.runs,
            "KeyConditionExpression": "job_id = :j AND scheduled_for BETWEEN :a AND :b",
            "ExpressionAttributeValues": serialize(
                {":j": job_id, ":a": format_instant(first), ":b": format_instant(last)}
            ),
            "ProjectionExpression": "scheduled_for, #s",
            "ExpressionAttributeNames": {"#s": "state"},
            "ConsistentRead": True,
        }
        return {
            parse_instant(str(item["scheduled_for"])): RunState(str(item["state"]))
            for item in self._query_items(request)
        }

    def get_watermark(self, shard: int) -> datetime | None:
        item = self._get(self.tables.shards, {"shard_id": f"{shard:04d}"})
        return None if item is None else parse_instant(item["planned_through"])

    # --- the commit point --------------------------------------------------------------------------

    def commit_plan(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        if job.next_fire_at is None:
            raise ValueError("a job without a next fire has nothing to plan")
        advanced = job.advanced_to(next_fire_at)
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
            values[":due"] = advanced.due_key
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

    def set_watermark(self, shard: int, planned_through: datetime) -> None:
        try:
            self._client.put_item(
                TableName=self.tables.shards,
                Item=serialize(
                    {"shard_id": f"{shard:04d}", "planned_through": format_instant_ms(planned_through)}
                ),
                ConditionExpression="attribute_not_exists(shard_id) OR planned_through < :t",
                ExpressionAttributeValues=serialize({":t": format_instant_ms(planned_through)}),
            )
        except ClientError as error:
            if _code(error) == "ConditionalCheckFailedException":
                return  # another ticker already moved it further: forward-only is the rule, not an error
            raise self._translate(error) from error

    # --- job management ----------------------------------------------------------------------------

    def create_job(self, job: Job, runs: Sequence[Run]) -> None:
        self._create(job_to_item(job), runs)

    def create_job_with_fingerprint(self, job: Job, runs: Sequence[Run], fingerprint: str) -> None:
        """create_job, also recording the fingerprint of the request that created the job (an idempotent
        create compares a retry against it). ConflictError if the job exists."""
        self._create({**job_to_item(job), REQUEST_FINGERPRINT: fingerprint}, runs)

    def _create(self, job_item: dict[str, Any], runs: Sequence[Run]) -> None:
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
        try:
            self._transact(items)
        except _Cancelled as cancelled:
            raise ConflictError(f"job {job_item['job_id']} already exists") from cancelled.error

    def get_job_fingerprint(self, job_id: str) -> tuple[Job, str | None] | None:
        """The job and the fingerprint of the request that created it (None if created without one)."""
        item = self._get(self.tables.jobs, {"job_id": job_id})
        if item is None:
            return None
        fingerprint = item.get(REQUEST_FINGERPRINT)
        return job_from_item(item), None if fingerprint is None else str(fingerprint)

    def replace_job(
        self,
        expected: Job,
        updated: Job,
        runs: Sequence[Run],
        refreshed: Sequence[tuple[Run, JobView]] = (),
    ) -> None:
        # An update of the fields job management owns, never a whole-item put: the executors' overlap slot
        # (active_run, queued_run) lives on the same item and must survive an edit.
        condition, values = _job_condition(expected)
        item = job_to_item(updated)
        owned = [k for k in item if k != "job_id"]
        names = {f"#f{i}": k for i, k in enumerate(owned)}
        values.update({f":f{i}": item[k] for i, k in enumerate(owned)})
        sets = ", ".join(f"#f{i} = :f{i}" for i in range(len(owned)))
        removable = [
            a for a in ("next_fire_at", "due_key", "paused_at", "resumed_at", "due_floor") if a not in item
        ]
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
        self._transact_job_change(expected, items, new_runs=len(runs))

    def delete_job(self, expected: Job, refreshed: Sequence[tuple[Run, JobView]] = ()) -> None:
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
        self._transact_job_change(expected, items, new_runs=0)

    # --- execution ---------------------------------------------------------------------------------

    def transition_run(self, expected: Run, updated: Run) -> None:
        """One conditional UpdateItem of the attributes that change (never a whole-item put)."""
        condition, values = self._run_condition(expected)
        update, names, update_values = _changes(run_to_item(expected), run_to_item(updated))
        try:
            self._client.update_item(
                TableName=self.tables.runs,
                Key=serialize(_run_key(expected)),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames={"#s": "state", **names},
                ExpressionAttributeValues=serialize({**values, **update_values}),
                # The refusal carries the stored run: a retry whose first try landed recognises itself.
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if _code(error) == "ConditionalCheckFailedException":
                raise StaleRunError(
                    f"run {expected.run_id} moved on from {expected.state}/{expected.attempt}",
                    current=_stored_run(error.response.get("Item")),
                ) from error
            raise self._translate(error) from error

    def claim(self, claim: Claim) -> Run:
        """The executor's claim: one conditional UpdateItem (no read before it) that moves a claimable run
        at the expected attempt to running under a new lease, and returns the run as it now is. The index
        sort key is left alone (see domain.execution.check_at). StaleRunError, carrying the stored run (None
        if there is none), when the run is not claimable at that attempt."""
        update = (
            "SET #s = :running, attempt = :attempt, lease_owner = :worker, lease_expires_at = :lease, "
            "started_at = if_not_exists(started_at, :now)"
        )
        values: dict[str, Any] = {
            ":running": str(RunState.RUNNING),
            ":attempt": claim.expected_attempt + 1,
            ":worker": claim.worker,
            ":lease": format_instant_ms(claim.lease_expires_at),
            ":now": format_instant_ms(claim.now),
            ":expected_attempt": claim.expected_attempt,
            **{f":c{i}": str(state) for i, state in enumerate(sorted(CLAIMABLE_STATES))},
        }
        if claim.dispatched_at is not None:
            update += ", dispatched_at = if_not_exists(dispatched_at, :sent)"
            values[":sent"] = format_instant_ms(claim.dispatched_at)
        claimable = ", ".join(f":c{i}" for i in range(len(CLAIMABLE_STATES)))
        condition = f"#s IN ({claimable}) AND attempt = :expected_attempt"
        names = {"#s": "state"}
        if claim.trusting_view:
            # The run's job view lets it run, under overlap allow, with the timeout this lease was computed
            # from: the claim needs no read of the job.
            condition += (
                " AND job_view.standing = :active AND job_view.overlap = :allow"
                " AND job_view.timeout_seconds = :timeout"
            )
            values.update(
                {
                    ":active": str(Standing.ACTIVE),
                    ":allow": str(OverlapPolicy.ALLOW),
                    ":timeout": claim.timeout_seconds,
                }
            )
        try:
            response = self._client.update_item(
                TableName=self.tables.runs,
                Key=serialize({"job_id": claim.job_id, "scheduled_for": format_instant(claim.scheduled_for)}),
                UpdateExpression=update + " REMOVE retry_at",
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=serialize(values),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if _code(error) == "ConditionalCheckFailedException":
                raise StaleRunError(
                    f"run {claim.run_id} is not claimable at attempt {claim.expected_attempt}",
                    current=_stored_run(error.response.get("Item")),
                ) from error
            raise self._translate(error) from error
        stored = deserialize(response["Attributes"])
        lease = format_instant_ms(claim.lease_expires_at)
        if "check_at" in stored and str(stored["check_at"]) > lease:
            # The run's check time is later than this lease (a short timeout, or a re-sent run): bring it
            # forward, or a dead worker would go unnoticed until then. The common claim skips this write.
            # The claim has landed: a failure here must not undo it (a retried claim would be refused as
            # our own and skip this step); the run is then found at its later check time instead.
            try:
                self._tighten_check(claim, lease)
                stored["check_at"] = lease
            except TransientStoreError as error:
                logger.warning("run %s: check time left at %s (%s)", claim.run_id, stored["check_at"], error)
        return run_from_item(stored)

    def _tighten_check(self, claim: Claim, lease: str) -> None:
        try:
            self._client.update_item(
                TableName=self.tables.runs,
                Key=serialize({"job_id": claim.job_id, "scheduled_for": format_instant(claim.scheduled_for)}),
                UpdateExpression="SET check_at = :lease",
                ConditionExpression="#s = :running AND attempt = :attempt AND lease_owner = :worker",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues=serialize(
                    {
                        ":lease": lease,
                        ":running": str(RunState.RUNNING),
                        ":attempt": claim.expected_attempt + 1,
                        ":worker": claim.worker,
                    }
                ),
            )
        except ClientError as error:
            if _code(error) == "ConditionalCheckFailedException":
                return  # the run already moved on (finished, or taken over): its check time moved with it
            raise self._translate(error) from error

    def claim_exclusive(self, expected: Run, updated: Run, now: datetime) -> bool:
        slot_free = "(attribute_not_exists(active_run) OR active_lease_expires_at < :now OR active_run = :me)"
        update = "SET active_run = :me, active_lease_expires_at = :lease"
        if expected.state is RunState.QUEUED:
            update += " REMOVE queued_run"
        values = {
            ":now": format_instant_ms(now),
            ":me": expected.run_id,
            ":lease": format_instant_ms(updated.lease_expires_at or now),
        }
        return self._run_with_job_slot(expected, updated, slot_free, update, values)

    def enqueue_behind(self, expected: Run, updated: Run) -> bool:
        values = {":me": expected.run_id}
        if self._run_with_job_slot(
            expected,
            updated,
            "(attribute_not_exists(queued_run) OR queued_run = :me)",
            "SET queued_run = :me",
            values,
        ):
            return True
        # The slot names another run. If that run has left the queue some other way (cancelled, skipped,
        # failed from the DLQ), the slot is stale: take it over, or the job's queue would stay blocked.
        raw = self._get(self.tables.jobs, {"job_id": expected.job_id})
        holder = None if raw is None else raw.get("queued_run")
        if holder is None:
            return False
        holder_job, holder_fire = split_run_id(str(holder))
        if not waiting_slot_is_stale(self.get_run(holder_job, holder_fire)):
            return False
        return self._run_with_job_slot(
            expected, updated, "queued_run = :stale", "SET queued_run = :me", {**values, ":stale": holder}
        )

    def finish_exclusive(self, expected: Run, updated: Run) -> str | None:
        values = {":me": expected.run_id}
        released = self._run_with_job_slot(
            expected, updated, "active_run = :me", "REMOVE active_run, active_lease_expires_at", values
        )
        if not released:
            # The slot was lost (the job was deleted, or it was taken after our lease expired): record the
            # outcome on the run alone, still fenced by its state and attempt.
            self.transition_run(expected, updated)
        raw = self._get(self.tables.jobs, {"job_id": expected.job_id})
        return None if raw is None else raw.get("queued_run")

    def open_runs(self, shard: int, through: datetime) -> Iterator[Run]:
        """The shard's open runs whose check time is at or before `through`, oldest check first: the keys
        from each write shard of the keys-only index, then the runs themselves (strongly consistent batch
        reads, 100 at a time; a run finished in between is simply not returned)."""
        listed: list[tuple[str, str, str]] = []
        for key in open_keys(shard):
            request: dict[str, Any] = {
                "TableName": self.tables.runs,
                "IndexName": "open_runs",
                "KeyConditionExpression": "open_key = :k AND check_at <= :t",
                "ExpressionAttributeValues": serialize({":k": key, ":t": format_instant_ms(through)}),
            }
            listed.extend(
                (str(item["check_at"]), str(item["job_id"]), str(item["scheduled_for"]))
                for item in self._query_items(request)
            )
        listed.sort()
        for start in range(0, len(listed), 100):
            chunk = listed[start : start + 100]
            keys = [{"job_id": job_id, "scheduled_for": fire} for _, job_id, fire in chunk]
            found = {
                (str(item["job_id"]), str(item["scheduled_for"])): item
                for item in self._batch_get(self.tables.runs, keys)
            }
            for _, job_id, fire in chunk:
                item = found.get((job_id, fire))
                if item is not None and "open_key" in item:
                    yield run_from_item(item)

    def _query_items(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Every item of a Query, page after page, deserialized; AWS errors translated."""
        request = dict(request)
        while True:
            try:
                page = self._client.query(**request)
            except ClientError as error:
                raise self._translate(error) from error
            for item in page.get("Items", []):
                yield deserialize(item)
            if not page.get("LastEvaluatedKey"):
                return
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _run_condition(self, expected: Run) -> tuple[str, dict[str, Any]]:
        condition = "#s = :expected_state AND attempt = :expected_attempt"
        values: dict[str, Any] = {
            ":expected_state": str(expected.state),
            ":expected_attempt": expected.attempt,
        }
        if expected.lease_expires_at is not None:
            condition += " AND lease_expires_at = :expected_lease"
            values[":expected_lease"] = format_instant_ms(expected.lease_expires_at)
        return condition, values

    def _run_with_job_slot(
        self, expected: Run, updated: Run, job_condition: str, job_update: str, job_values: dict[str, Any]
    ) -> bool:
        """Move the run and the job's overlap slot together; False when only the slot's condition failed."""
        run_condition, run_values = self._run_condition(expected)
        update, names, update_values = _changes(run_to_item(expected), run_to_item(updated))
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.tables.runs,
                    "Key": serialize(_run_key(expected)),
                    "UpdateExpression": update,
                    "ConditionExpression": run_condition,
                    "ExpressionAttributeNames": {"#s": "state", **names},
                    "ExpressionAttributeValues": serialize({**run_values, **update_values}),
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {
                "Update": {
                    "TableName": self.tables.jobs,
                    "Key": serialize({"job_id": expected.job_id}),
                    "UpdateExpression": job_update,
                    "ConditionExpression": f"attribute_exists(job_id) AND {job_condition}",
                    "ExpressionAttributeValues": serialize(job_values),
                }
            },
        ]
        try:
            self._transact(items)
        except _Cancelled as cancelled:
            if cancelled.failed(0):
                raise StaleRunError(
                    f"run {expected.run_id} moved on", current=_stored_run(cancelled.item(0))
                ) from cancelled.error
            return False
        return True

    # --- helpers -----------------------------------------------------------------------------------

    def _transact_job_change(self, expected: Job, items: list[dict[str, Any]], *, new_runs: int) -> None:
        """A job write: items[0] is the job, then `new_runs` runs it plans, then the views it rewrites."""
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
            if cancelled.failed(1 + new_runs, len(items)):
                raise RunsMovedError(
                    f"job {expected.job_id}: a run it rewrites was claimed meanwhile; read it again"
                ) from cancelled.error
            raise ConflictError(
                f"job {expected.job_id}: a run it plans already exists ({cancelled.codes})"
            ) from cancelled.error

    def _transact(self, items: list[dict[str, Any]]) -> None:
        """TransactWriteItems, the one place its refusals are read: throttling and transaction conflicts
        become TransientStoreError (retried), other service errors are translated, and a cancellation by
        conditions is raised as _Cancelled for the caller to name in domain terms."""
        try:
            self._client.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
        except ClientError as error:
            if _code(error) != "TransactionCanceledException":
                raise self._translate(error) from error
            if any(code in TRANSIENT_REASONS for code in _cancellation_codes(error)):
                raise _transient(error) from error
            raise _Cancelled(error) from error

    def _refresh_view(self, run: Run, view: JobView) -> dict[str, Any]:
        """Rewrite an unclaimed run's job view, if it is still unclaimed at the attempt it was read at."""
        values: dict[str, Any] = {":view": job_view_to_item(view), ":attempt": run.attempt}
        values.update({f":c{i}": str(state) for i, state in enumerate(sorted(CLAIMABLE_STATES))})
        claimable = ", ".join(f":c{i}" for i in range(len(CLAIMABLE_STATES)))
        return {
            "Update": {
                "TableName": self.tables.runs,
                "Key": serialize(_run_key(run)),
                "UpdateExpression": "SET job_view = :view",
                "ConditionExpression": f"#s IN ({claimable}) AND attempt = :attempt",
                "ExpressionAttributeNames": {"#s": "state"},
                "ExpressionAttributeValues": serialize(values),
            }
        }

    def _put_new_run(self, run: Run) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.tables.runs,
                "Item": serialize(run_to_item(run)),
                "ConditionExpression": "attribute_not_exists(job_id)",
            }
        }

    def _get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        try:
            response = self._client.get_item(TableName=table, Key=serialize(key), ConsistentRead=True)
        except ClientError as error:
            raise self._translate(error) from error
        item = response.get("Item")
        return None if item is None else deserialize(item)

    @staticmethod
    def _translate(error: ClientError) -> Exception:
        """Every service error becomes a domain error here: retryable ones TransientStoreError, the rest
        StoreError (services never see botocore's types)."""
        if _code(error) in TRANSIENT_CODES:
            return _transient(error)
        message = error.response.get("Error", {}).get("Message", "")
        return StoreError(f"DynamoDB {_code(error)}: {message}", code=_code(error))
