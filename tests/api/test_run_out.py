"""The run as the API answers it: the lease while running and the retry time while waiting, which the web
console's run timeline shows."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tickwork.api.models import RunOut
from tickwork.domain.models import Run, RunState, Trigger

AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def run(**fields: Any) -> Run:
    base = Run(
        job_id="job_0123456789abcdef0123",
        scheduled_for=AT,
        due_at=AT,
        state=RunState.PLANNED,
        trigger=Trigger.SCHEDULE,
        job_version=1,
        planned_at=AT,
        expires_at=AT + timedelta(days=30),
        shard=3,
    )
    return replace(base, **fields)


def test_a_running_run_shows_who_holds_its_lease_and_until_when() -> None:
    lease_expires_at = AT + timedelta(minutes=2)
    running = run(state=RunState.RUNNING, attempt=1, lease_owner="w-1#abc", lease_expires_at=lease_expires_at)
    out = RunOut.of(running).model_dump(mode="json")
    assert out["lease"] == {"owner": "w-1#abc", "expires_at": "2026-12-04T12:02:00Z"}
    assert out["retry_at"] is None


def test_a_run_waiting_to_retry_shows_when_and_no_lease() -> None:
    out = RunOut.of(run(state=RunState.RETRY_WAIT, attempt=1, retry_at=AT + timedelta(seconds=30)))
    dumped = out.model_dump(mode="json")
    assert dumped["lease"] is None
    assert dumped["retry_at"] == "2026-12-04T12:00:30Z"
