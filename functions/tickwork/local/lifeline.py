"""Tie a child process's life to its parent's, whatever kills the parent (SIGKILL included).

Two mechanisms, because each alone has a gap:

- Linux ``prctl(PR_SET_PDEATHSIG)``: the kernel signals the child the moment its parent dies; nothing in the
  child has to be scheduled, and it survives ``execve``, so it also covers a binary we do not control (the
  emulator, started through :func:`exec_with_parent_death_signal`). Its gaps: Linux only, and a parent that
  died between ``fork`` and ``prctl`` goes unnoticed, which is why the parent pid is compared right after.
- A watchdog thread that polls ``getppid()``: portable, and it notices a re-parenting to PID 1 or a
  subreaper however it happened. Its gap: it needs the interpreter to run, so it is the fallback. Where the
  signal is armed the watchdog is only a backstop and looks every WATCHDOG_BACKSTOP_SECONDS: each look wakes
  an idle process, and every role process looking twice a second made up much of an idle runtime's CPU.

A pipe read until EOF would be portable too, but every process the child starts would inherit its end and
keep the parent "alive"; comparing pids has no such leak.

Importing this module has no side effects. ``python -m tickwork.local.lifeline PARENT_PID -- ARGV...``
arms the parent-death signal (SIGTERM) and execs ARGV.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCHDOG_INTERVAL_SECONDS = 0.5
WATCHDOG_BACKSTOP_SECONDS = 5.0  # where the parent-death signal is armed


def set_parent_death_signal(signum: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send `signum` to this process when its parent dies. False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def watch_parent(
    parent_pid: int, on_orphaned: Callable[[], None], interval: float = WATCHDOG_INTERVAL_SECONDS
) -> threading.Thread:
    """Call `on_orphaned` once, from a daemon thread, at most `interval` seconds after this process's parent
    is not `parent_pid`."""

    def watch() -> None:
        stop = threading.Event()
        while os.getppid() == parent_pid:
            stop.wait(interval)
        on_orphaned()

    thread = threading.Thread(target=watch, name="tickwork-parent-watchdog", daemon=True)
    thread.start()
    return thread


def exec_with_parent_death_signal(argv: list[str]) -> int:
    """`PARENT_PID -- PROGRAM ARGS...`: arm SIGTERM on parent death, check the parent, exec the program."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m tickwork.local.lifeline PARENT_PID -- PROGRAM [ARGS...]", file=sys.stderr)  # noqa: T201
        return 2
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != int(argv[0]):
        return 1  # the parent is already gone: do not start an orphan
    os.execv(argv[2], argv[2:])


if __name__ == "__main__":
    sys.exit(exec_with_parent_death_signal(sys.argv[1:]))
