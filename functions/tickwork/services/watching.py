"""The watcher (issue 32): from the runs table's changes to the events an owner reads and the messages their
channels get, plus the auto-pause. Downstream of every run path (a stream on AWS, a trigger's outbox in the
embedded engine), so what an owner is told never delays or fails a run, and a change is seen whichever of
the run's paths (executor, sweeper, callback, tracked poll) made it.

Planned work without scanning jobs: a run of a job with a deadline gets one timer when it is written, looked
at once when its deadline passes (the outbox index is read by time); a run's end is judged against the job's
recent runs only when a rule needs them (a streak or a baseline): one query of the job's own partition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from tickwork.domain.alert_rules import DEFAULT_WINDOW_SECONDS, Channel, ChannelKind
from tickwork.domain.alerts import (
    EventKind,
    JobEvent,
    SeenChange,
    WatchedJob,
    deadline_missed,
    deadline_of,
    events_of_change,
    reads_the_record,
    sets_deadline_timer,
)
from tickwork.domain.clock import Clock
from tickwork.domain.errors import ConflictError, NotFoundError
from tickwork.domain.models import Job, Run, RunState
from tickwork.domain.notify import (
    ChannelHealth,
    DeadlineTimer,
    Message,
    Window,
    admit,
    after_failure,
    digest_of,
    email_of,
    message_target,
)
from tickwork.domain.targets import Invocation, TargetInvoker, TargetResult
from tickwork.services.ports import EmailChannel, EventLog, Metrics
from tickwork.services.runs import decode_cursor, encode_cursor

logger = logging.getLogger(__name__)

RECENT_RUNS = 30  # the job's latest runs a baseline is judged on (a streak reads as many as its rule needs)
PLANNED_AHEAD = 20  # runs newer than the one judged a read of the latest may meet (planned ahead, running)
CLAIM_SECONDS = 60.0  # a message taken to be sent is left alone by other watchers this long
JOB_CACHE_SECONDS = 30.0  # a job's rules are re-read at most this often per process
RECORD_ATTEMPTS = 5  # a channel window moved by another watcher: read it again
SEND_TIMEOUT_SECONDS = 10.0
OUTBOX_PAGE = 500


class JobReader(Protocol):
    def get_watched_jobs(self, job_ids: Sequence[str]) -> dict[str, WatchedJob]:
        """What the watcher reads of the jobs that exist among `job_ids` (not their whole records)."""
        ...


class WatchedRuns(JobReader, Protocol):
    def get_run(self, job_id: str, scheduled_for: datetime) -> Run | None: ...

    def list_runs(self, job_id: str, *, newest_first: bool = True, limit: int = 1000) -> list[Run]: ...


@runtime_checkable
class JobMetrics(Protocol):
    def count_for_job(self, name: str, job_id: str, value: float = 1.0) -> None:
        """A count with the job's id as a dimension: which job skipped, not only that one did."""
        ...


@dataclass(frozen=True, slots=True)
class WithoutJob:
    """Per-job counts where the metrics have no dimensions (a test's recorder): counted by name only."""

    metrics: Metrics

    def count_for_job(self, name: str, job_id: str, value: float = 1.0) -> None:
        self.metrics.count(name, value)


# Pauses a job on Tickwork's own account: (owner, job id, reason, the time of the failure that paused it);
# whether it paused it (not if the owner resumed it after that failure, or it was paused already).
Pauser = Callable[[str, str, str, datetime], bool]


@dataclass
class WatchReport:
    changes: int = 0
    events: int = 0
    sent: int = 0
    failed_sends: int = 0
    digests: int = 0
    timers: int = 0
    kinds: dict[str, int] = field(default_factory=dict)

    def recorded(self, event: JobEvent) -> None:
        self.events += 1
        self.kinds[str(event.kind)] = self.kinds.get(str(event.kind), 0) + 1


