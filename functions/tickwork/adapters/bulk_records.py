"""Records of bulk actions (domain/bulk.py), the same in every engine: an item of the events table in its
owner's scope, keyed `b#<action id>`; while it is not done it is in the sparse `outbox` index under its own
partition (`bulk`), by when it may start, which is how a worker finds the actions it owes work to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tickwork.adapters.event_records import owner_scope
from tickwork.domain.bulk import KEEP_DONE, BulkAction, BulkKind, BulkState, Progress, Selector
from tickwork.domain.timekeys import epoch_seconds, format_instant_ms, parse_instant

BULK_FROM = "b#"
BULK_TO = "b$"
BULK_OUTBOX = "bulk"


def bulk_key(action_id: str) -> str:
    return f"{BULK_FROM}{action_id}"


def _instant(value: Any) -> Any:
    return None if value is None else format_instant_ms(value)


def _parsed(value: Any) -> Any:
    return None if value is None else parse_instant(str(value))


def bulk_to_item(action: BulkAction) -> dict[str, Any]:
    progress = action.progress
    item: dict[str, Any] = {
        "scope": owner_scope(action.owner),
        "key": bulk_key(action.action_id),
        "owner": action.owner,
        "action_id": action.action_id,
        "kind": str(action.kind),
        "group": action.selector.group,
        "tags": dict(action.selector.tags),
        "note": action.note,
        "actor": action.actor,
        "created_at": format_instant_ms(action.created_at),
        "not_before": format_instant_ms(action.not_before),
        "state": str(action.state),
        "progress": {
            "scanned": progress.scanned,
            "matched": progress.matched,
            "changed": progress.changed,
            "unchanged": progress.unchanged,
            "failed": progress.failed,
            "failures": list(progress.failures),
        },
        "cursor": action.cursor,
        "fingerprint": action.fingerprint,
        "resume_at": _instant(action.resume_at),
        "resume_action": action.resume_action,
        "maintenance_of": action.maintenance_of,
        "runs_from": _instant(action.runs_from),
        "runs_to": _instant(action.runs_to),
        "lease_owner": action.lease_owner,
        "lease_expires_at": _instant(action.lease_expires_at),
        "finished_at": _instant(action.finished_at),
        "version": action.version,
    }
    if action.state is not BulkState.DONE:  # in the outbox index until done
        item["outbox_key"] = BULK_OUTBOX
        item["send_at"] = format_instant_ms(action.not_before)
    elif action.finished_at is not None:  # then kept a while (TTL)
        item["expires_at"] = epoch_seconds(action.finished_at + KEEP_DONE)
    return {k: v for k, v in item.items() if v is not None}


def bulk_from_item(item: Mapping[str, Any]) -> BulkAction:
    progress = item.get("progress") or {}
    return BulkAction(
        action_id=str(item["action_id"]),
        owner=str(item["owner"]),
        kind=BulkKind(item["kind"]),
        selector=Selector(item.get("group"), {str(k): str(v) for k, v in (item.get("tags") or {}).items()}),
        note=str(item.get("note", "")),
        actor=str(item.get("actor", "")),
        created_at=parse_instant(str(item["created_at"])),
        not_before=parse_instant(str(item["not_before"])),
        state=BulkState(item["state"]),
        progress=Progress(
            int(progress.get("scanned", 0)),
            int(progress.get("matched", 0)),
            int(progress.get("changed", 0)),
            int(progress.get("unchanged", 0)),
            int(progress.get("failed", 0)),
            tuple(str(f) for f in progress.get("failures", ())),
        ),
        cursor=item.get("cursor"),
        fingerprint=str(item.get("fingerprint", "")),
        resume_at=_parsed(item.get("resume_at")),
        resume_action=item.get("resume_action"),
        maintenance_of=item.get("maintenance_of"),
        runs_from=_parsed(item.get("runs_from")),
        runs_to=_parsed(item.get("runs_to")),
        lease_owner=item.get("lease_owner"),
        lease_expires_at=_parsed(item.get("lease_expires_at")),
        finished_at=_parsed(item.get("finished_at")),
        version=int(item["version"]),
    )
