"""Domain errors. Adapters translate AWS errors into these; handlers map them to HTTP."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tickwork.domain.models import Run


class TickworkError(Exception):
    """Base class of every error the domain raises on purpose."""


class ValidationError(TickworkError):
    """Bad input. `field` names the offending input so the caller can fix it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotFoundError(TickworkError):
    """The job or run does not exist (or belongs to another owner)."""


class ConflictError(TickworkError):
    """The write lost a race or contradicts the current state."""


class VersionMismatchError(ConflictError):
    """An optimistic-concurrency precondition (If-Match / version) failed."""


class RunsMovedError(VersionMismatchError):
    """A job write lost a race with a claim of one of the runs whose job view it rewrites: read and write
    again (the job write and the views must land together)."""


class TargetNotGrantedError(TickworkError):
    """The job's AWS target is not one its owner was granted (domain/grants.py): a 403."""


class QuotaExceededError(TickworkError):
    """A request would break one of the owner's quotas (domain/quotas.py): a 403 naming it."""

    def __init__(self, quota: str, detail: str) -> None:
        super().__init__(f"quota {quota}: {detail}")
        self.quota = quota


class TransientStoreError(TickworkError):
    """Throttling or a transaction conflict: safe to retry with backoff, never to drop."""


class StoreError(TickworkError):
    """The store refused a request for a reason retrying will not change (a malformed request, an item
    over the size limit, a missing table or permission): a bug or a misconfiguration, named by the
    store's error code."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


class PlanConflictError(ConflictError):
    """The planning transaction was cancelled; says which of its conditions failed."""

    def __init__(self, *, run_exists: bool, job_changed: bool) -> None:
        super().__init__(f"plan cancelled (run_exists={run_exists}, job_changed={job_changed})")
        self.run_exists = run_exists
        self.job_changed = job_changed


class RequestConflictError(ConflictError):
    """Runs on request could not be created: one of them exists already (`run_exists`), or the request's
    Idempotency-Key record was written meanwhile by the same request sent twice (`request_exists`)."""

    def __init__(self, message: str, *, run_exists: bool, request_exists: bool) -> None:
        super().__init__(message)
        self.run_exists = run_exists
        self.request_exists = request_exists


class DispatchError(TickworkError):
    """Some runs could not be handed to the queue; the sweeper re-sends them."""

    def __init__(self, failed_run_ids: list[str], detail: str) -> None:
        super().__init__(f"dispatch failed for {len(failed_run_ids)} run(s): {detail}")
        self.failed_run_ids = failed_run_ids


class StaleRunError(ConflictError):
    """The run moved on (a newer attempt, the sweeper, another executor) since it was read. `current` is
    the run as the store holds it, when the store returned it with the refusal (it may be this caller's own
    write, landed by an earlier try whose response was lost: domain.execution.is_own_write tells)."""

    def __init__(self, message: str, current: Run | None = None) -> None:
        super().__init__(message)
        self.current = current


class ScalingError(TickworkError):
    """The executor's pollers could not be set (starting warm): the burst starts from the mappings' ramp."""
