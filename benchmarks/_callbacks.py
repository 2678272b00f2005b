"""Shared pieces of the callback-run benchmarks (bench_callbacks, bench_kill_executor, chaos):

- `CallbackTarget`: a loopback HTTP target that answers each call as its `answer` function says (202 by
  default: the target takes the work) and records each call's run, attempt and callback URLs.
- `Timeline`: actions due at given instants (heartbeats, completions), run by a small thread pool from one
  heap: thousands of runs in flight hold no thread each.
- `report`: one POST to a callback URL, as a target makes it (no credentials: the token is in the URL).
- `seed_specs`: jobs made from any JobSpec through the product's JobService, from a few threads.
- `RoleWatch`: the role processes' CPU seconds (across restarts), RSS and threads, from /proc.
- `run_states`: the runs table's states, counted on a read-only connection to the SQLite file.

Only loopback addresses are used anywhere.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import signal
import sqlite3
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from urllib.parse import parse_qs, urlsplit
from urllib.request import Request, urlopen

from _e2e import OWNER, cpu_seconds

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Call:
    at: float  # epoch seconds when the request arrived
    run_id: str  # Idempotency-Key
    attempt: int  # X-Tickwork-Attempt
    path: str
    complete_url: str  # "" for a response-mode call
    heartbeat_url: str


# What the target answers a call: (status code, seconds to hold the call before answering).
Answer = Callable[[Call], tuple[int, float]]


def accept_all(call: Call) -> tuple[int, float]:
    """202 at once when the call carries callback URLs; otherwise 204 after ?sleep=S (default 0)."""
    if call.complete_url:
        return 202, 0.0
    return 204, float(parse_qs(urlsplit(call.path).query).get("sleep", ["0"])[0])


@dataclass
class CallbackTarget:
    """Loopback HTTP target; `on_call(call)` runs (in the server thread) after each call is recorded."""

    answer: Answer = accept_all
    on_call: Callable[[Call], None] | None = None
    calls: list[Call] = field(default_factory=list)
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def start(self) -> CallbackTarget:
        target = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
                call = Call(
                    at=time.time(),
                    run_id=self.headers.get("Idempotency-Key", ""),
                    attempt=int(self.headers.get("X-Tickwork-Attempt") or 0),
                    path=self.path,
                    complete_url=self.headers.get("X-Tickwork-Completion-Url", ""),
                    heartbeat_url=self.headers.get("X-Tickwork-Heartbeat-Url", ""),
                )
                with target._lock:
                    target.calls.append(call)
                code, hold = target.answer(call)
                if target.on_call is not None:
                    target.on_call(call)
                if hold:
                    time.sleep(hold)
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 4096  # a burst of connections must not overflow the backlog

        self._server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True, name="target").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def called_runs(self) -> int:
        with self._lock:
            return len({c.run_id for c in self.calls})


def report(url: str, body: dict[str, Any] | None = None, timeout: float = 30.0) -> int:
    """POST to a callback URL: the HTTP status, or 0 if the request got no answer."""
    data = json.dumps(body).encode() if body is not None else None
    request = Request(url, method="POST", data=data, headers={"Content-Type": "application/json"})
    try:
        with urlopen(request, timeout=timeout) as response:
            response.read()
            return int(response.status)
    except HTTPError as error:
        error.read()
        return int(error.code)
    except OSError:
        return 0


class Timeline:
    """Actions due at given instants, run by `workers` threads from one heap. `lag()` says how late they
    ran (the driver keeping up is part of what a benchmark shows)."""

    def __init__(self, workers: int = 8) -> None:
        self._heap: list[tuple[float, int, str, Callable[[], None]]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="timeline")
        self._slots = threading.BoundedSemaphore(workers * 4)  # the pool's queue stays short: lag is real
        self._lags: dict[str, list[float]] = {}
        self._thread = threading.Thread(target=self._run, name="timeline", daemon=True)
        self.errors = 0

    def start(self) -> Timeline:
        self._thread.start()
        return self

    def at(self, when: float, action: Callable[[], None], kind: str = "") -> None:
        """Run `action` at `when` (epoch seconds); `kind` groups its lag in `lag()`."""
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._order), kind, action))
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._heap)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.time()):
                    self._cond.wait(None if not self._heap else max(0.0, self._heap[0][0] - time.time()))
                if self._stopped:
                    return
                due, _, kind, action = heapq.heappop(self._heap)
            self._slots.acquire()
            self._lags.setdefault(kind, []).append(time.time() - due)
            self._pool.submit(self._do, action)

    def _do(self, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception:  # a failed action is counted and logged, the timeline goes on
            self.errors += 1
            logger.exception("timeline action failed")
        finally:
            self._slots.release()

    def lag(self, kind: str | None = None) -> dict[str, float]:
        """Seconds between each action's due instant and its start (of one kind, or all): p50, p99, max."""
        lags = sorted(
            lag for name, values in list(self._lags.items()) if kind in (None, name) for lag in values
        )
        if not lags:
            return {"n": 0, "p50": float("nan"), "p99": float("nan"), "max": float("nan")}
        return {
            "n": len(lags),
            "p50": statistics.median(lags),
            "p99": lags[min(len(lags) - 1, int(len(lags) * 0.99))],
            "max": lags[-1],
        }

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)


