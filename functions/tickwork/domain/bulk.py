"""Groups and bulk actions: a job belongs to one group (`default` unless named); a bulk action pauses,
resumes or retries the failed runs of every job a selector matches (a group, tags, or both), one job at a
time, each write its own revision with the action's note (docs/api.md, "Groups and bulk actions").

A bulk action is a record that reports its progress: a request creates it (idempotently, under its
Idempotency-Key), and whoever holds its lease works through the owner's jobs in id order from its cursor,
saving the cursor and the counts after each page, so a worker that dies leaves the next one where it
stopped. A job already as the action wants it is counted `unchanged`: the action is idempotent too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from tickwork.domain.errors import ValidationError
from tickwork.domain.models import Job

DEFAULT_GROUP = "default"
GROUP_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# A bulk action's worker holds it this long past its own deadline: another worker takes it over after.
LEASE = timedelta(seconds=60)
# Failures kept on the record (the rest are counted): enough to say what went wrong.
MAX_FAILURES_KEPT = 20
# A maintenance window resumes at most this far ahead.
MAX_MAINTENANCE = timedelta(days=30)
# A retry window spans at most this long (the failed-runs index is read across it).
MAX_RETRY_WINDOW = timedelta(days=31)


class BulkKind(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    RETRY_FAILED = "retry_failed"


class BulkState(StrEnum):
    SCHEDULED = "scheduled"  # not due yet (a maintenance window's resume)
    RUNNING = "running"
    DONE = "done"


def check_group(name: str, field_name: str = "group") -> str:
    if not GROUP_NAME.match(name):
        raise ValidationError(
            field_name, "must be 1-64 of a-z, 0-9, '-' and '_', starting with a letter or digit"
        )
    return name


@dataclass(frozen=True, slots=True)
class Selector:
    """Which of the owner's jobs an action touches: those in `group` (if given) carrying every tag."""

    group: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.group is None and not self.tags:
            raise ValidationError("group", "name a group, tags, or both: a bulk action never means every job")
        if self.group is not None:
            check_group(self.group)

    def matches(self, job: Job) -> bool:
        in_group = self.group is None or job.group == self.group
        return in_group and all(job.tags.get(key) == value for key, value in self.tags.items())


@dataclass(frozen=True, slots=True)
class Progress:
    """What an action has done so far. `scanned`: the owner's jobs looked at; `matched`: those the selector
    takes; each matched one is `changed`, `unchanged` (already as wanted) or `failed`."""

    scanned: int = 0
    matched: int = 0
    changed: int = 0
    unchanged: int = 0
    failed: int = 0
    failures: tuple[str, ...] = ()  # "<job or run id>: <why>", the first MAX_FAILURES_KEPT

    def add(self, other: Progress) -> Progress:
        kept = (*self.failures, *other.failures)[:MAX_FAILURES_KEPT]
        return Progress(
            self.scanned + other.scanned,
            self.matched + other.matched,
            self.changed + other.changed,
            self.unchanged + other.unchanged,
            self.failed + other.failed,
            kept,
        )


@dataclass(frozen=True, slots=True)
class BulkAction:
    action_id: str
    owner: str
    kind: BulkKind
    selector: Selector
    note: str
    actor: str
    created_at: datetime
    not_before: datetime  # when it may start (now; a maintenance window's resume: its end)
    state: BulkState = BulkState.RUNNING
    progress: Progress = field(default_factory=Progress)
    cursor: str | None = None  # the last job id (or the failed-runs page) done: work goes on after it
    fingerprint: str = ""  # of the request: the same Idempotency-Key with another request is a conflict
    resume_at: datetime | None = None  # pause: the maintenance window's end (a resume action is due then)
    resume_action: str | None = None  # pause: that resume action's id
    maintenance_of: str | None = None  # resume: the pause whose jobs it resumes (only those it paused)
    runs_from: datetime | None = None  # retry_failed: the window of the times the runs failed
    runs_to: datetime | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    finished_at: datetime | None = None
    version: int = 1

    def leased(self, worker: str, until: datetime) -> BulkAction:
        return replace(self, lease_owner=worker, lease_expires_at=until, version=self.version + 1)

    def released(self) -> BulkAction:
        """Its worker gives it up (out of budget): the next pass takes it at once."""
        return replace(self, lease_owner=None, lease_expires_at=None, version=self.version + 1)

    def deferred(self, until: datetime) -> BulkAction:
        return replace(self, not_before=until, version=self.version + 1)

    def moved_on(self, progress: Progress, cursor: str | None, done: bool, now: datetime) -> BulkAction:
        """The action after one page of work: its counts and cursor, finished when `done`."""
        return replace(
            self,
            progress=self.progress.add(progress),
            cursor=cursor,
            state=BulkState.DONE if done else self.state,
            finished_at=now if done else None,
            lease_owner=None if done else self.lease_owner,
            lease_expires_at=None if done else self.lease_expires_at,
            version=self.version + 1,
        )

    def takeable(self, now: datetime) -> bool:
        """Due, not finished, and no live lease on it."""
        free = self.lease_expires_at is None or self.lease_expires_at <= now
        return self.state is not BulkState.DONE and self.not_before <= now and free


MAINTENANCE = "maintenance window "
# A finished action is kept this long (TTL), then forgotten: the jobs' revisions keep what it did.
KEEP_DONE = timedelta(days=30)


def maintenance_reason(action_id: str, resume_at: datetime) -> str:
    """The paused reason a maintenance window's pause leaves on each job it pauses: its resume takes back
    only those (a job paused for another reason stays paused)."""
    return f"{MAINTENANCE}{action_id} until {resume_at.isoformat().replace('+00:00', 'Z')}"


def paused_by(action_id: str, paused_reason: str | None) -> bool:
    """The job was paused by the maintenance window whose pause is `action_id` (and not resumed since)."""
    return paused_reason is not None and paused_reason.startswith(f"{MAINTENANCE}{action_id} ")


def is_maintenance(paused_reason: str | None) -> bool:
    return paused_reason is not None and paused_reason.startswith(MAINTENANCE)


def bulk_action_id(owner: str, key: str) -> str:
    """The action an Idempotency-Key names: the same (owner, key) always names the same action."""
    return "bulk_" + hashlib.sha256(f"{owner}\0{key}".encode()).hexdigest()[:20]


def check_window(kind: BulkKind, now: datetime, resume_at: datetime | None,
                 runs_from: datetime | None, runs_to: datetime | None) -> None:  # fmt: skip
    """The times an action of `kind` takes: a maintenance end ahead (pause only), a retry window."""
    if resume_at is not None:
        if kind is not BulkKind.PAUSE:
            raise ValidationError("resume_at", "only a pause takes a maintenance window's end")
        if not now < resume_at <= now + MAX_MAINTENANCE:
            raise ValidationError("resume_at", f"must be ahead, at most {MAX_MAINTENANCE.days} days")
    if kind is BulkKind.RETRY_FAILED:
        if runs_from is None or runs_to is None:
            raise ValidationError("from", "a retry of failed runs needs from and to")
        if not runs_from <= runs_to <= runs_from + MAX_RETRY_WINDOW:
            raise ValidationError("to", f"must be after from, at most {MAX_RETRY_WINDOW.days} days later")
    elif runs_from is not None or runs_to is not None:
        raise ValidationError("from", "only retry_failed takes a window of runs")
