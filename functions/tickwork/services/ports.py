"""Ports: what the services need from storage and dispatch. Adapters implement them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol

from tickwork.domain.alert_rules import AlertRules, Channel
from tickwork.domain.alerts import EventKind, JobEvent, SeenChange
from tickwork.domain.audit import AuditedJob, RecordedRuns
from tickwork.domain.bulk import BulkAction
from tickwork.domain.calendars import Calendar
from tickwork.domain.dispatch import DeadLetter, RunMessage
from tickwork.domain.execution import Claim
from tickwork.domain.models import Job, JobView, Run, RunState
from tickwork.domain.notify import ChannelHealth, DeadlineTimer, Message, Window
from tickwork.domain.planning import JobPlan
from tickwork.domain.prescale import MappingState
from tickwork.domain.requests import RunRequest
from tickwork.domain.revisions import Authored, Revision
from tickwork.domain.slots import Pool, SlotHold
from tickwork.domain.targets import TargetResult


class PlanStore(Protocol):
    """Storage as the ticker sees it."""

    def query_due(self, due_key: str, through: datetime) -> Sequence[Job]:
        """Active jobs in one `due` partition whose next fire is at or before `through`, read whole (so a
        retry repeats the whole read). Eventually consistent: a job written a moment ago may be missing,
        or stale."""
        ...

    def get_job(self, job_id: str) -> Job | None:
        """Strongly consistent read of one job."""
        ...

    def commit_plan(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        """THE commit point: atomically create `runs` (each must not exist) and move the job's next fire
        from `job.next_fire_at` to `next_fire_at` (job must still be active at `job.version` and
        `job.next_fire_at`). Raises PlanConflictError naming the failed conditions, or
        TransientStoreError (throttling, transaction conflict) which the caller retries."""
        ...

    def commit_plans(self, plans: Sequence[JobPlan]) -> list[Exception | None]:
        """`commit_plan` for each of a round's jobs, in order, each all or nothing on its own. Returns, in
        order, None where a job's plan committed, else the error its own `commit_plan` would have raised,
        for the caller to handle as that call's. An engine whose transactions are cheap to widen (SQLite)
        writes them in one, with one commit for the round. If it raises, some may have committed: doing
        each again then meets a conflict (the job moved on), never a second run."""
        ...

    def existing_run_times(self, job_id: str, scheduled_fors: Sequence[datetime]) -> set[datetime]:
        """Which of these fires of a job already have a run record (strongly consistent)."""
        ...

    def get_watermark(self, shard: int) -> datetime | None:
        """The instant through which the shard is fully planned, or None for a new shard."""
        ...

    def set_watermark(self, shard: int, planned_through: datetime) -> None:
        """Move the watermark forward (never back: a slower ticker must not rewind a faster one)."""
        ...


class JobStore(Protocol):
    """Storage as job management sees it."""

    def get_job(self, job_id: str) -> Job | None: ...

    def create_job(self, job: Job, runs: Sequence[Run], authored: Authored | None = None) -> None:
        """Create the job (must not exist) together with runs it plans for itself, and the write's revision
        when `authored`. ConflictError if exists."""
        ...

    def replace_job(
        self,
        expected: Job,
        updated: Job,
        runs: Sequence[Run],
        refreshed: Sequence[tuple[Run, JobView]] = (),
        authored: Authored | None = None,
    ) -> None:
        """Write `updated` if the stored job still has `expected`'s version and next fire, creating `runs`
        and rewriting the job views of `refreshed` runs (each only if still unclaimed at the attempt read)
        and recording the write's revision when `authored`, in the same transaction. VersionMismatchError
        if the job changed, RunsMovedError if one of those runs was claimed meanwhile, NotFoundError if the
        job is gone."""
        ...

    def delete_job(
        self, expected: Job, refreshed: Sequence[tuple[Run, JobView]] = (), authored: Authored | None = None
    ) -> None:
        """Delete if still at `expected.version`, rewriting the views of `refreshed` runs with it (and
        recording the revision when `authored`); VersionMismatchError (or RunsMovedError) otherwise."""
        ...

    def claimable_runs(self, job_id: str, since: datetime) -> list[Run]:
        """The job's unclaimed runs (planned, waiting to retry, queued) from `since` on, strongly
        consistent: the runs whose view a job write rewrites."""
        ...


class ManagedJobStore(JobStore, Protocol):
    """Storage as job management and the API see it (the DynamoDB store implements all of it)."""

    def create_job_with_fingerprint(
        self, job: Job, runs: Sequence[Run], fingerprint: str, authored: Authored | None = None
    ) -> None: ...

    def get_job_fingerprint(self, job_id: str) -> tuple[Job, str | None] | None: ...

    def owner_job_ids(
        self, owner: str, *, limit: int, after_job_id: str | None = None
    ) -> tuple[list[str], bool]: ...

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]: ...

    def run_times_between(self, job_id: str, first: datetime, last: datetime) -> set[datetime]: ...

    def run_states_between(self, job_id: str, first: datetime, last: datetime) -> dict[datetime, RunState]:
        """The state of each of the job's runs with first <= scheduled_for <= last (strongly consistent)."""
        ...


