"""Shared helpers for the schedule tests (no tests here): fixed anchors, compact UTC strings."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tickwork.domain.schedule import parse_schedule, preview


def utc(text: str) -> datetime:
    """'2026-03-08T07:00Z' -> aware UTC datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def fires(expression: str, timezone: str, after: str, count: int, **options: Any) -> list[str]:
    """The next `count` fires after `after`, as 'YYYY-MM-DDTHH:MM[:SS]Z' strings."""
    schedule = parse_schedule(expression, timezone, **options)
    return [_short(fire.at) for fire in preview(schedule, utc(after), count)]


def _short(moment: datetime) -> str:
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return (text[:-3] if text.endswith(":00") else text) + "Z"