class EventRecorder:
    """Records an event and what the job's channels are owed for it (a message, or a count in their
    window's digest): what the watcher does with what it notices, and the API with a resume that clears an
    auto-pause. Sends nothing (the outbox does), so it needs no way to call a channel."""

    def __init__(
        self, jobs: JobReader, log: EventLog, clock: Clock, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._jobs = jobs
        self._log = log
        self._clock = clock
        self._monotonic = monotonic
        self._cache: dict[str, tuple[float, WatchedJob | None]] = {}

    def job(self, job_id: str) -> WatchedJob | None:
        """The job, read at most every JOB_CACHE_SECONDS per process (its rules apply from then)."""
        now = self._monotonic()
        if (cached := self._fresh(job_id, now)) is not None:
            return cached[1]
        job = self._jobs.get_watched_jobs([job_id]).get(job_id)
        self._cache[job_id] = (now, job)
        return job

    def read_ahead(self, job_ids: Iterable[str]) -> None:
        """Read in one call every job among `job_ids` not read within JOB_CACHE_SECONDS: a page of changes
        names hundreds of jobs (a burst), and one read each would cost a round trip each."""
        now = self._monotonic()
        stale = [job_id for job_id in dict.fromkeys(job_ids) if self._fresh(job_id, now) is None]
        if not stale:
            return
        found = self._jobs.get_watched_jobs(stale)
        for job_id in stale:
            self._cache[job_id] = (now, found.get(job_id))  # not found: deleted

    def _fresh(self, job_id: str, now: float) -> tuple[float, WatchedJob | None] | None:
        """The job as read within JOB_CACHE_SECONDS (when, and the job or None: deleted); None if not."""
        cached = self._cache.get(job_id)
        return cached if cached is not None and now - cached[0] < JOB_CACHE_SECONDS else None

    def forget(self, job_id: str | None = None) -> None:
        """Read the job (every job: None) again next time."""
        if job_id is None:
            self._cache.clear()
        else:
            self._cache.pop(job_id, None)

    def record(self, event: JobEvent, *, besides: Channel | None = None) -> bool:
        """Store the event and what its channels (all but `besides`) are owed. False: recorded before (a
        re-delivered change)."""
        job = self.job(event.job_id)
        rules = job.alerts if job is not None else None
        channels = [c for c in (rules.channels if rules is not None else ()) if c != besides]
        length = timedelta(seconds=rules.window_seconds if rules is not None else DEFAULT_WINDOW_SECONDS)
        keep = timedelta(days=job.retention_days if job is not None else 30)
        for attempt in range(RECORD_ATTEMPTS):
            stored = self._log.windows(event.owner, channels, event.kind, int(length.total_seconds()))
            pairs: list[tuple[Window | None, Window]] = []
            messages: list[Message] = []
            for channel in channels:
                before = stored.get(channel.channel_id)
                window, message = admit(event, channel, before, length)
                pairs.append((before, window))
                if message is not None:
                    messages.append(message)
            try:
                return self._log.record_event(event, event.at + keep, pairs, messages)
            except ConflictError:
                if attempt + 1 == RECORD_ATTEMPTS:  # another watcher moved a window: read them again
                    raise
        return False

    def note_resumed(self, job: Job, cleared: str) -> bool:
        """The owner resumed a job Tickwork had paused: an event, told to the job's channels."""
        at = job.resumed_at or self._clock.now()
        detail = f"resumed; the auto-pause is cleared ({cleared})"
        return self.record(JobEvent(job.job_id, job.owner, EventKind.RESUMED, at, None, detail[:500]))


class Watcher:
    def __init__(
        self,
        runs: WatchedRuns,
        log: EventLog,
        invoker: TargetInvoker,
        pause: Pauser,
        clock: Clock,
        metrics: Metrics,
        job_metrics: JobMetrics,
        *,
        email: EmailChannel | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._email = email
        self._runs = runs
        self._log = log
        self._invoker = invoker
        self._pause = pause
        self._clock = clock
        self._metrics = metrics
        self._job_metrics = job_metrics
        self._monotonic = monotonic
        self.recorder = EventRecorder(runs, log, clock, monotonic=monotonic)

    # -- changes -> events ----------------------------------------------------------------------------------

    def observe(self, changes: Sequence[SeenChange]) -> WatchReport:
        """Every change once or more (a stream re-delivers): the same change records nothing twice."""
        report = WatchReport()
        # A write that moved no state (a lease, a heartbeat) is no change the rules read.
        moved = [c for c in changes if c.before is None or c.before.state is not c.state]
        self.recorder.read_ahead(c.job_id for c in moved)
        for change in moved:
            report.changes += 1
            for event in self._events_of(change, report):
                if self.recorder.record(event):
                    report.recorded(event)
        return report

    def _events_of(self, change: SeenChange, report: WatchReport) -> list[JobEvent]:
        if change.state in (RunState.SKIPPED, RunState.MISSED):
            name = f"Slots{str(change.state).capitalize()}"
            self._job_metrics.count_for_job(name, change.job_id)
        job = self.recorder.job(change.job_id)
        if job is None:
            return []  # deleted: its owner asked for nothing more
        rules = job.alerts
        if not reads_the_record(change.before, change.state, rules):
            return []  # nothing the rules read (a feed that decodes on use does not decode the record)
        # The job's owner (a run written before runs kept theirs carries none).
        after = change.after if change.after.owner == job.owner else replace(change.after, owner=job.owner)
        deadline = rules.deadline_seconds
        if deadline is not None and sets_deadline_timer(change.before, after.state, rules):
            fire_at = deadline_of(after, deadline)
            timer = DeadlineTimer(job.job_id, job.owner, after.scheduled_for, fire_at, after.expires_at)
            self._log.put_timer(timer)
            report.timers += 1
        ended = after.state.is_terminal
        recent = self._recent(job, after) if ended and rules.needs_history else ()
        events = []
        for event in events_of_change(change.before, after, rules, recent):
            if event.kind is EventKind.AUTO_PAUSED and not self._auto_pause(job, event):
                continue  # nothing was paused: the owner resumed it after this failure, or it was paused
            events.append(event)
        return events

    def _recent(self, job: WatchedJob, run: Run) -> list[Run]:
        """The job's runs that ended before this one, newest first (a streak or a baseline reads them);
        after a resume, only those since it: a streak starts again when the owner resumes the job."""
        rules = job.alerts
        streak = max(rules.failures_in_a_row or 0, rules.auto_pause_after or 0)
        limit = max(RECENT_RUNS, streak + 1) + PLANNED_AHEAD
        return [
            r
            for r in self._runs.list_runs(run.job_id, newest_first=True, limit=limit)
            if r.scheduled_for < run.scheduled_for
            and r.state in (RunState.SUCCEEDED, RunState.FAILED)
            and (job.resumed_at is None or (r.finished_at is not None and r.finished_at > job.resumed_at))
        ]

    def _auto_pause(self, job: WatchedJob, event: JobEvent) -> bool:
        self.recorder.forget(job.job_id)
        try:
            return self._pause(job.owner, job.job_id, event.detail, event.at)
        except NotFoundError:
            logger.info("auto-pause: job %s is gone", job.job_id)
            return False

    # -- the outbox: messages, digests, deadlines -----------------------------------------------------------

    def deliver(self, limit: int = OUTBOX_PAGE, budget_seconds: float | None = None) -> WatchReport:
        """One pass over what the outbox owes now, within `budget_seconds` if given (a slow channel must
        not hold up the stream). A send that fails is tried again later; once its attempts are spent the
        channel is recorded unhealthy (and healthy again at its next success)."""
        report = WatchReport()
        now = self._clock.now()
        started = self._monotonic()
        for entry in self._log.due(now, limit):
            if budget_seconds is not None and self._monotonic() - started > budget_seconds:
                break  # the rest stay owed: the next pass sends them
            if isinstance(entry, Message):
                self._send(entry, now, report)
            elif isinstance(entry, Window):
                digest, closed = digest_of(entry)
                if self._log.close_window(entry, closed, digest):
                    report.digests += 1
                    self._send(digest, now, report)
            else:
                self._check_deadline(entry, now, report)
        return report

    def _check_deadline(self, timer: DeadlineTimer, now: datetime, report: WatchReport) -> None:
        job = self.recorder.job(timer.job_id)
        run = self._runs.get_run(timer.job_id, timer.scheduled_for)
        if job is not None and run is not None and job.alerts.deadline_seconds is not None:
            deadline = deadline_of(run, job.alerts.deadline_seconds)
            if deadline > now:  # the deadline was raised since the timer was set: look again then
                self._log.put_timer(replace(timer, fire_at=deadline))
                return
            event = deadline_missed(run, job.alerts, now)
            if event is not None and self.recorder.record(event):
                report.recorded(event)
        self._log.drop_timer(timer)

    def _call(self, message: Message, invocation: Invocation) -> TargetResult:
        if message.channel.kind is not ChannelKind.EMAIL:
            return self._invoker.invoke(message_target(message), invocation)
        if self._email is None:
            return TargetResult(False, False, "NoEmail", 0, "this deployment sends no e-mail")
        subject, body = email_of(message)
        return self._email.send(message.channel.address, subject, body, message.message_id)

    def _send(self, due: Message, now: datetime, report: WatchReport) -> None:
        message = self._log.claim_message(due, now + timedelta(seconds=CLAIM_SECONDS))
        if message is None:
            return  # another watcher's pass took it
        invocation = Invocation(
            run_id=message.message_id,
            job_id=message.job_id or "",
            scheduled_for=message.at,
            attempt=message.attempts + 1,
            timeout_seconds=SEND_TIMEOUT_SECONDS,
            owner=message.owner,
        )
        result = self._call(message, invocation)
        health = self._log.health(message.owner, (message.channel,)).get(message.channel.channel_id)
        if result.ok:
            self._log.settle_message(message, None)
            report.sent += 1
            self._metrics.count("NotificationsSent")
            if health is not None and not health.healthy:
                self._log.set_health(ChannelHealth(message.owner, message.channel, True, now))
            return
        report.failed_sends += 1
        self._metrics.count("NotificationSendFailures")
        error = f"{result.status}: {result.detail}"
        retry = after_failure(message, error, now) if result.retryable else None
        if retry is None:
            logger.warning("channel %s of %s failed: %s", message.channel.label, message.owner, error)
            if health is None or health.healthy:
                self._log.set_health(ChannelHealth(message.owner, message.channel, False, now, error[:500]))
                if message.job_id is not None:
                    detail = f"{message.channel.label} failed {message.attempts + 1} time(s): {error}"
                    unhealthy = JobEvent(
                        message.job_id, message.owner, EventKind.CHANNEL_UNHEALTHY, now, None, detail[:500]
                    )
                    self.recorder.record(unhealthy, besides=message.channel)
        self._log.settle_message(message, retry)


@dataclass(frozen=True, slots=True)
class EventPage:
    events: list[JobEvent]
    next_cursor: str | None


MAX_EVENTS_PAGE = 100


class JobOwnership(Protocol):
    def get(self, owner: str, job_id: str) -> Job:
        """The owner's job; NotFoundError for another owner's or a missing one."""
        ...


class EventReader:
    """What `GET /events` answers: a job's events (its owner's only) or an owner's across their jobs,
    newest first, a page at a time, with a cursor only this listing accepts."""

    def __init__(self, jobs: JobOwnership, log: EventLog) -> None:
        self._jobs = jobs
        self._log = log

    def page(self, owner: str, job_id: str | None, limit: int, cursor: str | None) -> EventPage:
        limit = max(1, min(limit, MAX_EVENTS_PAGE))
        scope = f"events|{owner}|{job_id or '*'}"
        before = decode_cursor(cursor, ("k",), scope)["k"] if cursor else None
        if job_id is not None:
            self._jobs.get(owner, job_id)  # NotFoundError for another owner's job: nothing of it is shown
            events, after = self._log.job_events(job_id, limit, before)
        else:
            events, after = self._log.owner_events(owner, limit, before)
        return EventPage(events, None if after is None else encode_cursor({"k": after}, scope))

    def channel_health(self, owner: str, job_id: str) -> list[ChannelHealth]:
        """The recorded health of the owner's job's channels (a channel that never failed has none)."""
        job = self._jobs.get(owner, job_id)
        found = self._log.health(owner, job.alerts.channels)
        return [found[c.channel_id] for c in job.alerts.channels if c.channel_id in found]
