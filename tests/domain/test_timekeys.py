"""The stored time strings: fixed width, the same text strftime wrote before, lexical order = time order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.domain.timekeys import (
    compact_instant,
    format_instant,
    format_instant_ms,
    parse_compact_instant,
    parse_instant,
)

# Years from 1000: strftime's %Y is not zero-padded below that on Linux (the format fields are).
instants = st.datetimes(
    min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
) | st.datetimes(
    min_value=datetime(1000, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.builds(lambda m: timezone(timedelta(minutes=m)), st.integers(-14 * 60, 14 * 60)),
)


@given(instants)
def test_the_texts_are_what_strftime_wrote(instant: datetime) -> None:
    utc = instant.astimezone(UTC)
    whole = utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert format_instant(instant) == (whole if utc.microsecond == 0 else f"{whole}~{utc.microsecond:06d}")
    millis = f"{utc.microsecond // 1000:03d}"
    assert format_instant_ms(instant) == utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis}Z"
    compact = utc.strftime("%Y%m%dT%H%M%SZ")
    assert compact_instant(instant) == (
        compact if utc.microsecond == 0 else f"{compact}~{utc.microsecond:06d}"
    )


@given(instants, instants)
def test_they_sort_as_time_and_read_back(first: datetime, second: datetime) -> None:
    for write, read in ((format_instant, parse_instant), (compact_instant, parse_compact_instant)):
        assert read(write(first)) == first
        assert (write(first) < write(second)) == (first < second)
    to_ms = first.replace(microsecond=first.microsecond // 1000 * 1000)
    assert parse_instant(format_instant_ms(first)) == to_ms


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        format_instant(datetime(2026, 12, 6, 1, 2, 3))


def test_remembered_texts_follow_the_instant_not_the_object_asked_with() -> None:
    """The conversions are remembered (a burst asks for the same instants thousands of times): an equal
    instant in another zone gives the UTC text, a naive one is still refused, and a parsed instant is the
    same value as before it was remembered."""
    utc = datetime(2026, 12, 6, 10, 0, 0, 250_000, tzinfo=UTC)
    east = utc.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert format_instant(utc) == format_instant(east) == "2026-12-06T10:00:00Z~250000"
    assert format_instant_ms(east) == format_instant_ms(utc) == "2026-12-06T10:00:00.250Z"
    assert compact_instant(east) == "20261206T100000Z~250000"
    for _ in range(2):
        with pytest.raises(ValueError, match="naive"):
            format_instant(utc.replace(tzinfo=None))
    for _ in range(2):
        parsed = parse_instant("2026-12-06T10:00:00.250Z")
        assert parsed == utc and parsed.tzinfo is UTC


def test_the_two_times_of_a_repeated_hour_are_remembered_apart() -> None:
    """01:30 on New York's fall-back night happens twice, an hour apart: equal as local times (only `fold`
    differs), so the texts are remembered by the UTC instant, not by the local time asked with."""
    zone = ZoneInfo("America/New_York")
    second, first = (
        datetime(2026, 11, 1, 1, 30, tzinfo=zone, fold=1),
        datetime(2026, 11, 1, 1, 30, tzinfo=zone),
    )
    assert format_instant(second) == "2026-11-01T06:30:00Z"
    assert format_instant(first) == "2026-11-01T05:30:00Z"
    assert format_instant_ms(second) == "2026-11-01T06:30:00.000Z"
    assert format_instant_ms(first) == "2026-11-01T05:30:00.000Z"
    assert compact_instant(second) == "20261101T063000Z" and compact_instant(first) == "20261101T053000Z"
