"""The SQLite engine's database: schema versions, error translation, and how few connections it holds."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import ANCHOR
from tests.contract.test_store_contract import a_job
from tickwork.adapters.records import run_to_item
from tickwork.adapters.sqlite import db as db_module
from tickwork.adapters.sqlite import turns
from tickwork.adapters.sqlite.base import put, rewrite, stored_columns
from tickwork.adapters.sqlite.db import (
    _V4_RUN_CHANGES_TRIGGER,
    READERS,
    SCHEMA_VERSION,
    Database,
    SchemaTooNewError,
    _table_ddl,
    key_columns,
)
from tickwork.adapters.sqlite.events import SqliteEventLog, SqliteRunChangeFeed
from tickwork.adapters.sqlite.store import JOB_COUNT_SQL, SqliteStore
from tickwork.domain.alerts import EventKind, JobEvent, RunBefore
from tickwork.domain.errors import StoreError, TransientStoreError
from tickwork.domain.execution import Claim
from tickwork.domain.models import Job, Run, RunState, Trigger
from tickwork.resources import JOBS, RUNS, SHARDS

REPO = Path(__file__).resolve().parents[2]
GENEROUS_SECONDS = 30.0  # a bound only reached when the behaviour under test is missing


def _a_job(job_id: str = "job_feed", name: str = "feed", retention_days: int = 30) -> Job:
    return a_job(job_id, name=name, shard=0, next_fire_at=None, retention_days=retention_days)


def test_a_new_file_gets_the_current_schema_and_a_second_open_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    assert Database(path).open().schema_version() == SCHEMA_VERSION
    assert Database(path).open().schema_version() == SCHEMA_VERSION
    with sqlite3.connect(path) as raw:
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        indexes = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        journal = raw.execute("PRAGMA journal_mode").fetchone()[0]
    assert {"jobs", "runs", "shards", "messages"} <= tables
    # The DynamoDB indexes of resources.py, as partial SQL indexes, and the run expiry index.
    assert {"jobs_due", "jobs_by_owner", "runs_open_runs", "runs_expiry"} <= indexes
    assert journal == "wal"


def test_a_version_1_file_is_migrated_forward_and_keeps_its_runs(tmp_path: Path) -> None:
    """Version 1 had no requests table and no failed-runs index: opening it adds both, in place."""
    path = tmp_path / "t.db"
    version_1_runs = replace(RUNS, indexes=tuple(i for i in RUNS.indexes if i.name != "failed_runs"))
    job = _a_job("job_v1", "v1")
    old_run = Run.for_fire(job, ANCHOR, now=ANCHOR, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
    with sqlite3.connect(path) as raw:
        for table in (JOBS, version_1_runs, SHARDS):
            for statement in _table_ddl(table):
                raw.execute(statement)
        item = {k: v for k, v in run_to_item(old_run).items() if k != "owner"}
        raw.execute(
            "INSERT INTO runs (job_id, scheduled_for, open_key, check_at, expires_at, item) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                item["job_id"],
                item["scheduled_for"],
                item["open_key"],
                item["check_at"],
                item["expires_at"],
                json.dumps(item),
            ),
        )
        raw.execute("PRAGMA user_version = 1")
    store = SqliteStore(Database(path).open())
    assert store.db.schema_version() == SCHEMA_VERSION == 6
    with sqlite3.connect(path) as raw:
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        indexes = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "requests" in tables and "runs_failed_runs" in indexes
    assert {"events", "run_changes"} <= tables and "events_outbox" in indexes
    kept = store.get_run(old_run.job_id, old_run.scheduled_for)
    assert kept is not None and kept.state is RunState.PLANNED and kept.owner == ""
    failed = replace(
        old_run,
        state=RunState.FAILED,
        finished_at=ANCHOR,
        owner="alice",
        scheduled_for=ANCHOR + timedelta(minutes=5),
    )
    with store.db.write() as connection:
        put(connection, RUNS, run_to_item(failed))
    assert [r.run_id for r in store.failed_runs("alice", since=None, before=None, limit=5)[0]] == [
        failed.run_id
    ]
    # The change feed starts with the upgrade: the run written after it is in it, the old one is not.
    changes = SqliteRunChangeFeed(store.db).take_changes(10)
    assert [(c.before, c.after.run_id) for _, c in changes] == [(None, failed.run_id)]


def _write_run(store: SqliteStore, run: Run) -> None:
    with store.db.write() as connection:
        put(connection, RUNS, run_to_item(run))


def _running(run: Run) -> Run:
    started = run.due_at + timedelta(seconds=2)
    return replace(run, state=RunState.RUNNING, attempt=1, started_at=started, start_delay_ms=2000)


def test_the_change_feed_notes_only_the_state_and_start_of_the_run_before(tmp_path: Path) -> None:
    store = SqliteStore(Database(tmp_path / "t.db").open())
    planned = Run.for_fire(_a_job(), ANCHOR, now=ANCHOR, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
    running = _running(planned)
    ended = replace(running, state=RunState.SUCCEEDED, finished_at=running.started_at)
    for run in (planned, running, ended):
        _write_run(store, run)
    with store.db.read() as connection:
        befores = [row[0] for row in connection.execute("SELECT before FROM run_changes ORDER BY id")]
    assert befores[0] is None
    assert [set(json.loads(b)) for b in befores[1:]] == [{"state", "started_at"}] * 2
    changes = [c for _, c in SqliteRunChangeFeed(store.db).take_changes(10)]
    assert [c.before for c in changes] == [
        None,
        RunBefore(RunState.PLANNED, None),
        RunBefore(RunState.RUNNING, running.started_at),
    ]
    assert [c.after for c in changes] == [planned, running, ended]
    # What the watcher judges a change by before it decodes the record, read by SQLite from it.
    assert [(c.job_id, c.state) for c in changes] == [(r.job_id, r.state) for r in (planned, running, ended)]


def test_the_change_feed_decodes_a_record_only_when_it_is_read(tmp_path: Path) -> None:
    """A record the watcher never reads is never decoded: one that cannot be (here, no scheduled time)
    still gives its job and state, and fails only when read."""
    store = SqliteStore(Database(tmp_path / "t.db").open())
    with store.db.write() as connection:
        connection.execute(
            "INSERT INTO run_changes (before, after) VALUES (NULL, ?)",
            (json.dumps({"job_id": "job_a", "state": "planned"}),),
        )
    [(_, change)] = SqliteRunChangeFeed(store.db).take_changes(10)
    assert (change.job_id, change.state, change.before) == ("job_a", RunState.PLANNED, None)
    with pytest.raises(KeyError):
        _ = change.after


def test_a_version_4_change_feed_is_kept_and_its_trigger_notes_less_from_then_on(tmp_path: Path) -> None:
    """Version 4's trigger copied the whole record before into every change: the changes it wrote still
    read the same after the upgrade, and the new trigger notes only the state and start."""
    path = tmp_path / "t.db"
    Database(path).open().close()
    planned = Run.for_fire(_a_job(), ANCHOR, now=ANCHOR, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
    running = _running(planned)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:  # a version 4 file
        raw.execute("DROP TRIGGER runs_change_feed_update")
        raw.execute("DROP TRIGGER runs_change_feed")
        raw.execute(_V4_RUN_CHANGES_TRIGGER)
        raw.execute("PRAGMA user_version = 4")
        put(raw, RUNS, run_to_item(planned))
        put(raw, RUNS, run_to_item(running))
        [old_note] = [r[0] for r in raw.execute("SELECT before FROM run_changes WHERE before IS NOT NULL")]
    assert "job_view" in json.loads(old_note)  # the whole record
    store = SqliteStore(Database(path).open())
    assert store.db.schema_version() == SCHEMA_VERSION == 6
    _write_run(store, replace(running, state=RunState.SUCCEEDED, finished_at=running.started_at))
    changes = [c for _, c in SqliteRunChangeFeed(store.db).take_changes(10)]
    assert [c.before for c in changes] == [
        None,
        RunBefore(RunState.PLANNED, None),
        RunBefore(RunState.RUNNING, running.started_at),
    ]
    with store.db.read() as connection:
        newest = connection.execute("SELECT before FROM run_changes ORDER BY id DESC LIMIT 1").fetchone()[0]
    assert set(json.loads(newest)) == {"state", "started_at"}


def _columns_match_records(store: SqliteStore) -> bool:
    """Every run row's key and index-key columns are its record's (what `rewrite` relies on)."""
    names = ", ".join(key_columns(RUNS))
    with store.db.read() as connection:
        rows = connection.execute(f"SELECT {names}, item FROM runs").fetchall()
    return all(list(row[:-1]) == stored_columns(RUNS, json.loads(row[-1])) for row in rows)


def test_a_run_written_over_in_place_is_noted_moves_its_index_keys_and_keeps_its_columns(
    tmp_path: Path,
) -> None:
    """Claims and finishes write a run over its stored row (an UPDATE): the feed notes each change of
    state from the row before, a write that keeps the state is not a change, and the sweeper's and the
    failed runs' index keys move with the record."""
    store = SqliteStore(Database(tmp_path / "t.db").open())
    planned = Run.for_fire(_a_job(), ANCHOR, now=ANCHOR, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
    running = _running(planned)
    beating = replace(running, heartbeat_at=running.due_at + timedelta(seconds=5))
    failed = replace(beating, state=RunState.FAILED, finished_at=running.due_at + timedelta(seconds=9))
    _write_run(store, planned)
    for before, after in [(planned, running), (running, beating), (beating, failed)]:
        store.transition_run(before, after)
        assert _columns_match_records(store)

    changes = [c for _, c in SqliteRunChangeFeed(store.db).take_changes(10)]
    assert [c.before for c in changes] == [
        None,
        RunBefore(RunState.PLANNED, None),
        RunBefore(RunState.RUNNING, running.started_at),
    ]
    assert [c.after for c in changes] == [planned, running, failed]
    assert list(store.open_runs(planned.shard, ANCHOR + timedelta(days=1))) == []
    assert [r.run_id for r in store.failed_runs("alice", since=None, before=None, limit=5)[0]] == [
        planned.run_id
    ]


def test_a_claim_moves_the_sweepers_index_key_to_its_lease_end(tmp_path: Path) -> None:
    """The claim changes the record in place: its row's columns are taken before, so the open-runs key
    moves with it, and the sweeper finds the run once its lease ended (not at the planned run's check)."""
    store = SqliteStore(Database(tmp_path / "t.db").open())
    job = _a_job()
    planned = Run.for_fire(job, ANCHOR, now=ANCHOR, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
    _write_run(store, planned)
    now = planned.due_at + timedelta(seconds=1)
    lease = now + timedelta(seconds=5)
    swept_at = lease + timedelta(seconds=1)
    assert list(store.open_runs(planned.shard, swept_at)) == []  # planned: looked at later than that

    store.claim(
        Claim(
            job_id=job.job_id,
            scheduled_for=planned.scheduled_for,
            expected_attempt=0,
            worker="w#1",
            now=now,
            timeout_seconds=job.timeout_seconds,
            lease_expires_at=lease,
        )
    )

    assert _columns_match_records(store)
    assert [r.run_id for r in store.open_runs(planned.shard, swept_at)] == [planned.run_id]


def test_a_rewrite_cannot_move_a_record_to_another_key_nor_write_a_row_that_is_gone(tmp_path: Path) -> None:
    store = SqliteStore(Database(tmp_path / "t.db").open())
    planned = Run.for_fire(_a_job(), ANCHOR, now=ANCHOR, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
    _write_run(store, planned)
    item = run_to_item(planned)
    moved = run_to_item(replace(planned, scheduled_for=ANCHOR + timedelta(minutes=5)))
    with pytest.raises(ValueError), store.db.write() as connection:
        rewrite(connection, RUNS, stored_columns(RUNS, item), moved)
    with store.db.write() as connection:
        connection.execute("DELETE FROM runs")
    with pytest.raises(StoreError), store.db.write() as connection:
        rewrite(connection, RUNS, stored_columns(RUNS, item), {**item, "state": "running"})


def test_a_version_5_file_gets_the_trigger_that_notes_runs_written_over_in_place(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    Database(path).open().close()
    planned = Run.for_fire(_a_job(), ANCHOR, now=ANCHOR, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:  # a version 5 file
        raw.execute("DROP TRIGGER runs_change_feed_update")
        raw.execute("PRAGMA user_version = 5")
        put(raw, RUNS, run_to_item(planned))
    store = SqliteStore(Database(path).open())
    assert store.db.schema_version() == SCHEMA_VERSION == 6
    store.transition_run(planned, _running(planned))
    changes = [c for _, c in SqliteRunChangeFeed(store.db).take_changes(10)]
    assert [c.before for c in changes] == [None, RunBefore(RunState.PLANNED, None)]


def test_a_database_from_a_newer_tickwork_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    Database(path).open()
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(SchemaTooNewError, match="newer than this Tickwork"):
        Database(path).open()
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1


@pytest.mark.process  # runs `tickwork local`
def test_tickwork_local_says_so_and_exits_2_on_a_newer_database(tmp_path: Path) -> None:
    path = tmp_path / "tickwork.db"
    Database(path).open()
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TICKWORK_"))}
    done = subprocess.run(
        [sys.executable, "-m", "tickwork.cli", "local", "--state-dir", str(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "newer than this Tickwork" in done.stderr


def test_a_write_lock_held_by_another_process_is_transient(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    Database(path).open()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        db = Database(path)  # not opened again: the schema is there, and opening would wait for the lock
        with pytest.raises(TransientStoreError), _short_busy_timeout(db), db.write() as connection:
            connection.execute("DELETE FROM shards")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _turn_is_free(path: Path) -> bool:
    """Whether a writer of another process could take the writers' turn now (a fresh open file)."""
    fd = os.open(f"{path}.writers", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing lets go of a lock it took
    return True


def test_the_writers_turn_is_held_exactly_while_a_write_transaction_is_open(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    db = Database(path).open()
    assert _turn_is_free(path)
    with db.write() as connection:
        _add_shard(connection, "a")
        assert not _turn_is_free(path)
        with db.write() as inner:  # a nested write is the outer transaction's: it takes no turn of its own
            _add_shard(inner, "b")
        assert not _turn_is_free(path)
    assert _turn_is_free(path)
    with pytest.raises(RuntimeError), db.write() as connection:  # let go when the block raises, too
        _add_shard(connection, "c")
        raise RuntimeError("undo")
    assert _turn_is_free(path) and _shard_ids(db) == ["a", "b"]
    db.close()
    assert _turn_is_free(path)


def test_a_writer_of_another_process_waits_for_the_turn_and_goes_in_when_it_is_let_go(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    holder, waiter = Database(path).open(), Database(path).open()  # two files open: as two processes
    entered, done = threading.Event(), threading.Event()

    def write_after() -> None:
        entered.set()
        with waiter.write() as connection:
            _add_shard(connection, "second")
        done.set()

    with holder.write() as connection:
        _add_shard(connection, "first")
        thread = threading.Thread(target=write_after)
        thread.start()
        entered.wait(GENEROUS_SECONDS)
        assert not done.wait(0.2)
        # It waits for the turn, not in SQLite's busy handler: its writer has no transaction open.
        assert waiter._writer is not None and not waiter._writer.in_transaction
    thread.join(GENEROUS_SECONDS)
    assert done.is_set() and _shard_ids(waiter) == ["first", "second"]


def test_a_write_through_a_second_database_inside_a_write_is_refused_not_left_waiting(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    first, second = Database(path).open(), Database(path).open()
    with first.write() as connection:
        _add_shard(connection, "outer")
        with pytest.raises(StoreError, match="wait for itself"), second.write() as inner:
            _add_shard(inner, "inner")
    assert _shard_ids(first) == ["outer"]
    with second.write() as connection:  # after the outer write: its turn is free again
        _add_shard(connection, "later")
    assert _shard_ids(first) == ["later", "outer"]


def _holding_process(path: Path) -> subprocess.Popen[str]:
    """A process that opens a write transaction on the database (taking the turn) and keeps it."""
    script = (
        "import sys, time; sys.path.insert(0, sys.argv[2]); from pathlib import Path; "
        "from tickwork.adapters.sqlite.db import Database; db = Database(Path(sys.argv[1])).open(); "
        "w = db.write(); c = w.__enter__(); print('holding', flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(path), str(REPO / "functions")], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    return holder


def test_a_writer_waits_for_a_stopped_holder_says_so_and_goes_in_once_it_is_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(turns, "WATCH_SECONDS", 0.1)
    path = tmp_path / "t.db"
    Database(path).open()
    holder = _holding_process(path)
    waiter = Database(path)
    done = threading.Event()

    def write() -> None:
        with waiter.write() as connection:
            _add_shard(connection, "after")
        done.set()

    thread = threading.Thread(target=write)
    try:
        holder.send_signal(signal.SIGSTOP)
        with caplog.at_level(logging.WARNING):
            thread.start()
            assert not done.wait(0.5)  # no timeout: it waits as long as the holder holds the turn
        assert any("waited" in r.getMessage() and "writers' turn" in r.getMessage() for r in caplog.records)
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait(GENEROUS_SECONDS)
    thread.join(GENEROUS_SECONDS)
    assert done.is_set() and _shard_ids(waiter) == ["after"]


def test_without_a_turn_file_sqlite_alone_orders_the_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.db"
    (tmp_path / "t.db.writers").mkdir()  # cannot be opened as the turn's file
    with caplog.at_level(logging.WARNING):
        db = Database(path).open()
        with db.write() as connection:
            _add_shard(connection, "a")
    assert _shard_ids(db) == ["a"]
    assert any("no writers' turn" in r.getMessage() for r in caplog.records)


def test_a_process_killed_holding_the_turn_lets_it_go(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    Database(path).open()
    holder = _holding_process(path)
    try:
        assert not _turn_is_free(path)
    finally:
        holder.kill()
        holder.wait(GENEROUS_SECONDS)
    db = Database(path)
    with db.write() as connection:
        _add_shard(connection, "after")
    assert _shard_ids(db) == ["after"]


class _short_busy_timeout:
    """Make the database give up on a held lock at once (the default waits 10 s)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def __enter__(self) -> None:
        with self.db._write_lock:  # the writer is created under the lock, as write() does
            self.db._writer_connection().execute("PRAGMA busy_timeout = 0")

    def __exit__(self, *exc: object) -> None:
        return None


def _shard_ids(db: Database) -> list[str]:
    with db.read() as connection:
        return _shard_ids_in(connection)


def _shard_ids_in(connection: sqlite3.Connection) -> list[str]:
    return [row[0] for row in connection.execute("SELECT shard_id FROM shards ORDER BY shard_id")]


def _add_shard(connection: sqlite3.Connection, shard_id: str) -> None:
    connection.execute("INSERT INTO shards (shard_id, item) VALUES (?, ?)", (shard_id, "{}"))


def test_a_write_inside_a_write_undoes_only_its_own_changes_when_it_raises(tmp_path: Path) -> None:
    db = Database(tmp_path / "t.db").open()
    with db.write() as outer:
        _add_shard(outer, "a")
        with pytest.raises(ValueError), db.write() as inner:
            assert inner is outer  # the same transaction
            _add_shard(inner, "b")
            raise ValueError("refused")
        with db.write() as inner:
            _add_shard(inner, "c")
        assert _shard_ids(db) == []  # another connection sees nothing before the commit

    assert _shard_ids(db) == ["a", "c"]


def test_a_write_two_deep_that_raises_undoes_only_its_own_changes(tmp_path: Path) -> None:
    db = Database(tmp_path / "t.db").open()
    with db.write() as outer:
        _add_shard(outer, "a")
        with db.write() as middle:
            _add_shard(middle, "b")
            with pytest.raises(ValueError), db.write() as inner:
                _add_shard(inner, "c")
                raise ValueError("refused")
            _add_shard(middle, "d")

    assert _shard_ids(db) == ["a", "b", "d"]


def test_a_write_that_raises_undoes_the_writes_nested_in_it_that_returned(tmp_path: Path) -> None:
    db = Database(tmp_path / "t.db").open()
    with db.write() as outer:
        with db.write() as first:
            _add_shard(first, "a")
        with pytest.raises(ValueError), db.write() as middle:
            _add_shard(middle, "b")
            with db.write() as inner:  # returns: its savepoint stays open inside the middle's
                _add_shard(inner, "c")
            raise ValueError("refused")
        with db.write() as last:
            _add_shard(last, "d")
        _add_shard(outer, "e")

    assert _shard_ids(db) == ["a", "d", "e"]


def test_a_nested_write_that_returns_costs_one_statement_its_savepoint(tmp_path: Path) -> None:
    """No RELEASE per nested write: the commit ends the savepoints (each statement in an executor's
    shared commit waits for the GIL while the write lock is held)."""
    db = Database(tmp_path / "t.db").open()
    statements: list[str] = []
    with db.write() as outer:
        outer.set_trace_callback(statements.append)
        try:
            for shard in ("a", "b", "c"):
                with db.write() as inner:
                    _add_shard(inner, shard)
        finally:
            outer.set_trace_callback(None)

    assert [s.split()[0] for s in statements] == ["SAVEPOINT", "INSERT"] * 3
    assert _shard_ids(db) == ["a", "b", "c"]


def test_past_the_open_savepoints_limit_each_nested_write_is_released_again(tmp_path: Path) -> None:
    db = Database(tmp_path / "t.db").open()
    statements: list[str] = []
    shards = [f"s{n:03d}" for n in range(db_module.OPEN_SAVEPOINTS + 3)]
    with db.write() as outer:
        outer.set_trace_callback(statements.append)
        try:
            for shard in shards:
                with db.write() as inner:
                    _add_shard(inner, shard)
            with pytest.raises(ValueError), db.write() as inner:  # past the limit, undone alone all the same
                _add_shard(inner, "z")
                raise ValueError("refused")
        finally:
            outer.set_trace_callback(None)

    assert sum(s.startswith("RELEASE") for s in statements) == 3 + 1  # the last one's after its rollback
    assert _shard_ids(db) == shards


def test_a_nested_write_without_a_savepoint_costs_no_statement_and_may_refuse_before_it_changes(
    tmp_path: Path,
) -> None:
    db = Database(tmp_path / "t.db").open()
    statements: list[str] = []
    with db.write() as outer:
        outer.set_trace_callback(statements.append)
        try:
            with db.write(savepoint=False) as inner:
                _add_shard(inner, "a")
            with pytest.raises(ValueError), db.write(savepoint=False) as inner:
                assert _shard_ids_in(inner) == ["a"]
                raise ValueError("refused before any change")
        finally:
            outer.set_trace_callback(None)
        _add_shard(outer, "b")

    assert [s.split()[0] for s in statements] == ["INSERT", "SELECT"]
    assert _shard_ids(db) == ["a", "b"]


def test_a_nested_write_without_a_savepoint_that_raises_after_a_change_fails_the_whole_transaction(
    tmp_path: Path,
) -> None:
    """Its change cannot be undone alone: nothing of the transaction lands, even when the outer block
    caught the error and went on."""
    db = Database(tmp_path / "t.db").open()
    with pytest.raises(StoreError, match="nothing of the transaction landed"), db.write() as outer:
        _add_shard(outer, "a")
        with pytest.raises(ValueError), db.write(savepoint=False) as inner:
            _add_shard(inner, "b")
            raise ValueError("refused after a change")
        _add_shard(outer, "c")

    assert _shard_ids(db) == []
    with db.write() as connection:  # the next transaction is not spoiled
        _add_shard(connection, "d")
    assert _shard_ids(db) == ["d"]


def test_a_write_inside_a_write_lands_only_with_the_outer_commit(tmp_path: Path) -> None:
    db = Database(tmp_path / "t.db").open()
    with pytest.raises(RuntimeError), db.write() as outer:
        with db.write() as inner:
            _add_shard(inner, "a")
        _add_shard(outer, "b")
        raise RuntimeError("the unit fails")

    assert _shard_ids(db) == []
    with db.write() as connection:  # the lock and the nesting are free again
        _add_shard(connection, "c")
    assert _shard_ids(db) == ["c"]


def test_a_write_of_another_thread_waits_for_the_outer_commit_and_is_not_nested_in_it(tmp_path: Path) -> None:
    db = Database(tmp_path / "t.db").open()
    inside, other_done = threading.Event(), threading.Event()

    def other() -> None:
        inside.wait()
        with db.write() as connection:
            _add_shard(connection, "other")
        other_done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with pytest.raises(RuntimeError), db.write() as outer:
        _add_shard(outer, "mine")
        inside.set()
        assert not other_done.wait(0.3)  # it waits for this transaction
        raise RuntimeError("rolled back: the other thread's write must not go with it")
    thread.join(10)

    assert other_done.is_set() and _shard_ids(db) == ["other"]


def test_hundreds_of_threads_share_a_few_connections(tmp_path: Path) -> None:
    """An executor has a thread per run in flight: each holding its own connection would be thousands of
    open files. The database holds one writer, one watcher, one checkpointer and at most READERS readers."""
    path = tmp_path / "t.db"
    db = Database(path).open()
    barrier = threading.Barrier(200)

    def work(index: int) -> None:
        barrier.wait()
        with db.write() as connection:
            connection.execute("INSERT INTO shards (shard_id, item) VALUES (?, ?)", (f"{index:04d}", "{}"))
        with db.read() as connection:
            connection.execute("SELECT COUNT(*) FROM shards").fetchone()
        db.data_version()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    with db.read() as connection:
        assert connection.execute("SELECT COUNT(*) FROM shards").fetchone()[0] == 200
    open_files = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the directory listing's own descriptor, closed
            open_files.append(os.readlink(f"/proc/self/fd/{fd}"))
    main_file = [name for name in open_files if name == str(path)]
    assert 1 <= len(main_file) <= READERS + 3, len(main_file)
    db.close()


def _checkpointed_shards(path: Path) -> int:
    """The shards in the database file itself, not counting what is still only in its WAL (none while the
    schema itself is only there)."""
    connection = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        tables = connection.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'shards'").fetchone()[0]
        if not tables:
            return 0
        return int(connection.execute("SELECT COUNT(*) FROM shards").fetchone()[0])
    finally:
        connection.close()


def test_a_commit_never_checkpoints_and_every_nth_commit_checkpoints_after_letting_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's own checkpoint would run inside a commit, with the writers' turn still held; here a process
    checkpoints after every CHECKPOINT_EVERY_COMMITS of its commits, once it let go of the lock and turn."""
    monkeypatch.setattr(db_module, "CHECKPOINT_EVERY_COMMITS", 3)
    path = tmp_path / "t.db"
    db = Database(path).open()
    seen: list[tuple[bool, bool]] = []
    checkpoint = db._checkpoint

    def noted() -> None:
        seen.append((db._write_lock.locked(), _turn_is_free(path)))
        checkpoint()

    monkeypatch.setattr(db, "_checkpoint", noted)
    for shard in ("a", "b"):
        with db.write() as connection:
            _add_shard(connection, shard)
    assert seen == [] and _checkpointed_shards(path) == 0  # two commits, none checkpointed: all in the WAL
    with db.write() as connection:  # a nested write is not a commit of its own
        _add_shard(connection, "c")
        with db.write() as inner:
            _add_shard(inner, "d")
    assert seen == [(False, True)]  # after the third commit, the lock and the turn let go
    assert _checkpointed_shards(path) == 4
    with pytest.raises(RuntimeError), db.write() as connection:  # rolled back: not a commit
        _add_shard(connection, "e")
        raise RuntimeError("undo")
    for shard in ("f", "g"):
        with db.write() as connection:
            _add_shard(connection, shard)
    assert len(seen) == 1 and _checkpointed_shards(path) == 4
    with db.write() as connection:
        assert connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0  # SQLite's own: off
        _add_shard(connection, "h")
    assert len(seen) == 2 and _checkpointed_shards(path) == 7
    db.close()


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param("execute", id="the checkpoint fails"),
        pytest.param("connect", id="its connection cannot be made: busy"),
    ],
)
def test_a_checkpoint_that_fails_is_logged_and_the_write_it_follows_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, failure: str
) -> None:
    """The write before the checkpoint landed: were the failure raised, the store's retries would make the
    write again (a second message, a second event)."""
    monkeypatch.setattr(db_module, "CHECKPOINT_EVERY_COMMITS", 1)
    db = Database(tmp_path / "t.db").open()
    closed: list[bool] = []

    class FailingConnection:
        def execute(self, sql: str) -> sqlite3.Cursor:
            raise sqlite3.OperationalError("disk I/O error")

        def close(self) -> None:
            closed.append(True)

    if failure == "execute":
        db._checkpointer = FailingConnection()  # type: ignore[assignment]
    else:
        connect = db._connect

        def busy_checkpointer(busy_timeout_ms: int | None = None) -> sqlite3.Connection:
            if busy_timeout_ms == 0:  # the checkpointer's
                raise TransientStoreError("database is locked: busy")
            return connect(busy_timeout_ms)

        monkeypatch.setattr(db, "_connect", busy_checkpointer)
    with caplog.at_level(logging.WARNING), db.write() as connection:
        _add_shard(connection, "a")
    assert _shard_ids(db) == ["a"]
    assert "checkpoint of" in caplog.text and ("disk I/O error" in caplog.text or "busy" in caplog.text)
    assert db._checkpointer is None and closed == ([True] if failure == "execute" else [])  # made anew next
    db.close()


def test_a_commit_of_more_pages_than_sqlites_mark_does_not_checkpoint_inside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's own mark (1,000 pages) is off for the writer: one commit of 1,500 pages stays in the WAL."""
    monkeypatch.setattr(db_module, "CHECKPOINT_EVERY_COMMITS", 5)
    path = tmp_path / "t.db"
    db = Database(path).open()
    with db.write() as connection:
        connection.executemany(
            "INSERT INTO shards (shard_id, item) VALUES (?, ?)",
            [(f"{i:05d}", "x" * 4000) for i in range(1500)],
        )
    assert _checkpointed_shards(path) == 0 and len(_shard_ids(db)) == 1500
    db.close()  # the last connection's close checkpoints
    assert _checkpointed_shards(path) == 1500


def test_a_checkpoint_a_reader_holds_back_is_tried_again_sooner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "CHECKPOINT_EVERY_COMMITS", 4)
    monkeypatch.setattr(db_module, "CHECKPOINT_AGAIN_COMMITS", 2)
    path = tmp_path / "t.db"
    db = Database(path).open()
    checkpoints: list[int] = []
    checkpoint = db._checkpoint

    def noted() -> None:
        checkpoints.append(db.write_lock_held()[0])
        checkpoint()

    monkeypatch.setattr(db, "_checkpoint", noted)
    with db.write() as connection:
        _add_shard(connection, "a")
    reader = sqlite3.connect(path)
    reader.execute("BEGIN")
    assert reader.execute("SELECT COUNT(*) FROM shards").fetchone()[0] == 1  # a snapshot at one shard
    for shard in "bcdefg":
        with db.write() as connection:
            _add_shard(connection, shard)
    # At the 4th commit the reader held back the pages after its snapshot: tried again 2 commits later.
    assert checkpoints == [4, 6]
    reader.execute("COMMIT")
    reader.close()
    for shard in "hijk":
        with db.write() as connection:
            _add_shard(connection, shard)
    # At the 8th, nothing held it back: all 8 shards copied, and the next one is a whole period later.
    assert checkpoints == [4, 6, 8] and _checkpointed_shards(path) == 8
    with db.write() as connection:
        _add_shard(connection, "l")
    assert checkpoints == [4, 6, 8, 12] and _checkpointed_shards(path) == 12
    db.close()


def test_the_write_lock_counts_its_commits_and_the_time_it_was_held(tmp_path: Path) -> None:
    told: list[tuple[int, float]] = []
    db = Database(tmp_path / "t.db", on_commit=lambda commits, held: told.append((commits, held))).open()
    committed, held_to_open = db.write_lock_held()  # the schema's transaction: held, not a write's commit
    assert committed == 0 and held_to_open > 0 and told == []
    with db.write() as connection:
        _add_shard(connection, "a")
        with db.write() as inner:
            _add_shard(inner, "b")
    committed, held = db.write_lock_held()
    assert committed == 1 and held > held_to_open
    assert told == [(1, held)]  # once, after the outer commit
    with pytest.raises(RuntimeError), db.write() as connection:
        _add_shard(connection, "c")
        raise RuntimeError("undo")
    assert db.write_lock_held()[0] == 1 and db.write_lock_held()[1] > held  # held, not committed
    assert len(told) == 1
    db.close()


def test_a_commit_listener_that_raises_is_logged_and_the_write_stands(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(commits: int, held: float) -> None:
        raise RuntimeError("listener bug")

    db = Database(tmp_path / "t.db", on_commit=broken).open()
    with caplog.at_level(logging.ERROR), db.write() as connection:
        _add_shard(connection, "a")
    assert _shard_ids(db) == ["a"] and "listener bug" in caplog.text
    db.close()


def test_runs_past_their_retention_are_deleted_and_the_rest_kept(tmp_path: Path) -> None:
    """DynamoDB's TTL, done by the SQLite engine's sweeper: `delete_expired` at each sweep."""
    store = SqliteStore(Database(tmp_path / "t.db").open())
    job = _a_job("job_ttl", "ttl", retention_days=1)
    fires = [ANCHOR + timedelta(minutes=5 * i) for i in range(3)]
    store.create_job(
        job,
        [Run.for_fire(job, f, now=ANCHOR, trigger=Trigger.SCHEDULE, state=RunState.PLANNED) for f in fires],
    )

    # A day after the second fire: the first two are past their retention, the third is not.
    assert store.delete_expired(fires[1] + timedelta(days=1, seconds=1)) == 2
    assert [r.scheduled_for for r in store.list_runs(job.job_id, newest_first=False)] == fires[2:]
    assert store.delete_expired(fires[1] + timedelta(days=1, seconds=1)) == 0


def test_events_past_their_expiry_are_deleted_as_runs_are(tmp_path: Path) -> None:
    """The embedded engine's TTL for the events table (DynamoDB expires them itself)."""
    db = Database(tmp_path / "tickwork.db").open()
    log = SqliteEventLog(db)
    old = JobEvent("job_a", "alice", EventKind.RUN_FAILED, ANCHOR, "job_a:1", "old")
    kept = JobEvent("job_a", "alice", EventKind.RUN_FAILED, ANCHOR + timedelta(days=40), "job_a:2", "kept")
    assert log.record_event(old, ANCHOR + timedelta(days=30), (), ())
    assert log.record_event(kept, ANCHOR + timedelta(days=70), (), ())
    assert log.delete_expired(ANCHOR + timedelta(days=31)) == 1
    assert [e.detail for e in log.job_events("job_a", 10, None)[0]] == ["kept"]


def test_the_job_count_counts_every_job_from_the_owners_index_not_the_records(tmp_path: Path) -> None:
    store = SqliteStore(Database(tmp_path / "tickwork.db").open())
    for n in range(3):
        store.create_job(_a_job(f"job_count_{n}"), [])
    store.delete_job(_a_job("job_count_1"))
    assert store.job_count() == 2
    with store.db.read() as connection:
        plan = " ".join(str(row[3]) for row in connection.execute(f"EXPLAIN QUERY PLAN {JOB_COUNT_SQL}"))
    assert "COVERING INDEX jobs_by_owner" in plan
