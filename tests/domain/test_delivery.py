"""The delivery table: one named row per situation a run message can meet, and the step `next_step` takes.

Pure: no store, no queue, no clock. Each row builds what the executor would know at that point by walking
the real decisions before it (`then`), so a row reads as the story that leads to its situation. The table in
docs/design.md ("A delivery, step by step") is rendered from these rows, and
`test_the_design_doc_shows_this_table` keeps the two in agreement (`python -m tests.domain.test_delivery
--write` rewrites the doc's copy).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from random import Random
from typing import Any

import pytest

from tickwork.domain.calendars import Calendar, ExcludedDate
from tickwork.domain.delivery import (
    BLOCKED_RETRY_WAIT,
    FINISH_WRITES,
    AcquireSlots,
    AwaitCallback,
    ClaimRun,
    Done,
    EndAttempt,
    ExtendSlots,
    Hold,
    Known,
    LeaseWatched,
    Outcome,
    PollTarget,
    QueueBehind,
    ReadCalendars,
    ReadJob,
    ReadRun,
    ReleaseSlots,
    SendBack,
    Started,
    StartTarget,
    Step,
    TakeSlot,
    Unsent,
    WatchLease,
    Why,
    attempt_hold,
    next_step,
)
from tickwork.domain.dispatch import COMMIT_SETTLE, COMMIT_WINDOW, MAX_HOPS, RunMessage
from tickwork.domain.errors import TransientStoreError
from tickwork.domain.execution import LEASE_MARGIN, VIEW_TRUST_WINDOW, claimed, lease_until
from tickwork.domain.models import (
    Completion,
    Concurrency,
    Job,
    JobState,
    OverlapPolicy,
    Policies,
    Run,
    RunState,
    Standing,
    Target,
    Trigger,
    make_run_id,
)
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.slots import ALL, Pool
from tickwork.domain.targets import TargetResult

FIRE = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)
NOW = FIRE + timedelta(milliseconds=100)
SENT = FIRE - timedelta(seconds=40)
WORKER = "w-1#0000abcd"
TARGET = Target("http", {"url": "https://example.com/hook"})
DOC = Path(__file__).resolve().parents[2] / "docs" / "design.md"


def a_job(**changes: Any) -> Job:
    job = Job(
        job_id="job_a",
        owner="alice",
        name="a",
        schedule=parse_schedule("*/5 * * * *"),
        target=TARGET,
        shard=3,
        created_at=FIRE - timedelta(days=1),
        updated_at=FIRE - timedelta(days=1),
        next_fire_at=FIRE,
    )
    return replace(job, **changes)


def a_run(job: Job | None = None, **changes: Any) -> Run:
    run = Run.for_fire(
        job or a_job(),
        FIRE,
        now=FIRE - timedelta(minutes=1),
        trigger=Trigger.SCHEDULE,
        state=RunState.PLANNED,
    )
    return replace(run, **{"queue_carried": True, **changes})


def on_calendars(run: Run) -> Run:
    return with_view(run, calendars=("us-holidays",))


HOLIDAYS = Calendar("alice", "us-holidays", "UTC", dates=(ExcludedDate(FIRE.date(), "holiday"),))
ELSEWHEN = replace(HOLIDAYS, dates=(ExcludedDate(FIRE.date() + timedelta(days=1)),))


def after_an_attempt(status: str) -> Run:
    record = {"attempt": 1, "worker": WORKER, "ok": False, "status": status, "latency_ms": 0, "detail": ""}
    return replace(on_calendars(a_run()), attempts=(record,))


def unread_three_times() -> Known:
    known = claim_on_view(on_calendars(a_run()))
    for _ in range(3):
        known = then(known, throttled=TransientStoreError("throttled"))  # the read
        if isinstance(next_step(known), Hold):
            known = then(known)  # the wait
    return known


def with_view(run: Run, **changes: Any) -> Run:
    assert run.job_view is not None
    return replace(run, job_view=replace(run.job_view, **changes))


def a_message(**changes: Any) -> RunMessage:
    message = RunMessage.for_run(a_run(), commit_by=SENT + COMMIT_WINDOW)
    return replace(message, sent_at=SENT, **changes)


def arrived(message: RunMessage | None = None, now: datetime = NOW) -> Known:
    return Known(message=message or a_message(), now=now, worker=WORKER, rng=Random(7))


def then(known: Known, **results: Any) -> Known:
    """What is known after the step `known` leads to was carried out with `results`."""
    return known.after(next_step(known), known.now, **results)


def running(run: Run | None = None, **changes: Any) -> Run:
    """`run` as this delivery's claim left it (attempt 1, leased by WORKER)."""
    mine = claimed(run or a_run(), a_job(), worker=WORKER, now=NOW, dispatched_at=SENT)
    return replace(mine, **changes)


def someone_elses(run: Run | None = None) -> Run:
    return running(run, lease_owner="w-2#00001234")


def claim_on_view(run: Run | None = None) -> Known:
    """A fresh message's claim on the run's view, answered with the run as it landed."""
    return then(arrived(), run=running(run))


def refused_claim(current: Run | None, message: RunMessage | None = None, now: datetime = NOW) -> Known:
    return then(arrived(message, now), refused=True, run=current)


def job_read(job: Job | None, message: RunMessage | None = None) -> Known:
    return then(arrived(message or a_message(attempt=1)), job=job)


def target_answered(result: TargetResult, *, exclusive: bool = False, attempt: int = 1, **job: Any) -> Known:
    """The target of a claimed run answered `result`."""
    run = running(a_run(a_job(**job)), attempt=attempt)
    assert run.job_view is not None
    step = StartTarget(started=Started(run, run.job_view, exclusive), target=TARGET)
    return arrived().after(step, NOW + timedelta(seconds=2), result=result)


def finish_answered(
    result: TargetResult, *, exclusive: bool = False, attempt: int = 1, **answer: Any
) -> Known:
    known = target_answered(result, exclusive=exclusive, attempt=attempt, **_policies(exclusive))
    return then(known, **answer)


def _policies(exclusive: bool) -> dict[str, Any]:
    return {"policies": Policies(overlap=OverlapPolicy.QUEUE)} if exclusive else {}


LATER = NOW + timedelta(seconds=2)
HOST_KEY = Concurrency("api.example.com", 2)
ACCEPTED = TargetResult(ok=True, retryable=False, status="202", latency_ms=3, accepted=True)
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:tickwork-target-flow:run"
SFN = Target("stepfunctions", {"state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:m"})
STARTED = TargetResult(ok=True, retryable=False, status="200", latency_ms=9, accepted=True, handle=EXECUTION)
RELEASED = make_run_id("job_a", FIRE + timedelta(minutes=5))
OK = TargetResult(ok=True, retryable=False, status="200", latency_ms=12)
BUSY = TargetResult(ok=False, retryable=True, status="503", latency_ms=9, detail="busy")
BAD = TargetResult(ok=False, retryable=False, status="400", latency_ms=9, detail="bad request")


@dataclass(frozen=True)
class Row:
    name: str
    situation: str
    known: Callable[[], Known]
    kind: type[Step]
    expect: dict[str, Any] = field(default_factory=dict)  # dotted attribute of the step -> value


