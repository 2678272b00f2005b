"""DynamoDB records of the shards aggregate."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from tickwork.adapters.dynamodb.items import serialize
from tickwork.domain.timekeys import format_instant_ms, parse_instant

if TYPE_CHECKING:
    pass

from tickwork.adapters.dynamodb.base import (
    StoreBase,
    _code,
)


class ShardRecords(StoreBase):
    """The shard aggregate: each shard's planning watermark."""

    def get_watermark(self, shard: int) -> datetime | None:
        item = self._get(self.tables.shards, {"shard_id": f"{shard:04d}"})
        return None if item is None else parse_instant(item["planned_through"])

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
