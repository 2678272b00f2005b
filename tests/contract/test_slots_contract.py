"""The SlotStore contract (services/ports.py), run against every engine: memory, SQLite, moto and MiniStack.
Time is an input (`now`), never the wall clock. The races run on the racing engines (separate SQLite
connections, MiniStack); moto is not thread-safe. Then the DynamoDB layout itself (stripes, the home and
its markers), on moto."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from random import Random
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.conftest import RacingEngine, ministack_client
from tickwork.adapters.dynamodb import slots as dynamodb_slots
from tickwork.adapters.dynamodb.items import deserialize
from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.adapters.dynamodb.slots import (
    MAX_WRITES,
    SAMPLE,
    STRIPE_SIZE,
    DynamoSlots,
    home_stripe,
    marker_key,
    stripe_key,
    stripe_sizes,
)
from tickwork.adapters.memory.slots import MemorySlots
from tickwork.adapters.sqlite.db import SCHEMA_VERSION, Database, _table_ddl
from tickwork.adapters.sqlite.slots import SqliteSlots
from tickwork.domain.errors import StoreError, TransientStoreError
from tickwork.domain.slots import Pool, SlotHold, holder_key, lease_ms
from tickwork.local.emulator import Emulator
from tickwork.resources import JOBS, REQUESTS, RUNS, SHARDS, SLOTS, ResourceNames
from tickwork.services.ports import SlotStore

NOW = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)
LEASE = NOW + timedelta(minutes=5)
ALL = Pool("all", 1)


def hold(index: int, attempt: int = 1, lease: datetime = LEASE) -> SlotHold:
    return SlotHold(f"job_{index:020d}:20261202T120500Z", attempt, lease)


@pytest.fixture(params=["memory", "sqlite", "moto", pytest.param("ministack", marks=pytest.mark.ministack)])
def slots(request: pytest.FixtureRequest, aws_env: None, tmp_path: Path) -> Iterator[SlotStore]:
    if request.param == "memory":
        yield MemorySlots()
    elif request.param == "sqlite":
        yield SqliteSlots(Database(tmp_path / "tickwork.db").open())
    elif request.param == "moto":
        names = ResourceNames(prefix="slots")
        with mock_aws():
            client = boto3.client("dynamodb", region_name="us-east-1")
            ensure_tables(client, names)
            yield DynamoSlots(client, names.table(SLOTS), rng=Random(7))
    else:
        emulator: Emulator = request.getfixturevalue("ministack")
        names = request.getfixturevalue("ministack_names")
        yield DynamoSlots(ministack_client(emulator, "dynamodb"), names.table(SLOTS), rng=Random(7))


def fill(slots: SlotStore, pool: Pool, holds: list[SlotHold], now: datetime = NOW) -> set[int]:
    """Acquire for every hold, as waiting runs do: each not yet admitted asks again, round after round,
    until all are in or the pool is full. Returns the indexes admitted."""
    admitted: set[int] = set()
    for _ in range(60):
        for index, one in enumerate(holds):
            if index not in admitted and slots.acquire([pool], one, now):
                admitted.add(index)
        if len(admitted) == len(holds) or slots.in_flight(pool, now) >= pool.size:
            break
    return admitted


# --- exactness ---


@pytest.mark.parametrize("size", [1, 2, 100])
def test_a_pool_admits_exactly_its_size(slots: SlotStore, size: int) -> None:
    pool = Pool("all", size)
    admitted = fill(slots, pool, [hold(i) for i in range(size + size // 2 + 1)])
    assert len(admitted) == size
    assert slots.in_flight(pool, NOW) == size
    assert not slots.acquire([pool], hold(10_000), NOW)
    assert slots.in_flight(pool, NOW) == size


def test_a_released_slot_is_taken_again(slots: SlotStore) -> None:
    pool = Pool("all", 2)
    assert slots.acquire([pool], hold(1), NOW) and slots.acquire([pool], hold(2), NOW)
    assert not slots.acquire([pool], hold(3), NOW)
    slots.release([pool], hold(1).run_id, 1)
    assert slots.in_flight(pool, NOW) == 1
    assert slots.acquire([pool], hold(3), NOW)
    assert not slots.acquire([pool], hold(4), NOW)
    assert slots.in_flight(pool, NOW) == 2


def test_pools_are_counted_apart(slots: SlotStore) -> None:
    alice, bob = Pool("owner:alice", 1), Pool("owner:bob", 1)
    assert slots.acquire([alice], hold(1), NOW)
    assert slots.acquire([bob], hold(2), NOW)
    assert not slots.acquire([alice], hold(3), NOW)
    assert (slots.in_flight(alice, NOW), slots.in_flight(bob, NOW)) == (1, 1)


# --- idempotency ---


def test_acquiring_again_takes_no_second_slot(slots: SlotStore) -> None:
    pool = Pool("all", 2)
    assert slots.acquire([pool], hold(1), NOW)
    assert slots.acquire([pool], hold(1), NOW)
    assert slots.in_flight(pool, NOW) == 1
    assert slots.acquire([pool], hold(2), NOW)
    assert slots.acquire([pool], hold(1), NOW), "a held slot is held, even when the pool is full"
    assert slots.in_flight(pool, NOW) == 2


def test_acquiring_again_in_a_full_busy_pool_takes_no_second_slot(slots: SlotStore) -> None:
    """Wherever the slot went (on DynamoDB: perhaps away from its home stripe), asking again finds it."""
    pool = Pool("all", 100)
    assert len(fill(slots, pool, [hold(i) for i in range(99)])) == 99
    assert fill(slots, pool, [hold(500)]) == {0}
    for _ in range(3):
        assert slots.acquire([pool], hold(500), NOW)
    assert slots.in_flight(pool, NOW) == 100
    slots.release([pool], hold(500).run_id, 1)
    assert slots.in_flight(pool, NOW) == 99


def test_acquiring_again_sets_the_new_lease(slots: SlotStore) -> None:
    assert slots.acquire([ALL], hold(1, lease=NOW + timedelta(seconds=10)), NOW)
    assert slots.acquire([ALL], hold(1, lease=NOW + timedelta(seconds=60)), NOW)
    assert slots.in_flight(ALL, NOW + timedelta(seconds=30)) == 1
    assert not slots.acquire([ALL], hold(2), NOW + timedelta(seconds=30))


# --- leases: take-over, extend ---


def test_a_slot_is_free_from_its_holders_lease_end_and_taken_over(slots: SlotStore) -> None:
    assert slots.acquire([ALL], hold(1), NOW)
    just_before = LEASE - timedelta(milliseconds=1)
    assert not slots.acquire([ALL], hold(2, lease=LEASE + timedelta(minutes=5)), just_before)
    assert slots.in_flight(ALL, just_before) == 1
    assert slots.in_flight(ALL, LEASE) == 0
    assert slots.acquire([ALL], hold(2, lease=LEASE + timedelta(minutes=5)), LEASE)
    assert slots.in_flight(ALL, LEASE) == 1
    assert not slots.extend([ALL], hold(1, lease=LEASE + timedelta(hours=1))), "taken over: lost"
    assert not slots.acquire([ALL], hold(3, lease=LEASE + timedelta(hours=1)), LEASE)


def test_extend_moves_the_lease(slots: SlotStore) -> None:
    assert slots.acquire([ALL], hold(1), NOW)
    later = LEASE + timedelta(minutes=10)
    assert slots.extend([ALL], hold(1, lease=later))
    assert slots.in_flight(ALL, LEASE + timedelta(minutes=1)) == 1
    assert not slots.acquire([ALL], hold(2, lease=later), LEASE + timedelta(minutes=1)), "extended: held"
    assert slots.acquire([ALL], hold(2, lease=later + timedelta(minutes=5)), later)


def test_extend_of_a_released_or_unknown_hold_is_false(slots: SlotStore) -> None:
    assert not slots.extend([ALL], hold(1))
    assert slots.acquire([ALL], hold(1), NOW)
    slots.release([ALL], hold(1).run_id, 1)
    assert not slots.extend([ALL], hold(1))
    assert slots.in_flight(ALL, NOW) == 0


def test_extend_in_a_full_busy_pool_finds_the_hold(slots: SlotStore) -> None:
    pool = Pool("all", 100)
    assert len(fill(slots, pool, [hold(i) for i in range(100)])) == 100
    later = LEASE + timedelta(hours=1)
    assert all(slots.extend([pool], hold(i, lease=later)) for i in range(100))
    assert slots.in_flight(pool, LEASE + timedelta(minutes=30)) == 100


def test_extend_is_false_when_one_pool_lost_the_hold(slots: SlotStore) -> None:
    key, everyone = Pool("key:db", 1), Pool("all", 10)
    assert slots.acquire([key, everyone], hold(1), NOW)
    assert slots.acquire([key], hold(2, lease=LEASE + timedelta(hours=1)), LEASE)  # took the key over
    assert not slots.extend([key, everyone], hold(1, lease=LEASE + timedelta(hours=1)))


# --- release ---


def test_release_is_idempotent_and_frees_only_that_attempt(slots: SlotStore) -> None:
    pool = Pool("all", 2)
    first, second = hold(1, attempt=1), hold(1, attempt=2)
    assert slots.acquire([pool], first, NOW) and slots.acquire([pool], second, NOW)
    assert slots.in_flight(pool, NOW) == 2
    for _ in range(2):
        slots.release([pool], first.run_id, 1)
        assert slots.in_flight(pool, NOW) == 1
    assert slots.extend([pool], second)
    slots.release([pool], "job_never:20261202T120500Z", 1)
    slots.release([Pool("key:never", 3)], second.run_id, 2)
    assert slots.in_flight(pool, NOW) == 1


def test_release_of_a_taken_over_attempt_leaves_the_newer_attempts_slot(slots: SlotStore) -> None:
    first = hold(1, attempt=1)
    second = hold(1, attempt=2, lease=LEASE + timedelta(minutes=5))
    assert slots.acquire([ALL], first, NOW)
    assert slots.acquire([ALL], second, LEASE)  # the first attempt's lease ended: taken over
    slots.release([ALL], first.run_id, 1)  # its late worker lets go
    assert slots.in_flight(ALL, LEASE) == 1
    assert not slots.acquire([ALL], hold(2, lease=LEASE + timedelta(minutes=5)), LEASE)
    assert slots.extend([ALL], second)


# --- all or nothing ---


def test_a_full_second_pool_leaves_the_first_untouched(slots: SlotStore) -> None:
    everyone, key = Pool("all", 10), Pool("key:api.example.com", 1)
    assert slots.acquire([everyone, key], hold(1), NOW)
    assert not slots.acquire([everyone, key], hold(2), NOW)
    assert (slots.in_flight(everyone, NOW), slots.in_flight(key, NOW)) == (1, 1)
    assert not slots.extend([everyone], hold(2)), "nothing held after False"
    slots.release([everyone, key], hold(1).run_id, 1)
    assert slots.acquire([everyone, key], hold(2), NOW)
    assert (slots.in_flight(everyone, NOW), slots.in_flight(key, NOW)) == (1, 1)


def test_false_releases_what_an_earlier_call_left_held(slots: SlotStore) -> None:
    """An acquire that raised after taking its first pool, asked again when the second is full: False,
    and the hold then holds nothing."""
    everyone, key = Pool("all", 10), Pool("key:db", 1)
    assert slots.acquire([everyone], hold(1), NOW)  # what the interrupted call took
    assert slots.acquire([key], hold(2), NOW)
    assert not slots.acquire([everyone, key], hold(1), NOW)
    assert slots.in_flight(everyone, NOW) == 0


def test_no_pools_is_nothing_to_hold(slots: SlotStore) -> None:
    assert slots.acquire([], hold(1), NOW)
    assert slots.extend([], hold(1))
    slots.release([], hold(1).run_id, 1)


# --- in flight ---


def test_in_flight_counts_the_live_holds_at_now(slots: SlotStore) -> None:
    pool = Pool("all", 5)
    for index, minutes in enumerate([1, 2, 3]):
        assert slots.acquire([pool], hold(index, lease=NOW + timedelta(minutes=minutes)), NOW)
    assert [slots.in_flight(pool, NOW + timedelta(minutes=m)) for m in (0, 1, 2, 3)] == [3, 2, 1, 0]
    assert slots.in_flight(Pool("all", 5), NOW) == 3, "a pool is its name"
    assert slots.in_flight(Pool("owner:nobody", 5), NOW) == 0


# --- races (separate connections or clients per thread, as separate processes have) ---


def racing_slots(engine: RacingEngine, request: pytest.FixtureRequest) -> Callable[[int], SlotStore]:
    """A new slot store per racer, each with its own connection (SQLite) or client (MiniStack)."""
    if engine.name == "sqlite":
        return lambda _: SqliteSlots(engine.store().db)
    emulator: Emulator = request.getfixturevalue("ministack")
    table = engine.names.table(SLOTS)
    return lambda racer: DynamoSlots(ministack_client(emulator, "dynamodb"), table, rng=Random(racer))


def race(stores: list[SlotStore], attempt: Callable[[SlotStore, int], bool]) -> list[int]:
    """Every store's thread calls `attempt` at once (after a barrier); the racers that got True. A racer's
    error is raised here."""
    barrier = threading.Barrier(len(stores))

    def racer(index: int) -> bool:
        barrier.wait(timeout=30)
        return attempt(stores[index], index)

    with ThreadPoolExecutor(max_workers=len(stores)) as pool:
        results = list(pool.map(racer, range(len(stores))))
    return [index for index, won in enumerate(results) if won]


def test_racing_acquires_never_exceed_the_pool_and_fill_it(
    racing_engine: RacingEngine, request: pytest.FixtureRequest
) -> None:
    """16 racers, each acquiring for its own run, on a pool of 5: exactly 5 win each round."""
    make = racing_slots(racing_engine, request)
    stores = [make(i) for i in range(16)]
    pool = Pool(f"all-{time.monotonic_ns()}", 5)
    for round_ in range(8):
        holds = [hold(round_ * 100 + i) for i in range(16)]
        won = race(stores, lambda store, i, holds=holds: store.acquire([pool], holds[i], NOW))
        assert len(won) == 5, f"round {round_}: {len(won)} won"
        assert stores[0].in_flight(pool, NOW) == 5
        for index in won:
            stores[index].release([pool], holds[index].run_id, 1)
        assert stores[0].in_flight(pool, NOW) == 0


def test_racing_acquires_on_a_striped_pool_never_exceed_it_and_fill_it(
    racing_engine: RacingEngine, request: pytest.FixtureRequest
) -> None:
    """40 racers on a pool of 30 (three stripes on DynamoDB), asking again until no one gets in: never more
    than 30, and all 30 taken. Then each racer's holds in a full pool race their own repeats."""
    make = racing_slots(racing_engine, request)
    stores = [make(i) for i in range(40)]
    pool = Pool(f"all-{time.monotonic_ns()}", 30)
    holds = [hold(i) for i in range(40)]
    admitted: set[int] = set()
    for _ in range(20):
        waiting = [i for i in range(40) if i not in admitted]
        won = race(
            stores, lambda store, i, waiting=waiting: i in waiting and store.acquire([pool], holds[i], NOW)
        )
        admitted.update(won)
        assert stores[0].in_flight(pool, NOW) == len(admitted) <= 30
        if len(admitted) == 30:
            break
    assert len(admitted) == 30
    again = race(stores, lambda store, i: i in admitted and store.acquire([pool], holds[i], NOW))
    assert set(again) == admitted
    assert stores[0].in_flight(pool, NOW) == 30


