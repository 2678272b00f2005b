"""What a job's owner is told about (issue 32): the rules a job sets, and the events a run's change gives.

Pure: a run as it was and as it is now (one change of the runs table), the job's rules and its recent runs in,
the events out. Each event has a dedupe key that is the same however often the same change is seen (a change
feed delivers at least once), so a notification sent for it is sent once per channel.

The rules and channels themselves are domain/alert_rules.py (a job carries them); services/watching.py
feeds this module the runs table's changes and records and sends what it gives.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from tickwork.domain.alert_rules import AlertRules
from tickwork.domain.models import Job, Run, RunState
from tickwork.domain.timekeys import format_instant, format_instant_ms

__all__ = [
    "AlertRules",
    "EventKind",
    "JobEvent",
    "RunBefore",
    "RunChange",
    "SeenChange",
    "WatchedJob",
    "deadline_missed",
    "events_of_change",
    "reads_the_record",
    "sets_deadline_timer",
]

DEAD_LETTERED = "dead-lettered"  # how a run failed from the dead-letter queue starts its reason
BASELINE_RUNS = 5  # succeeded runs a duration baseline needs before a run can be far from it


class EventKind(StrEnum):
    RUN_FAILED = "run_failed"
    RUN_DEAD_LETTERED = "run_dead_lettered"
    SLOT_SKIPPED = "slot_skipped"
    SLOT_MISSED = "slot_missed"
    RUN_LATE = "run_late"
    DEADLINE_MISSED = "deadline_missed"
    DURATION_OUT_OF_BOUNDS = "duration_out_of_bounds"
    DURATION_ANOMALY = "duration_anomaly"
    FAILURES_IN_A_ROW = "failures_in_a_row"
    AUTO_PAUSED = "auto_paused"
    RESUMED = "resumed"  # a resume that cleared an auto-pause
    CHANNEL_UNHEALTHY = "channel_unhealthy"  # a channel failed every retry of a message


class Earlier(Protocol):
    """What the rules read of a run as it was before a change: its state, and when it started (None: not
    yet). A whole `Run` tells it, and so does `RunBefore`."""

    @property
    def state(self) -> RunState: ...

    @property
    def started_at(self) -> datetime | None: ...


@dataclass(frozen=True, slots=True)
class RunBefore:
    """A run as it was before a change, as far as the rules read it: a change feed need not carry (nor the
    watcher decode) the whole earlier record."""

    state: RunState
    started_at: datetime | None = None


class SeenChange(Protocol):
    """One change of a run record as a feed delivers it (at least once): the run as it was (None: just
    written), its job and its state now, and the record as it is now (`after`), which a feed may decode only
    when it is asked for (most changes are judged by their state alone: `reads_the_record`)."""

    @property
    def before(self) -> RunBefore | None: ...

    @property
    def job_id(self) -> str: ...

    @property
    def state(self) -> RunState: ...

    @property
    def after(self) -> Run: ...


@dataclass(frozen=True, slots=True)
class RunChange:
    """One change of a run record: as it was (None: just written) and as it is. Delivered at least once."""

    before: RunBefore | None
    after: Run

    @property
    def job_id(self) -> str:
        return self.after.job_id

    @property
    def state(self) -> RunState:
        return self.after.state


@dataclass(frozen=True, slots=True)
class WatchedJob:
    """What the watcher reads of a job: whose it is, its rules, how long its events are kept, and when it
    was last resumed (a streak starts again then). Not the whole job: every run of a burst names its job,
    and the watcher reads each, so a store may read these fields alone."""

    job_id: str
    owner: str
    alerts: AlertRules
    retention_days: int
    resumed_at: datetime | None

    @classmethod
    def of(cls, job: Job) -> WatchedJob:
        return cls(job.job_id, job.owner, job.alerts, job.retention_days, job.resumed_at)


@dataclass(frozen=True, slots=True)
class JobEvent:
    job_id: str
    owner: str
    kind: EventKind
    at: datetime  # when it happened (the run's change), not when it was seen
    run_id: str | None
    detail: str

    @property
    def dedupe_key(self) -> str:
        """The same for every sighting of the same change: a notification's idempotency key. Its time
        tells apart the same kind of event of one run (a run retried by its owner that fails again)."""
        return f"{self.job_id}|{self.kind}|{self.run_id or ''}|{format_instant_ms(self.at)}"


def duration(run: Run) -> timedelta | None:
    if run.started_at is None or run.finished_at is None:
        return None
    return run.finished_at - run.started_at


def sets_deadline_timer(before: Earlier | None, state: RunState, rules: AlertRules) -> bool:
    """Whether a change gives the run a deadline timer: a run just written (not as skipped) of a job with
    a deadline. Its record then tells when the timer fires."""
    return before is None and rules.deadline_seconds is not None and state is not RunState.SKIPPED


def reads_the_record(before: Earlier | None, state: RunState, rules: AlertRules) -> bool:
    """Whether anything of a change (a timer, an event) can come from the run's record as it is now, where
    only its state is known: a change of which it cannot is judged without decoding it (in a burst most
    changes are a start or a success, and the rules of most jobs read neither). Never False where
    `events_of_change` or `sets_deadline_timer` could give something (tests/domain/test_alerts.py checks
    it on drawn changes, rules and histories)."""
    if sets_deadline_timer(before, state, rules) or rules.late_after_seconds is not None:
        return True
    if not state.is_terminal or (before is not None and before.state.is_terminal):
        return False  # not an end, or an end seen again: only a late start and a deadline's timer read it
    if state is RunState.FAILED:
        return True
    if state in (RunState.SKIPPED, RunState.MISSED):
        return rules.on_skip
    durations = (rules.duration_min_seconds, rules.duration_max_seconds, rules.anomaly_factor)
    return state is RunState.SUCCEEDED and any(rule is not None for rule in durations)


def events_of_change(
    before: Earlier | None, after: Run, rules: AlertRules, recent: Sequence[Run] = ()
) -> tuple[JobEvent, ...]:
    """The events of one change of a run (`before` None: the run was just written). `recent`: the job's
    latest terminal runs before this one, newest first (the failures in a row and the duration baseline
    read them)."""
    events: list[JobEvent] = []

    def event(kind: EventKind, at: datetime, detail: str) -> None:
        events.append(JobEvent(after.job_id, after.owner, kind, at, after.run_id, detail))

    ended = after.state.is_terminal and (before is None or not before.state.is_terminal)
    if (
        rules.late_after_seconds is not None
        and after.state is not RunState.EXCLUDED  # its claim only ended it: nothing started late
        and after.start_delay_ms is not None
        and (before is None or before.started_at is None)
        and after.started_at is not None
        and after.start_delay_ms > rules.late_after_seconds * 1000
    ):
        event(EventKind.RUN_LATE, after.started_at, f"started {after.start_delay_ms / 1000:.1f} s late")
    if not ended:
        return tuple(events)
    at = after.finished_at or after.planned_at
    if after.state in (RunState.SKIPPED, RunState.MISSED) and rules.on_skip:
        kind = EventKind.SLOT_SKIPPED if after.state is RunState.SKIPPED else EventKind.SLOT_MISSED
        event(kind, at, after.reason or str(after.state))
    if after.state is RunState.FAILED:
        dead = (after.reason or "").startswith(DEAD_LETTERED)
        if dead and rules.on_dead_letter:
            event(EventKind.RUN_DEAD_LETTERED, at, after.reason or "")
        elif not dead and rules.on_failure:
            event(EventKind.RUN_FAILED, at, after.reason or "failed")
        events.extend(_in_a_row(after, at, rules, recent))
    took = duration(after)
    if took is not None and after.state in (RunState.SUCCEEDED, RunState.FAILED):
        events.extend(_duration_events(after, at, took.total_seconds(), rules, recent))
    return tuple(events)


def _in_a_row(after: Run, at: datetime, rules: AlertRules, recent: Sequence[Run]) -> list[JobEvent]:
    """FAILURES_IN_A_ROW when this failure makes exactly the rule's count (not again at every one after),
    AUTO_PAUSED when it reaches the pause's."""
    streak = 1
    for run in recent:
        if run.state is not RunState.FAILED:
            break
        streak += 1
    found = []
    if rules.failures_in_a_row is not None and streak == rules.failures_in_a_row:
        found.append(
            JobEvent(
                after.job_id,
                after.owner,
                EventKind.FAILURES_IN_A_ROW,
                at,
                after.run_id,
                f"{streak} failures in a row",
            )
        )
    if rules.auto_pause_after is not None and streak == rules.auto_pause_after:
        found.append(
            JobEvent(
                after.job_id,
                after.owner,
                EventKind.AUTO_PAUSED,
                at,
                after.run_id,
                f"paused after {streak} failures in a row (the last: {after.reason or 'failed'})",
            )
        )
    return found


