"""Request and response bodies of the calendar routes (handlers/calendar_routes.py)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, Field, NaiveDatetime

from tickwork.api.models import TIMEZONE_PATTERN, RequestModel
from tickwork.domain.calendars import (
    MAX_DATES,
    MAX_DESCRIPTION,
    MAX_LABEL,
    MAX_WINDOWS,
    Calendar,
    ExcludedDate,
    ExcludedWindow,
)

_LABEL = Field(default="", max_length=MAX_LABEL, description="What it is, e.g. a holiday's name.")


class ExcludedDateIn(RequestModel):
    date: dt.date = Field(description="A whole day of the calendar's zone, however long (23-25 h).")
    label: str = _LABEL


class ExcludedWindowIn(RequestModel):
    start: NaiveDatetime = Field(description="Wall-clock time in the calendar's zone, no offset (included).")
    end: NaiveDatetime = Field(description="Wall-clock time in the calendar's zone, no offset (excluded).")
    label: str = _LABEL


class CalendarIn(RequestModel):
    """A calendar, whole: a PUT replaces every date and window."""

    timezone: str = Field(min_length=1, max_length=64, json_schema_extra={"pattern": TIMEZONE_PATTERN})
    description: str = Field(default="", max_length=MAX_DESCRIPTION)
    dates: list[ExcludedDateIn] = Field(default_factory=list, max_length=MAX_DATES)
    windows: list[ExcludedWindowIn] = Field(default_factory=list, max_length=MAX_WINDOWS)

    def to_calendar(self, owner: str, name: str) -> Calendar:
        return Calendar(
            owner=owner,
            name=name,
            timezone=self.timezone,
            description=self.description,
            dates=tuple(ExcludedDate(d.date, d.label) for d in self.dates),
            windows=tuple(ExcludedWindow(w.start, w.end, w.label) for w in self.windows),
        )


class ExcludedDateOut(BaseModel):
    date: dt.date
    label: str


class ExcludedWindowOut(BaseModel):
    start: NaiveDatetime
    end: NaiveDatetime
    label: str


class CalendarOut(BaseModel):
    name: str
    timezone: str
    description: str
    dates: list[ExcludedDateOut]
    windows: list[ExcludedWindowOut]
    version: int = Field(description="Bumped by every write; the ETag is the quoted version.")
    updated_at: dt.datetime | None

    @classmethod
    def of(cls, calendar: Calendar) -> CalendarOut:
        return cls(
            name=calendar.name,
            timezone=calendar.timezone,
            description=calendar.description,
            dates=[ExcludedDateOut(date=d.day, label=d.label) for d in calendar.dates],
            windows=[ExcludedWindowOut(start=w.start, end=w.end, label=w.label) for w in calendar.windows],
            version=calendar.version,
            updated_at=calendar.updated_at,
        )


class CalendarsOut(BaseModel):
    items: list[CalendarOut]
