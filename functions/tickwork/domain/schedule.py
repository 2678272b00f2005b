"""The schedule engine: parse cron expressions; compute fire times in a time zone under a DST policy.

Pure: time is always an input; nothing here reads a clock or does I/O beyond loading tz data.

How it works. A cron expression names *wall-clock* times. The engine matches the expression on wall-clock time
(its own matcher, see `_CronSpec`), then maps wall-clock times to instants through the zone's offset table
(`_zone_state`), walking the timeline one constant-offset segment at a time. The DST policy is applied where a
segment meets a transition, so gaps and repeated hours are handled in one place and results are strictly
increasing by construction. croniter's time-zone handling (which fires `30 1 * * *` twice on a fall-back day)
is never involved; the tests use croniter as an independent oracle for wall-clock matching.

Internally, instants are integer UTC epoch seconds and wall-clock times are integer "wall seconds" (the same
count for the naive local datetime), which keeps the hot path free of datetime arithmetic.
"""

from __future__ import annotations

import calendar
import hashlib
import re
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from itertools import pairwise
from typing import Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tickwork.domain.errors import ValidationError

__all__ = [
    "DEFAULT_MIN_INTERVAL_SECONDS",
    "MAX_JITTER_SECONDS",
    "MAX_PREVIEW_COUNT",
    "DstGapPolicy",
    "DstNote",
    "DstRepeatPolicy",
    "FireTime",
    "Schedule",
    "describe",
    "is_fire_time",
    "jitter_offset",
    "next_fire_after",
    "parse_schedule",
    "preview",
    "shortest_interval_seconds",
]

DEFAULT_MIN_INTERVAL_SECONDS: Final = 10
MAX_JITTER_SECONDS: Final = 600
MAX_PREVIEW_COUNT: Final = 100

DstNote = Literal["shifted", "repeated"]

_SECONDS_PER_DAY: Final = 86_400
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()
_ONE_SECOND: Final = timedelta(seconds=1)
# How far ahead to look for the next matching day before concluding there is none. Rare but valid expressions
# (the fifth Monday of February) recur within ~40 years; impossible ones are rejected when parsed.
_SEARCH_MONTHS: Final = 100 * 12
_LAST_SEARCHABLE_YEAR: Final = 9998
# Offsets are sampled this often to find transitions: no real zone changes offset twice within a day.
_TRANSITION_PROBE_SECONDS: Final = _SECONDS_PER_DAY
_MAX_SEGMENTS: Final = 1000


class DstGapPolicy(StrEnum):
    """What a fixed-time job does when its wall-clock time is skipped by a spring-forward transition."""

    SHIFT = "shift"  # run once at the first instant after the jump (Vixie cron)
    SKIP = "skip"  # do not run that day


class DstRepeatPolicy(StrEnum):
    """What a fixed-time job does when its wall-clock time occurs twice on a fall-back day."""

    FIRST = "first"  # run at the first occurrence only (Vixie cron)
    LAST = "last"  # run at the second occurrence only
    BOTH = "both"  # run at both


@dataclass(frozen=True, slots=True)
class Schedule:
    """A validated schedule; build it with `parse_schedule`, which normalizes every field."""

    expression: str
    timezone: str = "UTC"
    start_at: datetime | None = None  # tz-aware UTC; the first fire is at or after it
    end_at: datetime | None = None  # tz-aware UTC; the last fire is at or before it
    jitter_seconds: int = 0
    dst_gap: DstGapPolicy = DstGapPolicy.SHIFT
    dst_repeat: DstRepeatPolicy = DstRepeatPolicy.FIRST


@dataclass(frozen=True, slots=True)
class FireTime:
    """One fire of a schedule, as shown to a person."""

    at: datetime  # UTC
    local: datetime  # the same instant in the schedule's zone
    dst: DstNote | None  # "shifted": moved out of a DST gap; "repeated": inside a fall-back repeated hour


# ----------------------------------------------------------------------------------------------------
# Parsing


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    cycle_high: int  # the last value of the cycle; day-of-week accepts 7 for Sunday but cycles 0-6
    names: Mapping[str, int]


_MONTH_NAMES: Final = {name.lower(): number for number, name in enumerate(calendar.month_abbr) if name}
# The lengths a month can have: February has 28 days in common years and 29 in leap years.
_MONTH_LENGTHS: Final = {
    month: (28, 29) if month == 2 else (calendar.monthrange(2001, month)[1],) for month in range(1, 13)
}
_WEEKDAY_NAMES: Final = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}

_SECOND_FIELD: Final = _Field("second", 0, 59, 59, {})
_MINUTE_FIELD: Final = _Field("minute", 0, 59, 59, {})
_HOUR_FIELD: Final = _Field("hour", 0, 23, 23, {})
_DAY_OF_MONTH_FIELD: Final = _Field("day-of-month", 1, 31, 31, {})
_MONTH_FIELD: Final = _Field("month", 1, 12, 12, _MONTH_NAMES)
_DAY_OF_WEEK_FIELD: Final = _Field("day-of-week", 0, 7, 6, _WEEKDAY_NAMES)

_MACROS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_NUMBER_RE: Final = re.compile(r"[0-9]+")
_NAME_RE: Final = re.compile(r"[A-Za-z]+")
_NEAREST_WEEKDAY_RE: Final = re.compile(r"([0-9]+)W", re.IGNORECASE)
_NTH_WEEKDAY_RE: Final = re.compile(r"([0-9A-Za-z]+)#([0-9]+)")
_LAST_WEEKDAY_RE: Final = re.compile(r"([0-9]+|[A-Za-z]{3})L|L([0-9]+)", re.IGNORECASE)


