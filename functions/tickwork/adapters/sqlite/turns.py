"""The writers' turn: the processes of an installation take turns to write on a kernel lock (`flock` on a
file next to the database) before SQLite's own write lock.

Why: SQLite makes a writer that finds another process's transaction open sleep in steps that grow to
100 ms, so under a burst it sleeps on long after the lock came free, and every process's writes queue
behind those gaps. The kernel wakes a writer waiting for the turn as soon as the holder lets go.

SQLite's lock still keeps writes apart: the turn only orders the writers that take it. A writer that does
not (another tool on the file, or this process when the turn's file cannot be opened) is still waited
for by SQLite, up to its busy timeout.

The writer waits in the kernel, with no timeout, as it waits for its own process's write lock: a blocking
`flock` cannot be given one, and waiting through another thread (which could give up) costs each contended
write two more hand-overs of the GIL while the turn is ours and unused (docs/benchmarks.md, twelfth
session). The holder holds SQLite's write lock for as long as it holds the turn, so while it does no
writer could commit anyway. A holder that dies lets go; one that is stopped (SIGSTOP) holds both until it
goes on, and a writer waiting that long is logged every WATCH_SECONDS. The one wait that would never end,
a thread asking for a turn it already holds through another handle on the file, is refused."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable

from tickwork.domain.errors import StoreError

logger = logging.getLogger(__name__)

# How often a writer still waiting for the turn is logged.
WATCH_SECONDS = 10.0

# The turns this process's threads hold: (turn file, thread).
_HELD: set[tuple[str, int]] = set()
_HELD_LOCK = threading.Lock()


class WritersTurn:
    """One process's handle on an installation's writers' turn. `take` and `give_back` are called by one
    thread at a time (the database's in-process write lock sees to that)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._file: int | None = None
        self._closer: Callable[[], object] | None = None  # closes the file once (also if never closed)
        self._unavailable = False  # the file cannot be opened or locked: SQLite's lock alone
        self._waiting_since: float | None = None  # monotonic: when the writer now waiting began
        self._watch: threading.Thread | None = None

    def refuse_reentry(self) -> None:
        """StoreError when this thread holds this file's turn already (through another handle): its wait
        would never end. Called before the process's write lock is taken."""
        with _HELD_LOCK:
            if (self._path, threading.get_ident()) in _HELD:
                raise StoreError(
                    f"a write inside a write to the same database through a second handle ({self._path}) "
                    "would wait for itself",
                    code="WriteInsideWrite",
                )

    def take(self) -> bool:
        """Wait for the turn: True once this process holds it, False when there is no turn to take (its
        file cannot be opened or locked: SQLite's own lock orders the writes)."""
        fd = self._open()
        if fd is None:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another process writes: wait in the kernel until it lets go
                self._waiting_since = time.monotonic()
                self._start_watch()
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                finally:
                    self._waiting_since = None
        except OSError as error:  # no locks on this file system (ENOLCK): SQLite's alone
            self._without_turn(error, for_good=True)
            return False
        try:
            with _HELD_LOCK:
                _HELD.add((self._path, threading.get_ident()))
        except BaseException:  # interrupted once it was ours: nobody would give it back
            self.give_back()
            raise
        return True

    def give_back(self) -> None:
        assert self._file is not None, "give_back without a turn taken"
        with _HELD_LOCK:
            _HELD.discard((self._path, threading.get_ident()))
        fcntl.flock(self._file, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the file (it is opened again by the next `take`). Not while a turn is held or waited for."""
        if self._closer is not None:
            self._closer()
        self._file = self._closer = None

    def _open(self) -> int | None:
        """The turn's file (None: there is no turn to take)."""
        if self._unavailable:
            return None
        if self._file is None:
            try:
                # Like SQLite's own -wal and -shm files: readable and writable by whoever may write the
                # database (the umask decides), so a second user of the installation can take turns too.
                self._file = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as error:
                # Out of descriptors passes; a file that cannot be opened (a directory, no permission) stays.
                self._without_turn(error, for_good=error.errno not in (errno.EMFILE, errno.ENFILE))
            else:
                closer = weakref.finalize(self, os.close, self._file)  # a Database dropped unclosed
                closer.atexit = False  # not under a daemon thread still writing at exit
                self._closer = closer
        return self._file

    def _without_turn(self, error: OSError, *, for_good: bool) -> None:
        self._unavailable = for_good
        logger.warning("no writers' turn (%s): %s; SQLite's own lock orders the writes", self._path, error)

    def _start_watch(self) -> None:
        """The first contended wait starts a thread that logs a writer waiting longer than WATCH_SECONDS
        (off the writers' path: it only reads when the wait began)."""
        if self._watch is None:
            watch = threading.Thread(
                target=_watch, args=(weakref.ref(self),), name="tickwork-writers-turn", daemon=True
            )
            try:
                watch.start()
            except RuntimeError as error:  # no thread to spare: the wait goes on, unwatched
                logger.warning("no watch on the writers' turn (%s): %s", self._path, error)
                return
            self._watch = watch


def _watch(turn: weakref.ref[WritersTurn]) -> None:
    """Log a writer that has waited for the turn longer than WATCH_SECONDS, every WATCH_SECONDS; ends with
    its handle."""
    while True:
        time.sleep(WATCH_SECONDS)
        handle = turn()
        if handle is None:
            return
        since = handle._waiting_since
        if since is not None and time.monotonic() - since >= WATCH_SECONDS:
            logger.warning(
                "a write has waited %.0f s for the writers' turn (%s): another process holds it (stopped?)",
                time.monotonic() - since,
                handle._path,
            )
        del handle
