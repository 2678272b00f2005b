"""Bulk actions on DynamoDB (adapters/bulk_records.py): items of the events table, created together in one
transaction and each save conditional on the version it replaces."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from tickwork.adapters.bulk_records import (
    BULK_FROM,
    BULK_OUTBOX,
    BULK_TO,
    bulk_from_item,
    bulk_key,
    bulk_to_item,
)
from tickwork.adapters.dynamodb.base import StoreBase, TableNames, _Cancelled, _code
from tickwork.adapters.dynamodb.items import serialize
from tickwork.adapters.event_records import owner_scope
from tickwork.domain.bulk import BulkAction
from tickwork.domain.errors import ConflictError, VersionMismatchError
from tickwork.domain.timekeys import format_instant_ms

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DynamoBulkActions(StoreBase):
    def __init__(self, client: DynamoDBClient, tables: TableNames) -> None:
        super().__init__(client, tables)
        self._table = tables.events

    def create_actions(self, actions: Sequence[BulkAction]) -> None:
        puts = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": serialize(bulk_to_item(action)),
                    "ConditionExpression": "attribute_not_exists(#k)",
                    "ExpressionAttributeNames": {"#k": "key"},
                }
            }
            for action in actions
        ]
        try:
            self._transact(puts)  # (throttling and transaction conflicts: TransientStoreError, retried)
        except _Cancelled as cancelled:
            raise ConflictError(f"bulk action {actions[0].action_id} exists") from cancelled

    def get_action(self, owner: str, action_id: str) -> BulkAction | None:
        item = self._get(self._table, {"scope": owner_scope(owner), "key": bulk_key(action_id)})
        return None if item is None else bulk_from_item(item)

    def list_actions(self, owner: str) -> list[BulkAction]:
        request = self._scope_between(self._table, owner_scope(owner), BULK_FROM, BULK_TO)
        return [bulk_from_item(item) for item in self._query_items(request)]

    def due_actions(self, now: datetime, limit: int) -> list[BulkAction]:
        request = {
            "TableName": self._table,
            "IndexName": "outbox",
            "KeyConditionExpression": "outbox_key = :k AND send_at <= :now",
            "ExpressionAttributeValues": serialize({":k": BULK_OUTBOX, ":now": format_instant_ms(now)}),
        }
        # The index is eventually consistent and projects every attribute: each found action is read again,
        # strongly, so a worker leases it at the version it is stored at.
        found = []
        for item in self._first(request, limit):
            current = self.get_action(str(item["owner"]), str(item["action_id"]))
            if current is not None:
                found.append(current)
        return found

    def save_action(self, expected: BulkAction, action: BulkAction) -> None:
        request: dict[str, Any] = {
            "TableName": self._table,
            "Item": serialize(bulk_to_item(action)),
            "ConditionExpression": "#v = :expected",
            "ExpressionAttributeNames": {"#v": "version"},
            "ExpressionAttributeValues": serialize({":expected": expected.version}),
        }
        try:
            self._client.put_item(**request)
        except ClientError as error:
            if _code(error) == "ConditionalCheckFailedException":
                raise VersionMismatchError(
                    f"bulk action {expected.action_id} moved since version {expected.version}"
                ) from error
            raise self._translate(error) from error
