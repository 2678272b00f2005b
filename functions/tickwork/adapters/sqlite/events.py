"""SQLite records of the events table (adapters/event_records.py) and the runs' change feed (db.py's
trigger): what the watcher reads and writes in the embedded engine."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from tickwork.adapters.bulk_records import BULK_OUTBOX
from tickwork.adapters.event_records import (
    AUDIT_FROM,
    AUDIT_TO,
    DEFAULTS_KEY,
    REVISIONS_FROM,
    REVISIONS_TO,
    OutboxEntry,
    defaults_from_item,
    defaults_to_item,
    event_from_item,
    event_key,
    event_to_item,
    health_from_item,
    health_key,
    health_to_item,
    job_at_revision,
    message_key,
    message_to_item,
    outbox_entry,
    outbox_keys,
    owner_scope,
    page_of,
    revision_from_item,
    revision_key,
    timer_key,
    timer_to_item,
    window_from_item,
    window_key,
    window_to_item,
)
from tickwork.adapters.records import run_before_from_item, run_from_item
from tickwork.adapters.sqlite.base import SqliteBase, load, put
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.doorbell import CommitWait
from tickwork.domain.alert_rules import AlertRules, Channel
from tickwork.domain.alerts import EventKind, JobEvent, RunBefore
from tickwork.domain.errors import ConflictError, StoreError
from tickwork.domain.models import Job, Run, RunState
from tickwork.domain.notify import ChannelHealth, DeadlineTimer, Message, Window
from tickwork.domain.revisions import Revision
from tickwork.domain.timekeys import epoch_seconds, format_instant_ms, parse_instant
from tickwork.resources import EVENTS


def _get(connection: sqlite3.Connection, scope: str, key: str) -> dict[str, Any] | None:
    row = connection.execute("SELECT item FROM events WHERE scope = ? AND key = ?", (scope, key)).fetchone()
    return None if row is None else load(row[0])


def _window_item(connection: sqlite3.Connection, window: Window) -> dict[str, Any] | None:
    key = window_key(window.channel, window.kind, window.length_seconds)
    return _get(connection, owner_scope(window.owner), key)


def _delete(connection: sqlite3.Connection, scope: str, key: str) -> bool:
    """False if there was none."""
    return connection.execute("DELETE FROM events WHERE scope = ? AND key = ?", (scope, key)).rowcount > 0


# The items of one scope whose keys lie strictly between two bounds, in key order (one kind of item:
# an owner's calendars, an owner's bulk actions).
SCOPE_RANGE = "SELECT item FROM events WHERE scope = ? AND key > ? AND key < ? ORDER BY key"


class SqliteEventLog(SqliteBase):
    """The events table: each write one immediate transaction, its conditions checked inside it."""

    def record_event(
        self,
        event: JobEvent,
        expires_at: datetime,
        windows: Sequence[tuple[Window | None, Window]],
        messages: Sequence[Message],
    ) -> bool:
        with self.db.write() as connection:
            if _get(connection, event.job_id, event_key(event)) is not None:
                return False
            for before, after in windows:
                stored = _window_item(connection, after)
                version = None if stored is None else int(stored["version"])
                if version != (None if before is None else before.version):
                    raise ConflictError(f"window {after.channel.channel_id} {after.kind} moved")
            put(connection, EVENTS, event_to_item(event, epoch_seconds(expires_at)))
            for _, after in windows:
                put(connection, EVENTS, window_to_item(after))
            for message in messages:
                put(connection, EVENTS, message_to_item(message))
            return True

    def windows(
        self, owner: str, channels: Sequence[Channel], kind: EventKind, length_seconds: int
    ) -> dict[str, Window]:
        found = {}
        with self.db.read() as connection:
            for channel in channels:
                item = _get(connection, owner_scope(owner), window_key(channel, kind, length_seconds))
                if item is not None:
                    found[channel.channel_id] = window_from_item(item)
        return found

    def job_events(self, job_id: str, limit: int, before: str | None) -> tuple[list[JobEvent], str | None]:
        items = self._select_items(
            "SELECT item FROM events WHERE scope = ? AND key > 'e#' AND key < ? ORDER BY key DESC LIMIT ?",
            (job_id, before or "e#~", limit + 1),
        )
        return page_of(items, "key", limit, event_from_item)

    def owner_events(self, owner: str, limit: int, before: str | None) -> tuple[list[JobEvent], str | None]:
        items = self._select_items(
            "SELECT item FROM events WHERE event_owner = ? AND owner_order < ? ORDER BY owner_order DESC "
            "LIMIT ?",
            (owner, before or "~", limit + 1),
        )
        return page_of(items, "owner_order", limit, event_from_item)

    def delete_expired(self, now: datetime) -> int:
        """The events table's TTL, which DynamoDB keeps itself: what is past its expiry goes."""
        with self.db.write() as connection:
            cursor = connection.execute(
                "DELETE FROM events WHERE expires_at IS NOT NULL AND expires_at < ?", (int(now.timestamp()),)
            )
            return int(cursor.rowcount)

    def put_timer(self, timer: DeadlineTimer) -> None:
        with self.db.write() as connection:
            put(connection, EVENTS, timer_to_item(timer))

    def due(self, now: datetime, limit: int) -> list[OutboxEntry]:
        keys = outbox_keys()
        items = self._select_items(
            f"SELECT item FROM events WHERE outbox_key IN ({', '.join('?' for _ in keys)}) AND send_at <= ? "
            "ORDER BY send_at LIMIT ?",
            (*keys, format_instant_ms(now), limit),
        )
        return [outbox_entry(item) for item in items]

    def claim_message(self, message: Message, until: datetime) -> Message | None:
        with self.db.write() as connection:
            if not _still_as_read(connection, message):
                return None
            claimed = replace(message, send_at=until)
            put(connection, EVENTS, message_to_item(claimed))
            return claimed

    def settle_message(self, message: Message, retry: Message | None) -> None:
        with self.db.write() as connection:
            if not _still_as_read(connection, message):
                return  # its claim ran out and another watcher took it
            if retry is None:
                _delete(connection, owner_scope(message.owner), message_key(message))
            else:
                put(connection, EVENTS, message_to_item(retry))

    def close_window(self, window: Window, closed: Window, digest: Message) -> bool:
        with self.db.write() as connection:
            stored = _window_item(connection, window)
            if stored is None or int(stored["version"]) != window.version:
                return False
            put(connection, EVENTS, window_to_item(closed))
            put(connection, EVENTS, message_to_item(digest))
            return True

    def drop_timer(self, timer: DeadlineTimer) -> None:
        with self.db.write() as connection:
            _delete(connection, timer.job_id, timer_key(timer))

    def set_health(self, health: ChannelHealth) -> None:
        with self.db.write() as connection:
            put(connection, EVENTS, health_to_item(health))

    def health(self, owner: str, channels: Sequence[Channel]) -> dict[str, ChannelHealth]:
        found = {}
        with self.db.read() as connection:
            for channel in channels:
                item = _get(connection, owner_scope(owner), health_key(channel))
                if item is not None:
                    found[channel.channel_id] = health_from_item(item)
        return found


