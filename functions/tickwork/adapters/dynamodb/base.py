"""What every DynamoDB record class shares: the client (network errors made transient), the table names,
and the one place each kind of request is sent and its errors translated into domain errors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.adapters.dynamodb.items import deserialize, serialize
from tickwork.adapters.records import job_view_to_item, run_from_item, run_to_item
from tickwork.domain.errors import (
    StoreError,
    TransientStoreError,
)
from tickwork.domain.execution import CLAIMABLE_STATES
from tickwork.domain.models import Job, JobView, Run
from tickwork.domain.timekeys import format_instant, format_instant_ms
from tickwork.resources import EVENTS, JOBS, REQUESTS, RUNS, SHARDS, ResourceNames

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# `#s IN (...)` over the states a claim may take, with its placeholder values: every request that asks
# "still claimable?" spells it this way.
CLAIMABLE_VALUES: dict[str, str] = {f":c{i}": str(state) for i, state in enumerate(sorted(CLAIMABLE_STATES))}
CLAIMABLE_CONDITION = f"#s IN ({', '.join(CLAIMABLE_VALUES)})"

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
    requests: str
    events: str  # a job write's revision and audit entry go there, in the write's transaction

    @classmethod
    def from_resources(cls, names: ResourceNames) -> TableNames:
        return cls(
            jobs=names.table(JOBS),
            runs=names.table(RUNS),
            shards=names.table(SHARDS),
            requests=names.table(REQUESTS),
            events=names.table(EVENTS),
        )


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
    values: dict[str, Any] = {":expected_version": expected.version}
    if expected.next_fire_at is None:
        condition = "version = :expected_version AND attribute_not_exists(next_fire_at)"
    else:
        condition = "version = :expected_version AND next_fire_at = :expected_fire"
        values[":expected_fire"] = format_instant(expected.next_fire_at)
    # A run requested meanwhile (run now, retry, backfill) moves the counter: the write reads the job's
    # runs again, so it rewrites that run's view too.
    if expected.run_requests:
        condition += " AND run_requests = :expected_requests"
        values[":expected_requests"] = expected.run_requests
    else:
        condition += " AND attribute_not_exists(run_requests)"
    return condition, values


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


class StoreBase:
    """The client and table names, and the shared requests: reads, batch reads, queries, transactions."""

    def __init__(self, client: DynamoDBClient, tables: TableNames) -> None:
        self._client = cast("DynamoDBClient", _NetworkErrorsAreTransient(client))
        self.tables = tables

    def _batch_get(
        self, table: str, keys: Sequence[dict[str, Any]], *, attributes: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        """The items that exist among `keys` (BatchGetItem, strongly consistent, 100 keys a request;
        unprocessed keys are asked again a few times), deserialized, in no particular order; only their
        `attributes` when given (each named through a placeholder: some are reserved words)."""
        found: list[dict[str, Any]] = []
        pending = list(keys)
        projection: dict[str, Any] = {}
        if attributes:
            names = {f"#a{index}": name for index, name in enumerate(attributes)}
            projection = {"ProjectionExpression": ", ".join(names), "ExpressionAttributeNames": names}
        while pending:
            chunk, pending = pending[:100], pending[100:]
            request: dict[str, Any] = {
                table: {"Keys": [serialize(key) for key in chunk], "ConsistentRead": True, **projection}
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

    @staticmethod
    def _scope_between(table: str, scope: str, low: str, high: str) -> dict[str, Any]:
        """A Query of the events table's items of one scope whose keys lie from `low` to `high`, both
        included: BETWEEN is the one condition on the sort key it takes (DynamoDB refuses two)."""
        return {
            "TableName": table,
            "KeyConditionExpression": "#s = :s AND #k BETWEEN :lo AND :hi",
            "ExpressionAttributeNames": {"#s": "scope", "#k": "key"},
            "ExpressionAttributeValues": serialize({":s": scope, ":lo": low, ":hi": high}),
        }

    def _first(self, request: dict[str, Any], count: int) -> list[dict[str, Any]]:
        """The first `count` items of a Query (read page after page until there are that many)."""
        found = []
        for item in self._query_items(request):
            found.append(item)
            if len(found) >= count:
                break
        return found

    def _run_condition(self, expected: Run) -> tuple[str, dict[str, Any]]:
        """A run write's fence: the run is still in the state, attempt, lease and job view it was read in."""
        condition = "#s = :expected_state AND attempt = :expected_attempt"
        values: dict[str, Any] = {
            ":expected_state": str(expected.state),
            ":expected_attempt": expected.attempt,
        }
        if expected.lease_expires_at is not None:
            condition += " AND lease_expires_at = :expected_lease"
            values[":expected_lease"] = format_instant_ms(expected.lease_expires_at)
        if expected.job_view is not None:
            # A job write that rewrote the view since it was read (a pause before an overlap-slot claim, a
            # resume before a cancel) wins: this write is refused and the run is looked at again.
            condition += " AND job_view.version = :expected_view_version"
            values[":expected_view_version"] = expected.job_view.version
        return condition, values

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
        values: dict[str, Any] = {
            ":view": job_view_to_item(view),
            ":attempt": run.attempt,
            **CLAIMABLE_VALUES,
        }
        return {
            "Update": {
                "TableName": self.tables.runs,
                "Key": serialize(_run_key(run)),
                "UpdateExpression": "SET job_view = :view",
                "ConditionExpression": f"{CLAIMABLE_CONDITION} AND attempt = :attempt",
                "ExpressionAttributeNames": {"#s": "state"},
                "ExpressionAttributeValues": serialize(values),
            }
        }

    def _put_revision(self, item: dict[str, Any]) -> dict[str, Any]:
        # Never over an earlier job's history (a job id an Idempotency-Key names again after a delete).
        return {
            "Put": {
                "TableName": self.tables.events,
                "Item": serialize(item),
                "ConditionExpression": "attribute_not_exists(#k)",
                "ExpressionAttributeNames": {"#k": "key"},
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