def _value_pattern(field: _Field) -> str:
    """The field's values as a regular expression: numbers without leading zeros, names in upper case."""
    numbers = "|".join(str(n) for n in range(field.high, field.low - 1, -1))
    names = "|".join(name.upper() for name in field.names)
    return f"(?:{numbers}{'|' + names if names else ''})"


def _list_pattern(field: _Field, *specials: str) -> str:
    value = _value_pattern(field)
    item = rf"(?:\*|{value}(?:-{value})?)(?:/[1-9][0-9]?)?"
    if specials:
        item = f"(?:{'|'.join(specials)}|{item})"
    return f"{item}(?:,{item})*"


def expression_pattern() -> str:
    """A regular expression for the expressions every schedule accepts (for the API document): a macro, or
    five fields, or six whose seconds field fires at least 10 s apart (one second, or a step dividing a
    minute). `parse_schedule` takes more (names in any case, other second lists) and refuses what no
    expression of this shape can show: an expression that never fires (31 in February, or `0 0 30 2 */2`,
    where a day must match both day fields)."""
    macros = "|".join(_MACROS)
    day_of_week = _value_pattern(_DAY_OF_WEEK_FIELD)
    day_of_month = _value_pattern(_DAY_OF_MONTH_FIELD)
    five = " ".join(
        (
            _list_pattern(_MINUTE_FIELD),
            _list_pattern(_HOUR_FIELD),
            _list_pattern(_DAY_OF_MONTH_FIELD, "LW", "L", f"{day_of_month}W"),
            _list_pattern(_MONTH_FIELD),
            _list_pattern(_DAY_OF_WEEK_FIELD, f"{day_of_week}#[1-5]", f"{day_of_week}L"),
        )
    )
    seconds = rf"(?:{_value_pattern(_SECOND_FIELD)}|\*/(?:10|12|15|20|30))"
    return f"^(?:{macros}|(?:{seconds} )?{five})$"


def _expression_error(message: str) -> ValidationError:
    return ValidationError("schedule.expression", message)


def _parse_value(field: _Field, text: str, token: str) -> int:
    if _NUMBER_RE.fullmatch(text):
        value = int(text)
        if not field.low <= value <= field.high:
            raise _expression_error(f"{field.name} field '{token}' out of range {field.low}-{field.high}")
        return value
    if _NAME_RE.fullmatch(text) and text.lower() in field.names:
        return field.names[text.lower()]
    raise _expression_error(
        f"{field.name} field '{token}' is not a number, name, range (a-b), step (*/n, a-b/n) or list"
    )


def _expand_token(field: _Field, token: str) -> list[int]:
    """Values of one list item: `*`, `a`, `a-b`, with an optional `/step` (`a/n` means a through the end)."""
    base, has_step, step_text = token.partition("/")
    step = 1
    if has_step:
        if not _NUMBER_RE.fullmatch(step_text):
            raise _expression_error(f"{field.name} field step in '{token}' is not a whole number")
        step = int(step_text)
        if step < 1:
            raise _expression_error(f"{field.name} field step in '{token}' must be at least 1")
    if base == "*":
        low, high = field.low, field.cycle_high
    elif "-" in base:
        low_text, _, high_text = base.partition("-")
        low, high = _parse_value(field, low_text, token), _parse_value(field, high_text, token)
    else:
        low = _parse_value(field, base, token)
        high = field.cycle_high if has_step else low
    if low <= high:
        return list(range(low, high + 1, step))
    # A wrapping range such as FRI-MON or 22-2 runs to the end of the cycle and on from its start.
    wrapped = [*range(low, field.cycle_high + 1), *range(field.low, high + 1)]
    return wrapped[::step]


def _list_items(field: _Field, text: str) -> list[str]:
    items = text.split(",")
    if any(not item for item in items):
        raise _expression_error(f"{field.name} field '{text}' has an empty list item")
    return items


def _parse_plain_field(field: _Field, text: str) -> tuple[int, ...]:
    values: set[int] = set()
    for item in _list_items(field, text):
        values.update(_expand_token(field, item))
    return tuple(sorted(values))


@dataclass(frozen=True, slots=True)
class _DayOfMonthSpec:
    days: frozenset[int]
    last_day: bool  # L
    nearest_weekdays: tuple[int, ...]  # nW; LW is stored as 31W, which resolves to the last weekday


def _parse_day_of_month(text: str) -> _DayOfMonthSpec:
    field = _DAY_OF_MONTH_FIELD
    if text == "?":
        text = "*"
    days: set[int] = set()
    last_day = False
    nearest: set[int] = set()
    for item in _list_items(field, text):
        upper = item.upper()
        if upper == "L":
            last_day = True
        elif upper == "LW":
            nearest.add(31)
        elif match := _NEAREST_WEEKDAY_RE.fullmatch(item):
            nearest.add(_parse_value(field, match.group(1), item))
        else:
            days.update(_expand_token(field, item))
    return _DayOfMonthSpec(frozenset(days), last_day, tuple(sorted(nearest)))


@dataclass(frozen=True, slots=True)
class _DayOfWeekSpec:
    weekdays: frozenset[int]  # 0 = Sunday
    nth_weekdays: frozenset[tuple[int, int]]  # (weekday, n) for weekday#n
    last_weekdays: frozenset[int]  # weekday L: the last such weekday of the month