class SqliteAlertDefaults(SqliteBase):
    """Each owner's default alert rules (an item of the events table)."""

    def get_defaults(self, owner: str) -> AlertRules | None:
        with self.db.read() as connection:
            item = _get(connection, owner_scope(owner), DEFAULTS_KEY)
        return None if item is None else defaults_from_item(item)

    def set_defaults(self, owner: str, rules: AlertRules | None) -> None:
        with self.db.write() as connection:
            if rules is None:
                _delete(connection, owner_scope(owner), DEFAULTS_KEY)
            else:
                put(connection, EVENTS, defaults_to_item(owner, rules))


class FedChange:
    """A change from the feed: its job and state read by SQLite from the record after it, the record
    itself decoded on first use (the watcher judges most changes by their state alone, and decoding the
    whole record in Python costs many times more than SQLite reading two of its attributes)."""

    __slots__ = ("_after", "_raw", "before", "job_id", "state")

    def __init__(self, before: RunBefore | None, job_id: str, state: RunState, raw: str) -> None:
        self.before, self.job_id, self.state = before, job_id, state
        self._raw = raw
        self._after: Run | None = None

    @property
    def after(self) -> Run:
        if self._after is None:
            self._after = run_from_item(load(self._raw))
        return self._after


class SqliteRunChangeFeed(SqliteBase):
    """The `run_changes` rows the trigger on `runs` appends (db.py), oldest first."""

    def take_changes(self, limit: int) -> list[tuple[int, FedChange]]:
        with self.db.read() as connection:
            rows = connection.execute(
                "SELECT id, before, json_extract(after, '$.job_id'), json_extract(after, '$.state'), after "
                "FROM run_changes ORDER BY id LIMIT ?",
                (limit,),
            ).fetchall()
        changes = []
        for position, before, job_id, state, after in rows:
            if not isinstance(job_id, str):
                raise StoreError(f"change {position} of the runs' feed names no job", code="CorruptChange")
            was = None if before is None else run_before_from_item(load(before))
            changes.append((int(position), FedChange(was, job_id, RunState(state), after)))
        return changes

    def forget_changes(self, through: int) -> None:
        with self.db.write() as connection:
            connection.execute("DELETE FROM run_changes WHERE id <= ?", (through,))


