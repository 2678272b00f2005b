"""DynamoDB tables, built from the shared definitions in `tickwork.resources` (never restated here)."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms

from constructs import Construct
from tickwork.resources import TABLES, AttrType, KeyAttr, ResourceNames, TableDef

WarmUnits = tuple[int | None, int | None]  # (read, write) units per second; None: DynamoDB's default start

_TYPES: dict[AttrType, dynamodb.AttributeType] = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
}
_PROJECTIONS = {"ALL": dynamodb.ProjectionType.ALL, "KEYS_ONLY": dynamodb.ProjectionType.KEYS_ONLY}


def attribute(key: KeyAttr) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=key.name, type=_TYPES[key.type])


def warm_throughput(units: WarmUnits) -> dynamodb.WarmThroughput | None:
    read, write = units
    if read is None and write is None:
        return None
    return dynamodb.WarmThroughput(read_units_per_second=read, write_units_per_second=write)


class Storage(Construct):
    """One on-demand table per `TableDef`, encrypted with the deployment's key, with point-in-time recovery in
    every environment. Production also keeps the data: RETAIN and deletion protection. `warm` pre-warms a
    table (and its indexes, which throttle on their own) by logical name. A table with a `change_feed` has a
    stream of its old and new items (the runs table's feeds the watcher, constructs/watcher.py)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        names: ResourceNames,
        production: bool,
        warm: dict[str, WarmUnits] | None = None,
        encryption_key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        self._key = encryption_key
        self.definitions: dict[str, TableDef] = {t.logical_name: t for t in TABLES}
        unknown = set(warm or {}) - set(self.definitions)
        if unknown:
            raise ValueError(f"warm throughput for unknown tables: {sorted(unknown)}")
        self.tables: dict[str, dynamodb.Table] = {
            definition.logical_name: self._table(
                definition,
                names,
                production,
                warm_throughput((warm or {}).get(definition.logical_name, (None, None))),
            )
            for definition in TABLES
        }

    def _table(
        self,
        definition: TableDef,
        names: ResourceNames,
        production: bool,
        warm: dynamodb.WarmThroughput | None,
    ) -> dynamodb.Table:
        table = dynamodb.Table(
            self,
            definition.logical_name.title(),
            table_name=names.table(definition),
            partition_key=attribute(definition.partition),
            sort_key=attribute(definition.sort) if definition.sort else None,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            # The deployment's own key, whose policy names the functions (constructs/data_protection.py).
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self._key,
            time_to_live_attribute=definition.ttl_attribute,
            stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES if definition.change_feed else None,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            warm_throughput=warm,
            deletion_protection=production,
            removal_policy=RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY,
        )
        for index in definition.indexes:
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=attribute(index.partition),
                sort_key=attribute(index.sort) if index.sort else None,
                projection_type=_PROJECTIONS[index.projection],
                warm_throughput=warm,
            )
        return table

    def table(self, definition: TableDef) -> dynamodb.Table:
        return self.tables[definition.logical_name]

    def index_arns(self, definition: TableDef) -> list[str]:
        """Each index's own ARN (no `index/*` wildcard in policies)."""
        return [self.index_arn(definition, index.name) for index in definition.indexes]

    def index_arn(self, definition: TableDef, name: str) -> str:
        """One index's ARN, by its name in the definition."""
        if name not in {index.name for index in definition.indexes}:
            raise ValueError(f"table {definition.logical_name} has no index {name!r}")
        return f"{self.table(definition).table_arn}/index/{name}"

    def stream_arn(self, definition: TableDef) -> str:
        """The table's stream (its `change_feed`)."""
        arn = self.table(definition).table_stream_arn
        if not definition.change_feed or arn is None:
            raise ValueError(f"table {definition.logical_name} has no change feed")
        return arn
