"""DynamoDB capacity units counted from the real items, for any code that holds a DynamoDB client.

`UnitMeter` stands in for a boto3 DynamoDB client. Every write (PutItem, UpdateItem, DeleteItem, each item
of a TransactWriteItems) has its item read before and after with a client of the meter's own (not counted
by the benchmark's call counter) and is charged with benchmarks/write_units.py's rules: 1 KB rounding of the
larger of the two, 2x inside a transaction, one index write per index item added, removed or changed (two
when an index key moves). A refused conditional write is charged like a write of the item as it stands
(DynamoDB charges a failed condition). Reads are charged from the items they returned: 4 KB rounding per
GetItem and per BatchGetItem item, per Query over the sum of its items; 1 unit strongly consistent, 0.5
eventually consistent; an empty read still costs its minimum. Writes are serialized by a lock (the read
before, the write, the read after), so racing threads cannot blur an item's before and after.

The items are what DynamoDB stores (read back), so a layout change (the slots table's stripes, a new
attribute on a run) is priced without this file knowing it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from tickwork.adapters.dynamodb.items import deserialize
from tickwork.resources import TABLES, ResourceNames, TableDef
from write_units import item_size, units, write

_REFUSED = frozenset({"ConditionalCheckFailedException", "TransactionCanceledException"})


@dataclass
class Units:
    """Write and read units by label (`<operation> <table>`), and refused writes."""

    wcu: dict[str, float] = field(default_factory=dict)
    rcu: dict[str, float] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)

    def add(self, book: dict[str, float], label: str, value: float) -> None:
        book[label] = book.get(label, 0.0) + value

    def merged(self, other: Units) -> Units:
        out = Units(dict(self.wcu), dict(self.rcu), dict(self.refused))
        for label, value in other.wcu.items():
            out.add(out.wcu, label, value)
        for label, value in other.rcu.items():
            out.add(out.rcu, label, value)
        for label, count in other.refused.items():
            out.refused[label] = out.refused.get(label, 0) + count
        return out

    @property
    def total_wcu(self) -> float:
        return sum(self.wcu.values())

    @property
    def total_rcu(self) -> float:
        return sum(self.rcu.values())


def read_units(size: int, consistent: bool) -> float:
    return max(1, math.ceil(size / 4096)) * (1.0 if consistent else 0.5)


class UnitMeter:
    """A DynamoDB client that prices what it does (see the module's note). `inner` does the work (attach the
    call counter to it); `reader` reads items before and after writes and is not counted."""

    def __init__(self, inner: Any, reader: Any, names: ResourceNames) -> None:
        self._inner = inner
        self._reader = reader
        self._tables: dict[str, TableDef] = {names.table(t): t for t in TABLES}
        self._lock = threading.Lock()
        self.units = Units()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def reset(self) -> Units:
        """The units so far; the meter starts again from zero."""
        with self._lock:
            spent, self.units = self.units, Units()
        return spent

    # --- writes ---

    def put_item(self, **request: Any) -> Any:
        table = request["TableName"]
        return self._writes("PutItem", [(table, self._key_of(table, request["Item"]))], False, request)

    def update_item(self, **request: Any) -> Any:
        return self._writes("UpdateItem", [(request["TableName"], request["Key"])], False, request)

    def delete_item(self, **request: Any) -> Any:
        return self._writes("DeleteItem", [(request["TableName"], request["Key"])], False, request)

    def transact_write_items(self, **request: Any) -> Any:
        targets = []
        for entry in request["TransactItems"]:
            ((kind, body),) = entry.items()
            table = body["TableName"]
            key = self._key_of(table, body["Item"]) if kind == "Put" else body["Key"]
            targets.append((table, key))
        return self._writes("TransactWriteItems", targets, True, request)

    def _writes(
        self, operation: str, targets: list[tuple[str, dict[str, Any]]], transactional: bool, request: Any
    ) -> Any:
        call: Callable[..., Any] = getattr(self._inner, _snake(operation))
        with self._lock:
            before = [self._read(table, key) for table, key in targets]
            try:
                response = call(**request)
            except ClientError as error:
                code = str(error.response.get("Error", {}).get("Code", ""))
                if code in _REFUSED:
                    for (table, _), old in zip(targets, before, strict=True):
                        label = f"{operation} {self._logical(table)} (refused)"
                        charge = units(item_size(old or {})) * (2 if transactional else 1)
                        self.units.add(self.units.wcu, label, charge)
                        self.units.refused[label] = self.units.refused.get(label, 0) + 1
                raise
            for (table, key), old in zip(targets, before, strict=True):
                new = self._read(table, key)
                definition = self._tables[table]
                label = f"{operation} {self._logical(table)}"
                if new is None:  # deleted
                    charge = write(definition, old, {}, transactional) if old is not None else 1
                else:
                    charge = write(definition, old, new, transactional)
                self.units.add(self.units.wcu, label, charge)
        return response

    # --- reads ---

    def get_item(self, **request: Any) -> Any:
        response = self._inner.get_item(**request)
        size = item_size(deserialize(response["Item"])) if "Item" in response else 0
        label = f"GetItem {self._logical(request['TableName'])}"
        self._charge_read(label, read_units(size, bool(request.get("ConsistentRead"))))
        return response

    def query(self, **request: Any) -> Any:
        response = self._inner.query(**request)
        size = sum(item_size(deserialize(item)) for item in response.get("Items", []))
        where = self._logical(request["TableName"])
        if "IndexName" in request:
            where += f"/{request['IndexName']}"
        self._charge_read(f"Query {where}", read_units(size, bool(request.get("ConsistentRead"))))
        return response

    def batch_get_item(self, **request: Any) -> Any:
        response = self._inner.batch_get_item(**request)
        for table, items in response.get("Responses", {}).items():
            consistent = bool(request["RequestItems"].get(table, {}).get("ConsistentRead"))
            # Each key is charged, found or not (an absent key costs the minimum).
            found = [item_size(deserialize(item)) for item in items]
            asked = len(request["RequestItems"].get(table, {}).get("Keys", []))
            charge = sum(read_units(size, consistent) for size in found)
            charge += max(0, asked - len(found)) * read_units(0, consistent)
            self._charge_read(f"BatchGetItem {self._logical(table)}", charge)
        return response

    def _charge_read(self, label: str, value: float) -> None:
        with self._lock:
            self.units.add(self.units.rcu, label, value)

    # --- helpers ---

    def _key_of(self, table: str, item: Mapping[str, Any]) -> dict[str, Any]:
        definition = self._tables[table]
        names = [definition.partition.name] + ([definition.sort.name] if definition.sort else [])
        return {name: item[name] for name in names}

    def _read(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        found = self._reader.get_item(TableName=table, Key=key, ConsistentRead=True)
        return deserialize(found["Item"]) if "Item" in found else None

    def _logical(self, table: str) -> str:
        definition = self._tables.get(table)
        return definition.logical_name if definition is not None else table


def _snake(operation: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in operation).lstrip("_")
