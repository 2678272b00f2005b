"""The embedded engine's database: one SQLite file (WAL, a busy timeout, immediate write transactions),
its schema derived from the same definitions the CDK stack and the DynamoDB bootstrap read
(`tickwork.resources`), versioned with `PRAGMA user_version` and migrated forward when opened.

Each table keeps its whole record as JSON in `item` (the same record the DynamoDB adapter writes) next to
columns for its key and index attributes, so the indexes are real SQL indexes and a sparse index stays
sparse (a partial index over the rows whose index key is set)."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tickwork.adapters.sqlite.turns import WritersTurn
from tickwork.domain.errors import StoreError, TickworkError, TransientStoreError
from tickwork.resources import EVENTS, REQUESTS, RUNS, SLOTS, TABLES, IndexDef, TableDef

# The version of the schema this code writes. A database at a lower version is migrated forward at open
# (MIGRATIONS[v] takes it from v to v + 1); one at a higher version is refused.
SCHEMA_VERSION = 6
# How long a write waits for another process's write transaction before it counts as throttled.
BUSY_TIMEOUT_MS = 10_000
# FULL: a commit is on disk before it returns (survives a power cut; ~0.2 ms of fsync on this machine's disk).
# NORMAL: a commit survives any crash of the processes, and a power cut loses at most the last commits, in
# order (the WAL is synced at checkpoints, CHECKPOINT_EVERY_COMMITS apart): a prefix of the history survives.
SYNCHRONOUS = ("FULL", "NORMAL")
# Reader connections a process keeps at most (reads beyond wait for one): WAL readers never block each
# other or the writer, so a few are enough for the API's threads.
READERS = 8
# A process copies the WAL back into the database (a checkpoint) after this many of its commits, outside the
# writers' turn (`Database._checkpoint`). SQLite's own checkpoint (at 1,000 pages of WAL, about as many
# commits of the executors') runs inside the commit that crossed the mark, while the committing process
# still holds the turn: every writer of the installation then waits for it to copy the pages and sync.
CHECKPOINT_EVERY_COMMITS = 100
# A checkpoint that could not copy every page (a reader still needs the older ones) is tried again this
# many commits later, as SQLite's own is tried at every commit past its mark, so a long burst with readers
# keeps the WAL from growing for as long as it lasts.
CHECKPOINT_AGAIN_COMMITS = 10
# The nested writes of one transaction whose savepoints are left open for its commit (Database._nested);
# later ones are released when their block returns. A write costs more the more savepoints are open, and
# their journal stays in memory until the commit: a shared commit has a few dozen nested writes, a long loop
# of them should not pay that.
OPEN_SAVEPOINTS = 64
# The WAL file is cut back to this size when it restarts from its beginning (SQLite leaves it at its
# largest otherwise).
WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024

logger = logging.getLogger(__name__)


class SchemaTooNewError(StoreError):
    """The database was written by a newer Tickwork than this one."""


def key_columns(table: TableDef) -> list[str]:
    """The table's key, index-key and expiry attributes, in a stable order: each becomes a column."""
    names = [table.partition.name] + ([table.sort.name] if table.sort else [])
    for index in table.indexes:
        names.append(index.partition.name)
        if index.sort is not None:
            names.append(index.sort.name)
    if table.ttl_attribute:
        names.append(table.ttl_attribute)
    return list(dict.fromkeys(names))


def _index_ddl(table: TableDef, index: IndexDef) -> str:
    index_keys = [index.partition.name] + ([index.sort.name] if index.sort else [])
    # Partial: a row without the index's partition key is not in it (DynamoDB's sparse index).
    return (
        f"CREATE INDEX {table.logical_name}_{index.name} ON {table.logical_name} "
        f"({', '.join(index_keys)}) WHERE {index.partition.name} IS NOT NULL"
    )


