"""Records of exclusion calendars, the same in every engine: an item of the events table in its owner's
scope, keyed `cal#<name>` (no TTL: a calendar stays until deleted)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from tickwork.adapters.event_records import owner_scope
from tickwork.domain.calendars import Calendar, ExcludedDate, ExcludedWindow
from tickwork.domain.timekeys import format_instant_ms, parse_instant

CALENDARS_FROM = "cal#"
CALENDARS_TO = "cal$"  # `$` sorts right after `#`: the keys between are the owner's calendars


def calendar_key(name: str) -> str:
    return f"{CALENDARS_FROM}{name}"


def calendar_to_item(calendar: Calendar) -> dict[str, Any]:
    item: dict[str, Any] = {
        "scope": owner_scope(calendar.owner),
        "key": calendar_key(calendar.name),
        "owner": calendar.owner,
        "name": calendar.name,
        "timezone": calendar.timezone,
        "description": calendar.description,
        "dates": [{"date": d.day.isoformat(), "label": d.label} for d in calendar.dates],
        "windows": [
            {"start": w.start.isoformat(), "end": w.end.isoformat(), "label": w.label}
            for w in calendar.windows
        ],
        "version": calendar.version,
    }
    if calendar.updated_at is not None:
        item["updated_at"] = format_instant_ms(calendar.updated_at)
    return item


def calendar_from_item(item: Mapping[str, Any]) -> Calendar:
    updated_at = item.get("updated_at")
    return Calendar(
        owner=str(item["owner"]),
        name=str(item["name"]),
        timezone=str(item["timezone"]),
        description=str(item.get("description", "")),
        dates=tuple(
            ExcludedDate(date.fromisoformat(str(d["date"])), str(d.get("label", ""))) for d in item["dates"]
        ),
        windows=tuple(
            ExcludedWindow(
                datetime.fromisoformat(str(w["start"])),
                datetime.fromisoformat(str(w["end"])),
                str(w.get("label", "")),
            )
            for w in item["windows"]
        ),
        version=int(item["version"]),
        updated_at=None if updated_at is None else parse_instant(str(updated_at)),
    )
