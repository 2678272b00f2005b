"""A doorbell between the processes that share one SQLite file, so that an idle queue receiver can sleep.

A receiver cannot learn of another process's commit without looking, and each look wakes it. With the
doorbell, a sender whose message must be seen soon rings it after its commit (a `utime` of a file next to the
database), and every process listening is woken by the kernel (Linux inotify) at once; receivers then look
only every LISTENING_POLL_SECONDS as a safety net, for a ring that was lost. Where inotify is missing (not
Linux), nothing is heard and the receivers look every second, as before the doorbell.

Each process has one listener thread per doorbell it waits on, asleep in `select` until a ring or its close.
A ring becomes a new generation under a condition, so a receiver that took the generation before it looked at
the queue, and waits only if it is unchanged, cannot miss a ring that came in between.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

# <sys/inotify.h>
_IN_ATTRIB = 0x00000004
_IN_CLOEXEC = os.O_CLOEXEC


class Doorbell:
    """Ring it (any process) or wait on it (this process). Thread-safe."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._rung = threading.Condition()
        self._generation = 0
        self._listener: _Listener | None = None
        self._started = False
        self._start_lock = threading.Lock()

    @property
    def generation(self) -> int:
        """Taken before a look at the queue, and handed to wait_past."""
        return self._generation

    def ring(self) -> None:
        """Wake the waiters of every process (and of this one). A ring that cannot be made is logged: the
        others then see the send at their next look, LISTENING_POLL_SECONDS later at most."""
        self.knock()
        try:
            self._path.touch()  # its timestamps change: IN_ATTRIB for every watcher
        except OSError as error:
            logger.warning("doorbell %s not rung (%s): other processes see the send later", self._path, error)

    def knock(self) -> None:
        """Wake this process's waiters only (a send they can see without a ring to the others)."""
        with self._rung:
            self._generation += 1
            self._rung.notify_all()

    def listening(self) -> bool:
        """Start hearing other processes' rings (once per doorbell); False where that is not possible."""
        with self._start_lock:
            if not self._started:
                self._started = True
                self._listener = _Listener.start(self._path, self.knock)
            return self._listener is not None

    def wait_past(self, generation: int, seconds: float) -> None:
        """Sleep until the generation moves past `generation` (a ring or knock since it was taken), or for
        `seconds`."""
        with self._rung:
            if self._generation == generation:
                self._rung.wait(seconds)

    def close(self) -> None:
        """Stop the listener thread (a doorbell no longer waited on)."""
        with self._start_lock:
            if self._listener is not None:
                self._listener.close()
                self._listener = None


class _Listener:
    """A daemon thread asleep in `select` on an inotify descriptor watching the doorbell file, and on a pipe
    that close() writes to. It holds no reference to the doorbell, so a doorbell nobody holds is collected,
    and its finalizer closes the listener."""

    def __init__(self, inotify: int, on_ring: weakref.WeakMethod[Callable[[], None]]) -> None:
        self._inotify = inotify
        self._on_ring = on_ring
        self._stop_read, self._stop_write = os.pipe()
        self._thread = threading.Thread(target=self._run, name="tickwork-doorbell", daemon=True)

    @classmethod
    def start(cls, path: Path, on_ring: Callable[[], None]) -> _Listener | None:
        inotify = _inotify_watch(path)
        if inotify is None:
            return None
        listener = cls(inotify, weakref.WeakMethod(on_ring))
        weakref.finalize(on_ring.__self__, listener.close)  # type: ignore[attr-defined]
        listener._thread.start()
        return listener

    def _run(self) -> None:
        try:
            while True:
                readable, _, _ = select.select([self._inotify, self._stop_read], [], [])
                if self._stop_read in readable:
                    return
                os.read(self._inotify, 4096)  # the events themselves say nothing more than "rung"
                on_ring = self._on_ring()
                if on_ring is None:
                    return
                on_ring()
        finally:
            os.close(self._inotify)
            os.close(self._stop_read)

    def close(self) -> None:
        if self._stop_write < 0:
            return
        os.write(self._stop_write, b"x")
        os.close(self._stop_write)
        self._stop_write = -1


def _inotify_watch(path: Path) -> int | None:
    """An inotify descriptor watching `path` for a ring (its timestamps changed), or None where inotify is
    missing or the file cannot be watched (logged)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        path.touch()
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        descriptor = int(libc.inotify_init1(_IN_CLOEXEC))
        if descriptor < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if int(libc.inotify_add_watch(descriptor, os.fsencode(path), _IN_ATTRIB)) < 0:
            error = ctypes.get_errno()
            os.close(descriptor)
            raise OSError(error, "inotify_add_watch")
    except (OSError, AttributeError) as error:
        logger.warning("no doorbell at %s (%s): receivers look every second", path, error)
        return None
    return descriptor