class RunReader(Protocol):
    """Storage as run history needs it."""

    def get_job(self, job_id: str) -> Job | None: ...

    def get_run(self, job_id: str, scheduled_for: datetime) -> Run | None: ...

    def query_runs(
        self,
        job_id: str,
        *,
        start: datetime | None,
        end: datetime | None,
        states: Sequence[RunState] = (),
        limit: int,
        after: datetime | None = None,
        newest_first: bool = True,
    ) -> tuple[list[Run], datetime | None]: ...


class FailedRunReader(Protocol):
    def failed_runs(
        self, owner: str, *, since: datetime | None, before: str | None, limit: int
    ) -> tuple[list[Run], str | None]:
        """The owner's failed runs that finished at or after `since`, newest first, from after the position
        `before` (the failed-runs index's sort key, from an earlier page); returns at most `limit` runs and
        the position to continue from (None: no more)."""
        ...


class RunRequestStore(Protocol):
    """Storage as runs on request (run now, retry, backfill) see it."""

    def get_job(self, job_id: str) -> Job | None: ...

    def get_run(self, job_id: str, scheduled_for: datetime) -> Run | None: ...

    def run_times_between(self, job_id: str, first: datetime, last: datetime) -> set[datetime]: ...

    def get_request(self, request_key: str) -> RunRequest | None:
        """The Idempotency-Key record under this key, if any (strongly consistent)."""
        ...

    def request_runs(
        self,
        job: Job,
        created: Sequence[Run],
        retried: Sequence[tuple[Run, Run]] = (),
        record: RunRequest | None = None,
    ) -> None:
        """In one transaction: move the job's request counter on (the job must still be at `job`'s version
        and counter), create each of `created` (none may exist), move each retried run from its expected to
        its updated state (fenced like any run write), and write `record` (its key must be free).
        NotFoundError if the job is gone, VersionMismatchError if it changed, StaleRunError if a retried
        run moved, RequestConflictError if a run or the record exists already."""
        ...


class Dispatcher(Protocol):
    def dispatch(self, runs: Sequence[Run], now: datetime, *, commit_by: datetime | None = None) -> None:
        """Hand runs to the executors, each to become visible at its due time: committed runs, or (with
        `commit_by`, the ticker's) runs about to be committed by then. Raises DispatchError listing the
        messages it could not send (their dedupe ids)."""
        ...

    def redispatch(self, message: RunMessage, shard: int, now: datetime) -> None:
        """Send one message again (a retry, an early arrival held back, a sweeper repair)."""
        ...

    def redispatch_many(self, messages: Sequence[RunMessage], now: datetime) -> None:
        """Send several messages again in as few requests as the queue allows (the sweeper's repairs).
        Raises DispatchError listing the runs it could not send."""
        ...


