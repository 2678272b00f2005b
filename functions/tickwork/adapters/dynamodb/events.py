"""DynamoDB records of the events table (adapters/event_records.py): the same records and conditions as
adapters/sqlite/events.py, an event and its channels' windows and messages in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from tickwork.adapters.dynamodb.base import StoreBase, TableNames, _Cancelled, _code
from tickwork.adapters.dynamodb.items import serialize
from tickwork.adapters.event_records import (
    AUDIT_FROM,
    AUDIT_TO,
    DEFAULTS_KEY,
    REVISIONS_FROM,
    REVISIONS_TO,
    OutboxEntry,
    defaults_from_item,
    defaults_to_item,
    event_from_item,
    event_to_item,
    health_from_item,
    health_key,
    health_to_item,
    job_at_revision,
    message_key,
    message_to_item,
    outbox_entry,
    outbox_keys,
    owner_scope,
    page_of,
    revision_from_item,
    revision_key,
    timer_key,
    timer_to_item,
    window_from_item,
    window_key,
    window_to_item,
)
from tickwork.domain.alert_rules import AlertRules, Channel
from tickwork.domain.alerts import EventKind, JobEvent
from tickwork.domain.errors import ConflictError, TransientStoreError
from tickwork.domain.models import Job
from tickwork.domain.notify import ChannelHealth, DeadlineTimer, Message, Window
from tickwork.domain.revisions import Revision
from tickwork.domain.timekeys import epoch_seconds, format_instant_ms

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DynamoEventLog(StoreBase):
    def __init__(self, client: DynamoDBClient, tables: TableNames) -> None:
        super().__init__(client, tables)
        self._table = tables.events

    def _put(
        self, item: dict[str, Any], condition: str | None = None, values: dict[str, Any] | None = None
    ) -> Any:
        put: dict[str, Any] = {"TableName": self._table, "Item": serialize(item)}
        if condition is not None:
            put["ConditionExpression"] = condition
        if values:
            put["ExpressionAttributeValues"] = serialize(values)
        return {"Put": put}

    def record_event(
        self,
        event: JobEvent,
        expires_at: datetime,
        windows: Sequence[tuple[Window | None, Window]],
        messages: Sequence[Message],
    ) -> bool:
        items = [self._put(event_to_item(event, epoch_seconds(expires_at)), "attribute_not_exists(#k)")]
        items[0]["Put"]["ExpressionAttributeNames"] = {"#k": "key"}
        for before, after in windows:
            if before is None:
                put = self._put(window_to_item(after), "attribute_not_exists(#k)")
                put["Put"]["ExpressionAttributeNames"] = {"#k": "key"}
            else:
                put = self._put(window_to_item(after), "version = :v", {":v": before.version})
            items.append(put)
        items.extend(self._put(message_to_item(m)) for m in messages)
        try:
            self._transact(items)
        except _Cancelled as cancelled:
            if cancelled.failed(0):
                return False  # recorded before: a re-delivered change
            raise ConflictError(f"a channel window of {event.owner} moved") from None
        return True

    def windows(
        self, owner: str, channels: Sequence[Channel], kind: EventKind, length_seconds: int
    ) -> dict[str, Window]:
        found = {}
        for channel in channels:
            key = window_key(channel, kind, length_seconds)
            item = self._get(self._table, {"scope": owner_scope(owner), "key": key})
            if item is not None:
                found[channel.channel_id] = window_from_item(item)
        return found

    def job_events(self, job_id: str, limit: int, before: str | None) -> tuple[list[JobEvent], str | None]:
        request = {
            **self._scope_between(self._table, job_id, "e#", before or "e#~"),
            "ScanIndexForward": False,
            "Limit": limit + 2,
        }
        # BETWEEN includes the cursor's own event: read one more and leave it out.
        items = [i for i in self._first(request, limit + 2) if i["key"] != before]
        return page_of(items, "key", limit, event_from_item)

    def owner_events(self, owner: str, limit: int, before: str | None) -> tuple[list[JobEvent], str | None]:
        request = {
            "TableName": self._table,
            "IndexName": "by_owner",
            "KeyConditionExpression": "event_owner = :o AND owner_order < :before",
            "ExpressionAttributeValues": serialize({":o": owner, ":before": before or "~"}),
            "ScanIndexForward": False,
            "Limit": limit + 1,
        }
        return page_of(self._first(request, limit + 1), "owner_order", limit, event_from_item)

    def put_timer(self, timer: DeadlineTimer) -> None:
        self._write(self._put(timer_to_item(timer)))

    def due(self, now: datetime, limit: int) -> list[OutboxEntry]:
        found: list[dict[str, Any]] = []
        for key in outbox_keys():
            request = {
                "TableName": self._table,
                "IndexName": "outbox",
                "KeyConditionExpression": "outbox_key = :k AND send_at <= :now",
                "ExpressionAttributeValues": serialize({":k": key, ":now": format_instant_ms(now)}),
                "Limit": limit,
            }
            found.extend(self._first(request, limit))
        found.sort(key=lambda item: str(item["send_at"]))
        return [outbox_entry(item) for item in found[:limit]]

    def _as_read(self, message: Message) -> tuple[str, dict[str, Any]]:
        """The condition that the message is as it was read (or claimed): its attempts and send_at."""
        send_at = format_instant_ms(message.send_at) if message.send_at is not None else ""
        return "attempts = :a AND send_at = :s", {":a": message.attempts, ":s": send_at}

    def claim_message(self, message: Message, until: datetime) -> Message | None:
        condition, values = self._as_read(message)
        try:
            self._client.update_item(
                TableName=self._table,
                Key=serialize({"scope": owner_scope(message.owner), "key": message_key(message)}),
                UpdateExpression="SET send_at = :until",
                ConditionExpression=condition,
                ExpressionAttributeValues=serialize({**values, ":until": format_instant_ms(until)}),
            )
        except ClientError as error:
            if _code(error) == "ConditionalCheckFailedException":
                return None  # another watcher took it, or it was sent
            raise self._translate(error) from error
        return replace(message, send_at=until)

    def settle_message(self, message: Message, retry: Message | None) -> None:
        condition, values = self._as_read(message)
        try:
            if retry is not None:
                self._client.put_item(
                    TableName=self._table,
                    Item=serialize(message_to_item(retry)),
                    ConditionExpression=condition,
                    ExpressionAttributeValues=serialize(values),
                )
            else:
                self._client.delete_item(
                    TableName=self._table,
                    Key=serialize({"scope": owner_scope(message.owner), "key": message_key(message)}),
                    ConditionExpression=condition,
                    ExpressionAttributeValues=serialize(values),
                )
        except ClientError as error:
            if _code(error) == "ConditionalCheckFailedException":
                return  # its claim ran out and another watcher took it
            raise self._translate(error) from error

    def close_window(self, window: Window, closed: Window, digest: Message) -> bool:
        items = [
            self._put(window_to_item(closed), "version = :v", {":v": window.version}),
            self._put(message_to_item(digest)),
        ]
        try:
            self._transact(items)
        except _Cancelled:
            return False
        return True

    def drop_timer(self, timer: DeadlineTimer) -> None:
        try:
            self._client.delete_item(
                TableName=self._table, Key=serialize({"scope": timer.job_id, "key": timer_key(timer)})
            )
        except ClientError as error:
            raise self._translate(error) from error

    def set_health(self, health: ChannelHealth) -> None:
        self._write(self._put(health_to_item(health)))

    def health(self, owner: str, channels: Sequence[Channel]) -> dict[str, ChannelHealth]:
        found = {}
        for channel in channels:
            item = self._get(self._table, {"scope": owner_scope(owner), "key": health_key(channel)})
            if item is not None:
                found[channel.channel_id] = health_from_item(item)
        return found

    def _write(self, put: dict[str, Any]) -> None:
        try:
            self._client.put_item(**put["Put"])
        except ClientError as error:
            if _code(error) == "ConditionalCheckFailedException":
                raise TransientStoreError("a conditional write of the events table was refused") from error
            raise self._translate(error) from error


class DynamoAlertDefaults(StoreBase):
    """Each owner's default alert rules (an item of the events table)."""

    def __init__(self, client: DynamoDBClient, tables: TableNames) -> None:
        super().__init__(client, tables)
        self._table = tables.events

    def get_defaults(self, owner: str) -> AlertRules | None:
        item = self._get(self._table, {"scope": owner_scope(owner), "key": DEFAULTS_KEY})
        return None if item is None else defaults_from_item(item)

    def set_defaults(self, owner: str, rules: AlertRules | None) -> None:
        try:
            if rules is None:
                key = serialize({"scope": owner_scope(owner), "key": DEFAULTS_KEY})
                self._client.delete_item(TableName=self._table, Key=key)
            else:
                self._client.put_item(TableName=self._table, Item=serialize(defaults_to_item(owner, rules)))
        except ClientError as error:
            raise self._translate(error) from error


