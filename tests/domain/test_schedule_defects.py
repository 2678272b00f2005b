"""Schedule-engine defects of issue 27, part 4: the day-field rule in the "never fires" check and in describe,
and `is_fire_time` for a local time in the second pass of a repeated hour."""

from __future__ import annotations

import calendar
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from itertools import product
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tickwork.domain.errors import ValidationError
from tickwork.domain.schedule import (
    describe,
    describe_schedule,
    is_fire_time,
    next_fire_after,
    parse_schedule,
)

NEW_YORK = ZoneInfo("America/New_York")

# ----------------------------------------------------------------------------------------------------
# Never-firing expressions are refused, by the same day rule the fire times use


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        # Day-of-week starts with `*`, so a day must match both fields (Vixie): February has no 30th or 31st
        # and April no 31st, whatever the weekday field says.
        pytest.param(
            "0 0 30 2 */2", "day-of-month field '30' never occurs in month field '2'", id="dow_star_step_2"
        ),
        pytest.param(
            "0 0 31 4 */1", "day-of-month field '31' never occurs in month field '4'", id="dow_star_step_1"
        ),
        pytest.param(
            "0 0 31 2 *,1", "day-of-month field '31' never occurs in month field '2'", id="dow_star_list"
        ),
        # Both days occur, but never together: the 1st and 21st are never a fifth Monday (the 29th-31st).
        pytest.param(
            "0 0 */20 * MON#5",
            "day-of-month field '*/20' and day-of-week field 'MON#5' never match the same day",
            id="dom_star_step_never_a_fifth_monday",
        ),
    ],
)
def test_expressions_that_never_fire_are_refused(expression: str, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        parse_schedule(expression)
    assert raised.value.field == "schedule.expression"
    assert message in raised.value.message


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # The 13th when it is a Sunday, Tuesday, Thursday or Saturday (AND: day-of-week starts with `*`).
        pytest.param("0 0 13 * */2", ["2026-01-13", "2026-06-13", "2026-08-13"], id="dom_and_dow_star_step"),
        # `*,1` is every weekday, so ANDing it restricts nothing: the 13th of every month.
        pytest.param("0 0 13 * *,1", ["2026-01-13", "2026-02-13", "2026-03-13"], id="dow_star_list_is_all"),
        # Neither starts with `*`: either field (the 13th, or any Friday).
        pytest.param("0 0 13 * FRI", ["2026-01-02", "2026-01-09", "2026-01-13"], id="either_day_field"),
        # Day-of-month starts with `*`: a Monday that is the 1st, 11th, 21st or 31st.
        pytest.param("0 0 */10 * MON", ["2026-05-11", "2026-06-01", "2026-08-31"], id="dom_star_step_and"),
    ],
)
def test_fire_times_follow_the_day_rule_the_check_uses(expression: str, expected: list[str]) -> None:
    schedule = parse_schedule(expression)
    after, got = datetime(2026, 1, 1, tzinfo=UTC), []
    for _ in expected:
        fire = next_fire_after(schedule, after)
        assert fire is not None
        got.append(fire.date().isoformat())
        after = fire
    assert got == expected


# An independent oracle of Vixie's day rule on a small token set: each token as a predicate of a date.
_MONTH_DAY_TOKENS: dict[str, Callable[[date], bool]] = {
    "*": lambda day: True,
    "*/1": lambda day: True,
    "*,5": lambda day: True,
    "13": lambda day: day.day == 13,
    "29": lambda day: day.day == 29,
    "30": lambda day: day.day == 30,
    "31": lambda day: day.day == 31,
    "*/10": lambda day: day.day % 10 == 1,
    "*/20": lambda day: day.day in (1, 21),
    "30-31": lambda day: day.day >= 30,
    "L": lambda day: day.day == calendar.monthrange(day.year, day.month)[1],
}


def _cron_weekday(day: date) -> int:
    return day.isoweekday() % 7  # Sunday = 0


_WEEK_DAY_TOKENS: dict[str, Callable[[date], bool]] = {
    "*": lambda day: True,
    "*/1": lambda day: True,
    "*,1": lambda day: True,
    "1": lambda day: _cron_weekday(day) == 1,
    "*/2": lambda day: _cron_weekday(day) in (0, 2, 4, 6),
    "*/7": lambda day: _cron_weekday(day) == 0,
    "1-5": lambda day: 1 <= _cron_weekday(day) <= 5,
    "MON#5": lambda day: _cron_weekday(day) == 1 and day.day > 28,
    "5L": lambda day: _cron_weekday(day) == 5 and day.day + 7 > calendar.monthrange(day.year, day.month)[1],
}
_MONTH_TOKENS: dict[str, Callable[[date], bool]] = {
    "*": lambda day: True,
    "2": lambda day: day.month == 2,
    "4": lambda day: day.month == 4,
    "2,4": lambda day: day.month in (2, 4),
}
# 2000-2027 is a whole 28-year cycle of the calendar (no skipped leap year inside it): every month shape
# (length, weekday of the 1st) occurs, so a day pattern that matches no day in it matches none ever.
_CYCLE = [
    date(2000, 1, 1) + timedelta(days=offset) for offset in range((date(2028, 1, 1) - date(2000, 1, 1)).days)
]


