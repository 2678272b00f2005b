"""A meter of SQLite statements and write transactions, for bench_lock_time.py (benchmark code only).

Python imports `sitecustomize` at start from the first directory on its path that has one: a process started
with this directory on PYTHONPATH and BENCH_SQL_METER set to a directory installs the meter before any
connection is made, and writes what it measured there (a JSON file named after its PID) every second and at
exit. Without BENCH_SQL_METER, importing this module does nothing.

What it measures, per process: each statement's wall time, by the statement's first words, inside write
transactions and in all; and each write transaction (from BEGIN IMMEDIATE's return, the lock taken, to COMMIT
or ROLLBACK on one connection) three ways: its wall time, the wall time of its statements, and the CPU its
thread used meanwhile. The meter's own work inside a transaction counts as the transaction's. A statement's
wall time includes taking the GIL back once SQLite returns (the sqlite3 module lets it go around every call):
a thread that waits for it holds the write lock all the while without running."""

from __future__ import annotations

import atexit
import json
import os
import sqlite3
import sys
import threading
import time
from collections import defaultdict
from typing import Any

ENV = "BENCH_SQL_METER"


class Meter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        # count, wall; count and wall inside write transactions
        self.statements: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0, 0.0])
        self.holds = {"transactions": 0, "wall": 0.0, "sql": 0.0, "thread_cpu": 0.0}

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "argv": sys.argv,
                "holds": dict(self.holds),
                "statements": {name: list(value) for name, value in self.statements.items()},
            }

    def reset(self) -> None:
        with self.lock:
            self.statements.clear()
            self.holds.update(transactions=0, wall=0.0, sql=0.0, thread_cpu=0.0)


METER = Meter()


def _kind(sql: str) -> str:
    return " ".join(sql.split()[:4])[:48]


class MeteredConnection(sqlite3.Connection):
    """A connection that times its statements, and its write transactions when it opens them itself."""

    _began: tuple[float, float] | None = None  # (perf_counter, thread_time) once BEGIN IMMEDIATE returned
    _sql = 0.0  # the statements' wall time since then

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        started = time.perf_counter()
        cursor = super().execute(sql, *args)  # one that raises is not counted
        self._count(sql, started, time.perf_counter())
        return cursor

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        started = time.perf_counter()
        cursor = super().executemany(sql, *args)
        self._count("MANY " + sql, started, time.perf_counter())
        return cursor

    def _count(self, sql: str, started: float, ended: float) -> None:
        took = ended - started
        # The lock is held from BEGIN IMMEDIATE's return: its own wall time is the wait for the lock.
        opened = sql.startswith("BEGIN IMMEDIATE")
        in_hold = self._began is not None and not opened
        if in_hold:
            self._sql += took
        with METER.lock:
            counted = METER.statements[_kind(sql)]
            counted[0] += 1
            counted[1] += took
            if in_hold:
                counted[2] += 1
                counted[3] += took
            if self._began is not None and sql.startswith(("COMMIT", "ROLLBACK")):
                wall_started, cpu_started = self._began
                METER.holds["transactions"] += 1
                METER.holds["wall"] += ended - wall_started
                METER.holds["sql"] += self._sql
                METER.holds["thread_cpu"] += time.thread_time() - cpu_started
                self._began = None
        if opened:
            self._began, self._sql = (time.perf_counter(), time.thread_time()), 0.0


def install() -> None:
    """Every connection made from now on is metered (sqlite3.connect's `factory`, unless one is given)."""
    connect = sqlite3.connect
    if getattr(connect, "metered", False):
        return

    def metered(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", MeteredConnection)
        return connect(*args, **kwargs)

    metered.metered = True  # type: ignore[attr-defined]
    sqlite3.connect = metered  # type: ignore[assignment]


_WRITING = threading.Lock()  # the reporting thread and the exit both write the report


def _write(directory: str) -> None:
    path = os.path.join(directory, f"{os.getpid()}.json")
    with _WRITING:
        with open(f"{path}.tmp", "w") as out:
            json.dump(METER.snapshot(), out)
        os.replace(f"{path}.tmp", path)


def _report_to(directory: str) -> None:
    def every_second() -> None:
        while True:
            time.sleep(1.0)
            _write(directory)

    threading.Thread(target=every_second, name="sql-meter", daemon=True).start()
    atexit.register(_write, directory)


if os.environ.get(ENV):
    install()
    _report_to(os.environ[ENV])
