"""The embedded engine's quiet watcher (adapters/sqlite/events.SqliteWatchQuiet): a round is skipped only
while nothing was written since the last round began and nothing of the outbox is due."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.conftest import ANCHOR
from tests.contract.test_store_contract import a_job
from tickwork.adapters.sqlite.bulk import SqliteBulkActions
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.events import SqliteEventLog, SqliteWatchQuiet
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
