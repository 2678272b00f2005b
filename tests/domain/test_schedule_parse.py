"""Validation, jitter, preview limits and describe."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tickwork.domain.errors import ValidationError
from tickwork.domain.schedule import (
    MAX_JITTER_SECONDS,
    DstGapPolicy,
    DstRepeatPolicy,
    Schedule,
    describe,
    describe_schedule,
    jitter_offset,
    next_fire_after,
    parse_schedule,
    preview,
)

from .test_schedule_helpers import utc

TOKYO = ZoneInfo("Asia/Tokyo")


@pytest.mark.parametrize(
    ("expression", "field_words"),
    [
        pytest.param("61 * * * *", "minute field '61' out of range 0-59", id="minute_out_of_range"),
        pytest.param("0 24 * * *", "hour field '24' out of range 0-23", id="hour_out_of_range"),
        pytest.param("0 0 0 * *", "day-of-month field '0' out of range 1-31", id="dom_zero"),
        pytest.param("0 0 32 * *", "day-of-month field '32'", id="dom_32"),
        pytest.param("0 0 * 13 *", "month field '13' out of range 1-12", id="month_13"),
        pytest.param("0 0 * * 8", "day-of-week field '8' out of range 0-7", id="dow_8"),
        pytest.param("60 0 0 * * *", "second field '60' out of range 0-59", id="second_60"),
        pytest.param("0 0 * * 1#6", "day-of-week field '1#6'", id="hash_6"),
        pytest.param("*/0 * * * *", "minute field step", id="step_zero"),
        pytest.param("0 0 * JANUARY *", "month field 'JANUARY'", id="bad_month_name"),
        pytest.param("1,,2 * * * *", "minute field '1,,2' has an empty list item", id="empty_list_item"),
        pytest.param("0 L * * *", "hour field 'L'", id="L_in_hour"),
        pytest.param("0 0 ? * ?x", "day-of-week field", id="garbage_dow"),
        pytest.param("hello world", "has 2 fields", id="garbage"),
        pytest.param("", "empty", id="empty"),
        pytest.param("   ", "empty", id="blank"),
        pytest.param("* * * *", "has 4 fields", id="four_fields"),
        pytest.param("0 0 0 1 1 * 2026", "has 7 fields", id="seven_fields_rejected"),
        pytest.param("@reboot", "unknown macro '@reboot'", id="unknown_macro"),
        pytest.param(
            "0 0 31 2 *", "day-of-month field '31' never occurs in month field '2'", id="never_fires"
        ),
        pytest.param("0 0 31 4,6,9,11 *", "never occurs", id="never_fires_30_day_months"),
        pytest.param(
            "*/5 * * * * *", "every 5 s (second field '*/5'); the minimum interval is 10 s", id="too_often"
        ),
        pytest.param("0,55 * * * * *", "every 5 s", id="too_often_across_minute_wrap"),
        pytest.param("0,5 * * * * *", "every 5 s", id="too_often_in_minute"),
    ],
)
def test_invalid_expressions_name_the_field(expression: str, field_words: str) -> None:
    with pytest.raises(ValidationError) as raised:
        parse_schedule(expression)
    assert raised.value.field == "schedule.expression"
    assert field_words in raised.value.message


@pytest.mark.parametrize(
    ("expression", "floor"),
    [
        pytest.param("*/10 * * * * *", 10, id="every_10s_meets_default_floor"),
        pytest.param("0,50 0 * * * *", 10, id="wrap_only_if_next_minute_fires"),
        pytest.param("0,50 * * * * *", 10, id="wrap_gap_exactly_10"),
        pytest.param("* * * * *", 60, id="five_fields_every_minute"),
        pytest.param("*/2 * * * * *", 1, id="lower_floor_allows_2s"),
    ],
)
def test_interval_floor_accepts(expression: str, floor: int) -> None:
    schedule = parse_schedule(expression, min_interval_seconds=floor)
    first = next_fire_after(schedule, utc("2026-12-02T00:00Z"))
    assert schedule.expression == expression and first is not None


def test_interval_floor_can_be_raised() -> None:
    with pytest.raises(ValidationError, match="every 60 s"):
        parse_schedule("* * * * *", min_interval_seconds=300)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        pytest.param({"timezone": "Mars/Olympus_Mons"}, "schedule.timezone", id="unknown_zone"),
        pytest.param({"timezone": "America"}, "schedule.timezone", id="zone_directory"),
        pytest.param({"timezone": "../../etc/passwd"}, "schedule.timezone", id="zone_path"),
        pytest.param({"timezone": ""}, "schedule.timezone", id="empty_zone"),
        pytest.param({"start_at": datetime(2026, 1, 1)}, "schedule.start_at", id="naive_start"),
        pytest.param({"end_at": datetime(2026, 1, 1)}, "schedule.end_at", id="naive_end"),
        pytest.param(
            {"start_at": utc("2026-02-01T00:00Z"), "end_at": utc("2026-01-01T00:00Z")},
            "schedule.end_at",
            id="end_before_start",
        ),
        pytest.param({"jitter_seconds": -1}, "schedule.jitter_seconds", id="negative_jitter"),
        pytest.param(
            {"jitter_seconds": MAX_JITTER_SECONDS + 1}, "schedule.jitter_seconds", id="jitter_too_big"
        ),
        pytest.param({"jitter_seconds": True}, "schedule.jitter_seconds", id="jitter_bool"),
        pytest.param({"dst_gap": "later"}, "schedule.dst_gap", id="bad_gap_policy"),
        pytest.param({"dst_repeat": "twice"}, "schedule.dst_repeat", id="bad_repeat_policy"),
    ],
)
def test_invalid_options(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        parse_schedule("0 * * * *", **options)
    assert raised.value.field == field
    assert raised.value.message


def test_parse_normalizes() -> None:
    schedule = parse_schedule(
        "  0   9 * * 1-5 ",
        "Europe/Berlin",
        start_at=utc("2026-01-01T00:00Z").astimezone(TOKYO),
        dst_gap="skip",
        dst_repeat="both",
        jitter_seconds=MAX_JITTER_SECONDS,
    )
    assert schedule == Schedule(
        "0 9 * * 1-5",
        "Europe/Berlin",
        utc("2026-01-01T00:00Z"),
        None,
        MAX_JITTER_SECONDS,
        DstGapPolicy.SKIP,
        DstRepeatPolicy.BOTH,
    )
    assert schedule.start_at is not None and schedule.start_at.utcoffset() == timedelta(0)


def test_next_fire_rejects_naive_after() -> None:
    with pytest.raises(ValidationError) as raised:
        next_fire_after(parse_schedule("0 * * * *"), datetime(2026, 1, 1))
    assert raised.value.field == "after"


@pytest.mark.parametrize("count", [0, 101, -1])
def test_preview_count_bounds(count: int) -> None:
    with pytest.raises(ValidationError) as raised:
        preview(parse_schedule("0 * * * *"), utc("2026-01-01T00:00Z"), count)
    assert raised.value.field == "count"


def test_preview_max_count() -> None:
    assert len(preview(parse_schedule("0 * * * *"), utc("2026-01-01T00:00Z"), 100)) == 100


def test_jitter_is_deterministic_and_bounded() -> None:
    schedule = parse_schedule("0 * * * *", jitter_seconds=60)
    fire_at = utc("2026-01-01T01:00Z")
    offsets = {jitter_offset(schedule, f"job-{index}", fire_at) for index in range(500)}
    assert all(timedelta(0) <= offset < timedelta(seconds=60) for offset in offsets)
    assert all(offset.microseconds == 0 for offset in offsets)
    assert len(offsets) > 40  # spreads jobs out
    assert jitter_offset(schedule, "job-1", fire_at) == jitter_offset(
        schedule, "job-1", fire_at.astimezone(TOKYO)
    )
    assert jitter_offset(schedule, "job-1", fire_at) == timedelta(
        seconds=_expected_jitter("job-1", fire_at, 60)
    )
    assert jitter_offset(parse_schedule("0 * * * *"), "job-1", fire_at) == timedelta(0)


def _expected_jitter(job_id: str, fire_at: datetime, spread: int) -> int:
    digest = hashlib.sha256(f"{job_id}{fire_at.isoformat()}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % spread


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param("30 9 * * 1-5", "at 09:30 on Monday through Friday", id="weekdays"),
        pytest.param("*/15 * * * *", "every 15 minutes", id="step"),
        pytest.param("0 0 L * *", "at 00:00 on the last day of the month", id="L"),
        pytest.param("0 12 * * 5#3", "at 12:00 on the third Friday of the month", id="hash"),
        pytest.param("@hourly", "at minute 0 of every hour", id="macro"),
        pytest.param("*/20 * * * * *", "every 20 seconds", id="seconds"),
        pytest.param(
            "0 9-17/2 * 1-11 1-5",
            "at 09:00, 11:00, 13:00, 15:00 and 17:00 on Monday through Friday in January through November",
            id="complex",
        ),
        pytest.param("0 0 15W * *", "at 00:00 on the weekday nearest day 15 of the month", id="W"),
    ],
)
def test_describe(expression: str, expected: str) -> None:
    assert describe(expression) == expected


def test_describe_invalid_raises_validation_error() -> None:
    with pytest.raises(ValidationError):
        describe("61 * * * *")


@pytest.mark.parametrize(
    ("expression", "timezone", "expected"),
    [
        pytest.param("30 2 * * *", "Europe/Berlin", "every day at 02:30, Europe/Berlin", id="daily"),
        pytest.param("30 9 * * 1-5", "UTC", "at 09:30 on Monday through Friday, UTC", id="weekdays"),
        pytest.param("*/15 * * * *", "America/New_York", "every 15 minutes, America/New_York", id="step"),
    ],
)
def test_describe_schedule_says_the_day_pattern_and_the_zone(
    expression: str, timezone: str, expected: str
) -> None:
    assert describe_schedule(parse_schedule(expression, timezone)) == expected