def _parse_day_of_week(text: str) -> _DayOfWeekSpec:
    field = _DAY_OF_WEEK_FIELD
    if text == "?":
        text = "*"
    weekdays: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last: set[int] = set()
    for item in _list_items(field, text):
        if match := _NTH_WEEKDAY_RE.fullmatch(item):
            weekday = _parse_value(field, match.group(1), item) % 7
            if not _NUMBER_RE.fullmatch(match.group(2)) or not 1 <= int(match.group(2)) <= 5:
                raise _expression_error(f"{field.name} field '{item}': the number after # must be 1-5")
            nth.add((weekday, int(match.group(2))))
        elif match := _LAST_WEEKDAY_RE.fullmatch(item):
            last.add(_parse_value(field, match.group(1) or match.group(2), item) % 7)
        else:
            weekdays.update(value % 7 for value in _expand_token(field, item))
    return _DayOfWeekSpec(frozenset(weekdays), frozenset(nth), frozenset(last))


def _is_wildcard_text(text: str) -> bool:
    return "*" in text or "/" in text


def _nearest_weekday(first_weekday: int, day: int, last: int) -> int:
    """Quartz `W`: the weekday nearest to `day` without leaving a month of `last` days whose 1st is
    `first_weekday` (Monday = 0)."""
    day = min(day, last)
    weekday = (first_weekday + day - 1) % 7  # Monday = 0
    if weekday == 5:  # Saturday: Friday before, or Monday after when the 1st is a Saturday
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday: Monday after, or Friday before when it is the last day
        return day + 1 if day < last else day - 2
    return day