ROWS: list[Row] = [
    # A message arrives.
    Row(
        "on_time_claims_on_the_view",
        "a message arrives at its due time, its run inside the views' window",
        arrived,
        ClaimRun,
        {"view": None, "claim.timeout_seconds": 60, "claim.trusting_view": True, "claim.expected_attempt": 0},
    ),
    Row(
        "early_by_a_second_is_held",
        "it arrives under a second early (SQS delays round down)",
        lambda: arrived(now=FIRE - timedelta(milliseconds=800)),
        Hold,
        {"until": FIRE},
    ),
    Row(
        "held_then_claims",
        "the hold is over",
        lambda: then(arrived(now=FIRE - timedelta(milliseconds=800))),
        ClaimRun,
        {"view": None},
    ),
    Row(
        "far_early_goes_back",
        "it arrives more than the hold ahead (a backoff beyond SQS's 900 s delay)",
        lambda: arrived(now=FIRE - timedelta(minutes=20)),
        SendBack,
        {"outcome": Outcome.DEFERRED, "message.hops": 1, "message.not_before": FIRE, "unsent": Unsent.RAISE},
    ),
    Row(
        "retry_reads_the_job",
        "a retry's message (attempt > 0): the view was claimed at the first attempt and is not kept current",
        lambda: arrived(a_message(attempt=1)),
        ReadJob,
        {"started": None},
    ),
    Row(
        "no_timeout_reads_the_job",
        "a message without the view's timeout (from before the field existed)",
        lambda: arrived(a_message(timeout_seconds=None)),
        ReadJob,
    ),
    Row(
        "old_run_reads_the_job",
        "its run is older than the views' window (a late catch-up): the view may be stale",
        lambda: arrived(now=FIRE + VIEW_TRUST_WINDOW + timedelta(seconds=1)),
        ReadJob,
    ),
    Row(
        "runaway_reads_its_run",
        f"a message re-sent more than {MAX_HOPS} times arrives",
        lambda: arrived(a_message(hops=MAX_HOPS + 1)),
        ReadRun,
        {"why": Why.RUNAWAY},
    ),
    Row(
        "runaway_run_fails",
        "a runaway's run is still at the message's attempt",
        lambda: then(arrived(a_message(hops=MAX_HOPS + 1)), run=a_run()),
        EndAttempt,
        {"ended.state": RunState.FAILED, "outcome": Outcome.FAILED, "counts": ("RunawayLoops",)},
    ),
    Row(
        "runaway_run_moved_on",
        "a runaway's run has moved on (finished)",
        lambda: then(arrived(a_message(hops=MAX_HOPS + 1)), run=a_run(state=RunState.SUCCEEDED)),
        Done,
        {"outcome": Outcome.DUPLICATE},
    ),
    Row(
        "runaway_without_run",
        "a runaway's run does not exist",
        lambda: then(arrived(a_message(hops=MAX_HOPS + 1)), run=None),
        Done,
        {"outcome": Outcome.NOT_FOUND, "counts": ("OrphanMessages",)},
    ),
    # The claim on the view.
    Row(
        "claimed_starts_the_target",
        "the claim landed (the hot path: one conditional write)",
        claim_on_view,
        StartTarget,
        {"started.run.attempt": 1, "started.exclusive": False, "counts": ("RunsStarted",)},
    ),
    Row(
        "claimed_without_target_reads_the_job",
        "the claim landed, but the view leaves out a large target",
        lambda: claim_on_view(with_view(a_run(), target=None)),
        ReadJob,
        {"started.run.attempt": 1, "counts": ("RunsStarted",)},
    ),
    Row(
        "target_on_the_job",
        "the job read for the target has it",
        lambda: then(claim_on_view(with_view(a_run(), target=None)), job=a_job()),
        StartTarget,
        {"target": TARGET},
    ),
    Row(
        "target_job_deleted",
        "the job read for the target is gone",
        lambda: then(claim_on_view(with_view(a_run(), target=None)), job=None),
        EndAttempt,
        {"ended.state": RunState.CANCELLED, "ended.reason": "job deleted", "by_message": False},
    ),
    Row(
        "calendar_read_at_the_claim",
        "the claim landed, and the job names exclusion calendars: they are read as they are now",
        lambda: claim_on_view(on_calendars(a_run())),
        ReadCalendars,
        {"names": ("us-holidays",), "counts": ()},
    ),
    Row(
        "excluded_fire_ends_without_a_call",
        "a calendar excludes the fire: the attempt ends `excluded`, the target is not called",
        lambda: then(claim_on_view(on_calendars(a_run())), calendars=(HOLIDAYS,)),
        EndAttempt,
        {"ended.state": RunState.EXCLUDED, "outcome": Outcome.EXCLUDED, "after_target": True},
    ),
    Row(
        "excluded_end_lands",
        "the excluded end was written",
        lambda: then(then(claim_on_view(on_calendars(a_run())), calendars=(HOLIDAYS,))),
        Done,
        {"outcome": Outcome.EXCLUDED, "counts": ("RunsExcluded",)},
    ),
    Row(
        "calendar_lets_the_fire_run",
        "no calendar excludes the fire: it starts",
        lambda: then(claim_on_view(on_calendars(a_run())), calendars=(ELSEWHEN,)),
        StartTarget,
        {"counts": ("RunsStarted",), "logs": ()},
    ),
    Row(
        "missing_calendar_excludes_nothing",
        "the calendar was deleted: nothing excludes the fire, and the log says which is missing",
        lambda: then(claim_on_view(on_calendars(a_run())), calendars=()),
        StartTarget,
        {"counts": ("RunsStarted",), "levels": (logging.WARNING,)},
    ),
    Row(
        "calendar_read_throttled_is_read_again",
        "the calendar read throttled past the store's retries: the run is claimed, so it is read again",
        lambda: then(claim_on_view(on_calendars(a_run())), throttled=TransientStoreError("throttled")),
        Hold,
        {"then.names": ("us-holidays",), "counts": ("CalendarReadRetries",)},
    ),
    Row(
        "calendar_never_read_runs",
        "the read throttled three times: an unread calendar excludes nothing, the fire runs (logged)",
        unread_three_times,
        StartTarget,
        {"counts": ("RunsStarted", "CalendarsUnread"), "levels": (logging.ERROR,)},
    ),
    Row(
        "run_now_is_never_excluded",
        "a run asked for (run now) on a job with calendars: it starts without reading them",
        lambda: claim_on_view(on_calendars(a_run(trigger=Trigger.MANUAL))),
        StartTarget,
    ),
    Row(
        "retry_is_not_decided_again",
        "a retry's claim (attempt 2) on a job with calendars: its target answered once, it is not re-decided",
        lambda: then(
            job_read(a_job(calendars=("us-holidays",))), run=running(after_an_attempt("500"), attempt=2)
        ),
        StartTarget,
    ),
    Row(
        "retry_after_a_silent_end_decides_again",
        "a retry after an attempt that ended by its lease (the worker died after its claim): decided again",
        lambda: then(
            job_read(a_job(calendars=("us-holidays",))),
            run=running(after_an_attempt("LeaseExpired"), attempt=2),
        ),
        ReadCalendars,
    ),
    Row(
        "requested_retry_is_never_excluded",
        "a retry its owner asked for (a cancelled run, never started): it starts without reading calendars",
        lambda: claim_on_view(replace(on_calendars(a_run()), retry_requested=True)),
        StartTarget,
    ),
    Row(
        "overlap_job_reads_calendars_before_the_slot",
        "an overlap queue job with calendars: they are read before its run takes the job's one slot",
        lambda: refused_claim(on_calendars(a_run(a_job(policies=Policies(overlap=OverlapPolicy.QUEUE))))),
        ReadCalendars,
        {"started": None},
    ),
    Row(
        "excluded_before_the_slot_ends_unclaimed",
        "its fire is excluded: it ends `excluded` unclaimed, and no running or waiting slot is taken",
        lambda: then(
            refused_claim(on_calendars(a_run(a_job(policies=Policies(overlap=OverlapPolicy.QUEUE))))),
            calendars=(HOLIDAYS,),
        ),
        EndAttempt,
        {"ended.state": RunState.EXCLUDED, "after_target": False, "ended.attempt": 0},
    ),
    Row(
        "calendar_read_before_the_slot_throttled_goes_back",
        "the read before the overlap slot throttled past the store's retries: nothing is claimed, the "
        "message goes back to read again",
        lambda: then(
            refused_claim(on_calendars(a_run(a_job(policies=Policies(overlap=OverlapPolicy.QUEUE))))),
            throttled=TransientStoreError("throttled"),
        ),
        SendBack,
        {"unsent": Unsent.THROTTLED, "counts": ("ThrottledDeliveries",)},
    ),
    Row(
        "not_excluded_takes_the_slot",
        "its fire is not excluded: it takes the slot as any overlap run",
        lambda: then(
            refused_claim(on_calendars(a_run(a_job(policies=Policies(overlap=OverlapPolicy.QUEUE))))),
            calendars=(ELSEWHEN,),
        ),
        TakeSlot,
    ),
    Row(
        "no_run_yet_looks_again",
        "the claim finds no run, and the ticker's commit may still land (sent first, commit_by not settled)",
        lambda: refused_claim(None),
        SendBack,
        {"outcome": Outcome.WAITING_FOR_RUN, "counts": ("MessagesBeforeTheirRun",), "message.hops": 1},
    ),
    Row(
        "no_run_ever_is_an_orphan",
        "the claim finds no run, and its commit can no longer land",
        lambda: refused_claim(None, a_message(commit_by=NOW - COMMIT_SETTLE - timedelta(seconds=1))),
        Done,
        {"outcome": Outcome.NOT_FOUND},
    ),
    Row(
        "own_claim_recognised",
        "the claim was refused by its own condition: its first try landed and the response was lost",
        lambda: refused_claim(running(lease_expires_at=lease_until(60, NOW, LEASE_MARGIN))),
        StartTarget,
        {"counts": ("LostResponsesRecognised", "RunsStarted")},
    ),
    Row(
        "claimed_by_another_is_a_duplicate",
        "another delivery claimed the run first (not queue-carried: its sweeper entry recovers it)",
        lambda: refused_claim(replace(someone_elses(), queue_carried=False)),
        Done,
        {"outcome": Outcome.DUPLICATE},
    ),
    Row(
        "queue_carried_running_watches_the_lease",
        "a queue-carried run is running the attempt this message started: the message is what recovers it",
        lambda: refused_claim(someone_elses()),
        WatchLease,
        {"running.attempt": 1},
    ),
    Row(
        "finished_run_is_a_duplicate",
        "the run already ended",
        lambda: refused_claim(a_run(state=RunState.SUCCEEDED, attempt=1)),
        Done,
        {"outcome": Outcome.DUPLICATE},
    ),
    Row(
        "view_paused_cancels",
        "the view refused: the job was paused",
        lambda: refused_claim(with_view(a_run(), standing=Standing.PAUSED)),
        EndAttempt,
        {"ended.state": RunState.CANCELLED, "ended.reason": "job paused", "outcome": Outcome.CANCELLED},
    ),
    Row(
        "view_deleted_cancels",
        "the view refused: the job was deleted",
        lambda: refused_claim(with_view(a_run(), standing=Standing.DELETED)),
        EndAttempt,
        {"ended.reason": "job deleted"},
    ),
    Row(
        "view_off_schedule_cancels",
        "the view refused: an edit took this fire off the schedule",
        lambda: refused_claim(with_view(a_run(), standing=Standing.OFF_SCHEDULE)),
        EndAttempt,
        {"ended.state": RunState.CANCELLED, "outcome": Outcome.CANCELLED},
    ),
    Row(
        "view_exclusive_takes_the_slot",
        "the view refused: the job's overlap is skip or queue",
        lambda: refused_claim(with_view(a_run(), overlap=OverlapPolicy.SKIP)),
        TakeSlot,
        {"mine.state": RunState.RUNNING, "mine.attempt": 1, "expected.attempt": 0},
    ),
    Row(
        "view_new_timeout_claims_again",
        "the view refused: the job's timeout changed since the message was sent",
        lambda: refused_claim(with_view(a_run(), timeout_seconds=300)),
        ClaimRun,
        {"claim.timeout_seconds": 300, "view": None},
    ),
    Row(
        "view_new_concurrency_key_goes_back_with_it",
        "the view refused: an edit gave the job another concurrency key or limit since the message was sent",
        lambda: refused_claim(with_view(a_run(), concurrency=HOST_KEY)),
        SendBack,
        {
            "outcome": Outcome.DEFERRED,
            "message.concurrency": HOST_KEY,
            "message.hops": 1,
            "counts": ("ConcurrencyKeyChanges",),
        },
    ),
    Row(
        "second_refusal_reads_the_job",
        "the second claim on the view is refused too (the view moved again)",
        lambda: then(refused_claim(with_view(a_run(), timeout_seconds=300)), refused=True, run=a_run()),
        ReadJob,
    ),
    Row(
        "no_view_reads_the_job",
        "the run has no view (planned before views existed)",
        lambda: refused_claim(a_run(job_view=None)),
        ReadJob,
    ),
    # The job decides.
    Row(
        "job_deleted_reads_the_run_to_cancel",
        "the job read finds the job deleted",
        lambda: job_read(None),
        ReadRun,
        {"why": Why.CANCEL},
    ),
    Row(
        "job_paused_reads_the_run_to_cancel",
        "the job read finds it paused",
        lambda: job_read(a_job(state=JobState.PAUSED)),
        ReadRun,
        {"why": Why.CANCEL},
    ),
    Row(
        "job_exclusive_reads_the_run",
        "the job's overlap is skip or queue: the slot is taken from the run as stored",
        lambda: job_read(a_job(policies=Policies(overlap=OverlapPolicy.QUEUE))),
        ReadRun,
        {"why": Why.EXCLUSIVE},
    ),
    Row(
        "job_allows_claims_with_its_view",
        "the job lets the run go: claim with the job's timeout, not trusting the run's view",
        lambda: job_read(a_job(timeout_seconds=120)),
        ClaimRun,
        {"claim.timeout_seconds": 120, "claim.trusting_view": False, "view.standing": Standing.ACTIVE},
    ),
    Row(
        "a_keyed_claim_names_its_key",
        "a message carrying its job's concurrency key claims with it: the run's view must name the same",
        lambda: job_read(a_job(), a_message(attempt=1, concurrency=HOST_KEY)),
        ClaimRun,
        {"claim.concurrency": HOST_KEY, "claim.trusting_view": False},
    ),
    Row(
        "job_claim_refused_for_another_key",
        "the claim with the job's view is refused: the run's view names another concurrency key",
        lambda: then(job_read(a_job()), refused=True, run=with_view(a_run(attempt=1), concurrency=HOST_KEY)),
        SendBack,
        {"outcome": Outcome.DEFERRED, "message.concurrency": HOST_KEY},
    ),
    Row(
        "job_claim_refused_is_a_duplicate",
        "the claim with the job's view is refused: another delivery took the run",
        lambda: then(job_read(a_job()), refused=True, run=a_run(state=RunState.SUCCEEDED, attempt=2)),
        Done,
        {"outcome": Outcome.DUPLICATE},
    ),
    Row(
        "cancel_claimable_run",
        "the run the job stops is still this delivery's",
        lambda: then(job_read(a_job(state=JobState.PAUSED)), run=a_run(attempt=1)),
        EndAttempt,
        {"ended.state": RunState.CANCELLED, "ended.reason": "job paused"},
    ),
    Row(
        "cancel_gone_run",
        "the run the job stops does not exist",
        lambda: then(job_read(None), run=None),
        Done,
        {"outcome": Outcome.NOT_FOUND},
    ),
    Row(
        "cancel_moved_run",
        "the run the job stops has moved on",
        lambda: then(job_read(None), run=a_run(state=RunState.CANCELLED, attempt=1)),
        Done,
        {"outcome": Outcome.DUPLICATE},
    ),
    Row(
        "exclusive_run_not_there_yet",
        "the exclusive job's run is not committed yet",
        lambda: then(
            job_read(a_job(policies=Policies(overlap=OverlapPolicy.SKIP)), a_message(timeout_seconds=None)),
            run=None,
        ),
        SendBack,
        {"outcome": Outcome.WAITING_FOR_RUN},
    ),
    Row(
        "exclusive_run_of_another_key_goes_back",
        "the exclusive job's run is claimable, but its view names another concurrency key",
        lambda: then(
            job_read(a_job(policies=Policies(overlap=OverlapPolicy.SKIP))),
            run=with_view(a_run(attempt=1), concurrency=HOST_KEY),
        ),
        SendBack,
        {"outcome": Outcome.DEFERRED, "message.concurrency": HOST_KEY},
    ),
    Row(
        "exclusive_run_takes_the_slot",
        "the exclusive job's run is claimable",
        lambda: then(job_read(a_job(policies=Policies(overlap=OverlapPolicy.SKIP))), run=a_run(attempt=1)),
        TakeSlot,
        {"mine.attempt": 2, "view.overlap": OverlapPolicy.SKIP},
    ),
    # The overlap slot.
    Row(
        "slot_taken_starts_exclusive",
        "the run took the job's running slot",
        lambda: then(refused_claim(with_view(a_run(), overlap=OverlapPolicy.SKIP))),
        StartTarget,
        {"started.exclusive": True, "counts": ("RunsStarted",)},
    ),
    Row(
        "slot_busy_skips",
        "the slot is held by the previous run, overlap skip",
        lambda: then(refused_claim(with_view(a_run(), overlap=OverlapPolicy.SKIP)), busy=True),
        EndAttempt,
        {"ended.state": RunState.SKIPPED, "outcome": Outcome.SKIPPED},
    ),
    Row(
        "slot_busy_queues",
        "the slot is held by the previous run, overlap queue",
        lambda: then(refused_claim(with_view(a_run(), overlap=OverlapPolicy.QUEUE)), busy=True),
        QueueBehind,
        {"waiting.state": RunState.QUEUED},
    ),
    Row(
        "slot_busy_retry_waits",
        "the slot is held, and this is a retry (not a new overlapping fire): it waits, never skipped",
        lambda: then(
            then(job_read(a_job(policies=Policies(overlap=OverlapPolicy.SKIP))), run=a_run(attempt=1)),
            busy=True,
        ),
        SendBack,
        {"outcome": Outcome.DEFERRED, "message.not_before": NOW + BLOCKED_RETRY_WAIT, "message.hops": 1},
    ),
    Row(
        "slot_refused_reads_again",
        "the slot transaction was refused: another delivery claimed the run, or its view moved",
        lambda: then(
            refused_claim(with_view(a_run(), overlap=OverlapPolicy.SKIP)), refused=True, run=someone_elses()
        ),
        ReadRun,
        {"why": Why.REFUSED},
    ),
    Row(
        "slot_refused_own_write",
        "the slot transaction was refused by its own landed first try",
        lambda: _own_slot(),
        StartTarget,
        {"started.exclusive": True, "counts": ("LostResponsesRecognised", "RunsStarted")},
    ),
    Row(
        "queued_behind",
        "the run took the job's waiting slot",
        lambda: then(then(refused_claim(with_view(a_run(), overlap=OverlapPolicy.QUEUE)), busy=True)),
        Done,
        {"outcome": Outcome.QUEUED, "counts": ("RunsQueued",)},
    ),
    Row(
        "waiting_slot_taken_skips",
        "another run already waits in the job's one waiting slot",
        lambda: then(
            then(refused_claim(with_view(a_run(), overlap=OverlapPolicy.QUEUE)), busy=True), busy=True
        ),
        EndAttempt,
        {"ended.state": RunState.SKIPPED, "ended.reason": "overlap=queue and a run is already waiting"},
    ),
    Row(
        "queue_refused_reads_again",
        "taking the waiting slot was refused: the run moved",
        lambda: then(
            then(refused_claim(with_view(a_run(), overlap=OverlapPolicy.QUEUE)), busy=True), refused=True
        ),
        ReadRun,
        {"why": Why.REFUSED},
    ),
    # A refused write, read again.
    Row(
        "reread_still_claimable_goes_back",
        "read again after a refusal, the run is still claimable at this attempt (a job write moved its view)",
        lambda: then(_refused_end(), run=a_run()),
        SendBack,
        {"outcome": Outcome.DEFERRED, "message.hops": 1, "shard": 3},
    ),
    Row(
        "reread_gone",
        "read again after a refusal, the run is gone",
        lambda: then(_refused_end(), run=None),
        Done,
        {"outcome": Outcome.NOT_FOUND},
    ),
    Row(
        "reread_running_watches",
        "read again after a refusal, its queue-carried run is running this message's attempt",
        lambda: then(_refused_end(), run=someone_elses()),
        WatchLease,
    ),
    # The target answered.
    Row(
        "target_ok_finishes",
        "the target answered success",
        lambda: target_answered(OK),
        EndAttempt,
        {"ended.state": RunState.SUCCEEDED, "after_target": True, "frees_slot": False},
    ),
    Row(
        "target_failed_retries",
        "the target failed, retryably, with attempts left",
        lambda: target_answered(BUSY),
        EndAttempt,
        {"ended.state": RunState.RETRY_WAIT, "outcome": Outcome.RETRY_SCHEDULED},
    ),
    Row(
        "target_failed_for_good",
        "the target failed, not retryably",
        lambda: target_answered(BAD),
        EndAttempt,
        {"ended.state": RunState.FAILED, "outcome": Outcome.FAILED},
    ),
    Row(
        "last_attempt_fails",
        "the target failed retryably on the last attempt",
        lambda: target_answered(BUSY, attempt=3),
        EndAttempt,
        {"ended.state": RunState.FAILED},
    ),
    Row(
        "exclusive_finish_frees_the_slot",
        "an exclusive run's target answered success: the finish frees the job's slot",
        lambda: target_answered(OK, exclusive=True),
        EndAttempt,
        {"frees_slot": True},
    ),
    Row(
        "exclusive_retry_keeps_the_slot",
        "an exclusive run will retry: it keeps the slot",
        lambda: target_answered(BUSY, exclusive=True),
        EndAttempt,
        {"frees_slot": False, "ended.state": RunState.RETRY_WAIT},
    ),
    # The finish write.
    Row(
        "finished",
        "the finish landed: success",
        lambda: finish_answered(OK),
        Done,
        {"outcome": Outcome.SUCCEEDED, "counts": ("RunsSucceeded",)},
    ),
    Row(
        "retry_sent",
        "the finish landed: waiting to retry, its message goes out (the sweeper re-sends it if that fails)",
        lambda: finish_answered(BUSY),
        SendBack,
        {"outcome": Outcome.RETRY_SCHEDULED, "unsent": Unsent.SWEEPER, "message.attempt": 1},
    ),
    Row(
        "failed",
        "the finish landed: failed",
        lambda: finish_answered(BAD),
        Done,
        {"outcome": Outcome.FAILED, "counts": ("RunsFailed",), "levels": (logging.ERROR,)},
    ),
    Row(
        "stale_completion_discarded",
        "the finish was refused: the lease expired and a newer attempt owns the run",
        lambda: finish_answered(OK, refused=True, run=running(attempt=2, lease_owner="w-3")),
        Done,
        {"outcome": Outcome.STALE_COMPLETION, "counts": ("StaleCompletions",)},
    ),
    Row(
        "own_finish_recognised",
        "the finish was refused by its own landed first try",
        lambda: _own_finish(),
        Done,
        {"outcome": Outcome.SUCCEEDED, "counts": ("LostResponsesRecognised", "RunsSucceeded")},
    ),
    Row(
        "release_reads_the_waiting_run",
        "the exclusive finish freed the slot for a queued run",
        lambda: finish_answered(OK, exclusive=True, released=RELEASED),
        ReadRun,
        {"why": Why.RELEASE, "then": Outcome.SUCCEEDED, "counts": ("RunsSucceeded",)},
    ),
    Row(
        "release_sends_the_waiting_run",
        "the released run is still queued: its message goes out, its own first re-send",
        lambda: then(
            finish_answered(OK, exclusive=True, released=RELEASED),
            run=replace(a_run(), scheduled_for=FIRE + timedelta(minutes=5), state=RunState.QUEUED),
        ),
        SendBack,
        {"outcome": Outcome.SUCCEEDED, "message.hops": 1, "unsent": Unsent.SWEEPER},
    ),
    Row(
        "release_already_moved",
        "the released run is no longer queued",
        lambda: then(finish_answered(OK, exclusive=True, released=RELEASED), run=None),
        Done,
        {"outcome": Outcome.SUCCEEDED, "counts": ()},
    ),
    Row(
        "ended",
        "an end (cancel, skip, runaway) landed",
        lambda: then(refused_claim(with_view(a_run(), standing=Standing.PAUSED))),
        Done,
        {"outcome": Outcome.CANCELLED, "counts": ("RunsCancelled",)},
    ),
    Row(
        "end_refused_reads_again",
        "an end written by a delivery was refused",
        lambda: _refused_end(),
        ReadRun,
        {"why": Why.REFUSED},
    ),
    Row(
        "end_of_held_run_refused",
        "the cancel of a run this delivery held (its job gone at the target read) was refused",
        lambda: then(then(claim_on_view(with_view(a_run(), target=None)), job=None), refused=True),
        Done,
        {"outcome": Outcome.DUPLICATE},
    ),
    # Callback runs: the target answers 202 and reports later.
    Row(
        "callback_call_carries_its_token",
        "a callback run's claim landed: the call carries this attempt's signed URLs",
        lambda: claim_on_view(_callback_run()),
        StartTarget,
        {"started.callback.attempt": 1, "started.callback.deadline": NOW + timedelta(hours=1)},
    ),
    Row(
        "accepted_awaits_the_callback",
        "a callback run's target answered 202: the run stays running under the heartbeat lease",
        lambda: _callback_answered(ACCEPTED),
        AwaitCallback,
        {
            "awaiting.state": RunState.RUNNING,
            "awaiting.heartbeat_at": LATER,
            "awaiting.lease_expires_at": LATER + timedelta(seconds=60) + LEASE_MARGIN,
        },
    ),
    Row(
        "callback_answered_at_once",
        "a callback run's target answered 200: the answer is the outcome",
        lambda: _callback_answered(OK),
        EndAttempt,
        {"ended.state": RunState.SUCCEEDED},
    ),
    Row(
        "accepted_keeps_its_message",
        "the accepted lease is written: a queue-carried run's message comes back at the lease end",
        lambda: then(_callback_answered(ACCEPTED)),
        SendBack,
        {
            "outcome": Outcome.ACCEPTED,
            "message.not_before": LATER + timedelta(seconds=60) + LEASE_MARGIN,
            "counts": ("RunsAccepted",),
        },
    ),
    Row(
        "accepted_in_the_sweepers_list",
        "the accepted lease is written for a run the sweeper watches (sent after its commit)",
        lambda: then(_callback_answered(ACCEPTED, queue_carried=False)),
        Done,
        {"outcome": Outcome.ACCEPTED},
    ),
    Row(
        "accepted_after_a_takeover",
        "the accepted lease was refused: the attempt's lease had been taken over",
        lambda: then(_callback_answered(ACCEPTED), refused=True, run=running(attempt=2, lease_owner="w-4")),
        Done,
        {"outcome": Outcome.STALE_COMPLETION},
    ),
    # A heartbeat moves the lease while the executor is in the call or writing the attempt's end.
    Row(
        "finish_refused_by_a_heartbeat_writes_again",
        "the finish was refused because a heartbeat moved the lease: same attempt, same owner: write again",
        lambda: then(target_answered(OK), refused=True, run=_beaten()),
        EndAttempt,
        {"expected.lease_expires_at": NOW + timedelta(hours=1), "ended.state": RunState.SUCCEEDED},
    ),
    Row(
        "accept_refused_by_a_heartbeat_writes_again",
        "the 202's lease write was refused because the target heartbeat first: write again, the later lease",
        lambda: then(_callback_answered(ACCEPTED), refused=True, run=_beaten(_callback_run())),
        AwaitCallback,
        {"awaiting.lease_expires_at": NOW + timedelta(hours=1)},
    ),
    Row(
        "accept_write_throttled_writes_again",
        "the 202's lease write throttled past the store's retries: wait, then write it again",
        lambda: then(_callback_answered(ACCEPTED), throttled=TransientStoreError("throttled")),
        Hold,
        {"then.awaiting.heartbeat_at": LATER},
    ),
    Row(
        "a_watch_reads_the_run_first",
        "a message watching its running run's lease comes back: it reads the run (no slot, no claim)",
        lambda: arrived(replace(a_message(), watch=True)),
        ReadRun,
        {"why": Why.WATCH},
    ),
    Row(
        "a_watch_finds_its_run_running",
        "the watched run still runs this message's attempt",
        lambda: then(arrived(replace(a_message(), watch=True)), run=someone_elses()),
        WatchLease,
    ),
    Row(
        "a_watch_finds_its_run_claimable",
        "the watched run is claimable at this message's attempt again: a delivery like any other",
        lambda: then(arrived(replace(a_message(), watch=True)), run=a_run()),
        ClaimRun,
    ),
    # Tracked runs: Tickwork follows what the attempt started (a Step Functions execution) to its end.
    Row(
        "tracked_start_is_followed",
        "a tracked run's start answered with what it began: the run stays running, to its deadline",
        lambda: _tracked_answered(STARTED),
        AwaitCallback,
        {
            "awaiting.tracking": EXECUTION,
            "awaiting.lease_expires_at": NOW + timedelta(hours=1) + LEASE_MARGIN,
        },
    ),
    Row(
        "tracked_first_look",
        "the tracked run is written: its first look goes out, a few seconds on",
        lambda: then(_tracked_answered(STARTED)),
        SendBack,
        {"outcome": Outcome.ACCEPTED, "message.polls": 1, "message.not_before": LATER + timedelta(seconds=5)},
    ),
    Row(
        "a_look_reads_the_run",
        "a look at a tracked run arrives",
        lambda: arrived(_look(), now=_look().not_before),
        ReadRun,
        {"why": Why.POLL},
    ),
    Row(
        "a_look_asks_the_target",
        "the run still follows what this attempt started, within its lease",
        lambda: then(arrived(_look(), now=_look().not_before), run=_tracking()),
        PollTarget,
        {"running.tracking": EXECUTION, "target": SFN},
    ),
    Row(
        "a_look_after_the_deadline_asks_first",
        "a look finds the tracked attempt's lease over: it asks once more (the work may have just ended)",
        lambda: then(arrived(_look(), now=NOW + timedelta(hours=2)), run=_tracking()),
        PollTarget,
    ),
    Row(
        "still_running_at_the_deadline_ends_the_attempt",
        "still running at the lease end: the attempt ends as a silent worker's does",
        lambda: then(then(arrived(_look(), now=NOW + timedelta(hours=2)), run=_tracking()), result=None),
        WatchLease,
    ),
    Row(
        "a_tracked_runs_own_message_looks",
        "a tracked run's own message comes back (its first look never went): it looks",
        lambda: refused_claim(_tracking()),
        PollTarget,
    ),
    Row(
        "a_look_at_a_run_that_moved_on",
        "a look finds the run ended",
        lambda: then(
            arrived(_look(), now=_look().not_before), run=a_run(state=RunState.SUCCEEDED, attempt=1)
        ),
        Done,
        {"outcome": Outcome.DUPLICATE},
    ),
    Row(
        "still_running_looks_again",
        "what the attempt started is still running: look again, later each time (not a hop)",
        lambda: then(then(arrived(_look(), now=_look().not_before), run=_tracking()), result=None),
        SendBack,
        {"outcome": Outcome.TRACKING, "message.polls": 2, "message.hops": 0},
    ),
    Row(
        "tracked_work_ended",
        "what the attempt started ended: its end is the attempt's",
        lambda: then(then(arrived(_look(), now=_look().not_before), run=_tracking()), result=OK),
        EndAttempt,
        {"after_target": True, "ended.state": RunState.SUCCEEDED, "counts": ("TrackedRunsEnded",)},
    ),
    Row(
        "tracked_work_failed",
        "what the attempt started failed: the job's retry policy decides",
        lambda: then(then(arrived(_look(), now=_look().not_before), run=_tracking()), result=BUSY),
        EndAttempt,
        {"ended.state": RunState.RETRY_WAIT, "outcome": Outcome.RETRY_SCHEDULED},
    ),
    # What the invocation carrying the delivery has left.
    Row(
        "a_call_that_would_outlast_the_invocation_waits",
        "the claim's call could outlast the invocation carrying it: the message goes to a fresh invocation",
        lambda: replace(arrived(), deadline=NOW + timedelta(seconds=60)),
        SendBack,
        {"outcome": Outcome.DEFERRED, "message.hops": 1, "counts": ("DeadlineDeferrals",)},
    ),
    Row(
        "a_call_that_fits_is_claimed",
        "the call and its finish fit in what the invocation has left",
        lambda: replace(arrived(), deadline=NOW + timedelta(seconds=60 + 15)),
        ClaimRun,
    ),
    # The concurrency bound: a slot in every pool before a claim, freed when the attempt is done.
    Row(
        "a_slot_before_the_claim",
        "under a concurrency bound, a message arrives: the attempt takes its slots before its claim",
        lambda: bounded(arrived()),
        AcquireSlots,
        {"hold.attempt": 1, "hold.lease_expires_at": lease_until(60, NOW, LEASE_MARGIN)},
    ),
    Row(
        "slot_taken_then_claims",
        "the slots are taken",
        lambda: then(bounded(arrived())),
        ClaimRun,
        {"claim.expected_attempt": 0},
    ),
    Row(
        "slots_taken_claim_within_their_lease",
        "the slots took half a second to take: the claim gives that up, its lease ends with theirs",
        lambda: _slots_taken_after(timedelta(milliseconds=500)),
        ClaimRun,
        {
            "claim.lease_expires_at": lease_until(60, NOW, LEASE_MARGIN),
            "claim.now": NOW + timedelta(seconds=0.5),
        },
    ),
    Row(
        "slots_taken_slowly_move_their_lease",
        "the slots took five seconds to take (store retries): their lease moves to the claim's before it",
        lambda: _slots_taken_after(timedelta(seconds=5)),
        ExtendSlots,
        {"hold.lease_expires_at": lease_until(60, NOW + timedelta(seconds=5), LEASE_MARGIN)},
    ),
    Row(
        "slots_moved_then_claims",
        "the slots' lease moved",
        lambda: then(_slots_taken_after(timedelta(seconds=5))),
        ClaimRun,
        {"claim.lease_expires_at": lease_until(60, NOW + timedelta(seconds=5), LEASE_MARGIN)},
    ),
    Row(
        "slots_lost_before_the_claim_wait",
        "moving the slots' lease found them taken over: no claim; what the move reached is freed; it waits",
        lambda: then(_slots_taken_after(timedelta(seconds=5)), busy=True),
        ReleaseSlots,
        {"then.outcome": Outcome.WAITING_FOR_SLOT},
    ),
    Row(
        "slots_move_before_the_claim_throttled",
        "moving the slots' lease before the claim throttled past the store's retries: no claim; what the move"
        " may hold is freed, then it goes back",
        lambda: then(_slots_taken_after(timedelta(seconds=5)), throttled=TransientStoreError("throttled")),
        ReleaseSlots,
        {"then.outcome": Outcome.DEFERRED, "then.unsent": Unsent.THROTTLED},
    ),
    Row(
        "bound_full_reads_the_run",
        "a pool has no free slot: is the message's run still waiting for a claim, or already running?",
        lambda: then(bounded(arrived()), busy=True),
        ReadRun,
        {"why": Why.SLOT},
    ),
    Row(
        "bound_full_waits_in_the_queue",
        "a pool has no free slot, the run waits for a claim: back in the queue to ask again (not a hop)",
        lambda: then(then(bounded(arrived()), busy=True), run=a_run()),
        SendBack,
        {
            "outcome": Outcome.WAITING_FOR_SLOT,
            "message.slot_waits": 1,
            "message.hops": 0,
            "counts": ("SlotWaits",),
        },
    ),
    Row(
        "bound_full_own_run_running_watches",
        "a pool has no free slot, and the message's run is running its attempt (a redelivery): it watches"
        " the lease, never waits for the slot its own run holds",
        lambda: then(then(bounded(arrived()), busy=True), run=someone_elses()),
        WatchLease,
    ),
    Row(
        "bound_full_run_done_is_a_duplicate",
        "a pool has no free slot, and the message's run has ended: a duplicate",
        lambda: then(
            then(bounded(arrived()), busy=True),
            run=replace(running(), state=RunState.SUCCEEDED, lease_owner=None, lease_expires_at=None),
        ),
        Done,
        {"outcome": Outcome.DUPLICATE},
    ),
    Row(
        "bound_full_run_not_there_yet",
        "a pool has no free slot, and the ticker has not committed the run yet: it looks again later",
        lambda: then(then(bounded(arrived()), busy=True), run=None),
        SendBack,
        {"outcome": Outcome.WAITING_FOR_RUN},
    ),
    Row(
        "bound_full_for_a_key_the_run_no_longer_names",
        "a pool has no free slot, and a job write since gave the waiting run another concurrency key: the"
        " message goes back with the view's key, to wait in that key's pool",
        lambda: then(then(bounded(arrived()), busy=True), run=with_view(a_run(), concurrency=HOST_KEY)),
        SendBack,
        {"outcome": Outcome.DEFERRED, "message.concurrency": HOST_KEY, "counts": ("ConcurrencyKeyChanges",)},
    ),
    Row(
        "bound_full_exclusive_waits",
        "a pool has no free slot for an exclusive run just read claimable: it waits, with no second read",
        lambda: then(
            bounded(
                then(job_read(a_job(policies=Policies(overlap=OverlapPolicy.SKIP))), run=a_run(attempt=1))
            ),
            busy=True,
        ),
        SendBack,
        {"outcome": Outcome.WAITING_FOR_SLOT, "message.slot_waits": 1},
    ),
    Row(
        "finish_frees_the_slot",
        "the finish landed: the slot is freed before the delivery ends",
        lambda: then(_holding_slot(target_answered(OK))),
        ReleaseSlots,
        {"hold.attempt": 1, "then.outcome": Outcome.SUCCEEDED},
    ),
    Row(
        "freed_then_done",
        "the slot is freed",
        lambda: then(then(_holding_slot(target_answered(OK)))),
        Done,
        {"outcome": Outcome.SUCCEEDED},
    ),
    Row(
        "refused_claim_frees_the_slot",
        "the claim was refused (another delivery has the run): the slot taken for it is freed",
        lambda: then(
            then(bounded(arrived())), refused=True, run=replace(someone_elses(), queue_carried=False)
        ),
        ReleaseSlots,
        # Its own hold (named by its lease owner), never the winner's.
        {"then.outcome": Outcome.DUPLICATE, "hold.run_id": f"{a_run().run_id}@{WORKER}"},
    ),
    Row(
        "another_key_frees_the_slot",
        "the claim was refused: the run's view names another concurrency key; the slots taken are freed",
        lambda: then(then(bounded(arrived())), refused=True, run=with_view(a_run(), concurrency=HOST_KEY)),
        ReleaseSlots,
        {"then.outcome": Outcome.DEFERRED, "then.message.concurrency": HOST_KEY},
    ),
    Row(
        "accepted_moves_the_slot_first",
        "a callback run was accepted: its slot's lease moves to the accepted lease before the run's does",
        lambda: _holding_slot(_callback_answered(ACCEPTED)),
        ExtendSlots,
        {"hold.lease_expires_at": LATER + timedelta(seconds=60) + LEASE_MARGIN},
    ),
    Row(
        "accepted_slot_moved_then_the_lease",
        "the slot's lease moved: the run's accepted lease is written",
        lambda: then(_holding_slot(_callback_answered(ACCEPTED))),
        AwaitCallback,
        {"awaiting.lease_expires_at": LATER + timedelta(seconds=60) + LEASE_MARGIN},
    ),
    Row(
        "accepted_keeps_the_slot",
        "the accepted lease is written: the slot stays taken (its lease is the run's), the message watches",
        lambda: then(then(_holding_slot(_callback_answered(ACCEPTED)))),
        SendBack,
        {"outcome": Outcome.ACCEPTED, "counts": ("RunsAccepted",)},
    ),
    Row(
        "accepted_shorter_keeps_the_slot",
        "the accepted lease, written, is shorter than the claim's: the slot keeps the claim's (never"
        " shortened: a heartbeat may have moved it meanwhile; the attempt's end frees it)",
        lambda: then(_holding_slot(_callback_answered(ACCEPTED), until=NOW + timedelta(seconds=870))),
        SendBack,
        {"outcome": Outcome.ACCEPTED},
    ),
    Row(
        "accepted_write_throttled_keeps_the_slot",
        "the accepted lease's write throttled every try: the message goes back, the slot stays (the target"
        " holds the work; the slot's lease is at least the run's)",
        lambda: then(
            replace(then(_holding_slot(_callback_answered(ACCEPTED))), rewrites=FINISH_WRITES),
            throttled=TransientStoreError("throttled"),
        ),
        SendBack,
        {"unsent": Unsent.THROTTLED},
    ),
    Row(
        "slot_lost_while_calling",
        "moving the slot's lease found it taken over (the call outlived its lease): counted, the run goes on",
        lambda: then(_holding_slot(_callback_answered(ACCEPTED)), busy=True),
        AwaitCallback,
        {"counts": ("SlotsLost",)},
    ),
    Row(
        "accepted_slot_move_throttled",
        "moving the slot's lease throttled past the store's retries: the run's accepted lease ends with the"
        " slot's (a heartbeat moves both)",
        lambda: then(_holding_slot(_callback_answered(ACCEPTED)), throttled=TransientStoreError("throttled")),
        Hold,
        {"until": LATER + timedelta(seconds=1), "counts": ("SlotMoveRetries",)},
    ),
    Row(
        "accepted_slot_move_throttled_every_try",
        "moving the slot's lease throttled on every try: the run's accepted lease ends with the slot's (a"
        " heartbeat moves both)",
        lambda: then(
            replace(_holding_slot(_callback_answered(ACCEPTED)), slot_moves=FINISH_WRITES),
            throttled=TransientStoreError("throttled"),
        ),
        AwaitCallback,
        {
            "awaiting.lease_expires_at": lease_until(60, NOW, LEASE_MARGIN),
            "counts": ("SlotExtensionsThrottled",),
        },
    ),
    Row(
        "slot_take_throttled",
        "taking the slots throttled past the store's retries: what it may hold is freed, then it goes back",
        lambda: then(bounded(arrived()), throttled=TransientStoreError("throttled")),
        ReleaseSlots,
        {"then.outcome": Outcome.DEFERRED, "then.unsent": Unsent.THROTTLED},
    ),
    Row(
        "carried_end_frees_the_workers_slot",
        "a carried end landed: the delivery frees the slot the attempt's worker took",
        lambda: then(then(bounded(_finish_arrives()), run=running())),
        ReleaseSlots,
        {"hold.run_id": f"{a_run().run_id}@{WORKER}", "hold.attempt": 1, "then.outcome": Outcome.SUCCEEDED},
    ),
    # The finish write throttles: the target is never called again for a result already known.
    Row(
        "finish_throttled_tries_again",
        "the finish write throttled past the store's retries, the lease has time: wait, then write again",
        lambda: then(target_answered(OK), throttled=TransientStoreError("throttled")),
        Hold,
        {"then.after_target": True, "until": NOW + timedelta(seconds=3), "counts": ("FinishWriteRetries",)},
    ),
    Row(
        "finish_written_again",
        "the wait before writing the finish again is over",
        lambda: then(then(target_answered(OK), throttled=TransientStoreError("throttled"))),
        EndAttempt,
        {"after_target": True, "ended.state": RunState.SUCCEEDED},
    ),
    Row(
        "finish_goes_by_message",
        "the finish write throttled every try: the attempt's end goes by message, never a second call",
        lambda: _finish_throttled(times=3),
        SendBack,
        {
            "outcome": Outcome.FINISH_SENT,
            "unsent": Unsent.THROTTLED,
            "message.finish.state": RunState.SUCCEEDED,
            "message.finish.attempt": 1,
            "message.finish.worker": WORKER,
            "counts": ("ThrottledDeliveries", "FinishesSent"),
        },
    ),
    Row(
        "finish_throttled_near_the_lease_end",
        "the finish write throttled and the lease ends before a retry could: the end goes by message",
        lambda: _finish_throttled(times=1, at=NOW + timedelta(seconds=89, milliseconds=500)),
        SendBack,
        {"outcome": Outcome.FINISH_SENT},
    ),
    Row(
        "finish_message_reads_the_run",
        "a message carrying an attempt's end arrives",
        lambda: _finish_arrives(),
        ReadRun,
        {"why": Why.FINISH},
    ),
    Row(
        "finish_message_applied",
        "the run is still the running attempt the carried end is for: write it",
        lambda: then(_finish_arrives(), run=running()),
        EndAttempt,
        {"after_target": True, "ended.state": RunState.SUCCEEDED, "counts": ("FinishesApplied",)},
    ),
    Row(
        "finish_message_applied_lands",
        "the carried end landed",
        lambda: then(then(_finish_arrives(), run=running())),
        Done,
        {"outcome": Outcome.SUCCEEDED, "counts": ("RunsSucceeded",)},
    ),
    Row(
        "finish_message_too_late",
        "the attempt the carried end is for is over (its lease expired and a newer attempt took the run)",
        lambda: then(_finish_arrives(), run=running(attempt=2, lease_owner="w-9")),
        Done,
        {"outcome": Outcome.DUPLICATE},
    ),
    # The lease watch.
    Row(
        "lease_live",
        "the watched run's lease is live: the message comes back at its end",
        lambda: then(refused_claim(someone_elses()), watched=LeaseWatched()),
        Done,
        {"outcome": Outcome.WATCHING_LEASE},
    ),
    Row(
        "lease_expired_retries",
        "the watched lease expired: the silent attempt ended and its retry went out",
        lambda: then(
            refused_claim(someone_elses()),
            watched=LeaseWatched(ended=a_run(state=RunState.RETRY_WAIT, attempt=1)),
        ),
        Done,
        {"outcome": Outcome.LEASE_EXPIRED, "counts": ("ExpiredLeases",)},
    ),
    Row(
        "lease_expired_frees_the_silent_attempts_slot",
        "under a bound, the watched lease expired and the silent attempt ended: its slot is freed now",
        lambda: then(
            bounded(refused_claim(someone_elses())),
            watched=LeaseWatched(ended=a_run(state=RunState.RETRY_WAIT, attempt=1)),
        ),
        ReleaseSlots,
        {"hold.run_id": f"{a_run().run_id}@w-2#00001234", "then.outcome": Outcome.LEASE_EXPIRED},
    ),
    Row(
        "lease_expired_fails",
        "the watched lease expired on the last attempt",
        lambda: then(
            refused_claim(someone_elses()),
            watched=LeaseWatched(ended=a_run(state=RunState.FAILED, attempt=3)),
        ),
        Done,
        {"outcome": Outcome.LEASE_EXPIRED, "counts": ("ExpiredLeases", "RunsFailed")},
    ),
    Row(
        "lease_expired_retry_unsent",
        "the watched lease expired and the retry's message failed to go (the sweeper re-sends it)",
        lambda: then(
            refused_claim(someone_elses()),
            watched=LeaseWatched(ended=a_run(state=RunState.RETRY_WAIT, attempt=1), retry_not_sent="down"),
        ),
        Done,
        {"counts": ("ExpiredLeases", "DispatchFailures"), "levels": (logging.ERROR,)},
    ),
    Row(
        "lease_run_moved",
        "the watched run moved while we looked (finished, or taken over)",
        lambda: then(refused_claim(someone_elses()), watched=LeaseWatched(moved=True)),
        Done,
        {"outcome": Outcome.DUPLICATE},
    ),
    # The store throttles.
    Row(
        "throttled_goes_back",
        "a store call still throttles after the store's retries (before or after the target)",
        lambda: then(arrived(), throttled=TransientStoreError("ProvisionedThroughputExceeded")),
        SendBack,
        {"outcome": Outcome.DEFERRED, "unsent": Unsent.THROTTLED, "counts": ("ThrottledDeliveries",)},
    ),
]


