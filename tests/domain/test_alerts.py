"""The events a run's change gives under a job's rules (domain/alerts.py), with frozen times: failures and
dead letters, skipped and missed slots, a late start, a deadline, durations out of bounds or far from the
job's own baseline, N failures in a row and the auto-pause."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.domain.alerts import (
    AlertRules,
    EventKind,
    RunBefore,
    deadline_missed,
    events_of_change,
    reads_the_record,
    sets_deadline_timer,
)
from tickwork.domain.errors import ValidationError
from tickwork.domain.models import Run, RunState, Trigger

FIRE = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def run(state: RunState, *, at: datetime = FIRE, took: float | None = None, **extra: object) -> Run:
    started = at + timedelta(seconds=1) if took is not None else None
    base = Run(
        job_id="job_a",
        scheduled_for=at,
        due_at=at,
        state=state,
        trigger=Trigger.SCHEDULE,
        job_version=1,
        planned_at=at - timedelta(minutes=1),
        expires_at=at + timedelta(days=30),
        shard=0,
        owner="alice",
        started_at=started,
        finished_at=started + timedelta(seconds=took) if started is not None and took is not None else None,
    )
    return replace(base, **extra)  # type: ignore[arg-type]


def kinds(events: tuple[object, ...]) -> list[str]:
    return [str(e.kind) for e in events]  # type: ignore[attr-defined]


def test_a_failure_is_an_event_once_and_a_dead_letter_is_its_own() -> None:
    running = run(RunState.RUNNING)
    failed = run(RunState.FAILED, took=2, reason="500 Internal Server Error")
    assert kinds(events_of_change(running, failed, AlertRules())) == ["run_failed"]
    assert events_of_change(failed, failed, AlertRules()) == ()  # the same change seen again: nothing new
    dead = replace(failed, reason="dead-lettered after 5 deliveries (attempt 1)")
    assert kinds(events_of_change(running, dead, AlertRules())) == ["run_dead_lettered"]
    assert events_of_change(running, failed, AlertRules(on_failure=False)) == ()


def test_skipped_and_missed_slots_only_when_asked() -> None:
    skipped = run(RunState.SKIPPED, reason="overlap=skip: job_a:20261202T115900Z still running")
    missed = run(RunState.MISSED, reason="missed-fire policy skip")
    assert events_of_change(None, skipped, AlertRules()) == ()
    assert kinds(events_of_change(None, skipped, AlertRules(on_skip=True))) == ["slot_skipped"]
    assert kinds(events_of_change(None, missed, AlertRules(on_skip=True))) == ["slot_missed"]


def test_a_late_start_past_the_rule_and_not_before() -> None:
    planned = run(RunState.PLANNED)
    late = replace(run(RunState.RUNNING, took=0), start_delay_ms=45_000, finished_at=None)
    on_time = replace(late, start_delay_ms=29_000)
    rules = AlertRules(late_after_seconds=30)
    [event] = events_of_change(planned, late, rules)
    assert event.kind is EventKind.RUN_LATE and event.detail == "started 45.0 s late"
    assert events_of_change(planned, on_time, rules) == ()
    assert events_of_change(late, late, rules) == ()  # seen again


def test_a_change_feed_s_note_of_the_run_before_reads_as_the_whole_run() -> None:
    """What a feed keeps of the run before a change (its state and start) gives the events the whole
    earlier record gives: the late start once, the failure once."""
    rules = AlertRules(late_after_seconds=30)
    late = replace(run(RunState.RUNNING, took=0), start_delay_ms=45_000, finished_at=None)
    failed = replace(late, state=RunState.FAILED, finished_at=late.started_at, reason="500")
    for whole, note in [
        (run(RunState.PLANNED), RunBefore(RunState.PLANNED)),
        (late, RunBefore(RunState.RUNNING, late.started_at)),
        (failed, RunBefore(RunState.FAILED, failed.started_at)),
    ]:
        for after in (late, failed):
            assert events_of_change(note, after, rules) == events_of_change(whole, after, rules)
    assert kinds(events_of_change(RunBefore(RunState.PLANNED), late, rules)) == ["run_late"]
    assert kinds(events_of_change(RunBefore(RunState.RUNNING, late.started_at), failed, rules)) == [
        "run_failed"
    ]


def test_the_deadline_passes_for_an_open_run_and_a_late_finish_but_not_an_early_one() -> None:
    rules = AlertRules(deadline_seconds=600)
    open_run = run(RunState.RUNNING, took=0)
    assert deadline_missed(open_run, rules, FIRE + timedelta(seconds=599)) is None
    missed = deadline_missed(open_run, rules, FIRE + timedelta(seconds=600))
    assert missed is not None and missed.kind is EventKind.DEADLINE_MISSED
    assert missed.at == FIRE + timedelta(seconds=600)  # the deadline: every check gives the same event
    later = deadline_missed(open_run, rules, FIRE + timedelta(hours=2))
    assert later is not None and later.dedupe_key == missed.dedupe_key
    assert deadline_missed(run(RunState.SUCCEEDED, took=300), rules, FIRE + timedelta(hours=1)) is None
    assert deadline_missed(run(RunState.SUCCEEDED, took=900), rules, FIRE + timedelta(hours=1)) is not None
    assert deadline_missed(run(RunState.MISSED), rules, FIRE + timedelta(hours=1)) is not None
    assert deadline_missed(run(RunState.CANCELLED), rules, FIRE + timedelta(hours=1)) is None
    assert deadline_missed(open_run, AlertRules(), FIRE + timedelta(hours=1)) is None


def test_a_duration_out_of_bounds_and_far_from_the_jobs_own_baseline() -> None:
    running = run(RunState.RUNNING)
    bounds = AlertRules(duration_min_seconds=5, duration_max_seconds=60)
    assert kinds(events_of_change(running, run(RunState.SUCCEEDED, took=90), bounds)) == [
        "duration_out_of_bounds"
    ]
    assert kinds(events_of_change(running, run(RunState.SUCCEEDED, took=2), bounds)) == [
        "duration_out_of_bounds"
    ]
    assert events_of_change(running, run(RunState.SUCCEEDED, took=30), bounds) == ()
    history = tuple(
        run(RunState.SUCCEEDED, at=FIRE - timedelta(minutes=i), took=10 + i % 3) for i in range(1, 6)
    )
    anomaly = AlertRules(anomaly_factor=3)
    [event] = events_of_change(running, run(RunState.SUCCEEDED, took=45), anomaly, history)
    assert event.kind is EventKind.DURATION_ANOMALY and "median of its last 5 is 11.0 s" in event.detail
    assert events_of_change(running, run(RunState.SUCCEEDED, took=20), anomaly, history) == ()
    assert (
        events_of_change(running, run(RunState.SUCCEEDED, took=45), anomaly, history[:4]) == ()
    )  # no baseline


def test_n_failures_in_a_row_then_the_auto_pause_each_once() -> None:
    rules = AlertRules(failures_in_a_row=2, auto_pause_after=3)
    running = run(RunState.RUNNING)
    history: list[Run] = [run(RunState.SUCCEEDED, at=FIRE - timedelta(minutes=9), took=1)]
    seen: list[list[str]] = []
    for minute in range(4):
        failed = run(RunState.FAILED, at=FIRE + timedelta(minutes=minute), took=1, reason="503")
        seen.append(kinds(events_of_change(running, failed, rules, tuple(reversed(history)))))
        history.append(failed)
    assert seen == [
        ["run_failed"],
        ["run_failed", "failures_in_a_row"],
        ["run_failed", "auto_paused"],
        ["run_failed"],
    ]


@pytest.mark.parametrize(
    ("rules", "field"),
    [
        ({"deadline_seconds": 0}, "alerts.deadline_seconds"),
        ({"late_after_seconds": 10**9}, "alerts.late_after_seconds"),
        ({"duration_min_seconds": 60, "duration_max_seconds": 60}, "alerts.duration_min_seconds"),
        ({"anomaly_factor": 1.0}, "alerts.anomaly_factor"),
        ({"auto_pause_after": 0}, "alerts.auto_pause_after"),
    ],
)
def test_a_bad_rule_is_refused_naming_it(rules: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        AlertRules(**rules)  # type: ignore[arg-type]
    assert refused.value.field == field


# --- which changes the watcher must decode ------------------------------------------------------------------

_RULES = st.builds(
    AlertRules,
    on_failure=st.booleans(),
    on_dead_letter=st.booleans(),
    on_skip=st.booleans(),
    late_after_seconds=st.none() | st.integers(1, 120),
    deadline_seconds=st.none() | st.integers(1, 600),
    duration_min_seconds=st.none() | st.just(0.5),
    duration_max_seconds=st.none() | st.just(30.0),
    anomaly_factor=st.none() | st.just(2.0),
    failures_in_a_row=st.none() | st.integers(1, 4),
    auto_pause_after=st.none() | st.integers(1, 4),
)
_BEFORE = st.none() | st.builds(
    RunBefore, st.sampled_from(RunState), st.none() | st.just(FIRE + timedelta(seconds=1))
)


@st.composite
def _after(draw: st.DrawFn) -> Run:
    state = draw(st.sampled_from(RunState))
    took = draw(st.none() | st.sampled_from([0.1, 2.0, 90.0]))
    delay = draw(st.sampled_from([100, 45_000, 500_000]))
    reason = draw(st.sampled_from([None, "500", "dead-lettered after 5 deliveries (attempt 1)"]))
    after = run(state, took=took, reason=reason)
    return after if after.started_at is None else replace(after, start_delay_ms=delay)


def _ended(state: RunState, took: int) -> Run:
    return run(state, at=FIRE - timedelta(minutes=took), took=took)


# A history drawn at random, or one that makes a streak or a baseline (rare among random ones).
_RECENT = st.lists(
    st.builds(_ended, st.sampled_from([RunState.FAILED, RunState.SUCCEEDED]), st.sampled_from([1, 2, 3, 60])),
    max_size=8,
) | st.sampled_from(
    [
        [_ended(RunState.SUCCEEDED, took) for took in (1, 2, 2, 3, 2, 2)],
        [_ended(RunState.FAILED, took) for took in (1, 2, 3)],
    ]
)


@settings(max_examples=3000, deadline=None)
@given(before=_BEFORE, after=_after(), rules=_RULES, recent=_RECENT)
def test_a_change_whose_record_nothing_reads_gives_no_event_and_no_timer(
    before: RunBefore | None, after: Run, rules: AlertRules, recent: list[Run]
) -> None:
    """The watcher judges a change by its state alone where `reads_the_record` says no: then neither
    `events_of_change` nor the deadline's timer may give anything, whatever the record, rules and history."""
    if not reads_the_record(before, after.state, rules):
        assert events_of_change(before, after, rules, recent) == ()
        assert not sets_deadline_timer(before, after.state, rules)