def _duration_events(
    after: Run, at: datetime, seconds: float, rules: AlertRules, recent: Sequence[Run]
) -> list[JobEvent]:
    found = []
    low, high = rules.duration_min_seconds, rules.duration_max_seconds
    if (low is not None and seconds < low) or (high is not None and seconds > high):
        bounds = f"{low if low is not None else 0}-{high if high is not None else '∞'} s"
        found.append(
            JobEvent(
                after.job_id,
                after.owner,
                EventKind.DURATION_OUT_OF_BOUNDS,
                at,
                after.run_id,
                f"took {seconds:.1f} s, outside {bounds}",
            )
        )
    factor = rules.anomaly_factor
    past = [d.total_seconds() for r in recent if r.state is RunState.SUCCEEDED and (d := duration(r))]
    if factor is not None and len(past) >= BASELINE_RUNS:
        median = statistics.median(past)
        if median > 0 and (seconds > median * factor or seconds < median / factor):
            found.append(
                JobEvent(
                    after.job_id,
                    after.owner,
                    EventKind.DURATION_ANOMALY,
                    at,
                    after.run_id,
                    f"took {seconds:.1f} s; the job's median of its last {len(past)} is {median:.1f} s",
                )
            )
    return found


def deadline_of(run: Run, seconds: int) -> datetime:
    """When a run must be done by: from its scheduled time, or from when it was due to start if that is
    later (a backfill's or a catch-up's run of a past slot is not late the moment it is planned)."""
    return max(run.scheduled_for, run.due_at) + timedelta(seconds=seconds)


def deadline_missed(run: Run, rules: AlertRules, now: datetime) -> JobEvent | None:
    """DEADLINE_MISSED for a run not finished by its scheduled time plus the deadline: still open, recorded
    missed, or finished after it (a check that came late still sees it). The dead-man's switch. A run the
    owner's own pause, overlap policy or exclusion calendar ended (cancelled, skipped, excluded) is not late.
    Its time is the deadline itself, so every check that sees it gives the same event."""
    if rules.deadline_seconds is None or run.state in (
        RunState.CANCELLED,
        RunState.SKIPPED,
        RunState.EXCLUDED,
    ):
        return None
    deadline = deadline_of(run, rules.deadline_seconds)
    if now < deadline:
        return None
    finished = run.state in (RunState.SUCCEEDED, RunState.FAILED)
    if finished and run.finished_at is not None and run.finished_at <= deadline:
        return None
    since = format_instant(deadline - timedelta(seconds=rules.deadline_seconds))
    detail = f"not finished {rules.deadline_seconds} s after {since} ({run.state})"
    return JobEvent(run.job_id, run.owner, EventKind.DEADLINE_MISSED, deadline, run.run_id, detail)