def _refused_end() -> Known:
    """A cancel written by this delivery (the view said paused) was refused."""
    return then(refused_claim(with_view(a_run(), standing=Standing.PAUSED)), refused=True)


def _callback_run(**changes: Any) -> Run:
    return with_view(
        a_run(**changes), completion=Completion.CALLBACK, heartbeat_seconds=60, timeout_seconds=3600
    )


def _callback_answered(result: TargetResult, *, queue_carried: bool = True) -> Known:
    run = running(_callback_run(queue_carried=queue_carried))
    assert run.job_view is not None
    started = Started(run, run.job_view, exclusive=False, claimed_at=NOW)
    return arrived().after(StartTarget(started=started, target=TARGET), LATER, result=result)


def _tracked(**changes: Any) -> Run:
    job = a_job(target=SFN)
    return with_view(a_run(job, **changes), completion=Completion.TRACKED, timeout_seconds=3600)


def _tracked_answered(result: TargetResult) -> Known:
    run = running(_tracked())
    assert run.job_view is not None
    started = Started(run, run.job_view, exclusive=False, claimed_at=NOW)
    return arrived().after(StartTarget(started=started, target=SFN), LATER, result=result)


def _look() -> RunMessage:
    step = next_step(then(_tracked_answered(STARTED)))
    assert isinstance(step, SendBack)
    return RunMessage.from_json(step.message.to_json())


