"""Revisions and the audit log (pure): every write of a job's definition is a revision (who, when, what
changed, why), kept with the job's history, and an entry in its owner's audit log.

A revision's number is the job's `version` after the write, so a run's `job_version` names the revision
that planned it. A delete is the revision after the last one. The definition kept is the job as written
(the codec's item without what the ticker and the executors move: next fire, due keys, slots), so a diff
compares what a person set, and a rollback writes it back as a new revision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from tickwork.domain.errors import ValidationError

# How long an owner's audit entries are kept (TTL): longer than the longest run history (365 days). A job's
# revisions themselves have no TTL: the one a job is at, or that planned a run still kept, stays readable.
AUDIT_RETENTION = timedelta(days=400)
MAX_NOTE_CHARS = 1000


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    PAUSE = "pause"
    RESUME = "resume"
    DELETE = "delete"
    ROLLBACK = "rollback"
    AUTO_PAUSE = "auto_pause"  # Tickwork paused it (failures in a row: domain/alert_rules.py)


# Writes whose note is required: they stop a job's runs, or undo its history, and someone will ask why.
NOTE_REQUIRED = frozenset({Action.PAUSE, Action.DELETE, Action.ROLLBACK})


@dataclass(frozen=True, slots=True)
class Revision:
    job_id: str
    revision: int
    owner: str
    actor: str  # who wrote it: the caller's identity, an operator's, or "tickwork"
    at: datetime
    action: Action
    note: str | None
    definition: Mapping[str, Any]  # the job as written ({} for a delete)
    changed: tuple[str, ...]  # the definition's fields that differ from the revision before

    @property
    def expires_at(self) -> datetime:
        return self.at + AUDIT_RETENTION


def checked_note(action: Action, note: str | None) -> str | None:
    """The note, stripped; ValidationError when the action needs one and it is missing, or it is too long."""
    text = (note or "").strip()
    if action in NOTE_REQUIRED and not text:
        raise ValidationError("note", f"is required to {action.replace('_', ' ')} a job: say why")
    if len(text) > MAX_NOTE_CHARS:
        raise ValidationError("note", f"is {len(text)} characters; at most {MAX_NOTE_CHARS}")
    return text or None


def changed_fields(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, ...]:
    """The fields that differ, sorted: a field of a nested object as `parent.field` (one level deep, the
    depth a person edits: `schedule.timezone`, `target.config`)."""
    changed: list[str] = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            changed.extend(
                f"{key}.{inner}" for inner in sorted(set(old) | set(new)) if old.get(inner) != new.get(inner)
            )
        else:
            changed.append(key)
    return tuple(changed)


@dataclass(frozen=True, slots=True)
class FieldChange:
    field: str
    before: Any
    after: Any


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[FieldChange]:
    """What changed between two definitions, field by field (as `changed_fields` names them)."""
    changes = []
    for field in changed_fields(before, after):
        parent, _, inner = field.partition(".")
        old, new = before.get(parent), after.get(parent)
        if inner:
            old = old.get(inner) if isinstance(old, Mapping) else None
            new = new.get(inner) if isinstance(new, Mapping) else None
        changes.append(FieldChange(field, old, new))
    return changes


@dataclass(frozen=True, slots=True)
class Authored:
    """Who writes a job and why: what the store records as the write's revision, in the write's own
    transaction (a job write without its revision, or a revision of a write that lost, cannot happen)."""

    actor: str
    action: Action
    at: datetime
    note: str | None = None

    def revision(
        self, job_id: str, owner: str, number: int, before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> Revision:
        """The revision of a write from definition `before` to `after` ({}: none, a create or a delete)."""
        return Revision(
            job_id=job_id,
            revision=number,
            owner=owner,
            actor=self.actor,
            at=self.at,
            action=self.action,
            note=self.note,
            definition=dict(after),
            changed=changed_fields(before, after),
        )