class Tally:
    """Thread-safe counts of (what, HTTP status) for the reports a driver sent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, int]] = Counter()

    def add(self, what: str, status: int) -> None:
        with self._lock:
            self.counts[(what, status)] += 1

    def of(self, what: str) -> dict[int, int]:
        with self._lock:
            return {status: n for (kind, status), n in sorted(self.counts.items()) if kind == what}


def seed_specs(
    parts: Any, count: int, make_spec: Callable[[int], Any], threads: int = 8
) -> tuple[list[str], float]:
    """`count` jobs through JobService.create (spec `make_spec(n)`) from `threads` threads."""
    service = parts.job_service()

    def create(n: int) -> str:
        return str(service.create(OWNER, make_spec(n)).job_id)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        ids = list(pool.map(create, range(count)))
    return ids, time.perf_counter() - started


def job_spec(
    name: str,
    expression: str,
    url: str,
    timeout_seconds: int,
    *,
    callback: bool = True,
    heartbeat_seconds: int | None = None,
    retry: Any = None,
) -> Any:
    """An http job POSTing to `url`: completion callback (with `heartbeat_seconds`), or the default
    (response); `retry` a RetryPolicy, or the default one."""
    from tickwork.domain.jobs import JobSpec
    from tickwork.domain.models import Completion, Policies
    from tickwork.domain.models import Target as JobTarget
    from tickwork.domain.schedule import parse_schedule

    return JobSpec(
        name=name,
        schedule=parse_schedule(expression),
        target=JobTarget("http", {"url": url, "method": "POST"}),
        timeout_seconds=timeout_seconds,
        completion=Completion.CALLBACK if callback else None,
        heartbeat_seconds=heartbeat_seconds,
        policies=Policies() if retry is None else Policies(retry=retry),
    )


# --- the role processes, from /proc -----------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS (KiB) and Threads of a process; {} if it is gone."""
    found: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                found[key] = int(value.split()[0])
    return found


class RoleWatch:
    """CPU seconds per role process, summed across restarts (a new pid starts from its own zero), and each
    role's current pid. `pids` reads the supervisor's pids.json."""

    def __init__(self, pids: Callable[[], dict[str, int]]) -> None:
        self._pids = pids
        self._last: dict[str, tuple[int, float]] = {}  # role -> (pid, its cpu at the last read)
        self._done: dict[str, float] = {}  # role -> cpu of its earlier, dead pids
        self.restarts: Counter[str] = Counter()

    def read(self) -> tuple[dict[str, int], dict[str, float]]:
        """(pid per role, cumulative CPU seconds per role)."""
        with contextlib.suppress(OSError, ValueError):
            current = self._pids()
            for role, pid in current.items():
                last = self._last.get(role)
                if last is not None and last[0] != pid:
                    self._done[role] = self._done.get(role, 0.0) + last[1]
                    self.restarts[role] += 1
                used = cpu_seconds(pid)
                if last is not None and last[0] == pid:
                    used = max(used, last[1])  # a pid read as gone keeps what it had
                self._last[role] = (pid, used)
        pids = {role: pid for role, (pid, _) in self._last.items()}
        return pids, {role: self._done.get(role, 0.0) + used for role, (_, used) in self._last.items()}