def _tracking() -> Run:
    return replace(
        running(_tracked()), tracking=EXECUTION, lease_expires_at=NOW + timedelta(hours=1) + LEASE_MARGIN
    )


POOLS = (Pool(ALL, 100),)


def bounded(known: Known) -> Known:
    """`known` under a concurrency bound of 100."""
    return replace(known, pools=POOLS)


def _slots_taken_after(took: timedelta) -> Known:
    """A bounded message whose slots were taken `took` after it arrived."""
    known = bounded(arrived())
    return known.after(next_step(known), NOW + took)


def _holding_slot(known: Known, until: datetime | None = None) -> Known:
    """`known` for a delivery that holds its attempt's slot (it took it before its claim), until its claim's
    lease, or `until`."""
    run = running()
    assert run.lease_expires_at is not None
    hold = attempt_hold(run.run_id, WORKER, 1, until or run.lease_expires_at)
    return replace(known, pools=POOLS, holding=hold)


def _beaten(run: Run | None = None) -> Run:
    """`run` as this delivery claimed it, after a heartbeat moved its lease to an hour on."""
    return replace(running(run), lease_expires_at=NOW + timedelta(hours=1))


def _finish_throttled(times: int, at: datetime = NOW) -> Known:
    """The finish write after a successful target throttled `times` times, the last at `at`."""
    known = target_answered(OK)
    for _ in range(times - 1):
        known = then(then(known, throttled=TransientStoreError("throttled")))
    return known.after(next_step(known), at, throttled=TransientStoreError("throttled"))