def _table_ddl(table: TableDef) -> list[str]:
    columns = key_columns(table)
    keys = [table.partition.name] + ([table.sort.name] if table.sort else [])
    column_sql = ", ".join(
        f"{name} {'INTEGER' if name == table.ttl_attribute else 'TEXT'}"
        + (" NOT NULL" if name in keys else "")
        for name in columns
    )
    statements = [
        f"CREATE TABLE {table.logical_name} ({column_sql}, item TEXT NOT NULL, "
        f"PRIMARY KEY ({', '.join(keys)})) WITHOUT ROWID"
    ]
    statements.extend(_index_ddl(table, index) for index in table.indexes)
    if table.ttl_attribute:
        statements.append(
            f"CREATE INDEX {table.logical_name}_expiry ON {table.logical_name} ({table.ttl_attribute}) "
            f"WHERE {table.ttl_attribute} IS NOT NULL"
        )
    return statements


# The queues: one table for every queue, a message's queue named by its queue's name. `visible_at_ms`
# carries both the delay and the visibility timeout; `receipt` changes at each receive, so a receipt from
# an earlier receive can no longer delete or extend the message.
_MESSAGES_DDL = [
    "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, body TEXT NOT NULL, "
    "sent_at_ms INTEGER NOT NULL, visible_at_ms INTEGER NOT NULL, receive_count INTEGER NOT NULL DEFAULT 0, "
    "receipt TEXT, first_received_at_ms INTEGER)",
    "CREATE INDEX messages_visible ON messages (queue, visible_at_ms)",
    "CREATE UNIQUE INDEX messages_receipt ON messages (receipt) WHERE receipt IS NOT NULL",
]


# The concurrency slots: one row per hold, counted per pool in the write transaction that adds one (the
# slots table's stripes are DynamoDB's way to spread a pool over partitions; one file needs none of that).
# `holder` is `<run id>/<attempt>`, `lease_ms` its lease end (epoch ms): the index counts a pool's live holds.
_SLOT_HOLDS_DDL = [
    "CREATE TABLE slot_holds (pool TEXT NOT NULL, holder TEXT NOT NULL, lease_ms INTEGER NOT NULL, "
    "PRIMARY KEY (pool, holder)) WITHOUT ROWID",
    "CREATE INDEX slot_holds_lease ON slot_holds (pool, lease_ms)",
]
# The runs table's change feed (DynamoDB Streams' NEW_AND_OLD_IMAGES, here): a row per change of a run's
# state, appended in the writing transaction itself, read and deleted by the watcher: the record after,
# and of the record before (NULL: a new run) only what the watcher reads of it, its state and start
# (domain/alerts.RunBefore), not a second copy of the whole record into every change. A BEFORE trigger,
# since a record is written with INSERT OR REPLACE (an AFTER trigger would see the replaced row gone);
# writes that leave the state as it was (a heartbeat, a lease extension) are not changes the watcher needs.
_RUN_CHANGES_TABLE = (
    "CREATE TABLE run_changes (id INTEGER PRIMARY KEY AUTOINCREMENT, before TEXT, after TEXT NOT NULL)"
)


def _run_changes_trigger(before: str) -> str:
    """The change feed's trigger, noting `before` (an expression over the stored row's `item`)."""
    this_run = "FROM runs WHERE job_id = NEW.job_id AND scheduled_for = NEW.scheduled_for"
    return (
        "CREATE TRIGGER runs_change_feed BEFORE INSERT ON runs "
        f"WHEN (SELECT json_extract(item, '$.state') {this_run}) IS NOT json_extract(NEW.item, '$.state') "
        f"BEGIN INSERT INTO run_changes (before, after) VALUES ((SELECT {before} {this_run}), NEW.item); END"
    )


def _noted_before(item: str) -> str:
    """What the feed notes of a run's record before a change (`item`: an expression of the record)."""
    return (
        f"json_object('state', json_extract({item}, '$.state'), "
        f"'started_at', json_extract({item}, '$.started_at'))"
    )


_RUN_CHANGES_TRIGGER = _run_changes_trigger(_noted_before("item"))
# A record written over the stored one in place (adapters/sqlite/base.rewrite: an UPDATE, where `put` is
# an INSERT OR REPLACE) is noted by this trigger, which reads the record before as OLD instead of looking
# the row up again.
_RUN_UPDATES_TRIGGER = (
    "CREATE TRIGGER runs_change_feed_update AFTER UPDATE OF item ON runs "
    "WHEN json_extract(OLD.item, '$.state') IS NOT json_extract(NEW.item, '$.state') "
    f"BEGIN INSERT INTO run_changes (before, after) VALUES ({_noted_before('OLD.item')}, NEW.item); END"
)
_RUN_CHANGES_DDL = [_RUN_CHANGES_TABLE, _RUN_CHANGES_TRIGGER, _RUN_UPDATES_TRIGGER]
# The tables of `tickwork.resources` this engine keeps as such (the slots live in `slot_holds`).
EMBEDDED_TABLES = tuple(table for table in TABLES if table is not SLOTS)


