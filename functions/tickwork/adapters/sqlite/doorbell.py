"""A doorbell between the processes that share one SQLite file, so that an idle queue receiver can sleep.

A receiver cannot learn of another process's commit without looking, and each look wakes it. With the
doorbell, a sender whose message must be seen soon rings it after its commit (a `utime` of a file next to the
database), and every process listening is woken by the kernel (Linux inotify) at once; receivers then look
only every LISTENING_POLL_SECONDS as a safety net, for a ring that was lost. Where inotify is missing (not
Linux), nothing is heard and the receivers look every second, as before the doorbell.

Each process has one listener thread per doorbell it waits on, asleep in `poll` until a ring or its close.
A ring becomes a new generation under a condition, so a receiver that took the generation before it looked at
the queue, and waits only if it is unchanged, cannot miss a ring that came in between.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import logging
import os
import select
import struct
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

# <sys/inotify.h>
_IN_MODIFY = 0x00000002
_IN_ATTRIB = 0x00000004
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_IGNORED = 0x00008000
_IN_CLOEXEC = os.O_CLOEXEC
# The file is gone or moved, or its watch was removed: nothing will be heard on this descriptor again.
_DEAF = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)


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
        """Start hearing other processes' rings (once per doorbell); False where that is not possible, or
        no longer is (the listener ended: the file was removed, say), so receivers look every second."""
        with self._start_lock:
            if not self._started:
                self._started = True
                self._listener = _Listener.start(self._path, self.knock)
                if self._listener is not None:
                    # A ring between a waiter's look and the watch's start was not heard: look again.
                    self.knock()
            return self._listener is not None and self._listener.alive

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
    """A daemon thread asleep in `poll` on an inotify descriptor watching the doorbell file, and on a pipe
    that close() writes to. It holds no reference to the doorbell, so a doorbell nobody holds is collected,
    and its finalizer closes the listener. It ends (and `alive` says so) when the file's watch is gone."""

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

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        poller = select.poll()  # not select(): it refuses descriptors past 1024
        poller.register(self._inotify, select.POLLIN)
        poller.register(self._stop_read, select.POLLIN)
        try:
            while True:
                ready = {descriptor for descriptor, _ in poller.poll()}
                if self._stop_read in ready:
                    return
                if _masks(os.read(self._inotify, 4096)) & _DEAF:
                    logger.warning("the doorbell's file is gone: receivers look every second from now on")
                    return
                on_ring = self._on_ring()
                if on_ring is None:
                    return
                on_ring()
        except Exception:  # logged, and `alive` turns False: receivers go back to looking every second
            logger.exception("the doorbell's listener failed: receivers look every second from now on")
        finally:
            os.close(self._inotify)
            os.close(self._stop_read)

    def close(self) -> None:
        if self._stop_write < 0:
            return
        # A listener that ended already (its file was gone) closed its end: there is nothing to stop.
        with contextlib.suppress(BrokenPipeError):
            os.write(self._stop_write, b"x")
        os.close(self._stop_write)
        self._stop_write = -1


def _masks(events: bytes) -> int:
    """The union of the masks of the inotify events in `events`."""
    mask, offset = 0, 0
    while offset + _EVENT.size <= len(events):
        _, event_mask, _, name_length = _EVENT.unpack_from(events, offset)
        mask |= event_mask
        offset += _EVENT.size + name_length
    return mask


class CommitWait:
    """Sleep until a commit lands in a WAL database, from any process: each commit appends to its `-wal`
    file, and Linux inotify hears the write. The file is watched only while someone sleeps here, so a
    process at work hears nothing of the commits (a burst's thousands a second). `wake()` ends a sleep,
    and every later one at once (a stop). Where inotify is missing, or the WAL file is not there to watch,
    a sleep lasts its fallback."""

    def __init__(self, wal: Path) -> None:
        self._wal = wal
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)  # a wake never waits: one byte there is enough
        self._inotify = _inotify_open()
        weakref.finalize(self, _close_all, [self._wake_read, self._wake_write, self._inotify])

    def sleep(self, seconds: float, fallback: float, still_quiet: Callable[[], bool]) -> bool:
        """Up to `seconds`, until a write to the WAL file or `wake()`; not at all unless `still_quiet()`,
        asked once the file is watched (a commit just before the watch began is seen there). Where nothing
        can be heard, up to `fallback` seconds. True when a write ended it."""
        watch = self._watch()
        if watch is None:
            return self._sleep_on([], min(seconds, fallback), still_quiet)
        try:
            return self._sleep_on([self._inotify], seconds, still_quiet)
        finally:
            _libc().inotify_rm_watch(self._inotify, watch)
            self._drain()

    def pause(self, seconds: float) -> None:
        """Up to `seconds`, or until `wake()`."""
        self._sleep_on([], seconds, lambda: True)

    def wake(self) -> None:
        # A full pipe has its byte already; a closed one, nobody sleeping here any more.
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")

    def _sleep_on(self, descriptors: list[int], seconds: float, still_quiet: Callable[[], bool]) -> bool:
        if not still_quiet() or seconds <= 0:
            return False
        poller = select.poll()  # not select(): it refuses descriptors past 1024
        for descriptor in (*descriptors, self._wake_read):
            poller.register(descriptor, select.POLLIN)
        ready = {descriptor for descriptor, _ in poller.poll(seconds * 1000)}
        return self._inotify >= 0 and self._inotify in ready

    def _watch(self) -> int | None:
        if self._inotify < 0:
            return None
        watch = int(_libc().inotify_add_watch(self._inotify, os.fsencode(self._wal), _IN_MODIFY))
        return None if watch < 0 else watch  # no WAL file (yet): looked at every fallback

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._inotify, 4096):
                pass


def _inotify_open() -> int:
    """A non-blocking inotify descriptor with no watch yet; -1 where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return -1
    try:
        return _inotify_init(_IN_CLOEXEC | os.O_NONBLOCK)
    except (OSError, AttributeError) as error:
        logger.warning("no inotify (%s): an idle watcher looks at its interval", error)
        return -1


def _inotify_init(flags: int) -> int:
    """A new inotify descriptor; OSError (AttributeError: no such call in this libc) where there is none."""
    descriptor = int(_libc().inotify_init1(flags))
    if descriptor < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    return descriptor


def _close_all(descriptors: list[int]) -> None:
    for descriptor in descriptors:
        if descriptor >= 0:
            with contextlib.suppress(OSError):
                os.close(descriptor)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _inotify_watch(path: Path) -> int | None:
    """An inotify descriptor watching `path` for a ring (its timestamps changed), or None where inotify is
    missing or the file cannot be watched (logged)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        path.touch()
        descriptor = _inotify_init(_IN_CLOEXEC)
        if int(_libc().inotify_add_watch(descriptor, os.fsencode(path), _IN_ATTRIB | _DEAF)) < 0:
            error = ctypes.get_errno()
            os.close(descriptor)
            raise OSError(error, "inotify_add_watch")
    except (OSError, AttributeError) as error:
        logger.warning("no doorbell at %s (%s): receivers look every second", path, error)
        return None
    return descriptor
