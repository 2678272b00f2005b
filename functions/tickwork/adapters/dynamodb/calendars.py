"""Exclusion calendars on DynamoDB (adapters/calendar_records.py): items of the events table, each write
conditional on the version it replaces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from tickwork.adapters.calendar_records import (
    CALENDARS_FROM,
    CALENDARS_TO,
    calendar_from_item,
    calendar_key,
    calendar_to_item,
)
from tickwork.adapters.dynamodb.base import StoreBase, TableNames, _code
from tickwork.adapters.dynamodb.items import serialize
from tickwork.adapters.event_records import owner_scope
from tickwork.domain.calendars import Calendar
from tickwork.domain.errors import VersionMismatchError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DynamoCalendars(StoreBase):
    def __init__(self, client: DynamoDBClient, tables: TableNames) -> None:
        super().__init__(client, tables)
        self._table = tables.events

    def get_calendars(self, owner: str, names: Sequence[str]) -> dict[str, Calendar]:
        # At most MAX_CALENDARS_PER_JOB names: one strongly consistent read each (a batch read is not
        # strongly consistent per item in every emulator, and five reads are a claim's worth of time).
        found = {}
        for name in names:
            item = self._get(self._table, {"scope": owner_scope(owner), "key": calendar_key(name)})
            if item is not None:
                found[name] = calendar_from_item(item)
        return found

    def list_calendars(self, owner: str) -> list[Calendar]:
        scope = self._scope_between(self._table, owner_scope(owner), CALENDARS_FROM, CALENDARS_TO)
        request = {**scope, "ConsistentRead": True}
        return [calendar_from_item(item) for item in self._query_items(request)]

    def put_calendar(self, calendar: Calendar) -> None:
        request: dict[str, Any] = {"TableName": self._table, "Item": serialize(calendar_to_item(calendar))}
        if calendar.version == 1:
            request["ConditionExpression"] = "attribute_not_exists(#k)"
            request["ExpressionAttributeNames"] = {"#k": "key"}
        else:
            request["ConditionExpression"] = "#v = :previous"
            request["ExpressionAttributeNames"] = {"#v": "version"}
            request["ExpressionAttributeValues"] = serialize({":previous": calendar.version - 1})
        try:
            self._client.put_item(**request)
        except ClientError as error:
            if _code(error) == "ConditionalCheckFailedException":
                raise VersionMismatchError(
                    f"calendar {calendar.name} changed since version {calendar.version - 1}"
                ) from error
            raise self._translate(error) from error

    def delete_calendar(self, owner: str, name: str) -> bool:
        try:
            response = self._client.delete_item(
                TableName=self._table,
                Key=serialize({"scope": owner_scope(owner), "key": calendar_key(name)}),
                ReturnValues="ALL_OLD",
            )
        except ClientError as error:
            raise self._translate(error) from error
        return "Attributes" in response
