"""When the sweeper looks at an open run (`check_at`, the open-runs index key) and when it acts
(`needs_repair`), table-driven at a fixed time."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.domain.execution import DISPATCH_GRACE, check_at, needs_repair
from tickwork.domain.models import Run, RunState, Trigger

DUE = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)
MIN = timedelta(minutes=1)


def a_run(**changes: object) -> Run:
    run = Run(
        job_id="job_a",
        scheduled_for=DUE,
        due_at=DUE,
        state=RunState.PLANNED,
        trigger=Trigger.SCHEDULE,
        job_version=1,
        planned_at=DUE - 2 * MIN,
        expires_at=DUE + timedelta(days=30),
        shard=0,
    )
    return replace(run, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        pytest.param(a_run(), DUE + DISPATCH_GRACE, id="planned_run_is_checked_a_grace_after_its_due_time"),
        pytest.param(
            a_run(planned_at=DUE + 10 * MIN, trigger=Trigger.CATCH_UP),
            DUE + 10 * MIN + DISPATCH_GRACE,
            id="catch_up_run_counts_from_when_it_was_planned",
        ),
        pytest.param(
            a_run(redispatched_at=DUE + 10 * MIN),
            DUE + 20 * MIN,
            id="a_re_send_doubles_the_wait_before_the_next",
        ),
        pytest.param(
            a_run(
                state=RunState.RETRY_WAIT, attempt=1, retry_at=DUE + 30 * MIN, redispatched_at=DUE + 3 * MIN
            ),
            DUE + 30 * MIN + DISPATCH_GRACE,
            id="a_re_send_from_an_earlier_attempt_does_not_count_for_a_retry",
        ),
        pytest.param(
            a_run(state=RunState.RUNNING, attempt=1, lease_expires_at=DUE + 10 * MIN),
            DUE + DISPATCH_GRACE,
            id="a_long_lease_keeps_the_first_check_the_claim_does_not_move_it",
        ),
        pytest.param(
            a_run(state=RunState.RUNNING, attempt=1, lease_expires_at=DUE + 40 * timedelta(seconds=1)),
            DUE + 40 * timedelta(seconds=1),
            id="a_short_lease_brings_the_check_forward",
        ),
        pytest.param(a_run(state=RunState.SUCCEEDED), None, id="a_finished_run_leaves_the_index"),
    ],
)
def test_check_at(run: Run, expected: datetime | None) -> None:
    assert check_at(run) == expected


def test_a_running_run_is_repaired_only_once_its_lease_has_expired() -> None:
    running = a_run(state=RunState.RUNNING, attempt=1, lease_expires_at=DUE + 10 * MIN)

    assert not needs_repair(running, DUE + 5 * MIN)  # listed (past its check time), but alive
    assert needs_repair(running, DUE + 10 * MIN)
    assert not needs_repair(a_run(), DUE + MIN)
    assert needs_repair(a_run(), DUE + DISPATCH_GRACE)