def run_states(database: Path) -> Counter[str]:
    """The runs table's states, on a read-only connection (the product's own file, never written here)."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)
    try:
        rows = connection.execute(
            "SELECT json_extract(item, '$.state'), COUNT(*) FROM runs GROUP BY 1"
        ).fetchall()
    finally:
        connection.close()
    return Counter({str(state): int(n) for state, n in rows})


def live_slot_holds(database: Path) -> int | None:
    """Live holds of the concurrency slots' `all` pool when the file has them (what the bound counts), else
    None. Read-only."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)
    try:
        row = connection.execute(
            "SELECT COUNT(*) FROM slot_holds WHERE pool = 'all' AND lease_ms > ?", (int(time.time() * 1000),)
        ).fetchone()
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    return int(row[0])


def others_note(others: list[str]) -> str:
    """Other benchmark or test processes (_e2e.other_benchmarks), shortened: how many, the first few."""
    shown = [line[:100] for line in others[:4]]
    return f"{len(others)} processes: {shown}" + (" ..." if len(others) > 4 else "")


def exit_once_on_sigterm() -> None:
    """SIGTERM (`timeout`, `kill`) unwinds like Ctrl-C, so `tickwork local` and the target are stopped; a
    second SIGTERM during that unwinding is ignored, so it cannot cut the stop short (`_e2e`'s handler
    exits again on each one, abandoning the stop of `tickwork local` half-way)."""

    def stop(*_: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.exit(143)

    signal.signal(signal.SIGTERM, stop)


def load_average() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


def running_runs(database: Path) -> int:
    """Runs in state `running`. Read-only. (Not through the open_runs index: a queue-carried run has no
    entry there, its message watches it.)"""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)
    try:
        row = connection.execute(
            "SELECT COUNT(*) FROM runs WHERE json_extract(item, '$.state') = 'running'"
        ).fetchone()
    finally:
        connection.close()
    return int(row[0])


class StoreSampler:
    """Every `every` s, in a thread: runs `running` in the SQLite file, and the slots' live holds when the
    file has them (what the bound counts). `samples` are (at, running, live holds or None)."""

    def __init__(self, database: Path, every: float = 0.1) -> None:
        self.database = database
        self.every = every
        self.samples: list[tuple[float, int, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="store-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                running = running_runs(self.database)
            except sqlite3.Error:  # busy past the timeout: this sample is skipped
                continue
            self.samples.append((time.time(), running, live_slot_holds(self.database)))

    def start(self) -> StoreSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def peak(self) -> int:
        return max((running for _, running, _ in self.samples), default=0)

    def peak_holds(self) -> int | None:
        holds = [h for _, _, h in self.samples if h is not None]
        return max(holds) if holds else None

    def describe(self, cap: int) -> str:
        """Peak running against the cap, and how often the samples saw exactly the cap."""
        peak = self.peak()
        at_cap = sum(1 for _, running, _ in self.samples if running == cap)
        verdict = "above the cap" if peak > cap else ("exactly the cap" if peak == cap else "below the cap")
        holds = self.peak_holds()
        return (
            f"peak {peak} runs running in the store (cap {cap}): {verdict}; {at_cap} of "
            f"{len(self.samples)} samples (every {self.every:.1f} s) at exactly the cap, "
            f"{sum(1 for _, running, _ in self.samples if running > cap)} above it; slot holds: "
            + ("none in this database" if holds is None else f"peak {holds} live")
        )
