"""Job management: create, pause, resume, delete. A write whose next fire falls inside the ticker's
horizon plans those fires itself, in the same transaction, so no tick can pass them over."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from tickwork.domain.clock import Clock
from tickwork.domain.errors import DispatchError, NotFoundError
from tickwork.domain.models import (
    Job,
    JobState,
    MissedFirePolicy,
    OverlapPolicy,
    RetryPolicy,
    Run,
    RunState,
    Target,
    shard_of,
)
from tickwork.domain.planning import plan_batch
from tickwork.domain.schedule import Schedule, next_fire_after
from tickwork.services.planning import DEFAULT_LOOKAHEAD
from tickwork.services.ports import Dispatcher, JobStore

logger = logging.getLogger(__name__)


def new_job_id() -> str:
    return "job_" + uuid.uuid4().hex[:20]


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A validated request to create a job (the API turns its input into this)."""

    name: str
    schedule: Schedule
    target: Target
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    missed_fire: MissedFirePolicy = MissedFirePolicy.RUN_ALL
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_seconds: int = 60
    retention_days: int = 30
    description: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobServiceConfig:
    shard_count: int
    lookahead: timedelta = DEFAULT_LOOKAHEAD
    # A transaction holds at most 100 items; with the interval floor (10 s) and lookahead 120 s a write plans
    # at most 13 runs, far below this bound.
    max_self_planned_runs: int = 90


class JobService:
    def __init__(
        self,
        store: JobStore,
        dispatcher: Dispatcher,
        clock: Clock,
        config: JobServiceConfig,
        new_id: Callable[[], str] = new_job_id,
    ) -> None:
        self._store = store
        self._dispatcher = dispatcher
        self._clock = clock
        self._config = config
        self._new_id = new_id

    def create(self, owner: str, spec: JobSpec) -> Job:
        now = self._clock.now()
        job_id = self._new_id()
        job = Job(
            job_id=job_id,
            owner=owner,
            name=spec.name,
            description=spec.description,
            tags=dict(spec.tags),
            schedule=spec.schedule,
            target=spec.target,
            shard=shard_of(job_id, self._config.shard_count),
            created_at=now,
            updated_at=now,
            next_fire_at=next_fire_after(spec.schedule, now),
            overlap=spec.overlap,
            missed_fire=spec.missed_fire,
            retry=spec.retry,
            timeout_seconds=spec.timeout_seconds,
            retention_days=spec.retention_days,
        )
        job, runs = self._plan_own_horizon(job, now)
        self._store.create_job(job, runs)
        self._dispatch(runs, now)
        return job

    def get(self, owner: str, job_id: str) -> Job:
        job = self._store.get_job(job_id)
        if job is None or job.owner != owner:
            # Another owner's job answers exactly like a missing one.
            raise NotFoundError(f"job {job_id} not found")
        return job

    def pause(self, owner: str, job_id: str) -> Job:
        """Paused jobs leave the `due` index; planned runs are cancelled when an executor claims them."""
        job = self.get(owner, job_id)
        if job.state is JobState.PAUSED:
            return job
        now = self._clock.now()
        paused = replace(job, state=JobState.PAUSED, paused_at=now, updated_at=now, version=job.version + 1)
        self._store.replace_job(job, paused, ())
        return paused

    def resume(self, owner: str, job_id: str) -> Job:
        """Resume from now: fires that fell inside the pause are not run (pausing asked for exactly that)."""
        job = self.get(owner, job_id)
        if job.state is JobState.ACTIVE:
            return job
        now = self._clock.now()
        resumed = replace(
            job,
            state=JobState.ACTIVE,
            paused_at=None,
            updated_at=now,
            version=job.version + 1,
            next_fire_at=next_fire_after(job.schedule, now),
        )
        resumed, runs = self._plan_own_horizon(resumed, now)
        self._store.replace_job(job, resumed, runs)
        self._dispatch(runs, now)
        return resumed

    def delete(self, owner: str, job_id: str) -> None:
        """Planned runs stay as history; an executor that claims one records it `cancelled`."""
        job = self.get(owner, job_id)
        self._store.delete_job(job)

    def _plan_own_horizon(self, job: Job, now: datetime) -> tuple[Job, tuple[Run, ...]]:
        """Fires up to now + lookahead may lie inside a horizon a tick has already planned: plan them here."""
        if job.state is not JobState.ACTIVE:
            return job, ()
        batch = plan_batch(
            job, now=now, horizon=now + self._config.lookahead, max_runs=self._config.max_self_planned_runs
        )
        return job.advanced_to(batch.next_fire_at), batch.runs

    def _dispatch(self, runs: tuple[Run, ...], now: datetime) -> None:
        to_send = [r for r in runs if r.state is RunState.PLANNED]
        if not to_send:
            return
        try:
            self._dispatcher.dispatch(to_send, now)
        except DispatchError as error:
            # Committed already; the sweeper re-sends planned runs whose message never arrived.
            logger.error("dispatch failed after commit, sweeper will re-send: %s", error)
