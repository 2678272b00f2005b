"""Runs on request: run now, retry a failed run, backfill a past window (docs/design.md "Runs on request").

Each request is one store transaction per at most REQUEST_CHUNK runs, conditional on the job's version and
request counter (so a concurrent edit or delete cannot miss the runs it creates), and, with an
Idempotency-Key, on the key's record: a request sent twice does its work once and answers the same."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from tickwork.domain.clock import Clock
from tickwork.domain.errors import (
    ConflictError,
    DispatchError,
    NotFoundError,
    RequestConflictError,
    StaleRunError,
    VersionMismatchError,
)
from tickwork.domain.models import Job, JobState, Run, split_run_id
from tickwork.domain.quotas import OwnerQuotas
from tickwork.domain.requests import (
    REQUEST_RETENTION,
    BackfillWindow,
    JobPausedError,
    RequestKind,
    RunRequest,
    backfill_fires,
    backfill_runs,
    check_may_request,
    manual_run,
    off_slot_instant,
    request_key,
    retried,
)
from tickwork.domain.timekeys import format_instant_ms, parse_instant
from tickwork.services.jobs import IdempotencyKeyReusedError
from tickwork.services.ports import Dispatcher, RunRequestStore
from tickwork.services.runs import plausible_id

logger = logging.getLogger(__name__)

# Runs per transaction: DynamoDB takes 100 items, and the job's counter and the key's record take two.
REQUEST_CHUNK = 90
# Lost races with job writes (or another run now in the same microsecond) before the request gives up.
MAX_REQUEST_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class Requested:
    """Runs created or restarted by a request; `replayed`: an earlier request with the same key did it."""

    runs: tuple[Run, ...]
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class BackfillResult:
    created: int
    skipped: int  # slots that already had a run (rerun not set)
    first_due_at: datetime | None  # when the first and the last created run start (gradually)
    last_due_at: datetime | None
    replayed: bool = False


def _fingerprint(kind: RequestKind, job_id: str, parameters: Mapping[str, Any]) -> str:
    canonical = json.dumps({"kind": str(kind), "job": job_id, **parameters}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


class RunRequests:
    def __init__(
        self, store: RunRequestStore, dispatcher: Dispatcher, clock: Clock, quotas: OwnerQuotas | None = None
    ) -> None:
        self._store = store
        self._dispatcher = dispatcher
        self._clock = clock
        self._quotas = quotas or OwnerQuotas()

    # --- run now -------------------------------------------------------------------------------------

    def run_now(
        self, owner: str, job_id: str, *, even_if_paused: bool = False, idempotency_key: str | None = None
    ) -> Requested:
        """A run of the job now, besides its schedule: it does not move the next fire, and goes through the
        same claim (overlap policy, concurrency cap) as any run. JobPausedError (409) on a paused job
        unless `even_if_paused`."""
        fingerprint = _fingerprint(RequestKind.RUN_NOW, job_id, {"even_if_paused": even_if_paused})
        job = self._owned_job(owner, job_id)
        replay = self._replay(owner, RequestKind.RUN_NOW, job_id, idempotency_key, fingerprint)
        if replay is not None:
            return self._replayed_runs(job_id, replay)
        at: datetime | None = None
        for _ in range(MAX_REQUEST_ATTEMPTS):
            check_may_request(job, even_if_paused=even_if_paused)
            now = self._clock.now()
            at = off_slot_instant(now) if at is None or at < now else at
            run = manual_run(job, at, now=now)
            record = self._record(owner, RequestKind.RUN_NOW, job_id, idempotency_key, fingerprint, now, run)
            try:
                self._store.request_runs(job, [run], record=record)
            except VersionMismatchError:
                job = self._owned_job(owner, job_id)
                continue
            except RequestConflictError as conflict:
                if conflict.request_exists:
                    return self._replay_after_race(
                        owner, RequestKind.RUN_NOW, job_id, idempotency_key, fingerprint
                    )
                # Another run now of this job at the same microsecond: the next free one after it.
                taken = self._store.run_times_between(job_id, at, at + timedelta(seconds=1))
                at = off_slot_instant(max(taken, default=at) + timedelta(microseconds=1))
                continue
            self._dispatch([run], now)
            return Requested((run,))
        raise ConflictError(f"job {job_id} kept changing while the run was requested; try again")

    # --- retry ---------------------------------------------------------------------------------------

    def retry(self, owner: str, job_id: str, run_id: str, *, idempotency_key: str | None = None) -> Requested:
        """The next attempt of a failed or cancelled run (RunNotRetryableError, 409, otherwise)."""
        fingerprint = _fingerprint(RequestKind.RETRY, job_id, {"run_id": run_id})
        job = self._owned_job(owner, job_id)
        scheduled_for = self._run_key(job_id, run_id)
        replay = self._replay(owner, RequestKind.RETRY, job_id, idempotency_key, fingerprint)
        if replay is not None:
            return self._replayed_runs(job_id, replay)
        for _ in range(MAX_REQUEST_ATTEMPTS):
            run = self._store.get_run(job_id, scheduled_for)
            if run is None:
                raise NotFoundError(f"run {run_id} not found")
            now = self._clock.now()
            updated = retried(run, job, now=now)
            record = self._record(
                owner, RequestKind.RETRY, job_id, idempotency_key, fingerprint, now, updated
            )
            try:
                self._store.request_runs(job, [], retried=[(run, updated)], record=record)
            except VersionMismatchError:
                job = self._owned_job(owner, job_id)
                continue
            except StaleRunError:
                continue  # retried by someone else meanwhile, or the sweeper moved it: look again
            except RequestConflictError as conflict:
                if conflict.request_exists:
                    return self._replay_after_race(
                        owner, RequestKind.RETRY, job_id, idempotency_key, fingerprint
                    )
                raise
            self._dispatch([updated], now)
            return Requested((updated,))
        raise ConflictError(f"run {run_id} kept changing while its retry was requested; try again")

    # --- backfill ------------------------------------------------------------------------------------

    def backfill(
        self, owner: str, job_id: str, window: BackfillWindow, *, idempotency_key: str | None = None
    ) -> BackfillResult:
        """A run of every fire of the job's schedule in a past window (trigger backfill), started
        gradually at `window.rate_per_second`. Slots that have a run are left alone unless `rerun`.
        Without `rerun` a backfill is idempotent by its slots; a rerun is, with an Idempotency-Key."""
        now = self._clock.now()
        window.check(now)
        self._quotas.check_backfill_rate(window.rate_per_second)
        fingerprint = _fingerprint(
            RequestKind.BACKFILL,
            job_id,
            {
                "from": window.start.isoformat(),
                "to": window.end.isoformat(),
                "rerun": window.rerun,
                "rate": window.rate_per_second,
            },
        )
        job = self._owned_job(owner, job_id)
        replay = self._replay(owner, RequestKind.BACKFILL, job_id, idempotency_key, fingerprint)
        if replay is not None:
            return self._replayed_backfill(replay)
        # The rerun keys are named by the key, so a retried request names the same ones.
        salt = idempotency_key or uuid.uuid4().hex
        created: list[Run] = []
        mine: set[datetime] = set()
        for _ in range(MAX_REQUEST_ATTEMPTS):
            if job.state is JobState.PAUSED:
                # Its runs would be cancelled at claim, like any fire of a paused job.
                raise JobPausedError(f"job {job_id} is paused: resume it before a backfill")
            fires = backfill_fires(job, window)
            taken = self._store.run_times_between(job_id, fires[0], fires[-1]) if fires else set()
            runs, skipped = backfill_runs(
                job, fires, taken - mine, window, now=now, salt=salt, first_index=len(created)
            )
            # Slots (and rerun keys) this request created before it had to start over are its own.
            runs = [run for run in runs if run.scheduled_for not in mine]
            try:
                job = self._create_in_chunks(
                    job, runs, created, mine, owner, idempotency_key, fingerprint, now, skipped
                )
            except (VersionMismatchError, RequestConflictError) as error:
                if isinstance(error, RequestConflictError) and error.request_exists:
                    replay = self._replay(owner, RequestKind.BACKFILL, job_id, idempotency_key, fingerprint)
                    if replay is not None:
                        return self._replayed_backfill(replay)
                job = self._owned_job(owner, job_id)
                continue
            return self._backfill_result(created, skipped)
        raise ConflictError(f"job {job_id} kept changing during the backfill; try again")

    def _create_in_chunks(
        self,
        job: Job,
        runs: list[Run],
        created: list[Run],
        mine: set[datetime],
        owner: str,
        idempotency_key: str | None,
        fingerprint: str,
        now: datetime,
        skipped: int,
    ) -> Job:
        chunks = [runs[i : i + REQUEST_CHUNK] for i in range(0, len(runs), REQUEST_CHUNK)] or [[]]
        for index, chunk in enumerate(chunks):
            record = None
            if index == len(chunks) - 1 and idempotency_key is not None:
                result = self._backfill_result([*created, *chunk], skipped)
                record = RunRequest(
                    request_key=request_key(owner, RequestKind.BACKFILL, idempotency_key),
                    owner=owner,
                    kind=RequestKind.BACKFILL,
                    job_id=job.job_id,
                    fingerprint=fingerprint,
                    created_at=now,
                    expires_at=now + REQUEST_RETENTION,
                    answer=_backfill_answer(result),
                )
            self._store.request_runs(job, chunk, record=record)
            job = replace(job, run_requests=job.run_requests + 1)
            created.extend(chunk)
            mine.update(run.scheduled_for for run in chunk)
            self._dispatch(chunk, self._clock.now())
        return job

    @staticmethod
    def _backfill_result(created: Sequence[Run], skipped: int) -> BackfillResult:
        dues = [run.due_at for run in created]
        return BackfillResult(len(created), skipped, min(dues, default=None), max(dues, default=None))

    # --- shared --------------------------------------------------------------------------------------

    def _owned_job(self, owner: str, job_id: str) -> Job:
        job = self._store.get_job(job_id) if plausible_id(job_id) else None
        if job is None or job.owner != owner:
            raise NotFoundError(f"job {job_id} not found")
        return job

    @staticmethod
    def _run_key(job_id: str, run_id: str) -> datetime:
        try:
            run_job_id, scheduled_for = split_run_id(run_id)
        except ValueError:
            raise NotFoundError(f"run {run_id} not found") from None
        if run_job_id != job_id:
            raise NotFoundError(f"run {run_id} not found")
        return scheduled_for

    def _record(
        self,
        owner: str,
        kind: RequestKind,
        job_id: str,
        idempotency_key: str | None,
        fingerprint: str,
        now: datetime,
        run: Run,
    ) -> RunRequest | None:
        if idempotency_key is None:
            return None
        return RunRequest(
            request_key=request_key(owner, kind, idempotency_key),
            owner=owner,
            kind=kind,
            job_id=job_id,
            fingerprint=fingerprint,
            created_at=now,
            expires_at=now + REQUEST_RETENTION,
            answer={"run_ids": [run.run_id]},
        )

    def _replay(
        self, owner: str, kind: RequestKind, job_id: str, idempotency_key: str | None, fingerprint: str
    ) -> RunRequest | None:
        """The earlier request this key names, if any; IdempotencyKeyReusedError (409) if it named another
        request (another job, or other parameters)."""
        if idempotency_key is None:
            return None
        # A record past its retention but not yet deleted still answers: its key is still taken.
        record = self._store.get_request(request_key(owner, kind, idempotency_key))
        if record is None:
            return None
        if record.owner != owner or record.job_id != job_id or record.fingerprint != fingerprint:
            raise IdempotencyKeyReusedError(
                "this Idempotency-Key was used for a different request; use a new key"
            )
        return record

    def _replay_after_race(
        self, owner: str, kind: RequestKind, job_id: str, idempotency_key: str | None, fingerprint: str
    ) -> Requested:
        """The same request, sent twice at once, landed first from the other copy: answer as it did."""
        record = self._replay(owner, kind, job_id, idempotency_key, fingerprint)
        if record is None:
            raise ConflictError("the request's Idempotency-Key record vanished; try again")
        return self._replayed_runs(job_id, record)

    def _replayed_runs(self, job_id: str, record: RunRequest) -> Requested:
        runs = []
        for run_id in record.answer.get("run_ids", []):
            _, scheduled_for = split_run_id(str(run_id))
            run = self._store.get_run(job_id, scheduled_for)
            if run is None:
                raise NotFoundError(f"run {run_id} no longer exists (its retention has passed)")
            runs.append(run)
        return Requested(tuple(runs), replayed=True)

    @staticmethod
    def _replayed_backfill(record: RunRequest) -> BackfillResult:
        answer = record.answer

        def instant(name: str) -> datetime | None:
            value = answer.get(name)
            return None if value is None else parse_instant(str(value))

        return BackfillResult(
            int(answer["created"]),
            int(answer["skipped"]),
            instant("first_due_at"),
            instant("last_due_at"),
            replayed=True,
        )

    def _dispatch(self, runs: Sequence[Run], now: datetime) -> None:
        if not runs:
            return
        try:
            self._dispatcher.dispatch(runs, now)
        except DispatchError as error:
            # Committed already; the sweeper re-sends runs whose message never arrived.
            logger.error("dispatch failed after commit, sweeper will re-send: %s", error)


def _backfill_answer(result: BackfillResult) -> dict[str, Any]:
    return {
        "created": result.created,
        "skipped": result.skipped,
        "first_due_at": None if result.first_due_at is None else format_instant_ms(result.first_due_at),
        "last_due_at": None if result.last_due_at is None else format_instant_ms(result.last_due_at),
    }
