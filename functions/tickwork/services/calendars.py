"""Exclusion calendars: an owner writes, lists and deletes them; jobs name them (services/jobs.py checks
the names at the job's write), and the executor reads them at each claim (domain/delivery.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tickwork.domain.calendars import Calendar, check_calendar_name, checked_calendar
from tickwork.domain.clock import Clock
from tickwork.domain.errors import NotFoundError, QuotaExceededError, VersionMismatchError
from tickwork.services.ports import CalendarStore

# Every calendar is answered whole by GET /calendars: this many at their largest (64 KiB bodies) stay well
# inside a Lambda response (6 MB).
MAX_CALENDARS_PER_OWNER = 50


@dataclass(frozen=True, slots=True)
class CalendarWrite:
    calendar: Calendar
    created: bool


class CalendarService:
    def __init__(self, store: CalendarStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def get(self, owner: str, name: str) -> Calendar:
        found = self._store.get_calendars(owner, [check_calendar_name(name)]).get(name)
        if found is None:
            raise NotFoundError(f"calendar {name} not found")
        return found

    def list(self, owner: str) -> list[Calendar]:
        return self._store.list_calendars(owner)

    def put(self, calendar: Calendar, if_match: int | None = None) -> CalendarWrite:
        """Create the calendar, or replace it whole (version + 1). With `if_match`, only while it is at that
        version (0: only if it does not exist). An edit counts from the next claim of each job's run."""
        checked_calendar(calendar)
        current = self._store.get_calendars(calendar.owner, [calendar.name]).get(calendar.name)
        stored = 0 if current is None else current.version
        if current is None and len(self._store.list_calendars(calendar.owner)) >= MAX_CALENDARS_PER_OWNER:
            raise QuotaExceededError(
                "calendars", f"at most {MAX_CALENDARS_PER_OWNER} calendars per owner: delete one first"
            )
        if if_match is not None and if_match != stored:
            raise VersionMismatchError(f"calendar {calendar.name} is at version {stored}, not {if_match}")
        written = replace(calendar, version=stored + 1, updated_at=self._clock.now())
        self._store.put_calendar(written)  # VersionMismatchError: another write landed since the read
        return CalendarWrite(written, created=current is None)

    def delete(self, owner: str, name: str) -> None:
        """Jobs that name it run every fire from then on (the claim leaves a missing calendar out, and says
        so in the executor's log): removing a blackout must not stop what it excluded from running."""
        if not self._store.delete_calendar(owner, check_calendar_name(name)):
            raise NotFoundError(f"calendar {name} not found")