class RunStore(Protocol):
    """Storage as executors and the sweeper see it. Every transition is conditional on the run still
    being in the state and attempt it was read in: that is what fences out a stale worker."""

    def get_job(self, job_id: str) -> Job | None: ...

    def get_run(self, job_id: str, scheduled_for: datetime) -> Run | None: ...

    def transition_run(self, expected: Run, updated: Run) -> None:
        """Write `updated` if the stored run still has `expected`'s state, attempt and lease.
        Raises StaleRunError otherwise."""
        ...

    def claim(self, claim: Claim) -> Run:
        """Move the run to running at the claim's next attempt and lease, if it is still claimable at the
        expected attempt, in one write without a read before it; returns the run as stored after it.
        Raises StaleRunError (with the stored run, or None if there is none) otherwise."""
        ...

    def claim_exclusive(self, expected: Run, updated: Run, now: datetime) -> bool:
        """Overlap policies skip / queue: claim the run AND take the job's single running slot, atomically.
        False if another run of the job holds an unexpired slot. StaleRunError if the run moved."""
        ...

    def enqueue_behind(self, expected: Run, updated: Run) -> bool:
        """Overlap policy queue: record the run as the job's one waiting run. False if one already waits."""
        ...

    def finish_exclusive(self, expected: Run, updated: Run) -> str | None:
        """Finish a run holding the job's slot and release it; returns the run id waiting behind it, if any.
        StaleRunError if the run moved."""
        ...

    def open_runs(self, shard: int, through: datetime) -> Iterator[Run]:
        """Unfinished runs of a shard whose check time is at or before `through` (the sweeper's work list)."""
        ...


class AuditStore(Protocol):
    """Storage as the reconciliation audit sees it (services/auditing.py)."""

    def audit_jobs(
        self, segment: int, segments: int, *, after: str | None, limit: int
    ) -> tuple[list[AuditedJob], str | None]:
        """One page of the jobs in `segment` of `segments` (every job is in exactly one, the same one every
        pass), from after the position `after`, each with the `due` key its record is filed under; returns
        them and the position to continue from (None: the segment is done). Eventually consistent: a job
        may be a moment stale."""
        ...

    def runs_between(self, job_id: str, first: datetime, last: datetime) -> list[Run]:
        """The job's runs with first <= scheduled_for <= last, strongly consistent, in time order."""
        ...

    def get_job(self, job_id: str) -> Job | None:
        """The whole job (strongly consistent), for a repair of a job `audit_jobs` read in part."""
        ...

    def recorded_runs_of_jobs(
        self, firsts: Mapping[str, datetime], last: datetime
    ) -> dict[str, RecordedRuns]:
        """RecordedRuns.of(runs_between(job_id, first, last)) for every job_id -> first of `firsts`, as one
        read where the engine can (SQLite, which decodes only the unfinished runs); every job of `firsts`
        is a key, with no fires and no runs when it has none."""
        ...

    def restore_runs(self, runs: Sequence[Run]) -> list[Run]:
        """Create each run whose record does not exist (each on its own; one that exists is left as it is);
        returns the runs created."""
        ...

    def replace_job(
        self,
        expected: Job,
        updated: Job,
        runs: Sequence[Run],
        refreshed: Sequence[tuple[Run, JobView]] = (),
        authored: Authored | None = None,
    ) -> None: ...

    def get_watermark(self, shard: int) -> datetime | None: ...


class Metrics(Protocol):
    def count(self, name: str, value: float = 1.0) -> None: ...

    def timing_ms(self, name: str, value_ms: float) -> None: ...


class DeadLetterSource(Protocol):
    def receive(self, max_messages: int) -> list[DeadLetter]: ...

    def delete(self, receipt: str) -> None: ...


class WriteUnits(Protocol):
    """Several writes of the store and the slots made one commit, where the engine has transactions that
    span them (SQLite). Inside `together()` each write still succeeds or is refused on its own (a refused
    one undoes only its own changes); all that succeeded land when the block ends, or none do."""

    def together(self) -> AbstractContextManager[object]:
        """Enter: TransientStoreError (throttled) or StoreError, before anything was written. Exit:
        TransientStoreError or StoreError when the commit failed, and then nothing of the block was
        written. Code inside must not act on a write as landed (ring a doorbell, call out) before the
        block ends."""
        ...