def _create_current(connection: sqlite3.Connection) -> None:
    """An empty file gets the current schema at once (the migrations are for files written before)."""
    for table in EMBEDDED_TABLES:
        for statement in _table_ddl(table):
            connection.execute(statement)
    for statement in [*_MESSAGES_DDL, *_SLOT_HOLDS_DDL, *_RUN_CHANGES_DDL]:
        connection.execute(statement)


def _v1_to_v2(connection: sqlite3.Connection) -> None:
    """Runs on request: the requests table (Idempotency-Key records), and the runs' failed-runs index
    (its key columns filled from the failed runs already stored)."""
    for statement in _table_ddl(REQUESTS):
        connection.execute(statement)
    index = next(i for i in RUNS.indexes if i.name == "failed_runs")
    for key in (index.partition, index.sort):
        if key is not None:
            connection.execute(f"ALTER TABLE runs ADD COLUMN {key.name} TEXT")
    # Runs stored before this version carry no owner: they stay out of the index (as they would in AWS).
    connection.execute(_index_ddl(RUNS, index))


def _v2_to_v3(connection: sqlite3.Connection) -> None:
    """Concurrency slots: the slot_holds table (empty: no run held a slot before)."""
    for statement in _SLOT_HOLDS_DDL:
        connection.execute(statement)


def _v3_to_v4(connection: sqlite3.Connection) -> None:
    """What owners are told: the events table and the runs' change feed (from now on: changes made before
    the upgrade were not told, as a stream turned on later does not replay them)."""
    for statement in [*_table_ddl(EVENTS), _RUN_CHANGES_TABLE, _V4_RUN_CHANGES_TRIGGER]:
        connection.execute(statement)


# The change feed's trigger as version 4 wrote it: the whole record before, into every change.
_V4_RUN_CHANGES_TRIGGER = _run_changes_trigger("item")


def _v4_to_v5(connection: sqlite3.Connection) -> None:
    """The change feed notes only what the watcher reads of a run's record before a change. Changes
    already in the feed keep their whole record, which reads the same (domain/alerts.RunBefore)."""
    connection.execute("DROP TRIGGER runs_change_feed")
    connection.execute(_RUN_CHANGES_TRIGGER)


def _v5_to_v6(connection: sqlite3.Connection) -> None:
    """A run's record can be written over the stored one in place: the change feed notes those writes too."""
    connection.execute(_RUN_UPDATES_TRIGGER)


# MIGRATIONS[v]: from schema version v to v + 1, for a file written at version v >= 1.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
}


def _roll_back(connection: sqlite3.Connection) -> None:
    """Roll back the open transaction, unless SQLite already did (it does after some errors, such as a
    full disk): a ROLLBACK then would raise over the error that ended it."""
    if connection.in_transaction:
        connection.execute("ROLLBACK")


def translate(error: sqlite3.Error) -> Exception:
    """A locked or busy database is throttling (retried by the caller); anything else is a StoreError."""
    message = str(error)
    if isinstance(error, sqlite3.OperationalError) and ("locked" in message or "busy" in message):
        return TransientStoreError(f"SQLite busy: {message}")
    return StoreError(f"SQLite {type(error).__name__}: {message}", code=type(error).__name__)