class SqliteWatchQuiet(SqliteBase):
    """When a watcher round has nothing to find (services/ports.WatchQuiet): no commit since the last
    round began (`PRAGMA data_version`, which any process's commit moves: the runs' changes come by trigger,
    the outbox and bulk actions by writes), and the outbox index's earliest entry not yet due. Everything a
    round reads is in this database, and a deadline, a digest's window, a retry or a bulk action's turn is
    an entry's `send_at`. A bulk action another watcher holds stays due: while it does, every round runs."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        # The last ended round's mark, and the outbox's earliest `send_at` as stored (None: empty).
        self._seen: tuple[int, str | None] | None = None
        # SQLite names the WAL after the database's real file, not a link to it.
        self._wal = Path(f"{os.path.realpath(db.path)}-wal")
        self._commits = CommitWait(self._wal)
        # The WAL file as last seen (size, time, inode), and how many short rests are left to take since
        # it changed with no commit to see yet.
        self._wal_seen: tuple[int, int, int] | None = None
        self._unsettled = 0

    def round_begins(self) -> int:
        return self.db.data_version()

    def round_ended(self, mark: object) -> None:
        if not isinstance(mark, int):
            raise TypeError(f"not a mark of this database: {mark!r}")
        self._seen = (mark, self._next_due())
        self._wal_seen, self._unsettled = self._wal_state(), 0

    def quiet(self, now: datetime) -> bool:
        if self._seen is None:
            return False
        mark, next_due = self._seen
        # Compared as stored, as the round's own reads compare it (`send_at <= ?`): an entry the round
        # would take is never quiet, whatever its text.
        return (next_due is None or next_due > format_instant_ms(now)) and self.db.data_version() == mark

    def rest(self, now: datetime, look_every: float) -> None:
        """Until another commit lands (heard on the WAL file: a burst's first claims wake it at once), the
        outbox is next due, or QUIET_REST_SECONDS; where commits cannot be heard, `look_every`. A write
        that wakes it is given COMMIT_SETTLE_SECONDS to be joined by others: a round then takes them
        together, and a writer's long transaction (pages written before its commit) wakes it no more often.
        SQLite shows a commit to other connections (`data_version`) only after it wrote and synced the
        WAL: a WAL written since the last look that saw no commit may hold one in flight, so the rests stay
        `look_every` long while it settles (SETTLING_RESTS of them once it stops changing)."""
        written = self._wal_state()
        if written != self._wal_seen:
            self._wal_seen, self._unsettled = written, SETTLING_RESTS
        longest = self._longest_rest(now, look_every)
        if self._unsettled > 0:
            self._unsettled -= 1
            longest = min(longest, look_every)
        if self._commits.sleep(longest, look_every, lambda: self.quiet(now)):
            self._commits.pause(COMMIT_SETTLE_SECONDS)

    def wake(self) -> None:
        self._commits.wake()

    def _longest_rest(self, now: datetime, look_every: float) -> float:
        next_due = None if self._seen is None else self._seen[1]
        if next_due is None:
            return QUIET_REST_SECONDS
        try:
            until_due = (parse_instant(next_due) - now).total_seconds()
        except ValueError:  # quiet() compares it as stored; not an instant, it is looked at as before
            return look_every
        # Due by its instant while not by its text (quiet): looked at as before, never in a tight loop.
        return min(QUIET_REST_SECONDS, until_due) if until_due > 0 else look_every

    def _wal_state(self) -> tuple[int, int, int] | None:
        try:
            status = os.stat(self._wal)
        except OSError:  # none yet: every rest is `look_every` long (CommitWait), nothing to settle
            return None
        return (status.st_size, status.st_mtime_ns, status.st_ino)

    def _next_due(self) -> str | None:
        # One MIN per partition, each the first entry of its index range.
        keys = [*outbox_keys(), BULK_OUTBOX]
        sql = " UNION ALL ".join("SELECT MIN(send_at) AS due FROM events WHERE outbox_key = ?" for _ in keys)
        with self.db.read() as connection:
            row = connection.execute(f"SELECT MIN(due) FROM ({sql})", keys).fetchone()
        return None if row is None or row[0] is None else str(row[0])


# An idle watcher that hears commits still looks this often (a ring lost, a WAL file replaced).
QUIET_REST_SECONDS = 10.0
# How long a commit that woke it is left to be joined by others before the watcher looks.
COMMIT_SETTLE_SECONDS = 0.05
# Short rests after the WAL file changed with no commit seen: a commit's sync may be that slow to show.
SETTLING_RESTS = 4


def _still_as_read(connection: sqlite3.Connection, message: Message) -> bool:
    stored = _get(connection, owner_scope(message.owner), message_key(message))
    return (
        stored is not None
        and int(stored.get("attempts", 0)) == message.attempts
        and message.send_at is not None
        and stored["send_at"] == format_instant_ms(message.send_at)
    )


class SqliteRevisions(SqliteBase):
    """A job's revisions and an owner's audit log (the job writes record them: adapters/sqlite/jobs.py)."""

    def job_revisions(self, job_id: str, limit: int, before: str | None) -> tuple[list[Revision], str | None]:
        return self._page(job_id, REVISIONS_FROM, before or REVISIONS_TO, limit)

    def get_revision(self, job_id: str, revision: int) -> Revision | None:
        items = self._select_items(
            "SELECT item FROM events WHERE scope = ? AND key = ?", (job_id, revision_key(revision))
        )
        return revision_from_item(items[0]) if items else None

    def job_at(self, revision: Revision) -> Job:
        return job_at_revision(revision)

    def owner_audit(self, owner: str, limit: int, before: str | None) -> tuple[list[Revision], str | None]:
        return self._page(owner_scope(owner), AUDIT_FROM, before or AUDIT_TO, limit)

    def _page(self, scope: str, low: str, high: str, limit: int) -> tuple[list[Revision], str | None]:
        items = self._select_items(
            "SELECT item FROM events WHERE scope = ? AND key > ? AND key < ? ORDER BY key DESC LIMIT ?",
            (scope, low, high, limit + 1),
        )
        return page_of(items, "key", limit, revision_from_item)
