"""Bulk actions (domain/bulk.py): pause, resume, or retry the failed runs of every job a selector matches,
one job at a time through the same use cases a single write goes through (each its own revision, with the
action's note and actor), reporting progress on the action's record as it goes.

A request creates the action and works on it for a short slice; the watcher's passes (the minutely
schedule on AWS, every round of `tickwork local`'s watcher) take over whatever is left, one worker at a time
(a lease on the record), from the cursor the last one saved. A maintenance window is a pause whose resume
is an action of its own, due at the window's end; it resumes only the jobs that pause paused."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from tickwork.domain.bulk import (
    LEASE,
    BulkAction,
    BulkKind,
    BulkState,
    Progress,
    Selector,
    bulk_action_id,
    check_window,
    maintenance_reason,
    paused_by,
)
from tickwork.domain.clock import Clock
from tickwork.domain.errors import (
    ConflictError,
    NotFoundError,
    TickworkError,
    TransientStoreError,
    VersionMismatchError,
)
from tickwork.domain.models import Job, JobState
from tickwork.domain.revisions import MAX_NOTE_CHARS, Action, checked_note
from tickwork.domain.timekeys import truncate_ms
from tickwork.services.jobs import Author, JobService
from tickwork.services.ports import BulkStore, FailedRunReader, ManagedJobStore
from tickwork.services.requests import RunRequests

logger = logging.getLogger(__name__)

PAGE = 100  # jobs (or failed runs) read at a time; progress is saved after each page
DUE_AT_ONCE = 10  # actions a worker pass looks at
MIN_SHARE_SECONDS = 2.0  # each due action's share of a pass, at least
LISTED = 100  # GET /bulk-actions answers this many, newest first
# A maintenance window's resume whose pause is still going looks again this much later.
PAUSE_WAIT = timedelta(seconds=30)


class _Stopped(Exception):
    """A page stopped before a job (or a run) a retryable error met: what it did before, and where the
    next pass starts."""

    def __init__(self, progress: Progress, cursor: str | None) -> None:
        super().__init__("stopped")
        self.progress = progress
        self.cursor = cursor


@dataclass(frozen=True, slots=True)
class BulkRequest:
    kind: BulkKind
    selector: Selector
    note: str
    resume_at: datetime | None = None
    runs_from: datetime | None = None
    runs_to: datetime | None = None

    def fingerprint(self) -> str:
        def instant(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        body = {
            "kind": str(self.kind),
            "group": self.selector.group,
            "tags": dict(sorted(self.selector.tags.items())),
            "note": self.note,
            "resume_at": instant(self.resume_at),
            "from": instant(self.runs_from),
            "to": instant(self.runs_to),
        }
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Started:
    action: BulkAction
    replayed: bool


class BulkService:
    def __init__(
        self,
        actions: BulkStore,
        jobs: JobService,
        store: ManagedJobStore,
        failed: FailedRunReader,
        requests: RunRequests,
        clock: Clock,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._actions, self._jobs, self._store, self._failed = actions, jobs, store, failed
        self._requests, self._clock, self._monotonic = requests, clock, monotonic

    # --- the API's side ------------------------------------------------------------------------------------

    def start(
        self, owner: str, actor: str, request: BulkRequest, key: str | None, new_id: Callable[[], str]
    ) -> Started:
        """Create the action (and a maintenance window's resume); the same Idempotency-Key with the same
        request answers the action it created (ConflictError with another request)."""
        # Every bulk action says why, as a pause does (each job's revision carries the note).
        note = checked_note(Action.PAUSE, request.note) or ""
        # Stored instants have millisecond precision: the window's end is cut to it before anything (the
        # jobs' paused reason among them) is written with it.
        resume_at = None if request.resume_at is None else truncate_ms(request.resume_at)
        request = replace(request, note=note, resume_at=resume_at)
        action_id = bulk_action_id(owner, key) if key is not None else f"bulk_{new_id()}"
        fingerprint = request.fingerprint()
        existing = self._actions.get_action(owner, action_id)
        if existing is not None:  # (a replay is answered even once its window is past)
            return Started(self._replayed(existing, fingerprint), replayed=True)
        now = self._clock.now()
        check_window(request.kind, now, request.resume_at, request.runs_from, request.runs_to)
        action = BulkAction(
            action_id=action_id,
            owner=owner,
            kind=request.kind,
            selector=request.selector,
            note=note,
            actor=actor,
            created_at=now,
            not_before=now,
            fingerprint=fingerprint,
            resume_at=resume_at,
            runs_from=request.runs_from,
            runs_to=request.runs_to,
        )
        created = [action]
        if resume_at is not None:
            end = f"end of maintenance window {action_id}: "
            resume = replace(
                action,
                action_id=f"{action_id}_resume",
                kind=BulkKind.RESUME,
                not_before=resume_at,
                state=BulkState.SCHEDULED,
                resume_at=None,
                maintenance_of=action_id,
                note=(end + note)[:MAX_NOTE_CHARS],
            )
            action = replace(action, resume_action=resume.action_id)
            created = [action, resume]
        try:
            self._actions.create_actions(created)
        except ConflictError:  # the same key, at the same moment: the other request created it
            found = self._actions.get_action(owner, action_id)
            if found is None:
                raise
            return Started(self._replayed(found, fingerprint), replayed=True)
        return Started(action, replayed=False)

    @staticmethod
    def _replayed(existing: BulkAction, fingerprint: str) -> BulkAction:
        if existing.fingerprint != fingerprint:
            raise ConflictError(
                f"Idempotency-Key already started bulk action {existing.action_id} with another request"
            )
        return existing

    def get(self, owner: str, action_id: str) -> BulkAction:
        found = self._actions.get_action(owner, action_id)
        if found is None:
            raise NotFoundError(f"bulk action {action_id} not found")
        return found

    def list(self, owner: str) -> list[BulkAction]:
        """The owner's newest actions (finished ones expire 30 days after they end)."""
        found = self._actions.list_actions(owner)
        return sorted(found, key=lambda a: (a.created_at, a.action_id), reverse=True)[:LISTED]

    # --- the worker's side ---------------------------------------------------------------------------------

    def work_due(self, worker: str, budget_seconds: float) -> int:
        """Work on the actions that are due, within `budget_seconds`, each a share of it (one large action
        must not hold every other owner's back); how many jobs or runs were changed."""
        started, done = self._monotonic(), 0
        now = self._clock.now()
        due = [a for a in self._actions.due_actions(now, DUE_AT_ONCE) if a.takeable(now)]
        for index, action in enumerate(due):
            left = budget_seconds - (self._monotonic() - started)
            if left <= 0:
                break
            done += self.work(action, worker, max(MIN_SHARE_SECONDS, left / (len(due) - index)))
        return done

    def work(self, action: BulkAction, worker: str, budget_seconds: float) -> int:
        """Take the action's lease and work through it, a page at a time, until it is done or the budget is
        spent (the cursor, the counts and a renewed lease saved after each page); 0 if another worker holds
        it. A retryable error stops the pass before the job it met: the next pass starts there."""
        now = self._clock.now()
        if not action.takeable(now):
            return 0
        if action.maintenance_of is not None and not self._pause_done(action.owner, action.maintenance_of):
            # The window's end came while its pause is still going: resume once it is done, or jobs it
            # pauses after this would stay paused.
            with contextlib.suppress(VersionMismatchError):  # another worker deferred it first
                self._actions.save_action(action, action.deferred(now + PAUSE_WAIT))
            return 0
        started = self._monotonic()
        held = replace(action, state=BulkState.RUNNING).leased(worker, self._lease_end(budget_seconds))
        try:
            self._actions.save_action(action, held)
        except VersionMismatchError:
            return 0  # another worker took it first
        done = 0
        while True:
            left = budget_seconds - (self._monotonic() - started)
            if left <= 0:
                break
            try:
                progress, cursor, finished = self._page(held)
                stopped = False
            except _Stopped as stop:
                progress, cursor, finished, stopped = stop.progress, stop.cursor, False, True
            done += progress.changed
            moved = held.moved_on(progress, cursor, finished, self._clock.now())
            if not finished:
                moved = replace(moved, lease_expires_at=self._lease_end(left))
            try:
                self._actions.save_action(held, moved)
            except VersionMismatchError:
                logger.warning("bulk action %s was taken over by another worker", held.action_id)
                return done
            held = moved
            if finished:
                logger.info("bulk action %s done: %s", held.action_id, held.progress)
                return done
            if stopped:
                break
        # Out of budget (or stopped by a retryable error): the lease is given up, so the next pass takes it.
        try:
            self._actions.save_action(held, held.released())
        except VersionMismatchError:
            logger.info("bulk action %s: taken over while giving up its lease", held.action_id)
        return done

    def _lease_end(self, budget_seconds: float) -> datetime:
        return self._clock.now() + timedelta(seconds=budget_seconds) + LEASE

    def _pause_done(self, owner: str, pause_id: str) -> bool:
        pause = self._actions.get_action(owner, pause_id)
        return pause is None or pause.state is BulkState.DONE

    def _page(self, action: BulkAction) -> tuple[Progress, str | None, bool]:
        if action.kind is BulkKind.RETRY_FAILED:
            return self._retry_page(action)
        over = action.resume_at is not None and self._clock.now() >= action.resume_at
        if action.kind is BulkKind.PAUSE and over:
            return Progress(), action.cursor, True  # its window is over: pausing more would outlast it
        ids, more = self._store.owner_job_ids(action.owner, limit=PAGE, after_job_id=action.cursor)
        found = self._store.get_jobs(ids) if ids else {}
        progress, last = Progress(), action.cursor
        for job_id in ids:
            job = found.get(job_id)
            if job is not None and job.owner == action.owner and self._selects(action, job):
                try:
                    outcome = self._one_job(action, job)
                except (TransientStoreError, VersionMismatchError) as error:
                    # Throttled past the store's retries, or the job moved under the write: the next pass
                    # starts again at this job (a permanent failure would leave it as it was for good).
                    logger.warning("bulk action %s: job %s: %s; again later", action.action_id, job_id, error)
                    raise _Stopped(progress, last) from error
                progress = progress.add(outcome)
            progress, last = progress.add(Progress(scanned=1)), job_id
        return progress, (ids[-1] if ids else action.cursor), not more or not ids

    @staticmethod
    def _selects(action: BulkAction, job: Job) -> bool:
        """A maintenance window's resume takes back exactly the jobs its pause paused (whatever their group
        or tags became since); every other action, the jobs its selector takes."""
        if action.maintenance_of is not None:
            return paused_by(action.maintenance_of, job.paused_reason)
        return action.selector.matches(job)

    def _one_job(self, action: BulkAction, job: Job) -> Progress:
        """One job's write (at the version read: a job changed since is read again by the next pass)."""
        by = Author(action.actor, action.note)
        try:
            if action.kind is BulkKind.PAUSE:
                if job.state is JobState.PAUSED:
                    return Progress(matched=1, unchanged=1)
                reason = (
                    None
                    if action.resume_at is None
                    else maintenance_reason(action.action_id, action.resume_at)
                )
                self._jobs.pause(action.owner, job.job_id, job.version, reason=reason, by=by)
                return Progress(matched=1, changed=1)
            if job.state is JobState.ACTIVE:
                return Progress(matched=1, unchanged=1)
            self._jobs.resume(action.owner, job.job_id, job.version, by=by)
            return Progress(matched=1, changed=1)
        except NotFoundError:
            return Progress(matched=1, unchanged=1)  # deleted meanwhile
        except (TransientStoreError, VersionMismatchError):
            raise
        except (TickworkError, ValueError) as error:
            logger.warning("bulk action %s: job %s: %s", action.action_id, job.job_id, error)
            return Progress(matched=1, failed=1, failures=(f"{job.job_id}: {error}",))

    def _retry_page(self, action: BulkAction) -> tuple[Progress, str | None, bool]:
        runs, after = self._failed.failed_runs(
            action.owner, since=action.runs_from, before=action.cursor, limit=PAGE
        )
        jobs: Mapping[str, Job] = self._store.get_jobs(sorted({run.job_id for run in runs})) if runs else {}
        progress = Progress(scanned=len(runs))
        for run in runs:
            job = jobs.get(run.job_id)
            finished = run.finished_at
            in_window = finished is not None and action.runs_to is not None and finished <= action.runs_to
            if job is None or job.owner != action.owner or not in_window or not action.selector.matches(job):
                continue
            try:
                self._requests.retry(action.owner, run.job_id, run.run_id)
                progress = progress.add(Progress(matched=1, changed=1))
            except (TransientStoreError, VersionMismatchError) as error:
                # This page is read again next pass (the runs retried meanwhile have left the index).
                logger.warning("bulk action %s: run %s: %s; again later", action.action_id, run.run_id, error)
                raise _Stopped(progress, action.cursor) from error
            except TickworkError as error:
                failure = f"{run.run_id}: {error}"
                progress = progress.add(Progress(matched=1, failed=1, failures=(failure,)))
        return progress, (after if after is not None else action.cursor), after is None
