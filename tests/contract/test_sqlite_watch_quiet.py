"""The embedded engine's quiet watcher (adapters/sqlite/events.SqliteWatchQuiet): a round is skipped only
while nothing was written since the last round began and nothing of the outbox is due."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import ANCHOR
from tests.contract.test_store_contract import a_job
from tickwork.adapters.sqlite.bulk import SqliteBulkActions
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.doorbell import CommitWait
from tickwork.adapters.sqlite.events import SETTLING_RESTS, SqliteEventLog, SqliteWatchQuiet
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.domain.bulk import BulkAction, BulkKind, Selector
from tickwork.domain.notify import DeadlineTimer


def _databases(tmp_path: Path) -> tuple[Database, Database]:
    """The watcher's database and another process's (its own connections) on the same file."""
    path = tmp_path / "tickwork.db"
    return Database(path).open(), Database(path).open()


def _round(quiet: SqliteWatchQuiet) -> None:
    quiet.round_ended(quiet.round_begins())


def test_a_watcher_that_has_not_ended_a_round_is_never_quiet(tmp_path: Path) -> None:
    mine, _ = _databases(tmp_path)
    quiet = SqliteWatchQuiet(mine)
    assert not quiet.quiet(ANCHOR)
    quiet.round_begins()  # a round that began and failed ends nothing
    assert not quiet.quiet(ANCHOR)


def test_after_a_round_it_is_quiet_until_any_process_writes(tmp_path: Path) -> None:
    mine, theirs = _databases(tmp_path)
    quiet = SqliteWatchQuiet(mine)
    _round(quiet)
    assert quiet.quiet(ANCHOR)
    assert quiet.quiet(ANCHOR + timedelta(days=365))  # nothing owed: no time brings a round
    SqliteStore(theirs).create_job(a_job("job_written_elsewhere"), [])
    assert not quiet.quiet(ANCHOR)
    _round(quiet)
    assert quiet.quiet(ANCHOR)
    SqliteStore(mine).create_job(a_job("job_written_here"), [])  # this process's own writer too
    assert not quiet.quiet(ANCHOR)


def test_a_write_during_a_round_brings_another_round(tmp_path: Path) -> None:
    mine, theirs = _databases(tmp_path)
    quiet = SqliteWatchQuiet(mine)
    mark = quiet.round_begins()
    SqliteStore(theirs).create_job(a_job("job_written_meanwhile"), [])  # after the round read, say
    quiet.round_ended(mark)
    assert not quiet.quiet(ANCHOR)


def test_an_outbox_entry_ends_the_quiet_when_it_comes_due(tmp_path: Path) -> None:
    mine, theirs = _databases(tmp_path)
    quiet = SqliteWatchQuiet(mine)
    deadline = ANCHOR + timedelta(minutes=5)
    SqliteEventLog(theirs).put_timer(
        DeadlineTimer("job_x", "alice", ANCHOR, fire_at=deadline, expires_at=ANCHOR + timedelta(days=1))
    )
    _round(quiet)
    assert quiet.quiet(ANCHOR)
    assert quiet.quiet(deadline - timedelta(milliseconds=1))
    assert not quiet.quiet(deadline)  # nothing was written, but the deadline's look is due


def test_a_due_bulk_action_keeps_every_round_going(tmp_path: Path) -> None:
    mine, theirs = _databases(tmp_path)
    quiet = SqliteWatchQuiet(mine)
    action = BulkAction(
        action_id="bulk_1",
        owner="alice",
        kind=BulkKind.PAUSE,
        selector=Selector(group="nightly"),
        note="",
        actor="alice",
        created_at=ANCHOR,
        not_before=ANCHOR + timedelta(seconds=30),
    )
    SqliteBulkActions(theirs).create_actions([action])
    _round(quiet)
    assert quiet.quiet(ANCHOR)
    assert not quiet.quiet(ANCHOR + timedelta(seconds=30))
    _round(quiet)  # still due after a round (another watcher holds it, say): no quiet
    assert not quiet.quiet(ANCHOR + timedelta(seconds=31))


def test_a_mark_from_before_the_database_was_closed_never_matches_again(tmp_path: Path) -> None:
    """SQLite numbers data_version per connection: a watcher connection opened after close() counts from
    the start again, which must not pass for "nothing written"."""
    mine, theirs = _databases(tmp_path)
    quiet = SqliteWatchQuiet(mine)
    _round(quiet)
    SqliteStore(theirs).create_job(a_job("job_a"), [])
    SqliteStore(theirs).create_job(a_job("job_b"), [])
    mine.close()
    assert not quiet.quiet(ANCHOR)
    _round(quiet)
    assert quiet.quiet(ANCHOR)


def test_an_outbox_entry_is_due_as_the_rounds_read_it_whatever_its_text(tmp_path: Path) -> None:
    """The earliest entry is compared as stored, as `due()` compares it: a text the round would take (here,
    one no instant parses) keeps the rounds going, and nothing raises."""
    mine, theirs = _databases(tmp_path)
    quiet = SqliteWatchQuiet(mine)
    with theirs.write() as connection:
        connection.execute(
            "INSERT INTO events (scope, key, outbox_key, send_at, item) VALUES (?, ?, ?, ?, ?)",
            ("owner#alice", "m#broken", "outbox#0", "0000-garbage", "{}"),
        )
    _round(quiet)
    assert not quiet.quiet(ANCHOR)


# A bound reached only when the behaviour under test is missing: a rest that hears nothing lasts 10 s.
HEARD_WITHIN_SECONDS = 5.0


def _rest_in_thread(quiet: SqliteWatchQuiet, now: datetime, look_every: float) -> threading.Thread:
    thread = threading.Thread(target=quiet.rest, args=(now, look_every), daemon=True)
    thread.start()
    return thread


def test_a_quiet_watcher_rests_until_another_process_commits(tmp_path: Path) -> None:
    """Heard on the WAL file at once: not at the look interval (here an hour), nor at the rest's cap."""
    mine, theirs = _databases(tmp_path)
    quiet = SqliteWatchQuiet(mine)
    _round(quiet)
    assert quiet.quiet(ANCHOR)
    thread = _rest_in_thread(quiet, ANCHOR, look_every=3600.0)
    time.sleep(0.3)
    assert thread.is_alive()  # asleep: nothing was written
    SqliteStore(theirs).create_job(a_job("job_written_elsewhere"), [])
    thread.join(HEARD_WITHIN_SECONDS)
    assert not thread.is_alive()
    assert not quiet.quiet(ANCHOR)


