"""Calendar behaviour: month ends, leap years, L / W / #, seconds expressions, macros, bounds."""

from __future__ import annotations

from datetime import UTC
from zoneinfo import ZoneInfo

import pytest

from tickwork.domain.schedule import is_fire_time, next_fire_after, parse_schedule

from .test_schedule_helpers import fires, utc


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        pytest.param(
            "0 0 31 * *",
            "2026-03-31T12:00Z",
            ["2026-05-31T00:00Z", "2026-07-31T00:00Z", "2026-08-31T00:00Z"],
            id="31st_skipped_in_30_day_months",
        ),
        pytest.param(
            "0 0 29 2 *", "2026-01-01T00:00Z", ["2028-02-29T00:00Z", "2032-02-29T00:00Z"], id="feb_29"
        ),
        pytest.param(
            "0 0 L 2 *",
            "2027-01-01T00:00Z",
            ["2027-02-28T00:00Z", "2028-02-29T00:00Z"],
            id="last_of_feb_2027_vs_2028",
        ),
        pytest.param(
            "0 0 L * *",
            "2026-01-15T00:00Z",
            ["2026-01-31T00:00Z", "2026-02-28T00:00Z", "2026-03-31T00:00Z", "2026-04-30T00:00Z"],
            id="L_last_day_of_month",
        ),
        pytest.param(
            "0 0 15W * *",
            "2026-01-01T00:00Z",
            [
                "2026-01-15T00:00Z",
                "2026-02-16T00:00Z",
                "2026-03-16T00:00Z",
                "2026-04-15T00:00Z",
                "2026-05-15T00:00Z",
                "2026-06-15T00:00Z",
                "2026-07-15T00:00Z",
                "2026-08-14T00:00Z",
            ],
            # 2026-02-15 is a Sunday -> Mon 16; 2026-08-15 a Saturday -> Fri 14
            id="W_nearest_weekday_to_15th",
        ),
        pytest.param(
            "0 0 1W * *", "2026-07-15T00:00Z", ["2026-08-03T00:00Z"], id="W_first_is_saturday_goes_to_monday"
        ),
        pytest.param(
            "0 0 LW * *",
            "2026-05-01T00:00Z",
            ["2026-05-29T00:00Z", "2026-06-30T00:00Z"],
            id="LW_last_weekday",
        ),
        pytest.param(
            "0 0 * * 5#3",
            "2026-01-01T00:00Z",
            ["2026-01-16T00:00Z", "2026-02-20T00:00Z", "2026-03-20T00:00Z"],
            id="hash_third_friday",
        ),
        pytest.param(
            "0 12 * * FRI#5",
            "2026-01-01T00:00Z",
            ["2026-01-30T12:00Z", "2026-05-29T12:00Z"],
            id="hash_fifth_friday",
        ),
        pytest.param(
            "0 0 * * 1L", "2026-01-01T00:00Z", ["2026-01-26T00:00Z", "2026-02-23T00:00Z"], id="last_monday"
        ),
        pytest.param(
            "0 0 1,15 * MON",
            "2026-06-01T00:00Z",
            ["2026-06-08T00:00Z", "2026-06-15T00:00Z", "2026-06-22T00:00Z"],
            id="dom_or_dow_when_both_restricted",
        ),
        pytest.param(
            "0 0 */10 * MON",
            "2026-06-01T00:00Z",
            ["2026-08-31T00:00Z", "2026-09-21T00:00Z", "2026-12-21T00:00Z"],
            id="dom_and_dow_when_one_starts_with_star_vixie",
        ),
        pytest.param(
            "0 22-2/2 * * *",
            "2026-01-01T12:00Z",
            ["2026-01-01T22:00Z", "2026-01-02T00:00Z", "2026-01-02T02:00Z"],
            id="wrapping_hour_range",
        ),
        pytest.param(
            "0 0 * * FRI-MON",
            "2026-01-01T00:00Z",
            [
                "2026-01-02T00:00Z",
                "2026-01-03T00:00Z",
                "2026-01-04T00:00Z",
                "2026-01-05T00:00Z",
                "2026-01-09T00:00Z",
            ],
            id="wrapping_weekday_range",
        ),
        pytest.param("0 0 * * 7", "2026-01-01T00:00Z", ["2026-01-04T00:00Z"], id="weekday_7_is_sunday"),
        pytest.param("0 9 * JAN,jul *", "2026-01-31T12:00Z", ["2026-07-01T09:00Z"], id="month_names"),
        pytest.param(
            "5-5 * * * *",
            "2026-01-01T00:00Z",
            ["2026-01-01T00:05Z", "2026-01-01T01:05Z"],
            id="equal_range_is_one_value_not_croniters_whole_cycle",
        ),
        # Seconds first.
        pytest.param(
            "*/15 * * * * *",
            "2026-01-01T00:00:50Z",
            ["2026-01-01T00:01Z", "2026-01-01T00:01:15Z"],
            id="seconds_every_15",
        ),
        pytest.param(
            "30 0 9 * * *", "2026-01-01T00:00Z", ["2026-01-01T09:00:30Z"], id="seconds_first_not_last"
        ),
        pytest.param(
            "0,50 * * * * *",
            "2026-01-01T00:00:40Z",
            ["2026-01-01T00:00:50Z", "2026-01-01T00:01Z"],
            id="seconds_wrap_across_minute",
        ),
        # Macros.
        pytest.param("@hourly", "2026-01-01T00:30Z", ["2026-01-01T01:00Z"], id="macro_hourly"),
        pytest.param("@daily", "2026-01-01T00:30Z", ["2026-01-02T00:00Z"], id="macro_daily"),
        pytest.param("@midnight", "2026-01-01T00:30Z", ["2026-01-02T00:00Z"], id="macro_midnight"),
        pytest.param("@weekly", "2026-01-01T00:30Z", ["2026-01-04T00:00Z"], id="macro_weekly_sunday"),
        pytest.param("@monthly", "2026-01-01T00:30Z", ["2026-02-01T00:00Z"], id="macro_monthly"),
        pytest.param("@yearly", "2026-01-01T00:30Z", ["2027-01-01T00:00Z"], id="macro_yearly"),
        pytest.param("@ANNUALLY", "2026-01-01T00:30Z", ["2027-01-01T00:00Z"], id="macro_annually_any_case"),
    ],
)
def test_calendar(expression: str, after: str, expected: list[str]) -> None:
    assert fires(expression, "UTC", after, len(expected)) == expected


