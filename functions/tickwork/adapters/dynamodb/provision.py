"""Create the tables from the shared definitions (local runtime and tests; CDK does it in AWS)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from tickwork.resources import TABLES, ResourceNames, create_table_request

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def ensure_tables(client: DynamoDBClient, names: ResourceNames) -> list[str]:
    """Create every missing table (idempotent); returns the names it created."""
    created: list[str] = []
    for table in TABLES:
        physical = names.table(table)
        try:
            client.create_table(**create_table_request(table, physical))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ResourceInUseException":
                continue  # already there: bootstrap is idempotent
            raise
        client.get_waiter("table_exists").wait(
            TableName=physical, WaiterConfig={"Delay": 1, "MaxAttempts": 30}
        )
        if table.ttl_attribute:
            client.update_time_to_live(
                TableName=physical,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl_attribute},
            )
        created.append(physical)
    return created