def test_racing_take_overs_of_ended_leases_never_exceed_the_pool(
    racing_engine: RacingEngine, request: pytest.FixtureRequest
) -> None:
    make = racing_slots(racing_engine, request)
    stores = [make(i) for i in range(12)]
    pool = Pool(f"all-{time.monotonic_ns()}", 4)
    assert len(fill(stores[0], pool, [hold(1000 + i) for i in range(4)])) == 4
    later = LEASE + timedelta(minutes=5)
    won = race(stores, lambda store, i: store.acquire([pool], hold(i, lease=later), LEASE))
    assert len(won) == 4
    assert stores[0].in_flight(pool, LEASE) == 4


# --- errors ---


class FailingClient:
    """A DynamoDB client whose every request is refused with `code`."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def refuse(**_: Any) -> Any:
            raise ClientError({"Error": {"Code": self.code, "Message": "refused"}}, name)

        return refuse


@pytest.mark.parametrize("code", ["ProvisionedThroughputExceededException", "ThrottlingException"])
def test_dynamodb_throttling_is_transient(code: str) -> None:
    slots = DynamoSlots(FailingClient(code), "t")  # type: ignore[arg-type]
    with pytest.raises(TransientStoreError):
        slots.acquire([ALL], hold(1), NOW)
    with pytest.raises(TransientStoreError):
        slots.release([ALL], hold(1).run_id, 1)
    with pytest.raises(TransientStoreError):
        slots.in_flight(ALL, NOW)


def test_dynamodb_refusals_retrying_cannot_change_are_store_errors() -> None:
    slots = DynamoSlots(FailingClient("ResourceNotFoundException"), "t")  # type: ignore[arg-type]
    with pytest.raises(StoreError) as raised:
        slots.extend([ALL], hold(1))
    assert raised.value.code == "ResourceNotFoundException"


def test_a_busy_sqlite_database_is_transient(tmp_path: Path) -> None:
    path = tmp_path / "tickwork.db"
    slots = SqliteSlots(_impatient(path).open())
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(TransientStoreError):
            slots.acquire([ALL], hold(1), NOW)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert slots.acquire([ALL], hold(1), NOW)


def _impatient(path: Path) -> Database:
    """The database with a busy timeout of 50 ms instead of 10 s."""
    db = Database(path)
    connect = db._connect

    def quick(busy_timeout_ms: int | None = None) -> sqlite3.Connection:
        # What the database asks for when it names a wait (its checkpoints: none), else 50 ms.
        return connect(50 if busy_timeout_ms is None else busy_timeout_ms)

    db._connect = quick  # type: ignore[method-assign]
    return db


# --- SQLite: the schema ---


def test_a_version_2_database_gets_the_slot_holds_table(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with sqlite3.connect(path) as raw:
        for table in (JOBS, RUNS, SHARDS, REQUESTS):
            for statement in _table_ddl(table):
                raw.execute(statement)
        raw.execute("PRAGMA user_version = 2")
    db = Database(path).open()
    assert db.schema_version() == SCHEMA_VERSION == 6
    slots = SqliteSlots(db)
    assert slots.acquire([ALL], hold(1), NOW) and slots.in_flight(ALL, NOW) == 1
    with sqlite3.connect(path) as raw:
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "slot_holds" in tables and "slots" not in tables


def test_a_new_database_keeps_slots_in_slot_holds_only(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    Database(path).open()
    with sqlite3.connect(path) as raw:
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        plan = raw.execute(
            "EXPLAIN QUERY PLAN SELECT COUNT(*) FROM slot_holds WHERE pool = ? AND lease_ms > ?", ("all", 0)
        ).fetchall()
    assert "slot_holds" in tables and "slots" not in tables
    assert "slot_holds_lease" in str(plan), "the live count reads the index"


# --- DynamoDB: the layout ---


@pytest.mark.parametrize("size", [1, 2, 5, 11, 12, 13, 24, 25, 100, 1_000, 9_999, 10_000])
def test_stripes_add_up_to_the_pool_exactly_and_differ_by_one_at_most(size: int) -> None:
    sizes = stripe_sizes(size)
    assert sum(sizes) == size
    assert max(sizes) <= STRIPE_SIZE and max(sizes) - min(sizes) <= 1
    assert len(sizes) == -(-size // STRIPE_SIZE)


@dataclass
class Moto:
    client: Any
    table: str

    def slots(self, seed: int = 7) -> DynamoSlots:
        return DynamoSlots(self.client, self.table, rng=Random(seed))

    def stripe(self, pool: str, index: int) -> dict[str, Any]:
        raw = self.client.get_item(TableName=self.table, Key={"slot_key": {"S": stripe_key(pool, index)}})
        return deserialize(raw["Item"]) if "Item" in raw else {}

    def writes(self) -> list[str]:
        """Record the write requests made from now on (operation name, stripe key)."""
        seen: list[str] = []

        def record(params: Any, model: Any, **_: Any) -> None:
            if model.name in ("UpdateItem", "PutItem"):
                key = params.get("Key") or params.get("Item")
                seen.append(f"{model.name} {key['slot_key']['S']}")

        self.client.meta.events.register("before-parameter-build.dynamodb.*", record)
        return seen


@pytest.fixture
def moto_slots(moto: None) -> Moto:
    names = ResourceNames(prefix="layout")
    client = boto3.client("dynamodb", region_name="us-east-1")
    ensure_tables(client, names)
    return Moto(client, names.table(SLOTS))


def holds_homed_at(pool: Pool, stripe: int, count: int, start: int = 0) -> list[SlotHold]:
    stripes = len(stripe_sizes(pool.size))
    found: list[SlotHold] = []
    index = start
    while len(found) < count:
        one = hold(index)
        if home_stripe(pool.name, holder_key(one.run_id, 1), stripes) == stripe:
            found.append(one)
        index += 1
    return found


def test_the_common_case_is_one_write_to_acquire_and_one_to_release(moto_slots: Moto) -> None:
    pool = Pool("all", 100)
    slots = moto_slots.slots()
    assert slots.acquire([pool], hold(1), NOW)  # creates its home stripe
    one = holds_homed_at(pool, home_stripe(pool.name, holder_key(hold(1).run_id, 1), 9), 1, start=2)[0]
    writes = moto_slots.writes()
    assert slots.acquire([pool], one, NOW)
    assert len(writes) == 1 and writes[0].startswith("UpdateItem")
    slots.release([pool], one.run_id, 1)
    assert len(writes) == 2
    assert slots.extend([pool], hold(1))
    assert len(writes) == 3


def test_a_full_home_sends_the_hold_elsewhere_and_leaves_a_marker(moto_slots: Moto) -> None:
    pool = Pool("all", 24)  # two stripes of 12
    slots = moto_slots.slots()
    homed = holds_homed_at(pool, 0, 13)
    for one in homed[:12]:
        assert slots.acquire([pool], one, NOW)
    away = homed[12]
    assert slots.acquire([pool], away, NOW)
    holder = holder_key(away.run_id, 1)
    assert holder in moto_slots.stripe(pool.name, 1)["h"]
    assert moto_slots.stripe(pool.name, 0)["m"][marker_key(holder)]["s"] == 1
    writes = moto_slots.writes()
    assert slots.acquire([pool], away, NOW)  # found through the marker: no second slot
    assert slots.in_flight(pool, NOW) == 13
    assert slots.extend([pool], SlotHold(away.run_id, 1, LEASE + timedelta(hours=1)))
    assert moto_slots.stripe(pool.name, 0)["m"][marker_key(holder)]["l"] == lease_ms(
        LEASE + timedelta(hours=1)
    )
    slots.release([pool], away.run_id, 1)
    assert holder not in moto_slots.stripe(pool.name, 1)["h"]
    assert marker_key(holder) not in moto_slots.stripe(pool.name, 0)["m"]
    assert slots.in_flight(pool, NOW) == 12
    assert len(writes) == 2 + 3 + 2, writes


def test_a_full_pool_costs_a_waiting_run_one_write_and_one_read(moto_slots: Moto) -> None:
    pool = Pool("all", 48)  # four stripes
    slots = moto_slots.slots()
    assert len(fill(slots, pool, [hold(i) for i in range(50)])) == 48
    writes = moto_slots.writes()
    assert not slots.acquire([pool], hold(999), NOW)
    assert len(writes) == 1, writes


def test_an_acquire_misled_by_a_stale_read_spends_at_most_its_write_budget(
    moto_slots: Moto, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = Pool("all", 48)  # four stripes: the home and three more to try
    slots = moto_slots.slots()
    assert len(fill(slots, pool, [hold(i) for i in range(50)])) == 48
    read = slots._batch_get
    monkeypatch.setattr(
        slots, "_batch_get", lambda keys, consistent=True: read(keys) if consistent else []
    )  # every stripe looks empty
    writes = moto_slots.writes()
    assert not slots.acquire([pool], hold(999), NOW)
    assert len(writes) == MAX_WRITES, writes
    assert slots.in_flight(pool, NOW) == 48


def test_a_waiting_run_finds_the_one_free_slot_of_a_pool_up_to_SAMPLE_stripes(
    moto_slots: Moto, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool of at most SAMPLE + 1 stripes is read whole: one free slot anywhere is found at once (here
    with SAMPLE made 4, to keep the test small)."""
    assert STRIPE_SIZE * (SAMPLE + 1) == 396
    monkeypatch.setattr(dynamodb_slots, "SAMPLE", 4)
    pool = Pool("all", STRIPE_SIZE * 5)
    slots = moto_slots.slots()
    holds = [hold(i) for i in range(pool.size)]
    assert len(fill(slots, pool, holds)) == pool.size
    for index in range(0, pool.size, 7):
        slots.release([pool], holds[index].run_id, 1)
        assert slots.acquire([pool], hold(10_000 + index), NOW), "found at the first ask"
        assert slots.in_flight(pool, NOW) == pool.size


def test_markers_of_ended_holds_are_collected(moto_slots: Moto) -> None:
    pool = Pool("all", 24)
    slots = moto_slots.slots()
    homed = holds_homed_at(pool, 0, 16)
    short = NOW + timedelta(seconds=1)
    for one in homed[:12]:
        assert slots.acquire([pool], SlotHold(one.run_id, 1, LEASE + timedelta(hours=1)), NOW)
    for one in homed[12:15]:  # away from home, with short leases, never released (their workers died)
        assert slots.acquire([pool], SlotHold(one.run_id, 1, short), NOW)
    assert len(moto_slots.stripe(pool.name, 0)["m"]) == 3
    assert slots.acquire([pool], homed[15], NOW + timedelta(seconds=2))
    markers = moto_slots.stripe(pool.name, 0)["m"]
    assert list(markers) == [marker_key(holder_key(homed[15].run_id, 1))]
