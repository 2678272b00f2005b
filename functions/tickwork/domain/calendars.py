"""Exclusion calendars: named sets of local dates and wall-clock windows in one zone (holidays, blackout
windows) that an owner's jobs share. A scheduled fire inside one is recorded `excluded` with the entry
that excluded it: the slot is accounted for, not run (docs/design.md, "Exclusion calendars").

Entries are matched on the zone's wall clock, so a holiday is the whole local day whatever its length (23
or 25 hours across a DST change), and a window written 01:00-02:00 covers both 01:00s of a fall-back night.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from tickwork.domain.errors import ValidationError
from tickwork.domain.execution import LEASE_EXPIRED_STATUS
from tickwork.domain.models import Run, Trigger
from tickwork.domain.schedule import load_zone

CALENDAR_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MAX_DATES = 1000  # about three years of a busy trading calendar's closures, or decades of holidays
MAX_WINDOWS = 500
MAX_LABEL = 100
MAX_DESCRIPTION = 1024
# A job names at most this many calendars: each is read at the claim of its scheduled runs.
MAX_CALENDARS_PER_JOB = 5
# One window spans at most this long: longer blackouts are a pause (or dates), not a window.
MAX_WINDOW = timedelta(days=366)
# Only fires of the schedule are excluded: a run asked for (run now, retry, backfill) was asked for.
EXCLUDED_TRIGGERS = frozenset({Trigger.SCHEDULE, Trigger.CATCH_UP})


@dataclass(frozen=True, slots=True)
class ExcludedDate:
    day: date
    label: str = ""


@dataclass(frozen=True, slots=True)
class ExcludedWindow:
    """From `start` (included) to `end` (excluded), both wall-clock times of the calendar's zone."""

    start: datetime
    end: datetime
    label: str = ""


@dataclass(frozen=True, slots=True)
class Calendar:
    owner: str
    name: str
    timezone: str
    dates: tuple[ExcludedDate, ...] = ()
    windows: tuple[ExcludedWindow, ...] = ()
    description: str = ""
    version: int = 1
    updated_at: datetime | None = None

    def exclusion_at(self, instant: datetime) -> str | None:
        """Why `instant` (UTC) is excluded by this calendar (None: it is not)."""
        wall = instant.astimezone(load_zone(self.timezone)).replace(tzinfo=None)
        for excluded in self.dates:
            if excluded.day == wall.date():
                return _reason(self, excluded.day.isoformat(), excluded.label)
        for window in self.windows:
            if window.start <= wall < window.end:
                span = f"{_minutes(window.start)} to {_minutes(window.end)}"
                return _reason(self, span, window.label)
        return None


def _minutes(wall: datetime) -> str:
    return wall.isoformat(timespec="minutes")


def _reason(calendar: Calendar, when: str, label: str) -> str:
    named = f"{label}, " if label else ""
    return f"excluded by calendar {calendar.name}: {named}{when} ({calendar.timezone})"


def exclusion(calendars: Iterable[Calendar], instant: datetime) -> str | None:
    """The first reason any of `calendars` excludes `instant` (None: none does)."""
    for calendar in calendars:
        reason = calendar.exclusion_at(instant)
        if reason is not None:
            return reason
    return None


def excludable(run: Run) -> bool:
    """A run a calendar may exclude: a fire of the schedule whose target no attempt has answered for (its
    first attempt, or one after attempts that ended only by their lease), and no retry its owner asked
    for."""
    if run.trigger not in EXCLUDED_TRIGGERS or run.retry_requested:
        return False
    # An attempt that ended by its lease may never have reached the target (its worker died or stalled
    # after the claim, or its calendar read failed): the next attempt decides again.
    return all(attempt.get("status") == LEASE_EXPIRED_STATUS for attempt in run.attempts)


def check_calendar_name(name: str, field: str = "name") -> str:
    if not CALENDAR_NAME.match(name):
        raise ValidationError(field, "must be 1-64 of a-z, 0-9, '-' and '_', starting with a letter or digit")
    return name


def check_calendar_names(names: Sequence[str], field: str = "calendars") -> tuple[str, ...]:
    """A job's calendars: valid names, no repeats, at most MAX_CALENDARS_PER_JOB, kept in order."""
    if len(names) > MAX_CALENDARS_PER_JOB:
        raise ValidationError(field, f"at most {MAX_CALENDARS_PER_JOB} calendars")
    if len(set(names)) != len(names):
        raise ValidationError(field, "names a calendar twice")
    for index, name in enumerate(names):
        check_calendar_name(name, f"{field}[{index}]")
    return tuple(names)


def checked_calendar(calendar: Calendar) -> Calendar:
    """The calendar if every rule holds; a ValidationError naming the field otherwise."""
    check_calendar_name(calendar.name)
    try:
        load_zone(calendar.timezone)
    except ValidationError as error:
        raise ValidationError("timezone", error.message) from error
    if len(calendar.description) > MAX_DESCRIPTION:
        raise ValidationError("description", f"at most {MAX_DESCRIPTION} characters")
    if not calendar.dates and not calendar.windows:
        raise ValidationError("dates", "a calendar excludes at least one date or window")
    if len(calendar.dates) > MAX_DATES:
        raise ValidationError("dates", f"at most {MAX_DATES} dates")
    if len(calendar.windows) > MAX_WINDOWS:
        raise ValidationError("windows", f"at most {MAX_WINDOWS} windows")
    seen: set[date] = set()
    for index, excluded in enumerate(calendar.dates):
        if excluded.day in seen:
            raise ValidationError(f"dates[{index}].date", f"{excluded.day} is listed twice")
        seen.add(excluded.day)
        _check_label(excluded.label, f"dates[{index}].label")
    for index, window in enumerate(calendar.windows):
        if window.start.tzinfo is not None or window.end.tzinfo is not None:
            raise ValidationError(
                f"windows[{index}]",
                "start and end are wall-clock times of the calendar's timezone: no offset",
            )
        if window.end <= window.start:
            raise ValidationError(f"windows[{index}].end", "must be after start")
        if window.end - window.start > MAX_WINDOW:
            raise ValidationError(f"windows[{index}].end", f"a window spans at most {MAX_WINDOW.days} days")
        _check_label(window.label, f"windows[{index}].label")
    return calendar


def _check_label(label: str, field: str) -> None:
    if len(label) > MAX_LABEL or any(ord(c) < 32 for c in label):
        raise ValidationError(field, f"at most {MAX_LABEL} printable characters")
