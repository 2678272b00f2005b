"""Cross-process status for the local runtime: each role process writes a small JSON snapshot of its
metrics; the supervisor reads them and prints one status line."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

WINDOW_SECONDS = 60.0


# An unchanged snapshot is still rewritten this often, so timings older than the window leave the file.
REWRITE_SECONDS = 10.0


class SnapshotMetrics:
    """The Metrics port for local role processes: counters plus timings stamped with when they happened,
    so the status line can show start delay percentiles over the last minute."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._counts: dict[str, float] = defaultdict(float)
        self._timings: dict[str, deque[tuple[float, float]]] = defaultdict(lambda: deque(maxlen=100_000))
        self._gauges: dict[str, float] = {}
        self._changed = True
        self._written_at = 0.0
        self._timings_written = False  # the file holds timings, which must age out of it
        # Set by the first change after a write and by wake(): the writer sleeps on it, not on a timer.
        self._stirred = threading.Event()
        self._stirred.set()  # changed since the last write: there is none yet

    def gauge(self, name: str, value: float) -> None:
        with self._lock:
            if self._gauges.get(name) != value:
                self._gauges[name] = value
                self._mark_changed()

    def count(self, name: str, value: float = 1.0) -> None:
        with self._lock:
            self._counts[name] += value
            self._mark_changed()

    def timing_ms(self, name: str, value_ms: float) -> None:
        with self._lock:
            self._timings[name].append((time.time(), value_ms))
            self._mark_changed()

    def count_for_job(self, name: str, job_id: str, value: float = 1.0) -> None:
        self.count(f"{name}|{job_id}", value)

    def _mark_changed(self) -> None:
        """Under the lock. Only the first change after a write wakes the writer: a burst's thousands of
        counts cost one Event.set."""
        if not self._changed:
            self._changed = True
            self._stirred.set()

    def wake(self) -> None:
        """Wake the writer now (the role is stopping: its last snapshot is written at once)."""
        self._stirred.set()

    def wait_for_change(self) -> None:
        """Block until something changed (or wake()), or until the timings in the file are due to age: an
        idle role's writer does not wake at all."""
        with self._lock:
            timeout = REWRITE_SECONDS if self._timings_written else None
        self._stirred.wait(timeout)

    def write_if_due(self) -> None:
        """Write when something changed, and every REWRITE_SECONDS while the file holds timings (they age
        out of the last-minute window): an idle role does not rewrite the same file."""
        with self._lock:
            due = self._changed or (
                self._timings_written and time.time() - self._written_at >= REWRITE_SECONDS
            )
        if due:
            self.write()

    def write(self, extra: dict[str, Any] | None = None) -> None:
        now = time.time()
        with self._lock:
            self._changed = False
            self._stirred.clear()  # what it stands for is in this write
            self._written_at = now
            snapshot = {
                "written_at": now,
                "counts": dict(self._counts),
                "gauges": dict(self._gauges),
                "timings": {
                    k: [v for t, v in q if now - t <= WINDOW_SECONDS] for k, q in self._timings.items()
                },
                **(extra or {}),
            }
            self._timings_written = any(snapshot["timings"].values())
        write_json_atomically(self._path, snapshot)


def write_json_atomically(path: Path, value: Any) -> None:
    """Replace `path` with `value` as JSON in one step: a reader in another process never sees half a file."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(value))
    os.replace(temporary, path)


def read_snapshots(directory: Path) -> list[dict[str, Any]]:
    return list(snapshots_by_file(directory).values())


def snapshots_by_file(directory: Path) -> dict[str, dict[str, Any]]:
    """Each role process's latest snapshot, by its file's name (`metrics-executor-2.json`)."""
    snapshots = {}
    for path in sorted(directory.glob("metrics-*.json")):
        try:
            snapshots[path.name] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # being replaced right now: the next status line reads it
    return snapshots


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def summarize(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    counts: dict[str, float] = defaultdict(float)
    gauges: dict[str, float] = defaultdict(float)
    delays: list[float] = []
    for snapshot in snapshots:
        for name, value in snapshot.get("counts", {}).items():
            counts[name] += value
        for name, value in snapshot.get("gauges", {}).items():
            gauges[name] += value
        delays.extend(snapshot.get("timings", {}).get("StartDelay", []))
    return {
        "counts": dict(counts),
        "gauges": dict(gauges),
        "start_delay_p50": percentile(delays, 0.5),
        "start_delay_p99": percentile(delays, 0.99),
    }
