"""The runs table's DynamoDB stream (NEW_AND_OLD_IMAGES) as run changes: what the watcher Lambda's event
source mapping hands it, in the same form the embedded engine's change feed gives."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tickwork.adapters.dynamodb.items import deserialize
from tickwork.adapters.records import run_from_item
from tickwork.domain.alerts import RunChange


def run_changes(records: Iterable[Mapping[str, Any]]) -> list[RunChange]:
    """The inserts and modifications among a batch of stream records (a removal is a run's retention
    ending, nothing an owner is told about)."""
    changes = []
    for record in records:
        if record.get("eventName") not in ("INSERT", "MODIFY"):
            continue
        images = record.get("dynamodb") or {}
        new = images.get("NewImage")
        if not new:
            continue
        old = images.get("OldImage")
        before = run_from_item(deserialize(old)) if old else None
        changes.append(RunChange(before, run_from_item(deserialize(new))))
    return changes
