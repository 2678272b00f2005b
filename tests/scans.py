"""What a DynamoDB (moto, MiniStack) holds, read whole: for tests that must find a value nowhere; and a
table's stream, read whole, as an event source mapping hands its records to a function."""

from __future__ import annotations

import json
from typing import Any


def everything_in(dynamodb: Any) -> str:
    """Every item of every table and of every global secondary index, as one text."""
    found: list[Any] = []
    for table in dynamodb.list_tables()["TableNames"]:
        described = dynamodb.describe_table(TableName=table)["Table"]
        for index in [None, *(i["IndexName"] for i in described.get("GlobalSecondaryIndexes", []))]:
            pages = dynamodb.get_paginator("scan").paginate(
                TableName=table, **({"IndexName": index} if index else {})
            )
            found.extend(item for page in pages for item in page["Items"])
    assert found, "the scan read nothing"
    return json.dumps(found, default=str)


def stream_records(dynamodb: Any, streams: Any, table: str) -> list[dict[str, Any]]:
    """Every record of the table's stream, oldest first per shard (TRIM_HORIZON)."""
    arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    records: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records.extend(streams.get_records(ShardIterator=iterator)["Records"])
    return records