class Database:
    """One SQLite file shared by every process of an installation.

    Connections are few and shared, not one per thread (an executor has a thread per run in flight: 10,000
    connections would be 20,000+ file descriptors): one writer connection, used only under this process's
    write lock; a bounded pool of reader connections; one watcher for `data_version`. Writes are
    `BEGIN IMMEDIATE` transactions, so the read-check-write each adapter does inside one is atomic against
    every other writer, in this process or another."""

    def __init__(
        self,
        path: Path,
        *,
        synchronous: str = "FULL",
        readers: int = READERS,
        on_commit: Callable[[int, float], None] | None = None,
    ) -> None:
        """`on_commit(commits, held_seconds)`, if given, is told the process's write lock figures
        (`write_lock_held`) after each commit, outside the lock: a role process publishes them."""
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS}, not {synchronous!r}")
        self.path = path
        self._synchronous = synchronous
        # This process's writers queue here, woken as soon as the lock is free; only one of them at a time
        # then takes the installation's writers' turn (`_writing`), across processes.
        self._write_lock = threading.Lock()
        self._turn = WritersTurn(f"{path.resolve()}.writers")
        # The thread inside `write()` (None: none): a write inside a write of the same thread is a
        # savepoint of the outer transaction (`_nested`).
        self._write_owner: int | None = None
        # Savepoints opened in the write transaction now open (named by this count: `_nested`).
        self._savepoints = 0
        # A write nested without a savepoint raised after a change: the transaction must not commit.
        self._spoiled = False
        self._writer: sqlite3.Connection | None = None
        self._idle_readers: list[sqlite3.Connection] = []
        self._readers = threading.BoundedSemaphore(readers)
        self._pool_lock = threading.Lock()
        self._watch_lock = threading.Lock()
        self._watcher: sqlite3.Connection | None = None
        self._watchers = 0  # watcher connections opened so far (a closed one's numbers mean nothing after)
        self._opened = False
        self._open_lock = threading.Lock()
        # (commits, seconds the write lock was held): replaced whole under the write lock, read without it.
        self._held: tuple[int, float] = (0, 0.0)
        self._on_commit = on_commit
        # The checkpoints' own connection: one thread checkpoints at a time, the others go on. The next
        # checkpoint is due at this commit count of the process (counted under the write lock).
        self._checkpoint_lock = threading.Lock()
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpoint_at = CHECKPOINT_EVERY_COMMITS

    def open(self) -> Database:
        """Create or migrate the schema (once per process). SchemaTooNewError for a newer database."""
        with self._open_lock:
            if self._opened:
                return self
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._writing():
                connection = self._writer_connection()
                try:
                    connection.execute("BEGIN IMMEDIATE")
                    try:
                        version = int(connection.execute("PRAGMA user_version").fetchone()[0])
                        if version > SCHEMA_VERSION:
                            raise SchemaTooNewError(
                                f"{self.path} has schema version {version}, newer than this Tickwork's "
                                f"{SCHEMA_VERSION}: upgrade Tickwork, or point --state-dir at another "
                                "directory",
                                code="SchemaTooNew",
                            )
                        if version == 0:
                            _create_current(connection)
                        else:
                            for step in range(version, SCHEMA_VERSION):
                                MIGRATIONS[step](connection)
                        if version != SCHEMA_VERSION:
                            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                        connection.execute("COMMIT")
                    except BaseException:
                        _roll_back(connection)
                        raise
                except sqlite3.Error as error:
                    raise translate(error) from error
            self._opened = True
        return self

    def schema_version(self) -> int:
        with self.read() as connection:
            return int(connection.execute("PRAGMA user_version").fetchone()[0])

    def _connect(self, busy_timeout_ms: int | None = None) -> sqlite3.Connection:
        """A connection that waits `busy_timeout_ms` for the lock (None: BUSY_TIMEOUT_MS, read at the call, so
        a test can shorten it)."""
        if busy_timeout_ms is None:
            busy_timeout_ms = BUSY_TIMEOUT_MS
        try:
            # check_same_thread off: a connection moves between threads, never used by two at once (the
            # write lock, the reader pool and the watch lock see to that).
            connection = sqlite3.connect(
                self.path, isolation_level=None, timeout=busy_timeout_ms / 1000, check_same_thread=False
            )
            connection.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute(f"PRAGMA synchronous = {self._synchronous}")
        except sqlite3.Error as error:
            raise translate(error) from error
        return connection

    def _writer_connection(self) -> sqlite3.Connection:
        """The one writer connection; only called under the write lock. Its commits never checkpoint:
        `write` does, outside the lock."""
        if self._writer is None:
            connection = self._connect()
            try:
                connection.execute("PRAGMA wal_autocheckpoint = 0")
                # The savepoints' journal in memory: `_nested` leaves them open until the commit, so a
                # large transaction's journal would otherwise spill to a temporary file.
                connection.execute("PRAGMA temp_store = MEMORY")
                connection.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT_BYTES}")
            except sqlite3.Error as error:
                connection.close()
                raise translate(error) from error
            self._writer = connection
        return self._writer

    @contextmanager
    def write(self, *, savepoint: bool = True) -> Iterator[sqlite3.Connection]:
        """One immediate transaction: committed if the block returns, rolled back if it raises. SQLite
        errors inside become domain errors (busy: TransientStoreError).

        A write opened inside another write of the same thread is a savepoint of it: its block's changes
        are undone alone if it raises, and land with the outer transaction's commit, or not at all. So
        several writes can be made one commit (adapters/sqlite/units.py) without their code knowing; code
        that acts on its write as committed once its block ends (the queue rings its doorbell) must not
        be run inside another write.

        `savepoint=False` is for a block that raises only before its first change (it reads, checks, then
        writes): nested, it opens no savepoint, one statement less in a shared commit. Should it raise
        after a change all the same, that change cannot be undone alone: the whole transaction is then
        rolled back when it ends, and fails (StoreError), even if an enclosing savepoint's rollback had
        undone the change already."""
        if self._write_owner == threading.get_ident():
            with self._nested() if savepoint else self._unsaved() as connection:
                yield connection
            return
        checkpoint = False
        with self._writing():
            connection = self._writer_connection()
            try:
                connection.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as error:
                raise translate(error) from error
            self._write_owner = threading.get_ident()
            self._savepoints, self._spoiled = 0, False
            try:
                try:
                    yield connection
                except sqlite3.Error as error:
                    _roll_back(connection)
                    raise translate(error) from error
                except BaseException:
                    _roll_back(connection)
                    raise
                if self._spoiled:
                    _roll_back(connection)
                    raise StoreError(
                        "a write nested without a savepoint raised after it changed rows: nothing of the "
                        "transaction landed",
                        code="NestedWriteNotUndone",
                    )
                try:
                    connection.execute("COMMIT")
                except sqlite3.Error as error:
                    _roll_back(connection)
                    raise translate(error) from error
                commits = self._held[0] + 1
                self._held = (commits, self._held[1])
                checkpoint = commits >= self._checkpoint_at
                if checkpoint:  # taken by this commit: another thread's commit meanwhile does not start one
                    self._checkpoint_at = commits + CHECKPOINT_EVERY_COMMITS
            finally:
                self._write_owner = None
        if checkpoint:
            self._checkpoint()
        if self._on_commit is not None:
            self._tell_commit(self._on_commit, self._held)

    def _tell_commit(self, listener: Callable[[int, float], None], held: tuple[int, float]) -> None:
        try:
            listener(*held)
        except Exception:  # the write landed: it must not look failed (its caller would make it again)
            logger.exception("telling a commit of %s to its listener failed", self.path)

    def _checkpoint(self) -> None:
        """Copy the WAL's committed pages back into the database, on the checkpoints' own connection, after
        this thread let go of the write lock and the turn. PASSIVE: it waits for no reader and no writer
        (what they still use is copied by a later checkpoint). Called after a commit landed: a checkpoint
        that fails does not make the write fail; the next one copies what this one did not."""
        if not self._checkpoint_lock.acquire(blocking=False):
            return  # another thread of this process is checkpointing: that one will do
        try:
            if self._checkpointer is None:
                # Waits for no lock: a PASSIVE checkpoint copies what it can now, the next one the rest.
                self._checkpointer = self._connect(busy_timeout_ms=0)
                self._checkpointer.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT_BYTES}")
            _, wal_pages, copied = self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if 0 <= copied < wal_pages:  # a reader still needs some: again soon, not a whole period later
                # Not under the write lock (close() takes it, then this one's): a commit that moves the
                # mark meanwhile moves it by a period at most.
                self._checkpoint_at = min(self._checkpoint_at, self._held[0] + CHECKPOINT_AGAIN_COMMITS)
        except (sqlite3.Error, TickworkError) as error:
            # Not the write's failure: it landed. The connection is made again for the next checkpoint.
            logger.warning("checkpoint of %s failed, the next one copies its pages: %s", self.path, error)
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
        finally:
            self._checkpoint_lock.release()

    def write_lock_held(self) -> tuple[int, float]:
        """This process's committed writes, and the seconds it held the write lock (once it had both its
        own and the installation's turn) for every transaction, committed or not, the open's included. Read
        without the lock: a writer stuck waiting for the turn does not hold this up."""
        return self._held

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """This process's write lock, then the installation's writers' turn (adapters/sqlite/turns.py),
        before SQLite's write lock. A thread that holds the turn through another handle on the file is
        refused first, before the write lock: its wait would never end."""
        self._turn.refuse_reentry()
        with self._write_lock:
            taken = self._turn.take()
            started = time.perf_counter()
            try:
                yield
            finally:
                commits, seconds = self._held
                self._held = (commits, seconds + time.perf_counter() - started)
                if taken:
                    self._turn.give_back()

    @contextmanager
    def _unsaved(self) -> Iterator[sqlite3.Connection]:
        """A write nested in this thread's transaction with no savepoint (`write(savepoint=False)`): if its
        block raises after it changed rows, the transaction is spoiled and will not commit."""
        connection = self._writer_connection()
        changes = connection.total_changes
        try:
            yield connection
        except BaseException as error:
            if connection.total_changes != changes:
                self._spoiled = True
            if isinstance(error, sqlite3.Error):
                raise translate(error) from error
            raise

    @contextmanager
    def _nested(self) -> Iterator[sqlite3.Connection]:
        """A savepoint of the transaction this thread has open (only called from `write`), named for its
        place in the transaction: ROLLBACK TO undoes this block's changes and those of every savepoint
        opened after it, however deep.

        A block that returns leaves its savepoint open, not RELEASEd: the transaction's COMMIT ends every
        savepoint with it, and a RELEASE would be one more statement per write: inside an executor's shared
        commit each statement hands the GIL over and waits for it back while the installation's write lock
        is held (docs/benchmarks.md, seventeenth session). Past OPEN_SAVEPOINTS in one transaction, each is
        released again."""
        connection = self._writer_connection()
        self._savepoints += 1
        name = f"nested_write_{self._savepoints}"
        try:
            connection.execute(f"SAVEPOINT {name}")
            try:
                yield connection
            except BaseException:
                if connection.in_transaction:  # else SQLite ended the whole transaction (a full disk)
                    connection.execute(f"ROLLBACK TO {name}")
                    connection.execute(f"RELEASE {name}")
                raise
            if self._savepoints > OPEN_SAVEPOINTS:
                connection.execute(f"RELEASE {name}")
        except sqlite3.Error as error:
            raise translate(error) from error

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction on a pooled reader: every statement in the block sees one snapshot."""
        with self._readers:
            with self._pool_lock:
                connection = self._idle_readers.pop() if self._idle_readers else None
            if connection is None:
                connection = self._connect()
            try:
                connection.execute("BEGIN")
                try:
                    yield connection
                finally:
                    connection.execute("COMMIT")
            except sqlite3.Error as error:
                raise translate(error) from error
            finally:
                with self._pool_lock:
                    self._idle_readers.append(connection)

    def data_version(self) -> int:
        """A number that changes whenever a commit lands, from any connection of any process (the watcher
        connection never writes itself): a poller that saw it unchanged knows nothing was written since it
        last looked, without a query. SQLite counts per connection, so a watcher connection opened after
        `close()` starts its numbers above every earlier one's: an old number never matches a new one."""
        with self._watch_lock:
            if self._watcher is None:
                self._watcher = self._connect()
                self._watchers += 1
            try:
                version = int(self._watcher.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as error:
                raise translate(error) from error
            return (self._watchers << 48) + version

    def close(self) -> None:
        """Close every connection this process holds (none may be in use)."""
        with self._write_lock, self._pool_lock, self._watch_lock, self._checkpoint_lock:
            for connection in [self._writer, self._watcher, self._checkpointer, *self._idle_readers]:
                if connection is not None:
                    connection.close()
            self._writer, self._watcher, self._checkpointer, self._idle_readers = None, None, None, []
            self._turn.close()