class _CronSpec:
    """A parsed expression; matches wall-clock times. Immutable apart from its memo of matching days."""

    __slots__ = (
        "_day_memo",
        "day_of_month",
        "day_of_month_restricted",
        "day_of_week",
        "day_of_week_restricted",
        "either_day_field",
        "field_texts",
        "first_time_of_day",
        "fixed_time",
        "has_seconds",
        "hours",
        "minutes",
        "months",
        "seconds",
    )

    def __init__(self, field_texts: tuple[str, str, str, str, str, str], has_seconds: bool) -> None:
        second_text, minute_text, hour_text, dom_text, month_text, dow_text = field_texts
        self.field_texts = field_texts
        self.has_seconds = has_seconds
        self.seconds = _parse_plain_field(_SECOND_FIELD, second_text)
        self.minutes = _parse_plain_field(_MINUTE_FIELD, minute_text)
        self.hours = _parse_plain_field(_HOUR_FIELD, hour_text)
        self.day_of_month = _parse_day_of_month(dom_text)
        self.months = frozenset(_parse_plain_field(_MONTH_FIELD, month_text))
        self.day_of_week = _parse_day_of_week(dow_text)
        self.day_of_month_restricted = dom_text not in ("*", "?")
        self.day_of_week_restricted = dow_text not in ("*", "?")
        # Vixie cron: a day matches either day field only when both are restricted and neither starts with `*`
        # (so `*/2` counts as unrestricted here); otherwise it must match both.
        self.either_day_field = (
            self.day_of_month_restricted
            and self.day_of_week_restricted
            and not dom_text.startswith("*")
            and not dow_text.startswith("*")
        )
        # Vixie cron's rule: a job whose minute and hour are both fixed keeps its wall-clock meaning across
        # DST (the gap/repeat policies apply); `*` or a step in either follows real elapsed time instead.
        self.fixed_time = not _is_wildcard_text(minute_text) and not _is_wildcard_text(hour_text)
        self.first_time_of_day = self.hours[0] * 3600 + self.minutes[0] * 60 + self.seconds[0]
        self._day_memo: dict[int, tuple[int, ...]] = {}

    def can_ever_fire(self) -> bool:
        """Whether some real date matches, by the same day rule as `matching_days`.

        Which days of a month match depends only on the month, its length and the weekday of its 1st, and each
        month (February both in common and in leap years) starts on every weekday within 40 years, well
        inside the `next_wall` search. So trying every such shape of month decides it.
        """
        return any(
            self._days_of_month(month, first_weekday, last)
            for month in self.months
            for last in _MONTH_LENGTHS[month]
            for first_weekday in range(7)
        )

    def day_of_month_can_occur(self) -> bool:
        """Whether the day-of-month field alone names a day that some month of the month field has."""
        dom = self.day_of_month
        longest = max(_MONTH_LENGTHS[month][-1] for month in self.months)
        return dom.last_day or bool(dom.nearest_weekdays) or min(dom.days, default=32) <= longest

    def matching_days(self, year: int, month: int) -> tuple[int, ...]:
        key = year * 12 + month
        days = self._day_memo.get(key)
        if days is None:
            days = self._compute_matching_days(year, month)
            self._day_memo[key] = days
        return days

    def _compute_matching_days(self, year: int, month: int) -> tuple[int, ...]:
        if month not in self.months:
            return ()
        first_weekday, last = calendar.monthrange(year, month)  # Monday = 0
        return self._days_of_month(month, first_weekday, last)

    def _days_of_month(self, month: int, first_weekday: int, last: int) -> tuple[int, ...]:
        """The matching days of a month of `last` days whose 1st is `first_weekday` (Monday = 0)."""
        if month not in self.months:
            return ()
        dom, dow = self.day_of_month, self.day_of_week
        nearest = {_nearest_weekday(first_weekday, day, last) for day in dom.nearest_weekdays}
        either = self.either_day_field
        days = []
        for day in range(1, last + 1):
            weekday = (first_weekday + day) % 7  # cron numbering, Sunday = 0
            dom_ok = day in dom.days or (dom.last_day and day == last) or day in nearest
            dow_ok = (
                weekday in dow.weekdays
                or (weekday, (day - 1) // 7 + 1) in dow.nth_weekdays
                or (weekday in dow.last_weekdays and day + 7 > last)
            )
            if (dom_ok or dow_ok) if either else (dom_ok and dow_ok):
                days.append(day)
        return tuple(days)

    def next_time_of_day(self, second_of_day: int) -> int | None:
        """The first matching second of the day at or after `second_of_day`, or None if none is left."""
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        hour, rest = divmod(second_of_day, 3600)
        minute, second = divmod(rest, 60)
        hour_index = bisect_left(hours, hour)
        if hour_index == len(hours):
            return None
        if hours[hour_index] == hour:
            minute_index = bisect_left(minutes, minute)
            if minute_index < len(minutes):
                if minutes[minute_index] == minute:
                    second_index = bisect_left(seconds, second)
                    if second_index < len(seconds):
                        return hour * 3600 + minute * 60 + seconds[second_index]
                    minute_index += 1
                if minute_index < len(minutes):
                    return hour * 3600 + minutes[minute_index] * 60 + seconds[0]
            hour_index += 1
            if hour_index == len(hours):
                return None
        return hours[hour_index] * 3600 + minutes[0] * 60 + seconds[0]

    def next_wall(self, wall: int) -> int | None:
        """The first matching wall-clock time at or after `wall` (wall seconds); None if there is none."""
        days_since_epoch, second_of_day = divmod(wall, _SECONDS_PER_DAY)
        current = date.fromordinal(_EPOCH_ORDINAL + days_since_epoch)
        year, month, day = current.year, current.month, current.day
        for _ in range(_SEARCH_MONTHS):
            if month in self.months:
                days = self.matching_days(year, month)
                for index in range(bisect_left(days, day), len(days)):
                    matched_day = days[index]
                    time_of_day = self.next_time_of_day(second_of_day if matched_day == day else 0)
                    if time_of_day is not None:
                        ordinal = date(year, month, matched_day).toordinal()
                        return (ordinal - _EPOCH_ORDINAL) * _SECONDS_PER_DAY + time_of_day
            day, second_of_day = 1, 0
            month += 1
            if month == 13:
                month, year = 1, year + 1
                if year > _LAST_SEARCHABLE_YEAR:
                    return None
        return None

    def matches_wall(self, wall: datetime) -> bool:
        """Whether a naive wall-clock datetime is one of the expression's times."""
        return (
            wall.microsecond == 0
            and wall.day in self.matching_days(wall.year, wall.month)
            and self.next_time_of_day(wall.hour * 3600 + wall.minute * 60 + wall.second)
            == wall.hour * 3600 + wall.minute * 60 + wall.second
        )


def _split_expression(expression: str) -> tuple[tuple[str, str, str, str, str, str], bool]:
    text = expression.strip()
    if not text:
        raise _expression_error("expression is empty")
    if text.startswith("@"):
        expanded = _MACROS.get(text.lower())
        if expanded is None:
            raise _expression_error(f"unknown macro '{text}'; expected one of {', '.join(_MACROS)}")
        text = expanded
    fields = text.split()
    if len(fields) == 5:
        minute, hour, dom, month, dow = fields
        return ("0", minute, hour, dom, month, dow), False
    if len(fields) == 6:
        second, minute, hour, dom, month, dow = fields
        return (second, minute, hour, dom, month, dow), True
    raise _expression_error(
        f"has {len(fields)} fields; expected 5 (minute hour day-of-month month day-of-week) "
        "or 6 (second first, then those five)"
    )


@lru_cache(maxsize=16_384)
def _compile(expression: str) -> _CronSpec:
    field_texts, has_seconds = _split_expression(expression)
    spec = _CronSpec(field_texts, has_seconds)
    if not spec.can_ever_fire():
        dom_text, month_text, dow_text = field_texts[3:]
        if not spec.day_of_month_can_occur():
            raise _expression_error(
                f"day-of-month field '{dom_text}' never occurs in month field '{month_text}'"
            )
        raise _expression_error(
            f"day-of-month field '{dom_text}' and day-of-week field '{dow_text}' never match the same day "
            f"in month field '{month_text}' (a day field starting with '*' means a day must match both)"
        )
    return spec


def shortest_interval_seconds(schedule: Schedule) -> int:
    """The shortest time between two consecutive fires of the schedule (from its fields, no date math)."""
    return _shortest_gap_seconds(_compile(schedule.expression))


def _shortest_gap_seconds(spec: _CronSpec) -> int:
    """Shortest time between consecutive fires, from the second, minute and hour sets (no date math)."""
    seconds, minutes = spec.seconds, spec.minutes
    span = seconds[-1] - seconds[0]
    gaps = [later - earlier for earlier, later in pairwise(seconds)]
    gaps += [(later - earlier) * 60 - span for earlier, later in pairwise(minutes)]
    hour_set = set(spec.hours)
    if any((hour + 1) % 24 in hour_set for hour in hour_set):
        # The wrap-around from the last minute of one hour to the first minute of the next.
        gaps.append((60 - minutes[-1] + minutes[0]) * 60 - span)
    return min(gaps, default=_SECONDS_PER_DAY)


# ----------------------------------------------------------------------------------------------------
# Time zones


@dataclass(frozen=True, slots=True)
class _Transition:
    at: int  # first instant (UTC epoch seconds) with the new offset
    offset_before: int  # seconds east of UTC
    offset_after: int

    @property
    def repeated_seconds(self) -> int:
        """How long the repeated wall-clock interval of a fall-back is (0 for a spring-forward)."""
        return max(0, self.offset_before - self.offset_after)


@dataclass(frozen=True, slots=True)
class _YearOffsets:
    offset_at_start: int
    transitions: tuple[_Transition, ...]  # in the UTC year, in order
    transition_instants: tuple[int, ...]


# Files of a zoneinfo directory that are not IANA zones: `localtime` is the server's own zone (a schedule
# must not change meaning with the machine it runs on), `posixrules` and `Factory` are tooling artefacts, and
# `posix/`, `right/` are copies of the database with other leap-second rules.
_NOT_IANA_ZONES = frozenset({"localtime", "posixrules", "Factory"})
_NOT_IANA_PREFIXES = ("posix/", "right/")


@lru_cache(maxsize=1024)
def _load_zone(key: str) -> ZoneInfo:
    if key in _NOT_IANA_ZONES or key.startswith(_NOT_IANA_PREFIXES):
        raise ValidationError("schedule.timezone", f"'{key}' is not an IANA time zone name")
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError, OSError) as error:
        raise ValidationError(
            "schedule.timezone", f"unknown time zone '{key}' (expected an IANA name)"
        ) from error


