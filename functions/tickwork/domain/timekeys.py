"""Fixed-width UTC strings used as DynamoDB keys, so lexical order is time order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_INSTANT = "%Y-%m-%dT%H:%M:%SZ"
_MINUTE = "%Y-%m-%dT%H:%M"
_COMPACT = "%Y%m%dT%H%M%SZ"


def _utc(instant: datetime) -> datetime:
    if instant.tzinfo is None:
        raise ValueError("naive datetime: every stored time is tz-aware UTC")
    return instant.astimezone(UTC)


def format_instant(instant: datetime) -> str:
    """'2026-12-02T12:05:00Z' (second precision; fire times are whole seconds)."""
    return _utc(instant).strftime(_INSTANT)


def format_instant_ms(instant: datetime) -> str:
    """'2026-12-02T12:05:00.123Z' for observed times (planned, started, ...)."""
    utc = _utc(instant)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_instant(text: str) -> datetime:
    """Inverse of format_instant / format_instant_ms."""
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text).astimezone(UTC)


def minute_bucket(instant: datetime) -> str:
    return _utc(instant).strftime(_MINUTE)


def floor_minute(instant: datetime) -> datetime:
    return _utc(instant).replace(second=0, microsecond=0)


def minute_buckets(first: datetime, last: datetime) -> list[str]:
    """Every minute bucket from first's minute to last's minute, inclusive."""
    buckets: list[str] = []
    cursor = floor_minute(first)
    end = floor_minute(last)
    while cursor <= end:
        buckets.append(minute_bucket(cursor))
        cursor += timedelta(minutes=1)
    return buckets


def due_key(shard: int, instant: datetime) -> str:
    """Partition key of the `due` index: shard x minute, so a top-of-hour burst spreads over shards."""
    return f"{shard:04d}#{minute_bucket(instant)}"


def compact_instant(instant: datetime) -> str:
    return _utc(instant).strftime(_COMPACT)


def parse_compact_instant(text: str) -> datetime:
    return datetime.strptime(text, _COMPACT).replace(tzinfo=UTC)


def epoch_seconds(instant: datetime) -> int:
    return int(_utc(instant).timestamp())


def truncate_ms(instant: datetime) -> datetime:
    """Stored times keep milliseconds; computing with the same precision keeps comparisons exact."""
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)