def _finish_message() -> RunMessage:
    step = next_step(_finish_throttled(times=3))
    assert isinstance(step, SendBack)
    return RunMessage.from_json(step.message.to_json())  # as the queue delivers it


def _finish_arrives() -> Known:
    message = _finish_message()
    return arrived(message, now=message.not_before)


def _own_slot() -> Known:
    known = refused_claim(with_view(a_run(), overlap=OverlapPolicy.SKIP))
    step = next_step(known)
    assert isinstance(step, TakeSlot)
    return known.after(step, NOW, refused=True, run=step.mine)


def _own_finish() -> Known:
    known = target_answered(OK)
    step = next_step(known)
    assert isinstance(step, EndAttempt)
    return known.after(step, NOW, refused=True, run=step.ended)


def _attribute(step: Step, dotted: str) -> Any:
    if dotted == "levels":
        return tuple(line.level for line in step.logs)
    value: Any = step
    for name in dotted.split("."):
        value = getattr(value, name)
    return value


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_delivery_table(row: Row) -> None:
    step = next_step(row.known())
    assert isinstance(step, row.kind), f"{row.situation}: {describe(step)}"
    for dotted, value in row.expect.items():
        assert _attribute(step, dotted) == value, f"{row.name}: {dotted}"


def test_the_rows_are_distinct_situations() -> None:
    assert len(ROWS) >= 30
    assert len({row.name for row in ROWS}) == len(ROWS)
    assert len({row.situation for row in ROWS}) == len(ROWS)


