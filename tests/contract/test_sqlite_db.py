"""The SQLite engine's database: schema versions, error translation, and how few connections it holds."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import ANCHOR
from tickwork.adapters.records import run_to_item
from tickwork.adapters.sqlite import db as db_module
from tickwork.adapters.sqlite.base import put
from tickwork.adapters.sqlite.db import READERS, SCHEMA_VERSION, Database, SchemaTooNewError, _table_ddl
from tickwork.adapters.sqlite.events import SqliteEventLog, SqliteRunChangeFeed
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.domain.alerts import EventKind, JobEvent
from tickwork.domain.errors import ConflictError, StoreError, TickworkError, TransientStoreError
from tickwork.domain.models import Job, Run, RunState, Target, Trigger
from tickwork.domain.schedule import parse_schedule
from tickwork.resources import JOBS, RUNS, SHARDS

REPO = Path(__file__).resolve().parents[2]


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
    job = Job(
        job_id="job_v1",
        owner="alice",
        name="v1",
        schedule=parse_schedule("*/5 * * * *"),
        target=Target("http", {"url": "http://127.0.0.1:9/"}),
        shard=0,
        created_at=ANCHOR,
        updated_at=ANCHOR,
    )
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
    assert store.db.schema_version() == SCHEMA_VERSION == 4
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


class _short_busy_timeout:
    """Make the database give up on a held lock at once (the default waits 10 s)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def __enter__(self) -> None:
        with self.db._write_lock:  # the writer is created under the lock, as write() does
            self.db._writer_connection().execute("PRAGMA busy_timeout = 0")

    def __exit__(self, *exc: object) -> None:
        return None


def test_hundreds_of_threads_share_a_few_connections(tmp_path: Path) -> None:
    """An executor has a thread per run in flight: each holding its own connection would be thousands of
    open files. The database holds one writer, one watcher and at most READERS readers."""
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
    assert 1 <= len(main_file) <= READERS + 2, len(main_file)
    db.close()


def _commits_seen(db: Database) -> list[str]:
    """The statements the writer connection runs from now on (its COMMITs count the write transactions)."""
    seen: list[str] = []
    with db._write_lock:
        db._writer_connection().set_trace_callback(seen.append)
    return seen