def load_zone(key: str) -> ZoneInfo:
    """The IANA zone named `key` (a ValidationError naming `schedule.timezone` if there is none)."""
    return _load_zone(key)


def _offset_at(zone: ZoneInfo, instant: int) -> int:
    offset = datetime.fromtimestamp(instant, zone).utcoffset()
    return 0 if offset is None else offset // _ONE_SECOND


def _year_start(year: int) -> int:
    return (date(year, 1, 1).toordinal() - _EPOCH_ORDINAL) * _SECONDS_PER_DAY


@lru_cache(maxsize=8192)
def _year_offsets(zone_key: str, year: int) -> _YearOffsets:
    """The zone's offset at the start of the UTC year and its transitions during it, found by sampling."""
    zone = _load_zone(zone_key)
    start, end = _year_start(year), _year_start(year + 1)
    transitions: list[_Transition] = []
    probe = start - 1
    probe_offset = _offset_at(zone, probe)
    while probe < end - 1:
        next_probe = min(probe + _TRANSITION_PROBE_SECONDS, end - 1)
        next_offset = _offset_at(zone, next_probe)
        if next_offset != probe_offset:
            low, high = probe, next_probe  # offset(low) is the old one, offset(high) is not
            while high - low > 1:
                middle = (low + high) // 2
                if _offset_at(zone, middle) == probe_offset:
                    low = middle
                else:
                    high = middle
            transitions.append(_Transition(high, probe_offset, next_offset))
        probe, probe_offset = next_probe, next_offset
    return _YearOffsets(
        _offset_at(zone, start), tuple(transitions), tuple(transition.at for transition in transitions)
    )


