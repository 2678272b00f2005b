"""Run context in a target's payload (pure): a target whose config says `"templated": true` has its
`{{ name }}` placeholders filled with the run's context when each attempt calls it (docs/targets.md, "Run
context in the payload").

Opt-in, so a payload written before templates existed (one holding a literal `{{`) is sent as it was. The
names are a closed list, checked when the job is written: a placeholder that is not one is a 422 naming the
field, never a run that fails later; so is a field that would break a rule of its kind once filled in (at
its longest, or with an empty slot). Every value is drawn from [A-Za-z0-9:.~_-], so it can be put inside a
JSON string, a header or a command's argument without escaping.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from tickwork.domain.errors import ValidationError
from tickwork.domain.timekeys import format_instant

TEMPLATED_KEY = "templated"

# The run's context: what each name is (the docs' table is written from this).
NAMES: Mapping[str, str] = {
    "scheduled_for": "the run's slot: the fire time it was planned for (UTC; not the wall clock)",
    "previous_slot": "the schedule's fire before this run's slot ('' when there is none)",
    "next_slot": "the schedule's fire after this run's slot ('' once the schedule has ended)",
    "attempt": "this attempt's number, from 1",
    "run_id": "the run's id (the idempotency key)",
    "job_id": "the job's id",
    "revision": "the job's revision that planned the run",
    "trigger": "why the run exists: schedule, catch-up, manual or backfill",
}
TIME_NAMES = frozenset({"scheduled_for", "previous_slot", "next_slot"})
# A time name may be followed by a format: nothing (ISO 8601, UTC, `2026-12-05T04:00:00Z`), `.epoch` (Unix
# seconds) or `.date` (the UTC date, `2026-12-05`). Whole seconds: a run on request is keyed below the second
# (run ids do that), its slot is the second it was asked for.
TIME_FORMATS: Mapping[str, Callable[[datetime], str]] = {
    "": lambda moment: format_instant(moment.replace(microsecond=0)),
    "epoch": lambda moment: str(int(moment.timestamp())),
    "date": lambda moment: format_instant(moment)[:10],
}
_OPEN = "{{"
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)(?:\.([a-z]+))?\s*\}\}")

# Which parts of each kind's config are templated: strings, or every string inside a JSON value or list.
TEMPLATED_FIELDS: Mapping[str, tuple[str, ...]] = {
    "http": ("body", "headers"),
    "sqs": ("message",),
    "sns": ("message", "subject"),
    "eventbridge": ("detail",),
    "lambda": ("payload",),
    "stepfunctions": ("input",),
    "ecs": ("command", "environment"),
}


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a templated payload can name, for one attempt of one run."""

    run_id: str
    job_id: str
    scheduled_for: datetime
    attempt: int
    revision: int
    trigger: str
    previous_slot: datetime | None
    next_slot: datetime | None

    def value(self, name: str, form: str) -> str:
        if name not in NAMES or not _takes(name, form):
            raise ValidationError("target.config", f"{name}{'.' if form else ''}{form} is not a placeholder")
        value = getattr(self, name)
        if name in TIME_NAMES:
            return "" if value is None else TIME_FORMATS[form](value)
        return str(value)


_LONGEST_JOB_ID = "job_" + "f" * 20  # services/jobs.py makes every job id 24 characters
_LONGEST_TIME = datetime(2099, 12, 31, 23, 59, 59, tzinfo=UTC)
# What a templated field is checked with when the job is written, besides its placeholders: filled in with
# every value at its longest, and with no slots (empty), it must still keep its kind's rules (a subject's
# 100 characters, a message that may not be empty, the payload limit), or every run of it would fail.
LONGEST = RunContext(
    run_id=f"{_LONGEST_JOB_ID}:20991231T235959Z~999999",
    job_id=_LONGEST_JOB_ID,
    scheduled_for=_LONGEST_TIME,
    attempt=999,
    revision=9_999_999_999,
    trigger="catch-up",
    previous_slot=_LONGEST_TIME,
    next_slot=_LONGEST_TIME,
)
WITHOUT_SLOTS = replace(LONGEST, previous_slot=None, next_slot=None)


def _takes(name: str, form: str) -> bool:
    """Whether name `name` takes format `form` ("": none, which every name takes)."""
    return not form or (name in TIME_NAMES and form in TIME_FORMATS)


def check_templates(kind: str, config: Mapping[str, Any]) -> None:
    """Every `{{` in the kind's templated fields begins a placeholder of a known name and format, or
    ValidationError naming the field."""
    for key in TEMPLATED_FIELDS[kind]:
        if key in config:
            _visit(config[key], f"target.config.{key}", _check_text)


def render(kind: str, config: Mapping[str, Any], context: RunContext) -> dict[str, Any]:
    """The config with every placeholder in its templated fields replaced by the context's value."""
    rendered = dict(config)
    for key in TEMPLATED_FIELDS[kind]:
        if key in rendered:
            rendered[key] = _visit(rendered[key], key, lambda text, _: _fill(text, context))
    return rendered


def _visit(value: Any, field: str, text: Callable[[str, str], Any]) -> Any:
    """`value` with `text(string, field)` applied to every string in it (keys are left alone)."""
    if isinstance(value, str):
        return text(value, field)
    if isinstance(value, Mapping):
        return {key: _visit(item, f"{field}.{key}", text) for key, item in value.items()}
    if isinstance(value, list):
        return [_visit(item, f"{field}[{index}]", text) for index, item in enumerate(value)]
    return value


def _check_text(text: str, field: str) -> str:
    position = text.find(_OPEN)
    while position != -1:
        found = _PLACEHOLDER.match(text, position)
        if found is None:
            raise ValidationError(
                field,
                f"{text[position : position + 30]!r} is not a placeholder: write {{{{ name }}}} with a name "
                f"of {', '.join(NAMES)} (a templated payload cannot hold a literal '{{{{')",
            )
        name, form = found.group(1), found.group(2) or ""
        if name not in NAMES:
            raise ValidationError(
                field, f"unknown placeholder {found.group(0)!r}: the names are {', '.join(NAMES)}"
            )
        if not _takes(name, form):
            raise ValidationError(
                field,
                f"unknown format in {found.group(0)!r}: {', '.join(sorted(TIME_NAMES))} take .epoch or "
                ".date; the other names take none",
            )
        position = text.find(_OPEN, found.end())
    return text


def _fill(text: str, context: RunContext) -> str:
    return _PLACEHOLDER.sub(lambda found: context.value(found.group(1), found.group(2) or ""), text)
