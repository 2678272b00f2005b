"""Run history as a job's owner sees it: pages of runs newest first, and one run in full.

Pages continue from an opaque cursor: base64url of a small JSON object naming where the last page stopped.
A cursor is only ever a position inside the caller's own data; one that does not decode to such a position
is refused with InvalidCursorError (400), never passed to the store.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from tickwork.domain.errors import NotFoundError, ValidationError
from tickwork.domain.models import Job, Run, RunState, split_run_id
from tickwork.domain.timekeys import compact_instant, parse_compact_instant
from tickwork.services.ports import FailedRunReader, RunReader

MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 20
# A state filter can drop most of what a query reads: one request reads at most this many pages of runs,
# then hands back a cursor (possibly with a short page) rather than scanning a long history.
MAX_PAGES_PER_REQUEST = 10
_MAX_CURSOR_CHARS = 1024
MAX_ID_BYTES = 255  # ids Tickwork issues are short; a longer one cannot exist (and exceeds key limits)


def plausible_id(job_id: str) -> bool:
    """Whether an id could name a job at all; anything else is simply not found."""
    return 0 < len(job_id.encode("utf-8", errors="replace")) <= MAX_ID_BYTES


class InvalidCursorError(ValidationError):
    """The cursor was not issued by this API for this listing (the API answers 400)."""

    def __init__(self, message: str) -> None:
        super().__init__("cursor", message)


def _check(position: dict[str, str], scope: str) -> str:
    canonical = json.dumps(position, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(f"{scope}\0{canonical}".encode()).hexdigest()[:16]


def encode_cursor(position: dict[str, str], scope: str) -> str:
    """`scope` names the listing (its owner, its job): a cursor carries a check of its position within it,
    so an edited, invented or borrowed cursor is refused (400) instead of answering an empty page. It is an
    integrity check, not a signature: the position is the caller's own data either way."""
    raw = json.dumps({**position, "c": _check(position, scope)}, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, keys: Sequence[str], scope: str) -> dict[str, str]:
    """The position a cursor names; InvalidCursorError unless this API issued it for this listing."""
    if not cursor or len(cursor) > _MAX_CURSOR_CHARS:
        raise InvalidCursorError("is empty or too long")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        decoded: Any = json.loads(raw.decode())
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidCursorError("is not a cursor returned by this API") from None
    if not isinstance(decoded, dict) or "c" not in decoded:
        raise InvalidCursorError("is not a cursor returned by this API")
    check = decoded.pop("c")
    position: dict[str, str] = decoded
    if (
        sorted(position) != sorted(keys)
        or not all(isinstance(value, str) and value for value in position.values())
        or not isinstance(check, str)
        or not hmac.compare_digest(check, _check(position, scope))
    ):
        raise InvalidCursorError("is not a cursor returned by this API for this listing")
    return position


@dataclass(frozen=True, slots=True)
class RunPage:
    runs: tuple[Run, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class RunQuery:
    limit: int = DEFAULT_PAGE_SIZE
    cursor: str | None = None
    state: RunState | None = None
    start: datetime | None = None  # scheduled_for >= start
    end: datetime | None = None  # scheduled_for <= end


def _aware_utc(value: datetime | None, field: str) -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(field, "must include a time zone offset (e.g. 2026-12-02T12:00:00Z)")
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise ValidationError(field, "is outside the supported range of dates") from None


class RunHistoryStore(RunReader, FailedRunReader, Protocol):
    """What run history reads: a job's runs, and an owner's failed runs across jobs."""


class RunService:
    def __init__(self, store: RunHistoryStore) -> None:
        self._store = store

    def failed(self, owner: str, *, since: datetime | None, limit: int, cursor: str | None) -> RunPage:
        """The owner's failed runs across every job, newest first (by when they failed), from the sparse
        failed-runs index: only failed runs are in it, so the read never touches the rest."""
        if not 1 <= limit <= MAX_PAGE_SIZE:
            raise ValidationError("limit", f"must be 1-{MAX_PAGE_SIZE}")
        since = _aware_utc(since, "from")
        since_text = "" if since is None else since.isoformat()
        scope = f"failed\0{owner}\0{since_text}"
        before = None if cursor is None else decode_cursor(cursor, ["failed_order"], scope)["failed_order"]
        runs, position = self._store.failed_runs(owner, since=since, before=before, limit=limit)
        next_cursor = None if position is None else encode_cursor({"failed_order": position}, scope)
        return RunPage(tuple(runs), next_cursor)

    def _owned_job(self, owner: str, job_id: str) -> Job:
        job = self._store.get_job(job_id) if plausible_id(job_id) else None
        if job is None or job.owner != owner:
            # Another owner's job answers exactly like a missing one.
            raise NotFoundError(f"job {job_id} not found")
        return job

    def list(self, owner: str, job_id: str, query: RunQuery) -> RunPage:
        """Runs of one job, newest first."""
        if not 1 <= query.limit <= MAX_PAGE_SIZE:
            raise ValidationError("limit", f"must be 1-{MAX_PAGE_SIZE}")
        start = _aware_utc(query.start, "from")
        end = _aware_utc(query.end, "to")
        if start is not None and end is not None and end < start:
            raise ValidationError("to", "is before from")
        scope = f"runs\0{owner}\0{job_id}"
        after = None if query.cursor is None else self._cursor_position(query.cursor, start, end, scope)
        self._owned_job(owner, job_id)
        states = () if query.state is None else (query.state,)
        runs: list[Run] = []
        for _ in range(MAX_PAGES_PER_REQUEST):
            page, after = self._store.query_runs(
                job_id, start=start, end=end, states=states, limit=query.limit - len(runs), after=after
            )
            runs.extend(page)
            if after is None or len(runs) >= query.limit:
                break
        next_cursor = (
            None if after is None else encode_cursor({"scheduled_for": compact_instant(after)}, scope)
        )
        return RunPage(tuple(runs), next_cursor)

    def get(self, owner: str, job_id: str, run_id: str) -> Run:
        try:
            run_job_id, scheduled_for = split_run_id(run_id)
        except ValueError:
            raise NotFoundError(f"run {run_id} not found") from None
        if run_job_id != job_id:
            raise NotFoundError(f"run {run_id} not found")
        self._owned_job(owner, job_id)
        run = self._store.get_run(job_id, scheduled_for)
        if run is None:
            raise NotFoundError(f"run {run_id} not found")
        return run

    @staticmethod
    def _cursor_position(cursor: str, start: datetime | None, end: datetime | None, scope: str) -> datetime:
        text = decode_cursor(cursor, ["scheduled_for"], scope)["scheduled_for"]
        try:
            position = parse_compact_instant(text)
        except ValueError:
            raise InvalidCursorError("is not a cursor returned by this API") from None
        # The store refuses a start key outside the query's key range; so does the API, as a bad cursor.
        if (start is not None and position < start) or (end is not None and position > end):
            raise InvalidCursorError(
                "does not belong to this time range (from/to changed since it was issued)"
            )
        return position
