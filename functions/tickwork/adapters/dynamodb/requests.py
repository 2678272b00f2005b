"""DynamoDB records of runs on request (run now, retry, backfill) and of the failed-runs index."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from tickwork.adapters.dynamodb.base import StoreBase, _Cancelled, _changes, _run_key, _stored_run
from tickwork.adapters.dynamodb.items import deserialize, serialize
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
from tickwork.domain.timekeys import format_instant_ms


class RequestRecords(StoreBase):
    """Runs created or restarted on request, in one transaction with the job's request counter and the
    Idempotency-Key record; and the failed runs of an owner, newest first."""

    def get_request(self, request_key: str) -> RunRequest | None:
        item = self._get(self.tables.requests, {"request_key": request_key})
        return None if item is None else request_from_item(item)

    def request_runs(
        self,
        job: Job,
        created: Sequence[Run],
        retried: Sequence[tuple[Run, Run]] = (),
        record: RunRequest | None = None,
    ) -> None:
        condition = "attribute_exists(job_id) AND version = :v AND " + (
            "run_requests = :r" if job.run_requests else "attribute_not_exists(run_requests)"
        )
        values: dict[str, Any] = {":v": job.version, ":next": job.run_requests + 1}
        if job.run_requests:
            values[":r"] = job.run_requests
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.tables.jobs,
                    "Key": serialize({"job_id": job.job_id}),
                    "UpdateExpression": "SET run_requests = :next",
                    "ConditionExpression": condition,
                    "ExpressionAttributeValues": serialize(values),
                }
            }
        ]
        items.extend(self._put_new_run(run) for run in created)
        for expected, updated in retried:
            run_condition, run_values = self._run_condition(expected)
            update, names, update_values = _changes(run_update_base(expected), run_to_item(updated))
            items.append(
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
                }
            )
        if record is not None:
            items.append(
                {
                    "Put": {
                        "TableName": self.tables.requests,
                        "Item": serialize(request_to_item(record)),
                        "ConditionExpression": "attribute_not_exists(request_key)",
                    }
                }
            )
        try:
            self._transact(items)
        except _Cancelled as cancelled:
            first_retried = 1 + len(created)
            if cancelled.failed(0):
                if self._get(self.tables.jobs, {"job_id": job.job_id}) is None:
                    raise NotFoundError(f"job {job.job_id} not found") from cancelled.error
                raise VersionMismatchError(
                    f"job {job.job_id} changed since version {job.version}"
                ) from cancelled.error
            for index in range(first_retried, first_retried + len(retried)):
                if cancelled.failed(index):
                    raise StaleRunError(
                        f"run {retried[index - first_retried][0].run_id} moved on",
                        current=_stored_run(cancelled.item(index)),
                    ) from cancelled.error
            raise RequestConflictError(
                f"job {job.job_id}: a requested run exists already ({cancelled.codes})",
                run_exists=cancelled.failed(1, first_retried),
                request_exists=record is not None and cancelled.failed(len(items) - 1),
            ) from cancelled.error

    def failed_runs(
        self, owner: str, *, since: datetime | None, before: str | None, limit: int
    ) -> tuple[list[Run], str | None]:
        """The owner's failed runs finished at or after `since`, newest first, after the position `before`
        (a failed-order key from a previous page). Each write shard is read newest first and the pages are
        merged; returns the page and the position to continue from (None: no more)."""
        pages: list[list[tuple[str, dict[str, Any]]]] = []
        for key in failed_keys(owner):
            condition = "failed_key = :k"
            values: dict[str, Any] = {":k": key}
            if before is not None and since is not None:
                condition += " AND failed_order BETWEEN :since AND :before"
                values.update({":since": format_instant_ms(since), ":before": before})
            elif before is not None:
                condition += " AND failed_order <= :before"
                values[":before"] = before
            elif since is not None:
                condition += " AND failed_order >= :since"
                values[":since"] = format_instant_ms(since)
            request: dict[str, Any] = {
                "TableName": self.tables.runs,
                "IndexName": "failed_runs",
                "KeyConditionExpression": condition,
                "ExpressionAttributeValues": serialize(values),
                "ScanIndexForward": False,
                # A page, the position `before` itself (BETWEEN and <= include it), and one more to tell
                # whether anything follows.
                "Limit": limit + 2,
            }
            try:
                response = self._client.query(**request)
            except ClientError as error:
                raise self._translate(error) from error
            items = [deserialize(item) for item in response.get("Items", [])]
            pages.append([(str(i["failed_order"]), i) for i in items if str(i["failed_order"]) != before])
        merged = list(heapq.merge(*pages, key=lambda pair: pair[0], reverse=True))
        page = merged[:limit]
        more = len(merged) > limit
        return [run_from_item(item) for _, item in page], (page[-1][0] if more and page else None)
