"""DynamoDB records of the runs aggregate."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from itertools import islice
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from tickwork.adapters.dynamodb.items import deserialize, serialize
from tickwork.adapters.records import open_keys, run_from_item, run_to_item, run_update_base
from tickwork.domain.audit import RecordedRuns
from tickwork.domain.errors import (
    StaleRunError,
    TransientStoreError,
)
from tickwork.domain.execution import Claim, waiting_slot_is_stale
from tickwork.domain.models import OverlapPolicy, Run, RunState, Standing, split_run_id
from tickwork.domain.timekeys import format_instant, format_instant_ms, parse_instant

if TYPE_CHECKING:
    pass

from tickwork.adapters.dynamodb.base import (
    CLAIMABLE_CONDITION,
    CLAIMABLE_VALUES,
    StoreBase,
    _Cancelled,
    _changes,
    _code,
    _run_key,
    _stored_run,
)

logger = logging.getLogger(__name__)


class RunRecords(StoreBase):
    """The run aggregate: run items and the open-runs index; claims, transitions and the overlap slot (the
    slot lives on the job item, written in the run's own transaction)."""

    def existing_run_times(self, job_id: str, scheduled_fors: Sequence[datetime]) -> set[datetime]:
        """One strongly consistent keys-only Query over the fires' range, not one read per fire."""
        if not scheduled_fors:
            return set()
        found = self.run_times_between(job_id, min(scheduled_fors), max(scheduled_fors))
        return found & set(scheduled_fors)

    def claimable_runs(self, job_id: str, since: datetime) -> list[Run]:
        """The job's runs from `since` on that a claim could still take (planned, waiting to retry, queued):
        the ones a job write must rewrite the view of. One strongly consistent Query."""
        values: dict[str, Any] = {":j": job_id, ":since": format_instant(since), **CLAIMABLE_VALUES}
        request: dict[str, Any] = {
            "TableName": self.tables.runs,
            "KeyConditionExpression": "job_id = :j AND scheduled_for >= :since",
            "FilterExpression": CLAIMABLE_CONDITION,
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
            "Limit": limit,  # a page of what is asked, not 1 MB of the job's history
        }
        return [run_from_item(item) for item in islice(self._query_items(request), limit)]

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

    def _between(
        self, job_id: str, first: datetime, last: datetime, **projection: Any
    ) -> Iterator[dict[str, Any]]:
        """The job's runs in [first, last], strongly consistent, page after page (with `projection`: only
        the attributes it names)."""
        request: dict[str, Any] = {
            "TableName": self.tables.runs,
            "KeyConditionExpression": "job_id = :j AND scheduled_for BETWEEN :a AND :b",
            "ExpressionAttributeValues": serialize(
                {":j": job_id, ":a": format_instant(first), ":b": format_instant(last)}
            ),
            "ConsistentRead": True,
            **projection,
        }
        return self._query_items(request)

    def run_times_between(self, job_id: str, first: datetime, last: datetime) -> set[datetime]:
        """Fire times of the job's existing runs in [first, last] (keys only)."""
        items = self._between(job_id, first, last, ProjectionExpression="scheduled_for")
        return {parse_instant(str(item["scheduled_for"])) for item in items}

    def run_states_between(self, job_id: str, first: datetime, last: datetime) -> dict[datetime, RunState]:
        """The state of each of the job's runs in [first, last] (two attributes)."""
        items = self._between(
            job_id,
            first,
            last,
            ProjectionExpression="scheduled_for, #s",
            ExpressionAttributeNames={"#s": "state"},
        )
        return {parse_instant(str(item["scheduled_for"])): RunState(str(item["state"])) for item in items}

    def runs_between(self, job_id: str, first: datetime, last: datetime) -> list[Run]:
        """The job's runs in [first, last], whole."""
        return [run_from_item(item) for item in self._between(job_id, first, last)]

    def recorded_runs_of_jobs(
        self, firsts: Mapping[str, datetime], last: datetime
    ) -> dict[str, RecordedRuns]:
        """A query a job: DynamoDB has no query across partition keys (its auditor reads job by job)."""
        return RecordedRuns.job_by_job(firsts, last, self.runs_between)

    def restore_runs(self, runs: Sequence[Run]) -> list[Run]:
        """One conditional PutItem per run (it must not exist): a run found meanwhile is left as it is."""
        created: list[Run] = []
        for run in runs:
            put = self._put_new_run(run)["Put"]
            try:
                self._client.put_item(**put)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                    continue
                raise self._translate(error) from error
            created.append(run)
        return created

    def transition_run(self, expected: Run, updated: Run) -> None:
        """One conditional UpdateItem of the attributes that change (never a whole-item put)."""
        condition, values = self._run_condition(expected)
        update, names, update_values = _changes(run_update_base(expected), run_to_item(updated))
        self._update_run(
            f"run {expected.run_id} moved on from {expected.state}/{expected.attempt}",
            Key=serialize(_run_key(expected)),
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames={"#s": "state", **names},
            ExpressionAttributeValues=serialize({**values, **update_values}),
        )

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
            **CLAIMABLE_VALUES,
        }
        if claim.dispatched_at is not None:
            update += ", dispatched_at = if_not_exists(dispatched_at, :sent)"
            values[":sent"] = format_instant_ms(claim.dispatched_at)
        condition = f"{CLAIMABLE_CONDITION} AND attempt = :expected_attempt"
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
        # The run's view names the concurrency key and limit the attempt's slots were taken for (its
        # heartbeats extend, and its end frees, the slots of that pool).
        if claim.concurrency is None:
            condition += " AND attribute_not_exists(job_view.concurrency)"
        else:
            # `key` and `limit` are reserved words of DynamoDB's expressions.
            condition += " AND job_view.concurrency.#ck = :ck AND job_view.concurrency.#cl = :cl"
            names.update({"#ck": "key", "#cl": "limit"})
            values.update({":ck": claim.concurrency.key, ":cl": claim.concurrency.limit})
        response = self._update_run(
            f"run {claim.run_id} is not claimable at attempt {claim.expected_attempt}",
            Key=serialize({"job_id": claim.job_id, "scheduled_for": format_instant(claim.scheduled_for)}),
            # A new attempt has had no heartbeat yet (domain.execution.claimed).
            UpdateExpression=update + " REMOVE retry_at, heartbeat_at, tracking",
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=serialize(values),
            ReturnValues="ALL_NEW",
        )
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

    def _update_run(self, refusal: str, **request: Any) -> dict[str, Any]:
        """One conditional UpdateItem of a run. A refused condition is StaleRunError carrying the stored run
        (ALL_OLD): a retry whose first try landed recognises itself by it."""
        try:
            response = self._client.update_item(
                TableName=self.tables.runs, ReturnValuesOnConditionCheckFailure="ALL_OLD", **request
            )
        except ClientError as error:
            if _code(error) == "ConditionalCheckFailedException":
                raise StaleRunError(refusal, current=_stored_run(error.response.get("Item"))) from error
            raise self._translate(error) from error
        return dict(response)

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

    def _run_with_job_slot(
        self, expected: Run, updated: Run, job_condition: str, job_update: str, job_values: dict[str, Any]
    ) -> bool:
        """Move the run and the job's overlap slot together; False when only the slot's condition failed."""
        run_condition, run_values = self._run_condition(expected)
        update, names, update_values = _changes(run_update_base(expected), run_to_item(updated))
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
