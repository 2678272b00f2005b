"""The conditions and updates of the stores' conditional writes, as Python over a stored record
(adapters/records.py).

The DynamoDB adapter spells each of them as a condition or update expression; the adapters that check a
record themselves before writing it (SQLite inside one immediate transaction, memory under its lock)
evaluate these, so every engine refuses the same writes with the same domain errors and leaves the same
record behind."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tickwork.adapters.records import (
    REMOVABLE_JOB_ATTRIBUTES,
    concurrency_to_item,
    job_to_item,
    run_from_item,
)
from tickwork.domain.errors import PlanConflictError, StaleRunError
from tickwork.domain.execution import CLAIMABLE_STATES, Claim
from tickwork.domain.models import Job, JobState, OverlapPolicy, Run, RunState, Standing
from tickwork.domain.timekeys import format_instant, format_instant_ms

_CLAIMABLE = frozenset(str(state) for state in CLAIMABLE_STATES)
# Attribute of a job record: sha256 of the create request that carried an Idempotency-Key (as DynamoDB's).
REQUEST_FINGERPRINT = "request_fingerprint"


def job_still_at(item: Mapping[str, Any] | None, expected: Job) -> bool:
    """The job write's condition: the stored job is at the version and next fire it was read at."""
    if item is None or item.get("version") != expected.version:
        return False
    if item.get("run_requests", 0) != expected.run_requests:
        return False
    expected_fire = None if expected.next_fire_at is None else format_instant(expected.next_fire_at)
    return item.get("next_fire_at") == expected_fire


def plannable(item: dict[str, Any] | None, job: Job, run_exists: bool) -> dict[str, Any]:
    """The stored job record a plan may advance (commit_plan's condition): refused, with PlanConflictError
    naming the failed conditions, unless the job is still active at the version and next fire it was read
    at and none of the plan's runs exists."""
    job_changed = not (
        item is not None
        and job.next_fire_at is not None
        and item.get("state") == str(JobState.ACTIVE)
        and item.get("version") == job.version
        and item.get("next_fire_at") == format_instant(job.next_fire_at)
    )
    if run_exists or job_changed or item is None:
        raise PlanConflictError(run_exists=run_exists, job_changed=job_changed)
    return item


def run_still_at(item: Mapping[str, Any] | None, expected: Run) -> bool:
    """A run write's fence: the run is still in the state, attempt, lease and job view it was read in."""
    if item is None or item.get("state") != str(expected.state) or item.get("attempt") != expected.attempt:
        return False
    if expected.lease_expires_at is not None and item.get("lease_expires_at") != format_instant_ms(
        expected.lease_expires_at
    ):
        return False
    if expected.job_view is not None:
        view = item.get("job_view") or {}
        if view.get("version") != expected.job_view.version:
            return False
    return True


def claimable(item: Mapping[str, Any] | None, attempt: int) -> bool:
    """A claim's condition: the run waits to be started (planned, waiting to retry, queued) at `attempt`."""
    return item is not None and item.get("state") in _CLAIMABLE and item.get("attempt") == attempt


def apply_changes(
    stored: dict[str, Any], before: Mapping[str, Any], after: Mapping[str, Any]
) -> dict[str, Any]:
    """The DynamoDB adapter's update diff on the stored record: set what `after` changed from `before`,
    remove what it dropped, leave the rest (attributes other writers own) alone."""
    updated = dict(stored)
    for key, value in after.items():
        if before.get(key) != value:
            updated[key] = value
    for key in before:
        if key not in after:
            updated.pop(key, None)
    return updated


def rewritten_job(stored: Mapping[str, Any], updated: Job) -> dict[str, Any]:
    """A job edit's record: the fields job management owns from `updated`; the executors' overlap slot
    (active_run, queued_run) and the create fingerprint stay as they are."""
    item = {k: v for k, v in stored.items() if k not in REMOVABLE_JOB_ATTRIBUTES}
    item.update(job_to_item(updated))
    return item


def stored_run(item: Mapping[str, Any] | None) -> Run | None:
    """The run a refused write found (None if there is none): what StaleRunError carries as `current`."""
    return None if item is None else run_from_item(item)


def claimed_item(stored: dict[str, Any] | None, claim: Claim) -> dict[str, Any]:
    """The executor's claim on a run item read inside the caller's lock or transaction: claimable at the
    expected attempt, its view naming the concurrency key its slots were taken for (and, trusting the view,
    the view lets it run under overlap allow with this lease's timeout), then running under the new lease.
    StaleRunError with the stored run otherwise."""
    view = (stored or {}).get("job_view") or {}
    refused = (
        not claimable(stored, claim.expected_attempt)
        or view.get("concurrency") != concurrency_to_item(claim.concurrency)
        or (
            claim.trusting_view
            and (
                view.get("standing") != str(Standing.ACTIVE)
                or view.get("overlap") != str(OverlapPolicy.ALLOW)
                or view.get("timeout_seconds") != claim.timeout_seconds
            )
        )
    )
    if stored is None or refused:
        raise StaleRunError(
            f"run {claim.run_id} is not claimable at attempt {claim.expected_attempt}",
            current=stored_run(stored),
        )
    lease = format_instant_ms(claim.lease_expires_at)
    stored.update(
        state=str(RunState.RUNNING),
        attempt=claim.expected_attempt + 1,
        lease_owner=claim.worker,
        lease_expires_at=lease,
    )
    stored.setdefault("started_at", format_instant_ms(claim.now))
    if claim.dispatched_at is not None:
        stored.setdefault("dispatched_at", format_instant_ms(claim.dispatched_at))
    stored.pop("retry_at", None)
    stored.pop("heartbeat_at", None)  # a new attempt has had no heartbeat yet
    stored.pop("tracking", None)  # nor started anything to follow
    if "check_at" in stored and str(stored["check_at"]) > lease:
        # Checked no later than the lease ends, or a dead worker would go unnoticed until then.
        stored["check_at"] = lease
    return stored