def _oracle_first_day(day_of_month: str, month: str, day_of_week: str) -> date | None:
    in_month, in_week, in_months = (
        _MONTH_DAY_TOKENS[day_of_month],
        _WEEK_DAY_TOKENS[day_of_week],
        _MONTH_TOKENS[month],
    )
    both = day_of_month.startswith("*") or day_of_week.startswith("*")  # Vixie: `*` first means AND
    for day in _CYCLE:
        if in_months(day) and ((in_month(day) and in_week(day)) if both else (in_month(day) or in_week(day))):
            return day
    return None


def _disagreement(day_of_month: str, month: str, day_of_week: str) -> str | None:
    expression = f"0 0 {day_of_month} {month} {day_of_week}"
    expected = _oracle_first_day(day_of_month, month, day_of_week)
    try:
        schedule = parse_schedule(expression)
    except ValidationError:
        return None if expected is None else f"'{expression}' is refused but fires on {expected}"
    if expected is None:
        return f"'{expression}' is accepted but never fires"
    fire = next_fire_after(schedule, datetime(1999, 12, 31, 23, 59, tzinfo=UTC))
    got = None if fire is None else fire.date()
    return None if got == expected else f"'{expression}' first fires on {got}, expected {expected}"


def test_accepted_exactly_when_it_fires_and_first_fire_follows_vixie() -> None:
    """Every combination of the tokens: refused exactly when the oracle finds no day in a whole calendar
    cycle, and otherwise first fires on the oracle's first day."""
    combinations = list(product(_MONTH_DAY_TOKENS, _MONTH_TOKENS, _WEEK_DAY_TOKENS))
    disagreements = [text for fields in combinations if (text := _disagreement(*fields)) is not None]
    assert disagreements == []
    refused = [fields for fields in combinations if _oracle_first_day(*fields) is None]
    assert ("30", "2", "*/2") in refused and len(refused) < len(combinations)  # both outcomes are exercised


# ----------------------------------------------------------------------------------------------------
# Descriptions say what the matcher does


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param(
            "0 0 */10 * MON",
            "at 00:00 on day 1, 11, 21 and 31 of the month if it is a Monday",
            id="dom_star_step_is_and_not_or",
        ),
        pytest.param(
            "0 0 13 * */2",
            "at 00:00 on day 13 of the month if it is a Sunday, Tuesday, Thursday or Saturday",
            id="dow_star_step_is_and",
        ),
        pytest.param(
            "0 0 */15 * MON#5",
            "at 00:00 on day 1, 16 and 31 of the month if it is the fifth Monday of the month",
            id="and_with_nth_weekday",
        ),
        pytest.param("0 0 * * */7", "at 00:00 on Sunday", id="dow_step_7_is_sunday"),
        pytest.param("0 0 * * 0-7/7", "at 00:00 on Sunday", id="dow_range_step_7_is_sunday"),
        pytest.param("0 0 * * */2", "at 00:00 on Sunday, Tuesday, Thursday and Saturday", id="dow_star_step"),
        pytest.param("0 0 * * *,1", "at 00:00", id="dow_star_list_is_every_day"),
        pytest.param("0 0 13 * *,1", "at 00:00 on day 13 of the month", id="and_with_every_weekday"),
        pytest.param("0 0 1-31 * MON", "at 00:00", id="either_with_every_month_day_is_every_day"),
        pytest.param(
            "0 0 1,15 * MON", "at 00:00 on day 1 and day 15 of the month or on Monday", id="either_stays_or"
        ),
        pytest.param(
            "0 0 */2 * *", "at 00:00 on every 2nd day from day 1 through 31 of the month", id="dom_long_step"
        ),
    ],
)
def test_describe_follows_the_day_rule(expression: str, expected: str) -> None:
    assert describe(expression) == expected


def test_describe_schedule_of_an_every_day_weekday_list_says_every_day() -> None:
    assert describe_schedule(parse_schedule("0 0 * * *,1", "UTC")) == "every day at 00:00, UTC"


# ----------------------------------------------------------------------------------------------------
# is_fire_time for local times in a repeated hour (America/New_York falls back at 02:00 EDT on 2026-11-01)


@pytest.mark.parametrize(
    ("expression", "options", "fold", "expected"),
    [
        pytest.param("0 * * * *", {}, 0, True, id="wildcard_first_pass"),
        pytest.param("0 * * * *", {}, 1, True, id="wildcard_second_pass"),
        pytest.param("0 1 * * *", {"dst_repeat": "last"}, 1, True, id="fixed_last_second_pass"),
        pytest.param("0 1 * * *", {"dst_repeat": "last"}, 0, False, id="fixed_last_not_first_pass"),
        pytest.param("0 1 * * *", {"dst_repeat": "both"}, 1, True, id="fixed_both_second_pass"),
        pytest.param("0 1 * * *", {}, 0, True, id="fixed_first_first_pass"),
        pytest.param("0 1 * * *", {}, 1, False, id="fixed_first_not_second_pass"),
    ],
)
def test_is_fire_time_of_a_local_time_in_a_repeated_hour(
    expression: str, options: dict[str, Any], fold: int, expected: bool
) -> None:
    schedule = parse_schedule(expression, "America/New_York", **options)
    local = datetime(2026, 11, 1, 1, 0, fold=fold, tzinfo=NEW_YORK)
    assert local.astimezone(UTC) == datetime(2026, 11, 1, 5 + fold, 0, tzinfo=UTC)  # EDT, then EST
    assert is_fire_time(schedule, local) is expected
    assert is_fire_time(schedule, local.astimezone(UTC)) is expected  # the same answer as for the instant
