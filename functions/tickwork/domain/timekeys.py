"""UTC strings used as DynamoDB keys, so lexical order is time order.

Fire times of a schedule are whole seconds and are written fixed width ('2026-12-02T12:05:00Z'). A run
that is not a schedule slot (run now) is keyed at an instant with a non-zero microsecond, written with a
suffix after the 'Z' ('2026-12-02T12:05:00Z~123456'): '~' sorts after every character of the whole-second
form, so the order stays the time order, and the two forms can never name the same key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache

_MINUTE = "%Y-%m-%dT%H:%M"
_COMPACT = "%Y%m%dT%H%M%SZ"


def _utc(instant: datetime) -> datetime:
    if instant.tzinfo is None:
        raise ValueError("naive datetime: every stored time is tz-aware UTC")
    return instant if instant.tzinfo is UTC else instant.astimezone(UTC)


def _date_time(utc: datetime, between: str = "-", colon: str = ":") -> str:
    """'2026-12-02T12:05:00' (or the compact form), fixed width: written with format fields, not strftime,
    which costs twice as much and is called some 30 times per run."""
    return (
        f"{utc.year:04d}{between}{utc.month:02d}{between}{utc.day:02d}T"
        f"{utc.hour:02d}{colon}{utc.minute:02d}{colon}{utc.second:02d}"
    )


_SUB_SECOND = "~"
# Instants written and read are few and repeat (a burst's runs share their fire, due and planning times;
# a run's every write carries the instants it had), and a record holds a dozen: the conversions below are
# pure, so each is remembered for the last _MEMO instants it was asked for.
_MEMO = 4096


def format_instant(instant: datetime) -> str:
    """'2026-12-02T12:05:00Z' for a whole second (every fire time); '2026-12-02T12:05:00Z~123456' for an
    instant with microseconds (see the module's note)."""
    return _format_instant(_utc(instant))


# Remembered by the UTC instant: two local times an hour apart in a repeated hour are equal as keys (the
# same wall time, only `fold` differs), their UTC instants are not.
@lru_cache(maxsize=_MEMO)
def _format_instant(utc: datetime) -> str:
    text = f"{_date_time(utc)}Z"
    return text if utc.microsecond == 0 else f"{text}{_SUB_SECOND}{utc.microsecond:06d}"


def format_instant_ms(instant: datetime) -> str:
    """'2026-12-02T12:05:00.123Z' for observed times (planned, started, ...)."""
    return _format_instant_ms(_utc(instant))


@lru_cache(maxsize=_MEMO)
def _format_instant_ms(utc: datetime) -> str:
    return f"{_date_time(utc)}.{utc.microsecond // 1000:03d}Z"


def _split_sub_second(text: str) -> tuple[str, int]:
    head, sep, micros = text.partition(_SUB_SECOND)
    if not sep:
        return text, 0
    if len(micros) != 6 or not micros.isdigit() or int(micros) == 0:
        raise ValueError(f"not an instant: {text!r}")
    return head, int(micros)


@lru_cache(maxsize=_MEMO)
def parse_instant(text: str) -> datetime:
    """Inverse of format_instant / format_instant_ms."""
    text, micros = _split_sub_second(text)
    if micros:
        return parse_instant(text).replace(microsecond=micros)
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
    """'20261202T120500Z', or '20261202T120500Z~123456' for an instant with microseconds."""
    return _compact_instant(_utc(instant))


@lru_cache(maxsize=_MEMO)
def _compact_instant(utc: datetime) -> str:
    text = f"{_date_time(utc, between='', colon='')}Z"
    return text if utc.microsecond == 0 else f"{text}{_SUB_SECOND}{utc.microsecond:06d}"


def parse_compact_instant(text: str) -> datetime:
    text, micros = _split_sub_second(text)
    return datetime.strptime(text, _COMPACT).replace(tzinfo=UTC, microsecond=micros)


def is_whole_second(instant: datetime) -> bool:
    """Whether an instant can be a schedule's fire time (they are whole seconds)."""
    return instant.microsecond == 0


def epoch_seconds(instant: datetime) -> int:
    return int(_utc(instant).timestamp())


def truncate_ms(instant: datetime) -> datetime:
    """Stored times keep milliseconds; computing with the same precision keeps comparisons exact."""
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)
