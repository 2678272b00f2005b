"""The executor's writes in a row as one commit (services/ports.WriteUnits, the SQLite engine's): the slot
and the claim land together, the finish and the slot back land together, and a unit whose commit fails
left nothing behind and is handled as its first write's lost answer."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.services.test_carrier import Carrier
from tests.services.test_executing import FIRE, World
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.slots import SqliteSlots
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.adapters.sqlite.units import SqliteWriteUnits
from tickwork.domain.clock import FakeClock
from tickwork.domain.errors import TransientStoreError
from tickwork.domain.models import RunState
from tickwork.domain.slots import ALL, Pool, SlotLimits
from tickwork.services.executing import Executor, ExecutorConfig, Outcome

CAP = 5


class CountingDatabase(Database):
    """Counts the transactions its writer connection begins."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, synchronous="NORMAL")
        self.begun = 0

    def _writer_connection(self) -> sqlite3.Connection:
        connection = super()._writer_connection()
        connection.set_trace_callback(self._seen)
        return connection

    def _seen(self, statement: str) -> None:
        if statement.startswith("BEGIN IMMEDIATE"):
            self.begun += 1


class _Undo(Exception):
    pass


class FlakyUnits:
    """SQLite's units, whose commit fails for the units numbered in `failing` (1: the first): the
    transaction is rolled back, as a failed COMMIT leaves it, and the unit raises as throttled. With
    `busy_on_enter`, entering a unit fails as a write lock held elsewhere past its wait."""

    def __init__(self, db: Database, failing: set[int] = frozenset(), busy_on_enter: bool = False) -> None:
        self.db = db
        self.failing = set(failing)
        self.busy_on_enter = busy_on_enter
        self.entered = 0

    @contextmanager
    def together(self) -> Iterator[None]:
        if self.busy_on_enter:
            raise TransientStoreError("SQLite busy: database is locked (injected)")
        self.entered += 1
        try:
            with self.db.write():
                yield
                if self.entered in self.failing:
                    raise _Undo
        except _Undo:
            raise TransientStoreError("SQLite busy: the unit's commit failed (injected)") from None


class UnitWorld(World):
    """The executor on the SQLite engine: its store, its slots and (unless `units` is None) its units."""

    def __init__(self, db: Database, clock: FakeClock) -> None:
        super().__init__(SqliteStore(db), clock)  # type: ignore[arg-type]
        self.db = db
        self.slots = SqliteSlots(db)
        self.clock.set(FIRE + timedelta(milliseconds=100))

    def executor_with(self, units: object | None) -> Executor:
        config = ExecutorConfig(worker_id="worker-a", limits=SlotLimits(CAP))
        return Executor(
            self.store,
            self.invoker,
            self.dispatcher,
            self.clock,
            self.metrics,
            config,
            slots=self.slots,
            units=units,  # type: ignore[arg-type]
        )

    def in_flight(self) -> int:
        return self.slots.in_flight(Pool(ALL, CAP), self.clock.now())

    def run_state(self) -> RunState:
        run = self.store.get_run(self.job.job_id, FIRE)
        assert run is not None
        return run.state


@pytest.fixture
def world(tmp_path: Path, clock: FakeClock) -> UnitWorld:
    return UnitWorld(CountingDatabase(tmp_path / "tickwork.db").open(), clock)


def test_a_run_costs_two_commits_with_units_and_four_without(world: UnitWorld) -> None:
    assert isinstance(world.db, CountingDatabase)
    seen: list[int] = []
    world.invoker.during_call = lambda: seen.append(world.in_flight())
    before = world.db.begun

    assert world.executor_with(SqliteWriteUnits(world.db)).execute(world.first_message()) is Outcome.SUCCEEDED

    # The slot and the claim, then the finish and the slot back: one transaction each.
    assert world.db.begun - before == 2
    assert seen == [1] and world.in_flight() == 0 and world.run_state() is RunState.SUCCEEDED


def test_without_units_each_write_commits_on_its_own(world: UnitWorld) -> None:
    assert isinstance(world.db, CountingDatabase)
    before = world.db.begun

    assert world.executor_with(None).execute(world.first_message()) is Outcome.SUCCEEDED

    assert world.db.begun - before == 4
    assert world.in_flight() == 0 and world.run_state() is RunState.SUCCEEDED