def test_a_step_that_ends_the_delivery_has_nothing_after_it() -> None:
    for final in (
        Done(outcome=Outcome.QUEUED),
        next_step(then(arrived(), throttled=TransientStoreError("x"))),
    ):
        with pytest.raises(ValueError, match="ends a delivery"):
            next_step(arrived().after(final, NOW))


def test_the_throttled_send_back_grows_with_the_hops_and_never_precedes_the_due_time() -> None:
    delays = []
    for hops in (0, 3, 6):
        known = then(arrived(a_message(hops=hops)), throttled=TransientStoreError("x"))
        step = next_step(known)
        assert isinstance(step, SendBack)
        assert step.message.not_before >= FIRE
        delays.append((step.message.not_before - NOW).total_seconds())
    assert all(5.0 <= delay <= 65.0 for delay in delays)


def describe(step: Step) -> str:
    """A step as the design doc's table shows it."""
    if isinstance(step, Hold):
        text = (
            "hold until due" if step.then is None else f"wait, then {describe(replace(step.then, counts=()))}"
        )
    elif isinstance(step, ReadRun):
        text = f"read the run ({step.why.value})"
    elif isinstance(step, ReadJob):
        text = "read the job" + (" for the target" if step.started is not None else "")
    elif isinstance(step, ReadCalendars):
        text = "read the job's calendars"
    elif isinstance(step, ClaimRun):
        on = "the run's view" if step.view is None else "the job's view"
        text = f"claim on {on}"
    elif isinstance(step, TakeSlot):
        text = "take the overlap slot"
    elif isinstance(step, QueueBehind):
        text = "queue behind"
    elif isinstance(step, StartTarget):
        text = "start the target" + (" (holding the slot)" if step.started.exclusive else "")
    elif isinstance(step, AwaitCallback):
        text = "await the callback" if step.awaiting.tracking is None else "follow what it started"
    elif isinstance(step, AcquireSlots):
        text = f"take the slots, then {describe(replace(step.then, counts=()))}"
    elif isinstance(step, ExtendSlots):
        text = f"move the slots' lease, then {describe(replace(step.then, counts=()))}"
    elif isinstance(step, ReleaseSlots):
        text = f"free the slots, then {describe(replace(step.then, counts=()))}"
    elif isinstance(step, PollTarget):
        text = "look at what the attempt started"
    elif isinstance(step, WatchLease):
        text = "watch the lease"
    elif isinstance(step, EndAttempt):
        text = f"end the attempt: {step.ended.state.value}" + (", free the slot" if step.frees_slot else "")
    elif isinstance(step, SendBack):
        text = f"send back later → {step.outcome.value}"
    elif isinstance(step, Done):
        text = f"done → {step.outcome.value}"
    else:
        raise TypeError(step)
    return text + (f" [{', '.join(step.counts)}]" if step.counts else "")