def test_a_rest_is_not_taken_when_a_commit_landed_after_the_look(tmp_path: Path) -> None:
    """A commit between the quiet look and the rest's watch is not missed: the rest does not begin."""
    mine, theirs = _databases(tmp_path)
    quiet = SqliteWatchQuiet(mine)
    _round(quiet)
    assert quiet.quiet(ANCHOR)
    SqliteStore(theirs).create_job(a_job("job_written_meanwhile"), [])
    started = time.monotonic()
    quiet.rest(ANCHOR, look_every=3600.0)
    assert time.monotonic() - started < HEARD_WITHIN_SECONDS


def test_a_rest_ends_when_the_outbox_is_next_due(tmp_path: Path) -> None:
    mine, theirs = _databases(tmp_path)
    quiet = SqliteWatchQuiet(mine)
    now = datetime.now(UTC)
    due = now + timedelta(seconds=1)
    SqliteEventLog(theirs).put_timer(
        DeadlineTimer("job_x", "alice", now, fire_at=due, expires_at=now + timedelta(days=1))
    )
    _round(quiet)
    started = time.monotonic()
    quiet.rest(now, look_every=3600.0)
    took = time.monotonic() - started
    assert 0.9 <= took < HEARD_WITHIN_SECONDS  # slept until the deadline's look, not before


def test_a_wake_ends_a_rest_and_every_later_one(tmp_path: Path) -> None:
    mine, _ = _databases(tmp_path)
    quiet = SqliteWatchQuiet(mine)
    _round(quiet)
    thread = _rest_in_thread(quiet, ANCHOR, look_every=3600.0)
    time.sleep(0.3)
    assert thread.is_alive()  # asleep, until the wake
    quiet.wake()
    thread.join(HEARD_WITHIN_SECONDS)
    assert not thread.is_alive()
    started = time.monotonic()
    quiet.rest(ANCHOR, look_every=3600.0)
    assert time.monotonic() - started < HEARD_WITHIN_SECONDS


def test_without_inotify_a_rest_lasts_the_look_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tickwork.adapters.sqlite.doorbell._inotify_open", lambda: -1)
    mine, _ = _databases(tmp_path)
    quiet = SqliteWatchQuiet(mine)
    _round(quiet)
    started = time.monotonic()
    quiet.rest(ANCHOR, look_every=0.2)
    assert 0.15 <= time.monotonic() - started < HEARD_WITHIN_SECONDS


def test_the_wait_hears_another_processs_commit_on_the_wal_file(tmp_path: Path) -> None:
    """Only the write can end this sleep: it is still quiet whenever asked."""
    mine, theirs = _databases(tmp_path)
    SqliteStore(theirs).create_job(a_job("job_first"), [])  # the WAL file exists
    wait = CommitWait(Path(f"{mine.path}-wal"))
    heard: list[bool] = []
    thread = threading.Thread(target=lambda: heard.append(wait.sleep(60.0, 60.0, lambda: True)), daemon=True)
    thread.start()
    time.sleep(0.3)
    SqliteStore(theirs).create_job(a_job("job_second"), [])
    thread.join(HEARD_WITHIN_SECONDS)
    assert heard == [True]


def test_a_wal_changed_with_no_commit_to_see_keeps_the_rests_short_while_it_settles(tmp_path: Path) -> None:
    """SQLite shows a commit to other connections only after it wrote and synced the WAL: a written WAL
    with no commit seen yet may hold one in flight, so the watcher looks again at its interval, a while."""
    mine, theirs = _databases(tmp_path)
    SqliteStore(theirs).create_job(a_job("job_first"), [])
    quiet = SqliteWatchQuiet(mine)
    _round(quiet)
    wal = Path(f"{mine.path}-wal")
    stat = wal.stat()
    os.utime(wal, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # written, as far as it can tell
    started = time.monotonic()
    for _ in range(SETTLING_RESTS):
        quiet.rest(ANCHOR, look_every=0.1)
    assert time.monotonic() - started < HEARD_WITHIN_SECONDS
    thread = _rest_in_thread(quiet, ANCHOR, look_every=0.1)  # settled: a long rest again
    time.sleep(0.5)
    assert thread.is_alive()
    quiet.wake()
    thread.join(HEARD_WITHIN_SECONDS)
