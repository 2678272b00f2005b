"""The executor reads the clock after each store call, not before it: a lease starts when its claim is
written, however long the read before it took (found in review of the delivery table: a slow job read
shortened the lease by its own duration, so a slow retry could be leased already expired, and called
twice)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.fakes import failure
from tests.services.test_executing import World
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.execution import LEASE_MARGIN
from tickwork.domain.models import Job, RunState
from tickwork.services.executing import Executor, ExecutorConfig, Outcome

SLOW_READ = timedelta(seconds=40)


class SlowJobReads:
    """The real store whose job reads take SLOW_READ of the (fake) clock."""

    def __init__(self, inner: MemoryStore, clock: FakeClock) -> None:
        self.inner = inner
        self.clock = clock

    def get_job(self, job_id: str) -> Job | None:
        self.clock.advance(SLOW_READ.total_seconds())
        return self.inner.get_job(job_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_claim_after_a_slow_job_read_is_leased_from_the_claim(store: MemoryStore, clock: FakeClock) -> None:
    world = World(store, clock, timeout_seconds=10)
    world.invoker.results.append(failure())  # the first attempt fails: its retry reads the job first
    assert world.executor().execute(world.first_message()) is Outcome.RETRY_SCHEDULED
    [retry] = world.dispatcher.messages
    world.clock.set(retry.not_before)
    seen: list[tuple[datetime, datetime | None]] = []
    world.invoker.during_call = lambda: seen.append((world.clock.now(), world.run().lease_expires_at))
    executor = Executor(
        SlowJobReads(world.store, world.clock),
        world.invoker,
        world.dispatcher,
        world.clock,
        world.metrics,
        ExecutorConfig(worker_id="w"),
    )

    assert executor.execute(retry) is Outcome.SUCCEEDED

    [(called_at, lease)] = seen
    assert called_at == retry.not_before + SLOW_READ  # the read took its 40 s before the claim
    assert lease == called_at + timedelta(seconds=10) + LEASE_MARGIN
    assert world.run().state is RunState.SUCCEEDED