def test_a_failed_commit_of_the_slot_and_claim_left_neither_and_the_run_waits_for_its_resend(
    world: UnitWorld,
) -> None:
    units = FlakyUnits(world.db, failing={1})

    outcome = world.executor_with(units).execute(world.first_message())

    # Handled as the slot's answer lost: the slot is given back (nothing to give), the message goes again.
    assert outcome is Outcome.DEFERRED
    assert world.invoker.calls == [] and world.in_flight() == 0
    assert world.run_state() is RunState.PLANNED
    assert world.metrics.counts["ThrottledDeliveries"] == 1
    resent = world.dispatcher.messages[-1]
    world.clock.set(resent.not_before)
    assert world.executor_with(units).execute(resent) is Outcome.SUCCEEDED
    assert len(world.invoker.calls) == 1 and world.run_state() is RunState.SUCCEEDED
    assert world.in_flight() == 0


def test_a_failed_commit_of_the_finish_is_written_again_and_the_target_is_not_called_again(
    world: UnitWorld,
) -> None:
    units = FlakyUnits(world.db, failing={2})  # 1: the slot and the claim; 2: the finish and the slot back

    outcome = world.executor_with(units).execute(world.first_message())

    assert outcome is Outcome.SUCCEEDED
    assert len(world.invoker.calls) == 1
    assert world.run_state() is RunState.SUCCEEDED and world.in_flight() == 0
    assert units.entered == 3  # the failed one, then the finish and the slot back again


def test_a_unit_that_cannot_begin_carries_its_write_out_alone(world: UnitWorld) -> None:
    assert isinstance(world.db, CountingDatabase)
    before = world.db.begun

    outcome = world.executor_with(FlakyUnits(world.db, busy_on_enter=True)).execute(world.first_message())

    assert outcome is Outcome.SUCCEEDED
    assert world.db.begun - before == 4  # every write on its own
    assert world.in_flight() == 0 and world.run_state() is RunState.SUCCEEDED


def test_a_duplicate_delivery_in_a_unit_loses_the_claim_and_gives_back_only_its_own_slot(
    world: UnitWorld,
) -> None:
    """Its slot and its refused claim are one unit (the refusal undoes the claim's savepoint alone), its
    slot back another, after it watched the winner's lease; the winner's slot stays taken until its run
    ends."""
    assert isinstance(world.db, CountingDatabase)
    message = world.first_message()
    during: list[tuple[Outcome, int, int]] = []

    def duplicate_delivered_meanwhile() -> None:
        before = world.db.begun
        outcome = world.executor_with(SqliteWriteUnits(world.db)).execute(message)
        during.append((outcome, world.in_flight(), world.db.begun - before))

    world.invoker.during_call = duplicate_delivered_meanwhile
    assert world.executor_with(SqliteWriteUnits(world.db)).execute(message) is Outcome.SUCCEEDED

    [(outcome, in_flight, transactions)] = during
    assert outcome is Outcome.WATCHING_LEASE and in_flight == 1
    assert transactions == 2
    assert len(world.invoker.calls) == 1
    assert world.run_state() is RunState.SUCCEEDED and world.in_flight() == 0


def test_the_carrier_hears_of_a_claim_only_once_its_unit_committed(world: UnitWorld) -> None:
    carrier = Carrier(deadline=None)
    units = FlakyUnits(world.db, failing={1})

    assert world.executor_with(units).execute(world.first_message(), carrier) is Outcome.DEFERRED
    assert carrier.hidden_until == []  # the claim did not land: its message is not kept hidden for it

    resent = world.dispatcher.messages[-1]
    world.clock.set(resent.not_before)
    leases: list[datetime | None] = []
    world.invoker.during_call = lambda: leases.append(
        world.store.get_run(world.job.job_id, FIRE).lease_expires_at
    )  # type: ignore[union-attr]
    assert world.executor_with(units).execute(resent, carrier) is Outcome.SUCCEEDED
    assert leases[0] is not None and carrier.hidden_until == leases