class SlotStore(Protocol):
    """The concurrency slots (domain/slots.py): which run attempts hold a slot of which pool. A hold is
    named by its run id and attempt. Exact: the live holds of a pool (lease after `now`) never outnumber
    its size, however many callers race. From its lease end on a hold counts as free: another acquire may
    take it over (an extend that comes after the lease end may or may not still find it)."""

    def acquire(self, pools: Sequence[Pool], hold: SlotHold, now: datetime) -> bool:
        """All or nothing: True when `hold` now holds one slot in every pool (a slot whose holder's lease
        ended at or before `now` is free and may be taken over), at the hold's lease; False when some pool
        has no free slot it could find, and then the hold holds none (partial holds are released first). A
        caller that gets False waits and asks again. Idempotent: the same run id and attempt asking again
        (a lost response retried) gets True without taking a second slot, at the new lease. Raises
        TransientStoreError (throttling; retry: it is idempotent) or StoreError."""
        ...

    def extend(self, pools: Sequence[Pool], hold: SlotHold) -> bool:
        """Move the hold's lease to `hold.lease_expires_at` in every pool. False if the hold is no longer
        there in one of them (released, or taken over after its lease ended): the attempt has lost its
        slot."""
        ...

    def release(self, pools: Sequence[Pool], run_id: str, attempt: int) -> None:
        """Free the hold of this run attempt in every pool, if it is there (idempotent). Never touches
        another attempt's hold of the same run."""
        ...

    def in_flight(self, pool: Pool, now: datetime) -> int:
        """How many holds of the pool are live at `now` (lease after `now`): the runs the bound counts."""
        ...


class PollerControl(Protocol):
    """The executor's event source mappings, as far as starting warm needs them."""

    def states(self) -> dict[str, MappingState]:
        """Each mapping's provisioned minimum pollers, and when it last changed."""
        ...

    def set_min_pollers(self, changes: Mapping[str, int]) -> None:
        """These mappings keep at least so many pollers provisioned (they scale up from there)."""
        ...


class Carrier(Protocol):
    """What carries one delivery (a Lambda invocation and the SQS message it received): when it must be
    done, and how to keep its message hidden while the claimed run's lease runs, so that a dead executor's
    run comes back at its lease end, not the queue's visibility timeout."""

    @property
    def deadline(self) -> datetime | None: ...

    def keep_hidden_until(self, instant: datetime | None) -> None: ...


class RunChangeFeed(Protocol):
    """The runs table's changes, oldest first (the embedded engine's; DynamoDB's come as a stream)."""

    def take_changes(self, limit: int) -> Sequence[tuple[int, SeenChange]]:
        """Up to `limit` changes with their positions, oldest first, without removing them."""
        ...

    def forget_changes(self, through: int) -> None:
        """Remove the changes up to and including position `through` (handled)."""
        ...


class WatchQuiet(Protocol):
    """Whether a watcher round that reads the store itself (`tickwork local`) can have anything to do: the
    embedded engine knows when nothing was written, and when the outbox is next due. Without one, a watcher
    runs every round; an idle one that skips them wakes for a look, not for a round's reads."""

    def round_begins(self) -> object:
        """A mark of what was written so far, taken before a round reads anything."""
        ...

    def round_ended(self, mark: object) -> None:
        """The round that began at `mark` is done: remember it, and when the outbox is next due."""
        ...

    def quiet(self, now: datetime) -> bool:
        """True only when a round now would find nothing: nothing written since the mark of the last round
        that ended, and nothing of the outbox (messages, digests, deadlines, bulk actions) due by `now`."""
        ...

    def rest(self, now: datetime, look_every: float) -> None:
        """After a quiet look: sleep until a round may find something (a write, the outbox's next due
        time), or `look_every` seconds where the engine cannot tell; at once if it is no longer quiet."""
        ...

    def wake(self) -> None:
        """End a rest, and every later one at once (the watcher is stopping)."""
        ...


class EmailChannel(Protocol):
    """E-mail channels: a topic per address, held by the first owner who names it (adapters/email.py)."""

    def subscribe(self, owner: str, address: str) -> None:
        """Subscribe the address for this owner (SNS asks the address to confirm); again is nothing.
        ValidationError (field `address`) if another owner holds it, or SNS refuses it."""
        ...

    def send(self, address: str, subject: str, body: str, message_id: str) -> TargetResult:
        """Publish to the address's subscription; a result for every ordinary failure, as a target's."""
        ...


class AlertDefaults(Protocol):
    """Each owner's default alert rules: what a job created without `alerts` gets."""

    def get_defaults(self, owner: str) -> AlertRules | None: ...

    def set_defaults(self, owner: str, rules: AlertRules | None) -> None:
        """Store the owner's defaults (None: remove them)."""
        ...


class CalendarReader(Protocol):
    """The owner's exclusion calendars, as the executor and the job service read them."""

    def get_calendars(self, owner: str, names: Sequence[str]) -> dict[str, Calendar]:
        """Strongly consistent: the named calendars that exist (a name not found is left out)."""
        ...