class DynamoRevisions(StoreBase):
    """A job's revisions and an owner's audit log (the job writes record them: adapters/dynamodb/jobs.py)."""

    def __init__(self, client: DynamoDBClient, tables: TableNames) -> None:
        super().__init__(client, tables)
        self._table = tables.events

    def job_revisions(self, job_id: str, limit: int, before: str | None) -> tuple[list[Revision], str | None]:
        return self._page(job_id, REVISIONS_FROM, before or REVISIONS_TO, limit)

    def get_revision(self, job_id: str, revision: int) -> Revision | None:
        item = self._get(self._table, {"scope": job_id, "key": revision_key(revision)})
        return None if item is None else revision_from_item(item)

    def job_at(self, revision: Revision) -> Job:
        return job_at_revision(revision)

    def owner_audit(self, owner: str, limit: int, before: str | None) -> tuple[list[Revision], str | None]:
        return self._page(owner_scope(owner), AUDIT_FROM, before or AUDIT_TO, limit)

    def _page(self, scope: str, low: str, high: str, limit: int) -> tuple[list[Revision], str | None]:
        # One condition on the sort key (DynamoDB takes no more): BETWEEN includes the bounds, and the upper
        # one is the cursor's own item when there is a cursor, so it is read and left out.
        request = {
            **self._scope_between(self._table, scope, low, high),
            "ScanIndexForward": False,
            "Limit": limit + 2,
        }
        items = [i for i in self._first(request, limit + 2) if i["key"] not in (low, high)]
        return page_of(items, "key", limit, revision_from_item)