def table() -> str:
    lines = ["| situation | next step | row |", "|---|---|---|"]
    for row in ROWS:
        lines.append(f"| {row.situation} | {describe(next_step(row.known()))} | `{row.name}` |")
    return "\n".join(lines)


TABLE_START = "<!-- delivery-table: rendered from tests/domain/test_delivery.py -->"
TABLE_END = "<!-- /delivery-table -->"


TABLE_BLOCK = re.compile(re.escape(TABLE_START) + r"\n(.*?)\n" + re.escape(TABLE_END), re.S)


def test_the_design_doc_shows_this_table() -> None:
    match = TABLE_BLOCK.search(DOC.read_text())
    assert match is not None, f"docs/design.md has no {TABLE_START} ... {TABLE_END} block"
    assert match.group(1) == table(), (
        "docs/design.md's delivery table differs: `python -m tests.domain.test_delivery --write` rewrites it"
    )


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write"]:
        rendered = f"{TABLE_START}\n{table()}\n{TABLE_END}"
        DOC.write_text(TABLE_BLOCK.sub(lambda _: rendered, DOC.read_text(), count=1))
    else:
        print(table())


# What `Known.after` sets from the step just carried out; every other field is carried over as it was.
_STEP_RESULTS = {
    "last", "now", "run", "refused", "busy", "released", "result", "watched", "throttled", "holding",
    "claims_on_view", "finish_writes", "rewrites", "slot_moves", "calendar_reads",
}  # fmt: skip


def test_after_carries_over_every_field_that_is_not_a_result_of_the_step() -> None:
    """`Known.after` names each field (it does not use `dataclasses.replace`): a field added to `Known`
    and forgotten there would be reset to its default after the first step."""
    counters = {"claims_on_view", "finish_writes", "rewrites", "slot_moves", "calendar_reads"}
    values: dict[str, Any] = {
        f.name: 0 if f.name in counters else None if f.name == "holding" else object() for f in fields(Known)
    }
    known = Known(**values)
    after = known.after(Hold(until=NOW), NOW)
    carried = [f.name for f in fields(Known) if f.name not in _STEP_RESULTS]
    assert carried  # the message, the worker, the job read, ...
    assert {name: getattr(after, name) for name in carried} == {name: values[name] for name in carried}