def test_after_in_another_zone_and_with_microseconds() -> None:
    schedule = parse_schedule("0 * * * *")
    after = utc("2026-01-01T00:59:59.999999Z").astimezone(ZoneInfo("Asia/Kolkata"))
    assert next_fire_after(schedule, after) == utc("2026-01-01T01:00Z")
    assert next_fire_after(schedule, utc("2026-01-01T01:00Z")) == utc("2026-01-01T02:00Z")  # strictly after
    fire = next_fire_after(schedule, after)
    assert fire is not None and fire.tzinfo is UTC


@pytest.mark.parametrize(
    ("start_at", "end_at", "after", "expected"),
    [
        pytest.param(
            "2026-01-01T10:30Z", None, "2026-01-01T00:00Z", ["2026-01-01T11:00Z"], id="start_between_fires"
        ),
        pytest.param(
            "2026-01-01T11:00Z", None, "2026-01-01T00:00Z", ["2026-01-01T11:00Z"], id="start_inclusive"
        ),
        pytest.param(
            None,
            "2026-01-01T02:00Z",
            "2026-01-01T00:00Z",
            ["2026-01-01T01:00Z", "2026-01-01T02:00Z"],
            id="end_inclusive_then_none",
        ),
        pytest.param(
            "2026-01-01T03:00Z",
            "2026-01-01T03:30Z",
            "2026-01-01T00:00Z",
            ["2026-01-01T03:00Z"],
            id="window_of_one_fire",
        ),
        pytest.param(None, "2026-01-01T00:59:59Z", "2026-01-01T00:00Z", [], id="end_before_first_fire"),
    ],
)
def test_bounds(start_at: str | None, end_at: str | None, after: str, expected: list[str]) -> None:
    options = {"start_at": utc(start_at) if start_at else None, "end_at": utc(end_at) if end_at else None}
    got = fires("0 * * * *", "UTC", after, 5, **options)
    assert got == expected if end_at else got[: len(expected)] == expected


def test_is_fire_time() -> None:
    schedule = parse_schedule("30 1 * * *", "America/New_York")
    assert is_fire_time(schedule, utc("2026-11-01T05:30Z"))
    assert not is_fire_time(schedule, utc("2026-11-01T06:30Z"))  # the repeated 01:30 under FIRST
    assert not is_fire_time(schedule, utc("2026-11-01T05:30:00.5Z"))
    assert is_fire_time(parse_schedule("30 2 * * *", "America/New_York"), utc("2026-03-08T07:00Z"))
