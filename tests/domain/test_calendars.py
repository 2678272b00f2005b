"""Exclusion calendars' rules (domain/calendars.py): entries match the zone's wall clock, so a holiday is
its whole local day across a DST change and a window covers both occurrences of a repeated hour; every
rule of a calendar is refused naming its field."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tickwork.domain.calendars import (
    MAX_CALENDARS_PER_JOB,
    Calendar,
    ExcludedDate,
    ExcludedWindow,
    check_calendar_names,
    checked_calendar,
    exclusion,
)
from tickwork.domain.errors import ValidationError

NEW_YORK = ZoneInfo("America/New_York")


def calendar(**changes: object) -> Calendar:
    base = {"owner": "alice", "name": "ops", "timezone": "America/New_York"}
    return Calendar(**{**base, **changes})  # type: ignore[arg-type]


def hours_of(day: date) -> list[datetime]:
    """Every whole UTC hour from the day before to the day after."""
    start = datetime.combine(day - timedelta(days=1), datetime.min.time(), UTC)
    return [start + timedelta(hours=n) for n in range(72)]


@pytest.mark.parametrize(
    ("day", "hours"), [(date(2027, 3, 14), 23), (date(2027, 11, 7), 25), (date(2027, 7, 4), 24)]
)
def test_a_date_excludes_its_whole_local_day_however_long(day: date, hours: int) -> None:
    holiday = calendar(dates=(ExcludedDate(day, "holiday"),))
    excluded = [at for at in hours_of(day) if holiday.exclusion_at(at) is not None]
    assert len(excluded) == hours
    assert {at.astimezone(NEW_YORK).date() for at in excluded} == {day}
    assert excluded[0] == datetime.combine(day, datetime.min.time(), NEW_YORK).astimezone(UTC)


def test_a_window_in_a_repeated_hour_covers_both() -> None:
    night = calendar(
        windows=(ExcludedWindow(datetime(2027, 11, 7, 1), datetime(2027, 11, 7, 2), "patching"),)
    )
    first = datetime(2027, 11, 7, 5, 30, tzinfo=UTC)  # 01:30 EDT
    second = first + timedelta(hours=1)  # 01:30 EST, the same wall-clock time again
    after = second + timedelta(hours=1)  # 02:30 EST
    assert night.exclusion_at(first) == night.exclusion_at(second)
    reason = night.exclusion_at(first)
    assert reason is not None and "patching, 2027-11-07T01:00 to 2027-11-07T02:00" in reason
    assert night.exclusion_at(after) is None


def test_the_first_calendar_that_excludes_says_why() -> None:
    day = date(2027, 12, 25)
    at = datetime(2027, 12, 25, 15, tzinfo=UTC)
    first, second = (
        calendar(name="a", dates=(ExcludedDate(day),)),
        calendar(name="b", dates=(ExcludedDate(day),)),
    )
    assert exclusion([first, second], at) == "excluded by calendar a: 2027-12-25 (America/New_York)"
    assert exclusion([], at) is None


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": "Bad Name", "dates": (ExcludedDate(date(2027, 1, 1)),)}, "name"),
        ({"timezone": "Mars/Base", "dates": (ExcludedDate(date(2027, 1, 1)),)}, "timezone"),
        ({}, "dates"),
        ({"dates": (ExcludedDate(date(2027, 1, 1)), ExcludedDate(date(2027, 1, 1)))}, "dates[1].date"),
        ({"dates": (ExcludedDate(date(2027, 1, 1), "x" * 101),)}, "dates[0].label"),
        ({"windows": (ExcludedWindow(datetime(2027, 1, 2), datetime(2027, 1, 1)),)}, "windows[0].end"),
        ({"windows": (ExcludedWindow(datetime(2027, 1, 1), datetime(2028, 1, 3)),)}, "windows[0].end"),
        (
            {
                "windows": (
                    ExcludedWindow(datetime(2027, 1, 1, tzinfo=UTC), datetime(2027, 1, 2, tzinfo=UTC)),
                )
            },
            "windows[0]",
        ),
    ],
)
def test_a_bad_calendar_is_refused_naming_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        checked_calendar(calendar(**changes))
    assert refused.value.field == field


def test_a_job_names_a_few_distinct_calendars() -> None:
    assert check_calendar_names(["a", "b"]) == ("a", "b")
    for names, field in [
        (["a", "a"], "calendars"),
        ([str(n) for n in range(MAX_CALENDARS_PER_JOB + 1)], "calendars"),
        (["ok", "NOT OK"], "calendars[1]"),
    ]:
        with pytest.raises(ValidationError) as refused:
            check_calendar_names(names)
        assert refused.value.field == field
