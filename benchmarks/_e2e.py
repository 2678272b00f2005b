"""Shared pieces of the end-to-end benchmarks (burst, concurrency, APScheduler side by side).

- `Target`: a loopback HTTP server in the benchmark process that records when each call arrived and how
  many calls it was holding at once (server-side concurrency).
- `LocalTickwork`: `tickwork local` as a subprocess (emulator + role processes), stopped with SIGINT.
- `seed_jobs`: N jobs through the product's own JobService (one transaction per job), from several threads.
- `CpuMeter`: CPU seconds (utime + stime from /proc) of a set of processes and their descendants.
- `Probe`: the emulator's answer time to a tiny GetItem, sampled during a phase (how loaded MiniStack is).

Only loopback addresses are used anywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit
from urllib.request import Request, urlopen

REPO = Path(__file__).resolve().parents[1]
TOKEN = "local-dev-token"
OWNER = "local-user"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- the target ------------------------------------------------------------------------------------------


@dataclass
class Arrival:
    at: float  # epoch seconds when the request line was read
    key: str  # Idempotency-Key (Tickwork run id) or X-Bench-Job (APScheduler)
    attempt: str | None


@dataclass
class Target:
    """Loopback HTTP target. `/slow?sleep=S` holds each call S seconds. Thread per connection."""

    arrivals: list[Arrival] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0
    completed: int = 0
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def start(self) -> Target:
        target = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_POST(self) -> None:
                at = time.time()
                key = self.headers.get("Idempotency-Key") or self.headers.get("X-Bench-Job") or ""
                with target._lock:
                    target.in_flight += 1
                    target.peak_in_flight = max(target.peak_in_flight, target.in_flight)
                    target.arrivals.append(Arrival(at, key, self.headers.get("X-Tickwork-Attempt")))
                try:
                    self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
                    sleep = float(parse_qs(urlsplit(self.path).query).get("sleep", ["0"])[0])
                    if sleep:
                        time.sleep(sleep)
                    self.send_response(204)
                    self.end_headers()
                finally:
                    with target._lock:
                        target.in_flight -= 1
                        target.completed += 1

            def log_message(self, format: str, *args: Any) -> None:
                return

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 4096  # the default backlog (5) drops SYNs in a burst: 1 s+ client retries

        self._server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True, name="target").start()
        return self

    def reset(self) -> None:
        with self._lock:
            self.arrivals = []
            self.peak_in_flight = self.in_flight
            self.completed = 0

    def count(self) -> int:
        with self._lock:
            return len(self.arrivals)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def call_target(url: str, job: str) -> None:
    """What an APScheduler job does: one POST to the target (new connection, like Tickwork's invoker)."""
    request = Request(url, data=b"{}", method="POST", headers={"X-Bench-Job": job})
    with urlopen(request, timeout=60) as response:
        response.read()


# --- tickwork local ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class LocalSettings:
    shards: int = 16
    queues: int = 4
    cap: int = 500
    lookahead: int = 180
    tick_interval: float = 20.0
    sweep_interval: float = 60.0
    engine: str = "sqlite"
    executors: int | None = None  # None: the command's default (a baseline from before the option has one)

    def args(self) -> list[str]:
        return [
            "--engine",
            self.engine,
            "--shards",
            str(self.shards),
            "--queues",
            str(self.queues),
            "--cap",
            str(self.cap),
            "--lookahead",
            str(self.lookahead),
            "--tick-interval",
            str(self.tick_interval),
            "--sweep-interval",
            str(self.sweep_interval),
            *(["--executors", str(self.executors)] if self.executors is not None else []),
        ]

    def describe(self) -> str:
        return " ".join(self.args())


class LocalTickwork:
    """`python -m tickwork.cli local ...` in a fresh state dir; `stop()` sends SIGINT like Ctrl-C."""

    def __init__(
        self,
        state_dir: Path,
        settings: LocalSettings,
        source: Path | None = None,
        roles: str = "api,executor,ticker,sweeper",
        status_interval: float = 3600.0,
    ) -> None:
        self.state_dir = state_dir
        self.settings = settings
        self.roles = roles  # no watcher unless asked for (it works on bulk actions and sends alerts)
        self.status_interval = status_interval  # the supervisor's status line (its default: 5 s)
        # Another checkout's `functions/` to run instead of this one (a baseline measured side by side).
        self.source = source
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}

    def start(self, timeout: float = 90.0) -> LocalTickwork:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        args = [
            sys.executable,
            "-m",
            "tickwork.cli",
            "local",
            "--port",
            str(self.port),
            "--state-dir",
            str(self.state_dir),
            "--status-interval",
            str(self.status_interval),
            "--roles",
            self.roles,
            *self.settings.args(),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TICKWORK_"))}
        if self.source is not None:
            env["PYTHONPATH"] = str(self.source / "functions")  # ahead of the editable install's path
        self.process = subprocess.Popen(
            args, env=env, stdout=(self.state_dir / "cli.out").open("wb"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("tickwork local exited: " + (self.state_dir / "cli.out").read_text())
            try:
                with urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200 and (self.state_dir / "run" / "pids.json").exists():
                        break
            except OSError:
                pass
            time.sleep(0.3)
        else:
            self.stop()
            raise RuntimeError("tickwork local did not come up: " + (self.state_dir / "cli.out").read_text())
        self.env = json.loads((self.state_dir / "run" / "env.json").read_text())
        return self

    def pids(self) -> dict[str, int]:
        return {k: int(v) for k, v in json.loads((self.state_dir / "run" / "pids.json").read_text()).items()}

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> LocalTickwork:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def components(self, role: str | None = None) -> Any:
        """The package's own composition root, pointed at this runtime's engine; with `role`, on the SQLite
        engine, at that role process's durability (local/runtime.py's SQLITE_SYNCHRONOUS), else the API's."""
        import boto3
        from botocore.config import Config

        from tickwork.adapters.metrics import InMemoryMetrics
        from tickwork.composition import Components
        from tickwork.domain.clock import SystemClock
        from tickwork.settings import Settings

        if self.env.get("TICKWORK_ENGINE") == "sqlite":

            def no_aws(service: str) -> Any:
                raise RuntimeError(f"the SQLite engine has no {service} client")

            env = dict(self.env)
            if self.source is not None:
                _refuse_other_schema(Path(env["TICKWORK_DATABASE"]), self.source)
            if role is not None:
                from tickwork.local.runtime import SQLITE_SYNCHRONOUS

                env["TICKWORK_SQLITE_SYNCHRONOUS"] = SQLITE_SYNCHRONOUS[role]
            return Components(Settings.from_env(env), SystemClock(), no_aws, InMemoryMetrics())
        session: Any = boto3.session.Session(
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
            region_name=self.env["AWS_DEFAULT_REGION"],
        )
        clients: dict[str, Any] = {}
        lock = threading.Lock()
        config = Config(max_pool_connections=64, retries={"mode": "standard", "total_max_attempts": 5})

        def client_for(service: str) -> Any:
            with lock:
                if service not in clients:
                    clients[service] = session.client(
                        service, endpoint_url=self.env["AWS_ENDPOINT_URL"], config=config
                    )
                return clients[service]

        return Components(Settings.from_env(self.env), SystemClock(), client_for, InMemoryMetrics())


def http_job_spec(name: str, expression: str, url: str) -> Any:
    from tickwork.domain.jobs import JobSpec
    from tickwork.domain.models import Target as JobTarget
    from tickwork.domain.schedule import parse_schedule

    return JobSpec(
        name=name,
        schedule=parse_schedule(expression),
        target=JobTarget("http", {"url": url, "method": "POST"}),
        timeout_seconds=60,
    )


def _refuse_other_schema(database: Path, source: Path) -> None:
    """This harness's code opening an older checkout's database would migrate it under that runtime's
    running processes (a schema change breaks them: version 5's change feed stopped the older watcher), and
    its row would not compare: refused, with what to do instead."""
    import sqlite3

    from tickwork.adapters.sqlite.db import SCHEMA_VERSION

    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as raw:
        version = int(raw.execute("PRAGMA user_version").fetchone()[0])
    if version != SCHEMA_VERSION:
        raise RuntimeError(
            f"the checkout at {source} writes SQLite schema version {version}, this harness "
            f"{SCHEMA_VERSION}: opening its file would migrate it under its running processes. Compare "
            "the two with one invocation from each checkout instead."
        )


def seed_jobs(parts: Any, count: int, expression: str, url: str, threads: int = 8) -> tuple[list[str], float]:
    """`count` jobs through JobService.create (one TransactWriteItems each) from `threads` threads."""
    service = parts.job_service()

    def create(n: int) -> str:
        return str(service.create(OWNER, http_job_spec(f"bench {n}", expression, url)).job_id)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        ids = list(pool.map(create, range(count)))
    return ids, time.perf_counter() - started


def _sqlite_table(parts: Any, table: str) -> str:
    """The SQLite engine's table for a physical DynamoDB table name (its logical name)."""
    from tickwork.resources import TABLES

    return next(t.logical_name for t in TABLES if parts.settings.resource_names.table(t) == table)


def scan_table(parts: Any, table: str, segments: int = 4) -> list[dict[str, Any]]:
    """Every item of a table (parallel scan), deserialized."""
    from tickwork.adapters.dynamodb.items import deserialize

    if parts.settings.engine == "sqlite":
        with parts.database.read() as connection:
            rows = connection.execute(f"SELECT item FROM {_sqlite_table(parts, table)}").fetchall()
        return [json.loads(row[0]) for row in rows]

    client = parts.client_for("dynamodb")

    def segment(n: int) -> list[dict[str, Any]]:
        request: dict[str, Any] = {"TableName": table, "Segment": n, "TotalSegments": segments}
        items: list[dict[str, Any]] = []
        while True:
            page = client.scan(**request)
            items.extend(deserialize(item) for item in page.get("Items", []))
            if not page.get("LastEvaluatedKey"):
                return items
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    with ThreadPoolExecutor(max_workers=segments) as pool:
        return [item for part in pool.map(segment, range(segments)) for item in part]


def count_items(parts: Any, table: str) -> int:
    if parts.settings.engine == "sqlite":
        with parts.database.read() as connection:
            return int(
                connection.execute(f"SELECT COUNT(*) FROM {_sqlite_table(parts, table)}").fetchone()[0]
            )
    client = parts.client_for("dynamodb")
    request: dict[str, Any] = {"TableName": table, "Select": "COUNT"}
    total = 0
    while True:
        page = client.scan(**request)
        total += int(page.get("Count", 0))
        if not page.get("LastEvaluatedKey"):
            return total
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def parse_ms(text: str | None) -> float | None:
    """An instant as the store writes it ('2026-12-02T12:00:00.123Z' or without ms) to epoch seconds."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# --- time, schedules and statistics -------------------------------------------------------------------------


def fixed_second(at: float) -> tuple[datetime, str]:
    """The whole second after epoch `at`, and a 6-field expression firing at exactly that second daily."""
    moment = datetime.fromtimestamp(int(at) + 1, UTC)
    return moment, f"{moment.second} {moment.minute} {moment.hour} * * *"


def pct(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p90": pct(values, 90),
        "p99": pct(values, 99),
        "max": max(values) if values else float("nan"),
        "mean": statistics.fmean(values) if values else float("nan"),
    }


def fmt_ms(stats: dict[str, float]) -> str:
    return (
        f"p50 {stats['p50'] * 1000:8.0f} ms  p90 {stats['p90'] * 1000:8.0f} ms  "
        f"p99 {stats['p99'] * 1000:8.0f} ms  max {stats['max'] * 1000:8.0f} ms  (n={stats['n']:.0f})"
    )


def sleep_until(epoch: float) -> None:
    while (left := epoch - time.time()) > 0:
        time.sleep(min(left, 1.0))


def wait_for(condition: Callable[[], bool], timeout: float, every: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return condition()


# --- CPU accounting ---------------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from 3 (state) on; the name may contain spaces


def descendants(pid: int) -> list[int]:
    """pid and every process below it (MiniStack may run helper processes)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), in seconds; 0 if it is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime: fields 14 and 15 of stat


class CpuMeter:
    """CPU seconds per named process group, read on demand; groups are a pid and its descendants."""

    def __init__(self, roots: dict[str, int]) -> None:
        self.groups = {name: descendants(pid) for name, pid in roots.items()}

    def read(self) -> dict[str, float]:
        return {name: sum(cpu_seconds(p) for p in pids) for name, pids in self.groups.items()}

    @staticmethod
    def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {name: after[name] - before.get(name, 0.0) for name in after}


class CpuSampler:
    """Samples a CpuMeter every `every` seconds in a thread: utilisation per process over time."""

    def __init__(self, meter: CpuMeter, every: float = 1.0) -> None:
        self.meter = meter
        self.every = every
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-sampler")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self.meter.read()))
            self._stop.wait(self.every)

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per group spent between two instants (nearest samples)."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return {}
        return CpuMeter.delta(inside[0][1], inside[-1][1]) | {"_seconds": inside[-1][0] - inside[0][0]}


# --- emulator latency probe -------------------------------------------------------------------------------


class Probe:
    """A read of a missing job every `every` s: how long the store (the emulator, or the SQLite file) takes
    to answer the smallest call."""

    def __init__(self, parts: Any, every: float = 0.25) -> None:
        self._store = parts.store
        self.every = every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="probe")

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.time()
            with contextlib.suppress(Exception):  # a probe failure must not end the benchmark
                self._store.get_job("probe-missing")
                self.samples.append((started, time.time() - started))
            self._stop.wait(self.every)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> list[float]:
        return [latency for at, latency in self.samples if start <= at <= end]


# --- dispatch queues and the executor's own gauge ----------------------------------------------------------


class QueueSampler:
    """Every `every` s: messages waiting (visible), received but not yet deleted (in flight), still delayed,
    summed over the dispatch queues, and the executor's RunsInFlight gauge (from its metrics snapshot)."""

    def __init__(self, parts: Any, run_dir: Path, every: float = 1.0) -> None:
        self._client = parts.queues  # SQS, or the SQLite engine's SQS-shaped queues
        self._urls = list(parts.settings.dispatch_queue_urls)
        self._metrics = run_dir / "metrics-executor.json"
        self.every = every
        self.samples: list[tuple[float, int, int, int, int]] = []  # at, visible, not visible, delayed, gauge
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="queues")

    def _run(self) -> None:
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        names.append("ApproximateNumberOfMessagesDelayed")
        while not self._stop.is_set():
            at = time.time()
            totals = [0, 0, 0]
            with contextlib.suppress(Exception):  # a failed sample must not end the benchmark
                for url in self._urls:
                    got = self._client.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
                    for i, name in enumerate(names):
                        totals[i] += int(got.get(name, 0))
                gauge = 0
                with contextlib.suppress(OSError, ValueError):
                    gauge = int(json.loads(self._metrics.read_text())["gauges"].get("RunsInFlight", 0))
                self.samples.append((at, totals[0], totals[1], totals[2], gauge))
            self._stop.wait(self.every)

    def start(self) -> QueueSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> list[tuple[float, int, int, int, int]]:
        return [s for s in self.samples if start <= s[0] <= end]


# --- the machine --------------------------------------------------------------------------------------------


def machine() -> str:
    memory = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return (
        f"{os.cpu_count()} CPUs ({model}), {memory} RAM, Python {sys.version.split()[0]}, "
        f"MiniStack {_ministack_version()}"
    )


def _ministack_version() -> str:
    for meta in (REPO / ".venv-ministack").glob("lib/python*/site-packages/ministack-*.dist-info"):
        return meta.name.removesuffix(".dist-info").split("-", 1)[1]
    return "?"


def other_benchmarks() -> list[str]:
    """Other benchmark or test processes running now (they would share the 2 cores)."""
    mine = {os.getpid(), os.getppid()}
    found = []
    listing = subprocess.run(["pgrep", "-af", "benchmarks/|pytest"], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        pid, _, cmd = line.partition(" ")
        if int(pid) not in mine and "pgrep" not in cmd and "--worker" not in cmd:
            found.append(line)
    return found


def exit_cleanly_on_sigterm() -> None:
    """SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so `tickwork local` and the target are stopped."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def seconds_between(a: datetime, b: datetime) -> float:
    return (b - a) / timedelta(seconds=1)


def dump(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))


def iter_chunks(values: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]
