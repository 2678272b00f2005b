"""The run as the API answers it: the lease while running and the retry time while waiting, which the web
console's run timeline shows."""

from __future__ import annotations

from datetime import timedelta

from tests.domain.test_repair_timing import DUE, a_run
from tickwork.api.models import RunOut
from tickwork.domain.models import RunState


def test_a_running_run_shows_who_holds_its_lease_and_until_when() -> None:
    lease = {"lease_owner": "w-1#abc", "lease_expires_at": DUE + timedelta(minutes=2)}
    running = a_run(state=RunState.RUNNING, attempt=1, **lease)
    out = RunOut.of(running).model_dump(mode="json")
    assert out["lease"] == {"owner": "w-1#abc", "expires_at": "2026-12-02T12:07:00Z"}
    assert out["retry_at"] is None


def test_a_run_waiting_to_retry_shows_when_and_no_lease() -> None:
    out = RunOut.of(a_run(state=RunState.RETRY_WAIT, attempt=1, retry_at=DUE + timedelta(seconds=30)))
    dumped = out.model_dump(mode="json")
    assert dumped["lease"] is None
    assert dumped["retry_at"] == "2026-12-02T12:05:30Z"