def test_a_deadline_s_timer_is_set_when_a_run_is_written_unless_skipped() -> None:
    rules = AlertRules(deadline_seconds=60)
    assert sets_deadline_timer(None, RunState.PLANNED, rules)
    assert sets_deadline_timer(None, RunState.MISSED, rules)  # missed is late: its deadline passes
    assert not sets_deadline_timer(None, RunState.SKIPPED, rules)
    assert not sets_deadline_timer(RunBefore(RunState.PLANNED), RunState.RUNNING, rules)
    assert not sets_deadline_timer(None, RunState.PLANNED, AlertRules())


def test_a_burst_s_starts_and_successes_are_judged_by_their_state_alone() -> None:
    """Under the rules most jobs have (the defaults), a run's start and success read nothing of its record;
    its failure, a late rule, a deadline or a duration rule make them read it."""
    planned, running = RunBefore(RunState.PLANNED), RunBefore(RunState.RUNNING, FIRE)
    defaults = AlertRules()
    assert not reads_the_record(None, RunState.PLANNED, defaults)
    assert not reads_the_record(planned, RunState.RUNNING, defaults)
    assert not reads_the_record(running, RunState.SUCCEEDED, defaults)
    assert not reads_the_record(None, RunState.SKIPPED, defaults)
    assert reads_the_record(running, RunState.FAILED, defaults)
    assert reads_the_record(None, RunState.SKIPPED, AlertRules(on_skip=True))
    assert reads_the_record(None, RunState.PLANNED, AlertRules(deadline_seconds=60))
    assert reads_the_record(planned, RunState.RUNNING, AlertRules(late_after_seconds=30))
    assert reads_the_record(running, RunState.SUCCEEDED, AlertRules(duration_max_seconds=30))
    assert not reads_the_record(RunBefore(RunState.FAILED), RunState.FAILED, defaults)  # seen again
