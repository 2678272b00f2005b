"""Several deliveries begun with one commit (Executor.begin_together, the SQLite engine's executor pool):
each one's slot and claim land in one transaction with the others', each is decided as `execute` decides
it, one that raises undoes only its own writes, and a batch whose commit fails left nothing behind."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.services.test_executing import FIRE
from tests.services.test_write_units import CountingDatabase, FlakyUnits, UnitWorld
from tickwork.adapters.sqlite.units import SqliteWriteUnits
from tickwork.domain.clock import FakeClock
from tickwork.domain.delivery import Hold
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import RunState
from tickwork.domain.schedule import parse_schedule
from tickwork.services.executing import Begun, Executor, Outcome
from tickwork.services.planning import Planner

JOBS = 3


class Batch(UnitWorld):
    """Three `*/5` jobs (the world's own and two more), each with its 12:05 run planned and sent."""

    def __init__(self, db: CountingDatabase, clock: FakeClock) -> None:
        super().__init__(db, clock)
        self.clock.set(FIRE - timedelta(seconds=110))
        for n in range(1, JOBS):
            job = self.jobs.create(
                "alice",
                JobSpec(name=f"job-{n}", schedule=parse_schedule("*/5 * * * *"), target=self.job.target),
            )
            Planner(self.store, self.dispatcher, self.clock).plan(job.shard, self.clock.now())
        self.clock.set(FIRE + timedelta(milliseconds=100))

    def messages(self) -> list[RunMessage]:
        return [RunMessage.for_run(run) for run in self.dispatcher.sent if run.scheduled_for == FIRE]

    def states(self) -> list[RunState]:
        found = [self.store.get_run(m.job_id, FIRE) for m in self.messages()]
        return [run.state for run in found if run is not None]

    def batching(self, units: Any = None) -> Executor:
        return self.executor_with(units or SqliteWriteUnits(self.db))


@pytest.fixture
def batch(tmp_path: Path, clock: FakeClock) -> Batch:
    return Batch(CountingDatabase(tmp_path / "tickwork.db").open(), clock)


def test_the_slots_and_claims_of_several_deliveries_are_one_commit(batch: Batch) -> None:
    executor = batch.batching()
    messages = batch.messages()
    assert len(messages) == JOBS
    before = batch.db.begun

    begun = executor.begin_together(messages)

    assert begun is not None and len(begun) == JOBS
    assert batch.db.begun - before == 1
    assert batch.states() == [RunState.RUNNING] * JOBS and batch.in_flight() == JOBS
    assert batch.invoker.calls == []  # nothing is called before the batch landed

    assert [executor.resume(b) for b in begun] == [Outcome.SUCCEEDED] * JOBS
    assert batch.db.begun - before == 1 + JOBS  # then each finish and its slot back
    assert batch.states() == [RunState.SUCCEEDED] * JOBS and batch.in_flight() == 0
    assert len(batch.invoker.calls) == JOBS
    assert batch.metrics.timings["StartDelay"] == [100] * JOBS  # recorded as `execute` records them


class FailingClaims:
    """The store, whose claim raises for one job: a bug met in the middle of a batch."""

    def __init__(self, store: Any, job_id: str) -> None:
        self._store, self._job_id = store, job_id

    def claim(self, claim: Any) -> Any:
        if claim.job_id == self._job_id:
            raise RuntimeError("injected: the claim's code broke")
        return self._store.claim(claim)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_delivery_that_raises_leaves_nothing_of_the_batch_and_each_then_goes_alone(batch: Batch) -> None:
    messages = batch.messages()
    broken = messages[1].job_id
    batch.store = FailingClaims(batch.store, broken)  # type: ignore[assignment]
    executor = batch.batching()

    with pytest.raises(RuntimeError, match="injected"):
        executor.begin_together(messages)

    # The first delivery's slot and claim were written before the second raised: undone with the batch.
    assert batch.states() == [RunState.PLANNED] * JOBS and batch.in_flight() == 0
    assert batch.metrics.counts == {} and batch.metrics.timings == {}
    alone = [executor.execute(m) for m in (messages[0], messages[2])]
    assert alone == [Outcome.SUCCEEDED] * 2
    with pytest.raises(RuntimeError, match="injected"):
        executor.execute(messages[1])
    assert batch.states() == [RunState.SUCCEEDED, RunState.PLANNED, RunState.SUCCEEDED]
    assert batch.in_flight() == 0 and len(batch.invoker.calls) == JOBS - 1


def test_a_batch_whose_commit_failed_left_nothing_and_each_delivery_goes_alone(batch: Batch) -> None:
    units = FlakyUnits(batch.db, failing={1})
    executor = batch.batching(units)
    messages = batch.messages()

    assert executor.begin_together(messages) is None

    assert batch.states() == [RunState.PLANNED] * JOBS and batch.in_flight() == 0
    assert batch.metrics.counts == {} and batch.metrics.timings == {}  # nothing landed, nothing recorded
    assert [executor.execute(m) for m in messages] == [Outcome.SUCCEEDED] * JOBS
    assert batch.states() == [RunState.SUCCEEDED] * JOBS and batch.in_flight() == 0


def test_a_batch_that_cannot_begin_is_none(batch: Batch) -> None:
    executor = batch.batching(FlakyUnits(batch.db, busy_on_enter=True))

    assert executor.begin_together(batch.messages()) is None
    assert batch.states() == [RunState.PLANNED] * JOBS


def test_without_write_units_there_is_no_batch(batch: Batch) -> None:
    assert batch.executor_with(None).begin_together(batch.messages()) is None


def test_a_delivery_early_for_its_fire_time_is_only_decided_and_holds_when_resumed(batch: Batch) -> None:
    batch.clock.set(FIRE - timedelta(milliseconds=700))  # SQS delays are whole seconds: up to 1 s early
    executor = batch.batching()

    begun = executor.begin_together(batch.messages())

    assert begun is not None and all(isinstance(b.next, Hold) for b in begun)
    assert batch.states() == [RunState.PLANNED] * JOBS and batch.in_flight() == 0
    assert [executor.resume(b) for b in begun] == [Outcome.SUCCEEDED] * JOBS
    assert batch.states() == [RunState.SUCCEEDED] * JOBS


def test_a_duplicate_delivery_in_the_same_batch_loses_the_claim_and_the_target_is_called_once(
    batch: Batch,
) -> None:
    executor = batch.batching()
    message = batch.messages()[0]

    begun = executor.begin_together([message, message])

    # The loser's claim was refused in the batch; its slot goes back once it watched the winner's lease.
    assert begun is not None and batch.in_flight() == 2 and batch.states()[0] is RunState.RUNNING
    outcomes = [executor.resume(b) for b in begun]
    assert outcomes == [Outcome.SUCCEEDED, Outcome.WATCHING_LEASE]
    assert len(batch.invoker.calls) == 1 and batch.in_flight() == 0


def test_the_finishes_of_several_deliveries_are_one_commit_too(batch: Batch) -> None:
    """The executor pool's path: each delivery is advanced to its next write, and the deliveries at a write
    at the same time are carried out together: one commit for the claims, one for the finishes."""
    executor = batch.batching()
    before = batch.db.begun

    at_claim = [executor.advance(executor.start(m)) for m in batch.messages()]

    assert all(isinstance(b, Begun) and not b.done for b in at_claim)
    assert batch.db.begun == before and batch.invoker.calls == []  # stopped at the write, nothing written
    claimed = executor.carry_together([b for b in at_claim if isinstance(b, Begun)])
    assert claimed is not None and batch.db.begun - before == 1
    assert batch.states() == [RunState.RUNNING] * JOBS and batch.in_flight() == JOBS
    at_finish = [executor.advance(b) for b in claimed]  # each calls its target, then stops at its finish
    assert len(batch.invoker.calls) == JOBS and batch.db.begun - before == 1
    assert batch.states() == [RunState.RUNNING] * JOBS
    finished = executor.carry_together([b for b in at_finish if isinstance(b, Begun)])

    assert finished is not None and all(b.done for b in finished)
    assert batch.db.begun - before == 2  # against 1 + JOBS when each finish commits alone
    assert batch.states() == [RunState.SUCCEEDED] * JOBS and batch.in_flight() == 0
    assert [executor.advance(b) for b in finished] == [Outcome.SUCCEEDED] * JOBS
    assert batch.metrics.timings["StartDelay"] == [100] * JOBS
    assert batch.metrics.counts.get("RunsSucceeded") == JOBS


def test_finishes_whose_commit_failed_left_nothing_and_each_finishes_alone(batch: Batch) -> None:
    units = FlakyUnits(batch.db, failing={2})  # the second unit: the finishes
    executor = batch.batching(units)
    claimed = executor.carry_together([executor.start(m) for m in batch.messages()])
    assert claimed is not None
    at_finish = [executor.advance(b) for b in claimed]

    assert executor.carry_together([b for b in at_finish if isinstance(b, Begun)]) is None

    assert batch.states() == [RunState.RUNNING] * JOBS and batch.in_flight() == JOBS
    assert [executor.resume(b) for b in at_finish if isinstance(b, Begun)] == [Outcome.SUCCEEDED] * JOBS
    assert batch.states() == [RunState.SUCCEEDED] * JOBS and batch.in_flight() == 0
    assert len(batch.invoker.calls) == JOBS  # the failed commit called nothing again
    # Each end recorded once: nothing of the failed commit was recorded.
    assert batch.metrics.counts.get("RunsSucceeded") == JOBS
    assert batch.metrics.timings["StartDelay"] == [100] * JOBS


def test_without_write_units_advance_carries_a_delivery_to_its_end(batch: Batch) -> None:
    executor = batch.executor_with(None)

    outcomes = [executor.advance(executor.start(m)) for m in batch.messages()]

    assert outcomes == [Outcome.SUCCEEDED] * JOBS
    assert batch.states() == [RunState.SUCCEEDED] * JOBS and batch.in_flight() == 0
    assert len(batch.invoker.calls) == JOBS