def _year_of(instant: int) -> int:
    return date.fromordinal(_EPOCH_ORDINAL + instant // _SECONDS_PER_DAY).year


def _zone_state(zone_key: str, instant: int) -> tuple[int, _Transition | None, _Transition | None, int]:
    """(offset at `instant`, last transition at or before it, next one after it, end of its constant segment).

    With no transition in the rest of this year or the next, the segment ends at the start of the year after,
    a harmless artificial boundary that keeps every lookup bounded.
    """
    year = _year_of(instant)
    this_year = _year_offsets(zone_key, year)
    index = bisect_right(this_year.transition_instants, instant)
    if index:
        previous: _Transition | None = this_year.transitions[index - 1]
        offset = this_year.transitions[index - 1].offset_after
    else:
        earlier = _year_offsets(zone_key, year - 1).transitions
        previous = earlier[-1] if earlier else None
        offset = this_year.offset_at_start
    if index < len(this_year.transitions):
        following: _Transition | None = this_year.transitions[index]
    else:
        later = _year_offsets(zone_key, year + 1).transitions
        following = later[0] if later else None
    segment_end = following.at if following is not None else _year_start(year + 2)
    return offset, previous, following, segment_end


def _first_fire_at_or_after(
    spec: _CronSpec, zone_key: str, gap: str, repeat: str, bound: int
) -> tuple[int, DstNote | None] | None:
    """The first fire at or after `bound` (UTC epoch seconds) and its DST note, segment by segment."""
    fixed = spec.fixed_time
    instant_from = bound
    for _ in range(_MAX_SEGMENTS):
        offset, previous, following, segment_end = _zone_state(zone_key, instant_from)
        if (
            fixed
            and gap == DstGapPolicy.SHIFT
            and previous is not None
            and previous.at == instant_from
            and previous.offset_after > previous.offset_before
        ):
            # `instant_from` is the first instant after a spring-forward gap: fixed-time fires whose
            # wall-clock time was skipped run now, once.
            gap_wall = spec.next_wall(previous.at + previous.offset_before)
            if gap_wall is not None and gap_wall < previous.at + previous.offset_after:
                return instant_from, "shifted"
        # Wall-clock time at which the second pass of a fall-back just behind us ends.
        second_pass_end_wall = None if previous is None else previous.at + previous.offset_before
        wall = spec.next_wall(instant_from + offset)
        while wall is not None and wall - offset < segment_end:
            instant = wall - offset
            in_second_pass = previous is not None and instant < previous.at + previous.repeated_seconds
            in_first_pass = following is not None and instant >= following.at - following.repeated_seconds
            if not (in_first_pass or in_second_pass):
                return instant, None
            if not fixed:
                return instant, "repeated"  # wildcard jobs follow elapsed time: both passes fire
            if in_second_pass:
                if repeat != DstRepeatPolicy.FIRST:
                    return instant, "repeated"
                # It already ran in the first pass: resume where the repeated wall-clock interval ends.
                wall = None if second_pass_end_wall is None else spec.next_wall(second_pass_end_wall)
                continue
            if repeat != DstRepeatPolicy.LAST:
                return instant, "repeated"
            break  # every later time in this segment is in the first pass too: it runs in the second
        if wall is None:
            return None
        instant_from = segment_end
    return None


# ----------------------------------------------------------------------------------------------------
# Public API


def _require_aware(value: object, field: str) -> datetime:
    if not isinstance(value, datetime):
        raise ValidationError(field, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(field, "must be timezone-aware (naive datetimes are ambiguous)")
    return value


def _floor_seconds(moment: datetime) -> int:
    return (moment - _EPOCH) // _ONE_SECOND


def _ceil_seconds(moment: datetime) -> int:
    return -((_EPOCH - moment) // _ONE_SECOND)


def _to_datetime(instant: int) -> datetime:
    return _EPOCH + timedelta(seconds=instant)


def parse_schedule(
    expression: str,
    timezone: str = "UTC",
    *,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    jitter_seconds: int = 0,
    dst_gap: DstGapPolicy | str = DstGapPolicy.SHIFT,
    dst_repeat: DstRepeatPolicy | str = DstRepeatPolicy.FIRST,
    min_interval_seconds: int = DEFAULT_MIN_INTERVAL_SECONDS,
) -> Schedule:
    """Validate every part of a schedule and return it normalized (UTC bounds, enum policies).

    Raises ValidationError whose `field` is the offending `schedule.*` input.
    """
    if not isinstance(expression, str):
        raise _expression_error(f"must be a string, got {type(expression).__name__}")
    normalized = " ".join(expression.split())
    spec = _compile(normalized)
    shortest_gap = _shortest_gap_seconds(spec)
    if shortest_gap < min_interval_seconds:
        field_name, field_text = (
            ("second", spec.field_texts[0]) if spec.has_seconds else ("minute", spec.field_texts[1])
        )
        raise _expression_error(
            f"fires as often as every {shortest_gap} s ({field_name} field '{field_text}'); "
            f"the minimum interval is {min_interval_seconds} s"
        )

    if not isinstance(timezone, str) or not timezone:
        raise ValidationError("schedule.timezone", "must be a non-empty IANA time zone name")
    _load_zone(timezone)

    start_utc = None if start_at is None else _require_aware(start_at, "schedule.start_at").astimezone(UTC)
    end_utc = None if end_at is None else _require_aware(end_at, "schedule.end_at").astimezone(UTC)
    if start_utc is not None and end_utc is not None and end_utc < start_utc:
        raise ValidationError(
            "schedule.end_at", f"{end_utc.isoformat()} is before start_at {start_utc.isoformat()}"
        )

    if isinstance(jitter_seconds, bool) or not isinstance(jitter_seconds, int):
        raise ValidationError("schedule.jitter_seconds", "must be a whole number of seconds")
    if not 0 <= jitter_seconds <= MAX_JITTER_SECONDS:
        raise ValidationError(
            "schedule.jitter_seconds", f"{jitter_seconds} out of range 0-{MAX_JITTER_SECONDS}"
        )

    try:
        gap_policy = DstGapPolicy(dst_gap)
    except ValueError:
        raise ValidationError(
            "schedule.dst_gap", f"'{dst_gap}' is not one of {', '.join(DstGapPolicy)}"
        ) from None
    try:
        repeat_policy = DstRepeatPolicy(dst_repeat)
    except ValueError:
        raise ValidationError(
            "schedule.dst_repeat", f"'{dst_repeat}' is not one of {', '.join(DstRepeatPolicy)}"
        ) from None

    return Schedule(normalized, timezone, start_utc, end_utc, jitter_seconds, gap_policy, repeat_policy)


def _next_fire(schedule: Schedule, after: datetime) -> tuple[int, DstNote | None] | None:
    bound = _floor_seconds(_require_aware(after, "after")) + 1  # fires are whole seconds, strictly after
    return _next_fire_from(schedule, bound)


# Jobs share schedules and fire times: a burst is thousands of jobs on one expression, planned, audited and
# run on the same fires, and each search costs microseconds. Pure, so remembered for recent questions.
@lru_cache(maxsize=8192)
def _next_fire_from(schedule: Schedule, bound: int) -> tuple[int, DstNote | None] | None:
    """The first fire at or after epoch second `bound`."""
    if schedule.start_at is not None:
        bound = max(bound, _ceil_seconds(schedule.start_at))
    fire = _first_fire_at_or_after(
        _compile(schedule.expression), schedule.timezone, schedule.dst_gap, schedule.dst_repeat, bound
    )
    if fire is None or (schedule.end_at is not None and fire[0] > _floor_seconds(schedule.end_at)):
        return None
    return fire


def next_fire_after(schedule: Schedule, after: datetime) -> datetime | None:
    """The first fire strictly after `after` (any zone), in UTC; None once past `end_at`. No jitter."""
    fire = _next_fire(schedule, after)
    return None if fire is None else _to_datetime(fire[0])


# How far back `previous_fire_before` looks before it says there is none: as far as the forward search
# looks ahead (`_SEARCH_MONTHS`), so a schedule that fires every 28 years (`0 0 * 2 MON#5`) has a previous
# slot as surely as a next one. Never before 1970: no slot of a job is older.
_PREVIOUS_FIRE_HORIZON = timedelta(days=_SEARCH_MONTHS * 31)
_EARLIEST_SLOT = datetime(1970, 1, 1, tzinfo=UTC)
# Fires walked one by one before a search bisects instead (a window that holds many fires).
_PREVIOUS_FIRE_WALK = 4


def previous_fire_before(schedule: Schedule, before: datetime) -> datetime | None:
    """The last fire strictly before `before`, in UTC (a run's previous slot); None when there is none
    (before `start_at` or 1970, or within the forward search's horizon). Found with `next_fire_after`
    itself, so it agrees with it through DST gaps and repeats: a window that doubles back from `before`
    until it holds a fire, then a short walk, or a bisection when the window holds many."""
    return _previous_fire_before(schedule, _require_aware(before, "before").astimezone(UTC))


@lru_cache(maxsize=8192)  # as _next_fire_from: a burst's runs all ask for the same previous slot
def _previous_fire_before(schedule: Schedule, before: datetime) -> datetime | None:
    floor = _EARLIEST_SLOT if schedule.start_at is None else max(_EARLIEST_SLOT, schedule.start_at)
    window = timedelta(seconds=2 * shortest_interval_seconds(schedule))
    while True:
        start = max(before - window, floor - timedelta(seconds=1))
        fire = next_fire_after(schedule, start)
        if fire is not None and fire < before:
            return _last_fire_before(schedule, start, fire, before)
        if start < floor or window >= _PREVIOUS_FIRE_HORIZON:
            return None
        window = min(window * 8, _PREVIOUS_FIRE_HORIZON)


def _last_fire_before(schedule: Schedule, start: datetime, fire: datetime, before: datetime) -> datetime:
    """The last fire before `before`, given `fire`, the first after `start`, which is before it."""
    for _ in range(_PREVIOUS_FIRE_WALK):
        following = next_fire_after(schedule, fire)
        if following is None or following >= before:
            return fire
        fire = following
    # Many fires in the window: bisect on the time a search starts from (the first fire after a time only
    # moves later as the time does). `low` always has a fire after it and before `before`; `high` none.
    low, high = fire, before - timedelta(microseconds=1)
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        found = next_fire_after(schedule, middle)
        if found is not None and found < before:
            low = middle
        else:
            high = middle
    last = next_fire_after(schedule, low)
    assert last is not None and last < before  # the bisection's invariant
    return last


def is_fire_time(schedule: Schedule, instant: datetime) -> bool:
    """Whether `instant` is exactly one of the schedule's fires (policies and bounds included).

    Compared in UTC: arithmetic on a local time drops its `fold` (which pass of a repeated hour it is), and
    Python never finds a local time inside a repeated hour equal to a time in another zone.
    """
    moment = _require_aware(instant, "instant").astimezone(UTC)
    return next_fire_after(schedule, moment - timedelta(microseconds=1)) == moment


def jitter_offset(schedule: Schedule, job_id: str, fire_at: datetime) -> timedelta:
    """A deterministic delay in [0, jitter_seconds) whole seconds, spreading jobs that share a fire time.

    Derived from sha256(job_id + fire_at as UTC ISO 8601), so every retry of the same run gets the same delay.
    """
    if schedule.jitter_seconds <= 0:
        return timedelta(0)
    fire_utc = _require_aware(fire_at, "fire_at").astimezone(UTC)
    digest = hashlib.sha256(f"{job_id}{fire_utc.isoformat()}".encode()).digest()
    return timedelta(seconds=int.from_bytes(digest[:8], "big") % schedule.jitter_seconds)


def preview(schedule: Schedule, after: datetime, count: int) -> list[FireTime]:
    """The next `count` (1-100) fires after `after` with local times and DST notes; fewer if end_at comes."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PREVIEW_COUNT:
        raise ValidationError("count", f"must be a whole number 1-{MAX_PREVIEW_COUNT}, got {count!r}")
    zone = _load_zone(schedule.timezone)
    fires: list[FireTime] = []
    cursor = after
    while len(fires) < count:
        fire = _next_fire(schedule, cursor)
        if fire is None:
            break
        at = _to_datetime(fire[0])
        fires.append(FireTime(at, at.astimezone(zone), fire[1]))
        cursor = at
    return fires


# ----------------------------------------------------------------------------------------------------
# describe


_ORDINALS: Final = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}
_WEEKDAY_TITLES: Final = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MAX_LISTED_TIMES: Final = 6
_MAX_LISTED_DAYS: Final = 8


def _join(words: list[str], conjunction: str = "and") -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {conjunction} {words[-1]}"


def _nth(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _value_title(field: _Field, value: int) -> str:
    if field is _MONTH_FIELD:
        return calendar.month_name[value]
    if field is _DAY_OF_WEEK_FIELD:
        return _WEEKDAY_TITLES[value % 7]
    return str(value)


def _describe_items(field: _Field, text: str) -> str:
    """'1-5' -> 'Monday through Friday', '0,30' -> '0 and 30', '*/2' -> 'every 2nd'."""
    words = []
    for item in text.split(","):
        base, has_step, step = item.partition("/")
        if base == "*":
            words.append(f"every {_nth(int(step))}" if has_step else "every")
            continue
        low_text, has_range, high_text = base.partition("-")
        phrase = _value_title(field, _parse_value(field, low_text, item))
        if has_range:
            phrase += f" through {_value_title(field, _parse_value(field, high_text, item))}"
        words.append(f"every {_nth(int(step))} from {phrase}" if has_step else phrase)
    return _join(words)


def _describe_unit(field: _Field, text: str, unit: str) -> str:
    if text == "*":
        return f"every {unit}"
    if text.startswith("*/") and "," not in text:
        return f"every {text[2:]} {unit}s"
    plural = "s" if any(mark in text for mark in ",-/") else ""
    return f"at {unit}{plural} {_describe_items(field, text)}"


def _describe_time(spec: _CronSpec) -> str:
    second_text, minute_text, hour_text = spec.field_texts[:3]
    if len(spec.seconds) * len(spec.minutes) * len(spec.hours) <= _MAX_LISTED_TIMES:
        clock_format = "{:02d}:{:02d}:{:02d}" if spec.has_seconds else "{:02d}:{:02d}"
        times = [
            clock_format.format(hour, minute, second)
            for hour in spec.hours
            for minute in spec.minutes
            for second in spec.seconds
        ]
        return f"at {_join(times)}"
    parts = [_describe_unit(_SECOND_FIELD, second_text, "second")] if spec.has_seconds else []
    if not (spec.has_seconds and minute_text == "*"):
        parts.append(_describe_unit(_MINUTE_FIELD, minute_text, "minute"))
    if hour_text == "*" and parts[-1].startswith("at "):
        parts.append("of every hour")
    elif hour_text != "*":
        hours = _describe_unit(_HOUR_FIELD, hour_text, "hour")
        parts.append(hours if hours.startswith("every") else f"past {hours.removeprefix('at ')}")
    return " ".join(parts)


def _describe_month_days(dom_text: str) -> list[str]:
    """The day-of-month items in words, e.g. ['day 1 through 5', 'the last day'] (the caller adds 'of the
    month'). A step is spelled out as the days it gives: `*/10` is day 1, 11, 21 and 31."""
    words = []
    for item in dom_text.split(","):
        upper = item.upper()
        if upper == "L":
            words.append("the last day")
        elif upper == "LW":
            words.append("the last weekday")
        elif upper.endswith("W"):
            words.append(f"the weekday nearest day {item[:-1]}")
        elif "*" in item or "/" in item:
            days = _expand_token(_DAY_OF_MONTH_FIELD, item)
            if len(days) <= _MAX_LISTED_DAYS:
                words.append(f"day {_join([str(day) for day in days])}")
            else:
                step = item.partition("/")[2]
                words.append(f"every {_nth(int(step))} day from day {days[0]} through {days[-1]}")
        else:
            words.append(f"day {_describe_items(_DAY_OF_MONTH_FIELD, item)}")
    return words


def _describe_week_days(spec: _CronSpec) -> list[str]:
    """The day-of-week items in words, e.g. ['Monday through Friday', 'the last Friday of the month']. Items
    with `*` or a step are spelled out as the weekdays they give (`*/2` is Sunday, Tuesday, Thursday and
    Saturday; `*/7` is Sunday, as 0-7 in steps of 7 is 0 and 7)."""
    plain: list[str] = []
    special: list[str] = []
    for item in spec.field_texts[5].split(","):
        if match := _NTH_WEEKDAY_RE.fullmatch(item):
            weekday = _parse_value(_DAY_OF_WEEK_FIELD, match.group(1), item)
            special.append(
                f"the {_ORDINALS[int(match.group(2))]} {_WEEKDAY_TITLES[weekday % 7]} of the month"
            )
        elif match := _LAST_WEEKDAY_RE.fullmatch(item):
            weekday = _parse_value(_DAY_OF_WEEK_FIELD, match.group(1) or match.group(2), item)
            special.append(f"the last {_WEEKDAY_TITLES[weekday % 7]} of the month")
        else:
            plain.append(item)
    if any("*" in item or "/" in item for item in plain):
        named = [_WEEKDAY_TITLES[weekday] for weekday in sorted(spec.day_of_week.weekdays)]
    else:
        named = [_describe_items(_DAY_OF_WEEK_FIELD, item) for item in plain]
    return named + special


def _describe_days(spec: _CronSpec) -> str:
    """The day pattern in words under the matcher's day rule: when both day fields are restricted and neither
    starts with `*`, a day matches either ('on day 1 of the month or on Monday'); otherwise it must match both
    ('on day 1, 11, 21 and 31 of the month if it is a Monday'). A field that matches every day (`*`, `*/1`,
    `*,1`) restricts nothing and is not mentioned; under 'either' it makes every day match."""
    month_text = spec.field_texts[4]
    every_month_day = len(spec.day_of_month.days) == _DAY_OF_MONTH_FIELD.high
    every_week_day = len(spec.day_of_week.weekdays) == _DAY_OF_WEEK_FIELD.cycle_high + 1
    month_days: list[str] = []
    week_days: list[str] = []
    if not (spec.either_day_field and (every_month_day or every_week_day)):
        month_days = [] if every_month_day else _describe_month_days(spec.field_texts[3])
        week_days = [] if every_week_day else _describe_week_days(spec)
    if month_days and week_days:
        if spec.either_day_field:
            phrase = f"on {_join(month_days)} of the month or on {_join(week_days)}"
        else:
            article = "a " if week_days[0] in _WEEKDAY_TITLES else ""
            phrase = f"on {_join(month_days)} of the month if it is {article}{_join(week_days, 'or')}"
    elif month_days:
        phrase = f"on {_join(month_days)} of the month"
    elif week_days:
        phrase = f"on {_join(week_days)}"
    else:
        phrase = ""
    if month_text not in ("*", "?"):
        phrase = f"{phrase} in {_describe_items(_MONTH_FIELD, month_text)}".strip()
    return phrase


def describe(expression: str) -> str:
    """A short English description, e.g. 'at 09:30 on Monday through Friday'.

    Best effort: raises ValidationError only for an invalid expression; an unusual valid one that the phrasing
    does not cover falls back to quoting it.
    """
    normalized = " ".join(expression.split())
    spec = _compile(normalized)
    try:
        text = " ".join(part for part in (_describe_time(spec), _describe_days(spec)) if part)
    except (ValidationError, KeyError, IndexError, ValueError):
        return f"cron '{normalized}'"
    return text.replace("every every", "every")


def describe_schedule(schedule: Schedule) -> str:
    """The schedule in words with its day pattern and zone, e.g. 'every day at 02:30, Europe/Berlin'."""
    text = describe(schedule.expression)
    if text.startswith("at ") and not _describe_days(_compile(" ".join(schedule.expression.split()))):
        text = f"every day {text}"
    return f"{text}, {schedule.timezone}"