class CalendarStore(CalendarReader, Protocol):
    """Exclusion calendars: one item each in the owner's scope of the events table."""

    def list_calendars(self, owner: str) -> list[Calendar]: ...

    def put_calendar(self, calendar: Calendar) -> None:
        """Write the calendar at its version: version 1 must not exist yet, version n replaces n - 1
        (VersionMismatchError otherwise: another write came first)."""
        ...

    def delete_calendar(self, owner: str, name: str) -> bool:
        """False if there was none."""
        ...


class BulkStore(Protocol):
    """Bulk actions: one item each in the owner's scope of the events table (adapters/bulk_records.py)."""

    def create_actions(self, actions: Sequence[BulkAction]) -> None:
        """Create them all or none (a maintenance window's pause and its resume); ConflictError if one
        exists already."""
        ...

    def get_action(self, owner: str, action_id: str) -> BulkAction | None: ...

    def list_actions(self, owner: str) -> list[BulkAction]: ...

    def due_actions(self, now: datetime, limit: int) -> list[BulkAction]:
        """Actions not done whose start is at or before `now`, oldest first (leased ones included)."""
        ...

    def save_action(self, expected: BulkAction, action: BulkAction) -> None:
        """Write `action` if the stored one is still at `expected.version` (VersionMismatchError: another
        worker took it over)."""
        ...


class EventLog(Protocol):
    """The events table (adapters/event_records.py): events, channel windows, messages, timers, health."""

    def record_event(
        self,
        event: JobEvent,
        expires_at: datetime,
        windows: Sequence[tuple[Window | None, Window]],
        messages: Sequence[Message],
    ) -> bool:
        """Atomically: store the event unless it is stored (False, and nothing written: a re-delivered
        change), each window if still at its read version (None: not stored yet), and the messages.
        ConflictError when a window moved meanwhile (the caller reads them again)."""
        ...

    def windows(
        self, owner: str, channels: Sequence[Channel], kind: EventKind, length_seconds: int
    ) -> dict[str, Window]:
        """The owner's windows of this kind and length for these channels, by channel id (strongly
        consistent)."""
        ...

    def job_events(self, job_id: str, limit: int, before: str | None) -> tuple[list[JobEvent], str | None]:
        """A job's events, newest first, a page after cursor `before`; the next page's cursor or None."""
        ...

    def owner_events(self, owner: str, limit: int, before: str | None) -> tuple[list[JobEvent], str | None]:
        """An owner's events across jobs, newest first (the by_owner index: eventually consistent)."""
        ...

    def put_timer(self, timer: DeadlineTimer) -> None: ...

    def due(self, now: datetime, limit: int) -> list[Message | Window | DeadlineTimer]:
        """What the outbox owes at `now`: messages to send, windows owing a digest, timers to look at."""
        ...

    def claim_message(self, message: Message, until: datetime) -> Message | None:
        """Take the message to send it: its `send_at` moves to `until` if it is still as read (attempts and
        send_at), so another watcher's pass leaves it alone until then. None: another took it first."""
        ...

    def settle_message(self, message: Message, retry: Message | None) -> None:
        """The claimed message is sent (None: removed) or will be tried again as `retry`; nothing is
        written if another watcher claimed it since (its claim ran out)."""
        ...

    def close_window(self, window: Window, closed: Window, digest: Message) -> bool:
        """Write the digest and the window with nothing owed, if the window is still at its version."""
        ...

    def drop_timer(self, timer: DeadlineTimer) -> None: ...

    def set_health(self, health: ChannelHealth) -> None: ...

    def health(self, owner: str, channels: Sequence[Channel]) -> dict[str, ChannelHealth]:
        """The recorded health of these channels of the owner, by channel id (none recorded: healthy)."""
        ...


class RevisionReader(Protocol):
    """A job's revisions and an owner's audit log (written by the job writes themselves), newest first,
    paged by the key of the last item given."""

    def job_revisions(
        self, job_id: str, limit: int, before: str | None
    ) -> tuple[list[Revision], str | None]: ...

    def get_revision(self, job_id: str, revision: int) -> Revision | None: ...

    def job_at(self, revision: Revision) -> Job:
        """The job as the revision kept it (ValueError for a delete's, which keeps none)."""
        ...

    def owner_audit(
        self, owner: str, limit: int, before: str | None
    ) -> tuple[list[Revision], str | None]: ...
