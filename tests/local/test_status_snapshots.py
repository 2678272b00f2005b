"""Role processes write their metric snapshots when they change, not on a timer; the parent watchdog."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from tickwork.composition import Components
from tickwork.domain.clock import SystemClock
from tickwork.local import lifeline, status
from tickwork.local.lifeline import watch_parent
from tickwork.local.roles import _gauge_write_lock, _snapshots
from tickwork.local.status import SnapshotMetrics
from tickwork.settings import Settings


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_an_unchanged_snapshot_without_timings_is_not_written_again(tmp_path: Path) -> None:
    path = tmp_path / "metrics-x.json"
    metrics = SnapshotMetrics(path)
    metrics.count("RunsSucceeded")
    metrics.write_if_due()
    first = path.stat().st_mtime_ns
    os.utime(path, ns=(first - 10**9, first - 10**9))
    metrics._written_at -= 2 * status.REWRITE_SECONDS  # long ago: only timings would make it due
    metrics.write_if_due()
    assert path.stat().st_mtime_ns == first - 10**9
    metrics.count("RunsSucceeded")
    metrics.write_if_due()
    assert _read(path)["counts"] == {"RunsSucceeded": 2.0}


def test_a_snapshot_holding_timings_is_rewritten_so_they_age_out(tmp_path: Path) -> None:
    path = tmp_path / "metrics-x.json"
    metrics = SnapshotMetrics(path)
    metrics.timing_ms("StartDelay", 12.0)
    metrics.write_if_due()
    assert _read(path)["timings"] == {"StartDelay": [12.0]}
    # The timing is now older than the window, and the file was written REWRITE_SECONDS ago.
    metrics._timings["StartDelay"][0] = (time.time() - status.WINDOW_SECONDS - 1, 12.0)
    metrics._written_at -= status.REWRITE_SECONDS
    metrics.write_if_due()
    assert _read(path)["timings"] == {"StartDelay": []}
    assert not metrics._timings_written


def test_the_writer_sleeps_until_a_change_and_wakes_at_once(tmp_path: Path) -> None:
    metrics = SnapshotMetrics(tmp_path / "metrics-x.json")
    metrics.write_if_due()  # the first write: nothing changed since
    woke = threading.Event()

    def writer() -> None:
        metrics.wait_for_change()
        woke.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    assert not woke.wait(0.3), "an idle writer woke without a change"
    metrics.count("RunsPlanned")
    assert woke.wait(5)
    thread.join(5)


def test_wake_ends_the_wait_without_a_change(tmp_path: Path) -> None:
    metrics = SnapshotMetrics(tmp_path / "metrics-x.json")
    metrics.write_if_due()
    done = threading.Event()
    thread = threading.Thread(target=lambda: (metrics.wait_for_change(), done.set()), daemon=True)
    thread.start()
    metrics.wake()
    assert done.wait(5)


@pytest.mark.parametrize(("interval", "looks"), [(0.02, 3), (60.0, 1)])
def test_the_parent_watchdog_looks_once_an_interval(
    interval: float, looks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent changes at the watchdog's third look: a 20 ms watchdog gets there at once, a 60 s one has
    looked once in half a second."""
    parent, seen = os.getppid(), []

    def getppid() -> int:
        seen.append(1)
        return parent if len(seen) < 3 else 1

    monkeypatch.setattr(lifeline.os, "getppid", getppid)
    orphaned = threading.Event()
    watch_parent(parent, orphaned.set, interval=interval)
    assert orphaned.wait(0.5) is (looks == 3)
    assert len(seen) == looks


def test_a_fresh_roles_writer_writes_its_first_snapshot_and_then_each_change(tmp_path: Path) -> None:
    """The writer thread as a role runs it: the first snapshot at once, then one after each change, while the
    role runs (not only on stop)."""
    path = tmp_path / "metrics-x.json"
    metrics, stop = SnapshotMetrics(path), threading.Event()
    metrics.count("RunsPlanned")
    writer = threading.Thread(target=_snapshots, args=(metrics, stop), daemon=True)
    writer.start()
    try:
        _wait_for(lambda: path.exists() and _read(path)["counts"] == {"RunsPlanned": 1.0})
        metrics.count("RunsPlanned")
        _wait_for(lambda: _read(path)["counts"] == {"RunsPlanned": 2.0})
    finally:
        stop.set()
        metrics.wake()
        writer.join(5)
    assert not writer.is_alive()


def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_roles_database_tells_its_snapshot_how_long_it_held_the_write_lock(tmp_path: Path) -> None:
    """As `python -m tickwork.local.roles` wires it: each commit of the role's database sets the gauges a
    benchmark adds up (a burst on SQLite can be bound by that one lock)."""
    settings = Settings.from_env({"TICKWORK_ENGINE": "sqlite", "TICKWORK_DATABASE": str(tmp_path / "t.db")})
    metrics = SnapshotMetrics(tmp_path / "metrics-x.json")
    parts = Components(settings, SystemClock(), lambda service: None, metrics)
    parts.on_write_commit = partial(_gauge_write_lock, metrics)
    for shard in ("a", "b"):
        with parts.database.write() as connection:
            connection.execute("INSERT INTO shards (shard_id, item) VALUES (?, ?)", (shard, "{}"))
    metrics.write()
    gauges = _read(tmp_path / "metrics-x.json")["gauges"]
    commits, held = parts.database.write_lock_held()
    assert commits == 2 and gauges == {"WriteTransactions": 2, "WriteLockHeldSeconds": round(held, 6)}
    parts.database.close()