def test_concurrent_writes_share_commits_and_each_stays_atomic(tmp_path: Path) -> None:
    """Group commit: 40 threads each make 25 read-check-writes of one counter; every increment lands (the
    read and the write of each are still one atomic unit), in fewer commits than writes."""
    db = Database(tmp_path / "t.db").open()
    with db.write() as connection:
        connection.execute("INSERT INTO shards (shard_id, item) VALUES ('counter', '0')")
    statements = _commits_seen(db)
    barrier = threading.Barrier(40)

    def work() -> None:
        barrier.wait()
        for _ in range(25):
            with db.write() as connection:
                (value,) = connection.execute("SELECT item FROM shards WHERE shard_id = 'counter'").fetchone()
                connection.execute(
                    "UPDATE shards SET item = ? WHERE shard_id = 'counter'", (str(int(value) + 1),)
                )

    threads = [threading.Thread(target=work) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    with db.read() as connection:
        assert (
            connection.execute("SELECT item FROM shards WHERE shard_id = 'counter'").fetchone()[0] == "1000"
        )
    commits = sum(1 for statement in statements if statement == "COMMIT")
    assert 0 < commits < 1000, commits
    db.close()


@pytest.fixture
def patient_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group stays open for its waiting writers however slow this machine is right now."""
    monkeypatch.setattr(db_module, "GROUP_MAX_SECONDS", 30.0)
    monkeypatch.setattr(db_module, "GROUP_STALL_SECONDS", 30.0)  # no waiter commits a group early


def _carry_on_after(
    db: Database, second: Callable[[sqlite3.Connection], None]
) -> tuple[Exception | None, Exception | None]:
    """A first write (row 'first') returns while a second writer waits for the lock, so the second
    (`second`) carries the first's transaction on: both are in one group. What each raised (None: it
    returned, its write committed)."""
    entered = threading.Event()
    raised: dict[str, Exception] = {}

    def first() -> None:
        try:
            with db.write() as connection:
                connection.execute("INSERT INTO shards (shard_id, item) VALUES ('first', '{}')")
                entered.set()
                deadline = time.monotonic() + 10
                while db._waiting == 0 and time.monotonic() < deadline:  # the second writer is queued
                    time.sleep(0.001)
        except (TickworkError, ValueError) as error:
            raised["first"] = error

    thread = threading.Thread(target=first)
    thread.start()
    assert entered.wait(10)
    try:
        with db.write() as connection:
            second(connection)
    except (TickworkError, ValueError) as error:  # what the tests' second writes raise
        raised["second"] = error
    thread.join(10)
    assert not thread.is_alive()
    return raised.get("first"), raised.get("second")


@pytest.mark.usefixtures("patient_groups")
def test_a_write_that_raises_undoes_only_its_own_part_of_a_shared_transaction(tmp_path: Path) -> None:
    db = Database(tmp_path / "t.db").open()
    statements = _commits_seen(db)

    def second(connection: sqlite3.Connection) -> None:
        connection.execute("INSERT INTO shards (shard_id, item) VALUES ('second', '{}')")
        raise ValueError("the second write's own check failed")

    first_error, second_error = _carry_on_after(db, second)

    assert first_error is None
    assert isinstance(second_error, ValueError)
    with db.read() as connection:
        assert [row[0] for row in connection.execute("SELECT shard_id FROM shards")] == ["first"]
    assert statements.count("BEGIN IMMEDIATE") == 1  # the two writes shared one transaction
    db.close()


@pytest.mark.usefixtures("patient_groups")
def test_when_a_shared_transaction_is_lost_every_write_in_it_is_told(tmp_path: Path) -> None:
    """SQLite ends the whole transaction on some errors (a full disk, an I/O error): the writes that were
    waiting for its commit must not return as if committed."""
    db = Database(tmp_path / "t.db").open()

    def second(connection: sqlite3.Connection) -> None:
        connection.execute("ROLLBACK")  # as SQLite does on such an error: the savepoints are gone

    first_error, second_error = _carry_on_after(db, second)

    assert isinstance(first_error, StoreError), first_error
    assert isinstance(second_error, StoreError), second_error
    with db.read() as connection:
        assert connection.execute("SELECT COUNT(*) FROM shards").fetchone()[0] == 0
    with db.write() as connection:  # the next write starts a transaction of its own
        connection.execute("INSERT INTO shards (shard_id, item) VALUES ('after', '{}')")
    with db.read() as connection:
        assert connection.execute("SELECT shard_id FROM shards").fetchall() == [("after",)]
    db.close()


@pytest.mark.usefixtures("patient_groups")
def test_a_write_that_raises_returns_only_once_what_it_read_is_committed(tmp_path: Path) -> None:
    """A refusal is acted on at once (a replay reads the record that made it refuse, through another
    connection): a write that raises must not return while the writes it saw are still uncommitted, even
    when a later writer carries its group on."""
    db = Database(tmp_path / "t.db").open()
    entered, refused, queued = threading.Event(), threading.Event(), threading.Event()
    seen_after_refusal: list[int] = []

    def wait_for_a_queued_writer() -> None:
        deadline = time.monotonic() + 10
        while db._waiting == 0 and time.monotonic() < deadline:
            time.sleep(0.001)

    def first() -> None:  # writes the record, leaves the group open for the second
        with db.write() as connection:
            connection.execute("INSERT INTO shards (shard_id, item) VALUES ('request', '{}')")
            entered.set()
            wait_for_a_queued_writer()

    def second() -> None:  # sees the record, refuses, and reads it back as a replay would
        try:
            with db.write() as connection:
                assert connection.execute("SELECT 1 FROM shards WHERE shard_id = 'request'").fetchone()
                queued.set()
                wait_for_a_queued_writer()  # the third carries the group on after this one
                raise ConflictError("the request exists")
        except ConflictError:
            with db.read() as connection:
                seen_after_refusal.append(connection.execute("SELECT COUNT(*) FROM shards").fetchone()[0])
        refused.set()

    def third() -> None:
        time.sleep(0.2)  # the second has raised and is waiting for the group's commit
        with db.write() as connection:
            connection.execute("INSERT INTO shards (shard_id, item) VALUES ('other', '{}')")

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert entered.wait(10)
    threads.append(threading.Thread(target=second))
    threads[1].start()
    assert queued.wait(10)
    threads.append(threading.Thread(target=third))
    threads[2].start()
    for thread in threads:
        thread.join(10)
    assert refused.is_set()
    assert seen_after_refusal and seen_after_refusal[0] >= 1, seen_after_refusal
    db.close()


class _FailingCommits:
    """A writer connection whose COMMIT and ROLLBACK both fail, as on a disk that went away."""

    def __init__(self, real: sqlite3.Connection) -> None:
        self.real = real

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql in ("COMMIT", "ROLLBACK"):
            raise sqlite3.OperationalError("disk I/O error")
        return self.real.execute(sql, *args)

    @property
    def in_transaction(self) -> bool:
        return self.real.in_transaction

    def close(self) -> None:
        self.real.close()


def test_a_commit_and_rollback_that_both_fail_leave_no_lock_held(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    db = Database(path).open()
    with db._write_lock:
        db._writer = _FailingCommits(db._writer_connection())  # type: ignore[assignment]

    with pytest.raises(StoreError), db.write() as connection:
        connection.execute("INSERT INTO shards (shard_id, item) VALUES ('lost', '{}')")

    assert not db._write_lock.locked()
    # The failed connection was closed (that rolled it back): another process can write, and so can this one.
    other = sqlite3.connect(path, isolation_level=None, timeout=1)
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    other.close()
    with db.write() as connection:
        connection.execute("INSERT INTO shards (shard_id, item) VALUES ('next', '{}')")
    with db.read() as connection:
        assert connection.execute("SELECT shard_id FROM shards").fetchall() == [("next",)]
    db.close()


def test_an_exit_inside_a_write_stays_an_exit_when_its_group_fails(tmp_path: Path) -> None:
    """A failed commit turns a refusal into the store's error (what it read is gone), never an exit or an
    interrupt: a retry loop catching store errors must not swallow them."""
    db = Database(tmp_path / "t.db").open()
    with db._write_lock:
        db._writer = _FailingCommits(db._writer_connection())  # type: ignore[assignment]

    with pytest.raises(SystemExit), db.write():
        raise SystemExit(3)

    assert not db._write_lock.locked()
    db.close()


def test_runs_past_their_retention_are_deleted_and_the_rest_kept(tmp_path: Path) -> None:
    """DynamoDB's TTL, done by the SQLite engine's sweeper: `delete_expired` at each sweep."""
    store = SqliteStore(Database(tmp_path / "t.db").open())
    job = Job(
        job_id="job_ttl",
        owner="alice",
        name="ttl",
        schedule=parse_schedule("*/5 * * * *"),
        target=Target("http", {"url": "http://127.0.0.1:9/"}),
        shard=0,
        created_at=ANCHOR,
        updated_at=ANCHOR,
        retention_days=1,
    )
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
