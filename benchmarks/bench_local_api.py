"""What the local API (`tickwork local`) sustains: bursts of parallel clients, each on a new connection.

Starts its own `tickwork local --roles api` (the embedded MiniStack and the API process only) on a free
loopback port with a temporary --state-dir, waits for /health, then fires bursts of N concurrent requests
from N threads with raw `http.client` connections, one new connection per request (so the server's listen
backlog is exercised, not a keep-alive pool), all released together by a barrier: N parallel `POST /jobs`
(valid bodies, a yearly schedule that starts in 2099, so nothing runs) and N parallel `GET /jobs`, for each N.

Per burst: requests, 2xx, non-2xx, connection errors (reset, refused, timeout, ... by kind), latency
p50 / p99 / max (connect to last byte of the answer), the slowest connect (a backlog overflow shows up as a
dropped SYN: a connect of 1 s or more, or a reset), the burst's wall time and requests per second.

    python benchmarks/bench_local_api.py                 # bursts of 30, 60, 120, 240
    python benchmarks/bench_local_api.py 30 60 --timeout 20

The process it started is stopped in every case (SIGTERM, then SIGKILL after a timeout). Exit status 1 when
any request failed to connect or answered non-2xx. Only loopback addresses are used.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, other_benchmarks, percentile

HOST = "127.0.0.1"
TOKEN = "local-dev-token"  # the default token of `tickwork local` (no --token given)
SIZES = (30, 60, 120, 240)
START_TIMEOUT = 120.0  # seconds for `tickwork local` to answer /health
STOP_TIMEOUT = 30.0  # seconds after SIGTERM before SIGKILL
BARRIER_TIMEOUT = 30.0  # seconds for a burst's threads to all be ready
PAUSE = 1.0  # seconds between bursts
WARMUP = 5  # sequential requests of each kind before the first burst


@dataclass
class Outcome:
    seconds: float  # connect to last byte of the answer (or to the error)
    connect_seconds: float | None  # None: never connected
    status: int | None  # None: no HTTP answer
    error: str | None = None  # the exception's class name


@dataclass
class Burst:
    kind: str
    size: int
    outcomes: list[Outcome] = field(default_factory=list)
    wall: float = 0.0
    unfinished: int = 0  # threads still running when the burst's deadline passed

    @property
    def ok(self) -> int:
        return sum(1 for o in self.outcomes if o.status is not None and 200 <= o.status < 300)

    @property
    def non_2xx(self) -> int:
        return sum(1 for o in self.outcomes if o.status is not None and not 200 <= o.status < 300)

    @property
    def errors(self) -> Counter[str]:
        return Counter(o.error for o in self.outcomes if o.error is not None)

    @property
    def failed(self) -> bool:
        return bool(self.non_2xx or self.errors or self.unfinished)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def job_body(n: int) -> bytes:
    """A valid create (the shape of tests/api/conftest.py's job_body) that never fires during the run."""
    return json.dumps(
        {
            "name": f"bench-local-api {n}",
            "schedule": {"expression": "0 0 1 1 *", "start_at": "2099-01-01T00:00:00Z"},
            "target": {"kind": "http", "config": {"url": "https://hooks.example.com/x"}},
        }
    ).encode("utf-8")


def one_request(port: int, kind: str, n: int, timeout: float) -> Outcome:
    """One request on its own new connection, closed afterwards."""
    headers = {"Authorization": f"Bearer {TOKEN}", "Connection": "close"}
    body: bytes | None = None
    if kind == "POST":
        body = job_body(n)
        headers["Content-Type"] = "application/json"
    path = "/jobs" if kind == "POST" else "/jobs?limit=20"
    started = time.perf_counter()
    connected: float | None = None
    connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        connection.connect()
        connected = time.perf_counter() - started
        connection.request(kind, path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return Outcome(time.perf_counter() - started, connected, response.status)
    except (OSError, http.client.HTTPException) as error:  # resets, refusals, timeouts, bad answers
        return Outcome(time.perf_counter() - started, connected, None, type(error).__name__)
    finally:
        connection.close()


def burst(port: int, kind: str, size: int, timeout: float, first: int) -> Burst:
    """`size` threads, released together, one request each; bounded by the per-request timeout."""
    result = Burst(kind, size)
    lock = threading.Lock()
    barrier = threading.Barrier(size + 1, timeout=BARRIER_TIMEOUT)

    def worker(n: int) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()
        outcome = one_request(port, kind, n, timeout)
        with lock:
            result.outcomes.append(outcome)

    threads = [
        threading.Thread(target=worker, args=(first + i,), daemon=True, name=f"{kind}-{i}")
        for i in range(size)
    ]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()
    started = time.perf_counter()
    # Each request ends within about two timeouts (connect, then the answer): wait that long, no longer.
    deadline = time.monotonic() + 2 * timeout + 5
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    result.wall = time.perf_counter() - started
    with lock:
        result.unfinished = size - len(result.outcomes)
    return result


def fmt_ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1000:.0f}"  # NaN: no samples


def report(result: Burst) -> str:
    latencies = [o.seconds for o in result.outcomes if o.status is not None]
    connects = [o.connect_seconds for o in result.outcomes if o.connect_seconds is not None]
    errors = ", ".join(f"{name} {count}" for name, count in sorted(result.errors.items())) or "0"
    if result.unfinished:
        errors += f", unfinished {result.unfinished}"
    rate = len(latencies) / result.wall if result.wall else float("nan")
    slowest = max(latencies, default=float("nan"))
    slowest_connect = max(connects, default=float("nan"))
    return (
        f"  {result.kind + ' /jobs':10} {result.size:5d} {result.ok:5d} {result.non_2xx:8d}"
        f" {fmt_ms(percentile(latencies, 0.5)):>8} {fmt_ms(percentile(latencies, 0.99)):>8}"
        f" {fmt_ms(slowest):>8} {fmt_ms(slowest_connect):>11}"
        f" {result.wall:7.2f} {rate:6.0f}  {errors}"
    )


class LocalApi:
    """`tickwork local --roles api` as a subprocess in its own process group; `stop()` always ends it."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.port = free_port()
        self.log = state_dir / "cli.out"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [
            sys.executable,
            "-m",
            "tickwork.cli",
            "local",
            "--roles",
            "api",
            "--port",
            str(self.port),
            "--state-dir",
            str(self.state_dir / "state"),
            "--status-interval",
            "3600",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TICKWORK_"))}
        with self.log.open("wb") as out:
            # Its own session: a Ctrl-C in this terminal reaches only this script, whose finally stops it.
            self.process = subprocess.Popen(
                args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tickwork local exited with {self.process.returncode}:\n{self.tail()}")
            if self.healthy():
                return
            time.sleep(0.3)
        raise RuntimeError(f"tickwork local did not answer /health in {START_TIMEOUT:.0f} s:\n{self.tail()}")

    def healthy(self) -> bool:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=2)
        try:
            connection.request("GET", "/health")
            return connection.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def stop(self) -> None:
        """SIGTERM (it stops its role processes and the emulator), then SIGKILL to its group after a
        timeout. Its children also get SIGTERM from the kernel when it dies (see lifeline.py)."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            print(
                f"tickwork local (pid {process.pid}) still running {STOP_TIMEOUT:.0f} s after SIGTERM:"
                " SIGKILL"
            )
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the group it leads (start_new_session)
            process.wait(timeout=STOP_TIMEOUT)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def backlog_note() -> str:
    """The kernel caps a listen backlog at net.core.somaxconn."""
    try:
        somaxconn = Path("/proc/sys/net/core/somaxconn").read_text().strip()
    except OSError:
        return "request_queue_size 256 (net.core.somaxconn unknown)"
    return f"request_queue_size 256, net.core.somaxconn {somaxconn}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=list(SIZES), help="parallel requests per burst")
    parser.add_argument("--timeout", type=float, default=30.0, help="socket timeout per request, seconds")
    args = parser.parse_args()
    if any(size < 1 or size > 1000 for size in args.sizes):
        parser.error("burst sizes must be between 1 and 1000")
    # SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, through the finally that stops `tickwork local`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"machine: {machine()}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if others := other_benchmarks():
        print(f"note: other benchmarks running: {others}")
    results: list[Burst] = []
    with tempfile.TemporaryDirectory(prefix="bench-local-api-", ignore_cleanup_errors=True) as tmp:
        api = LocalApi(Path(tmp))
        try:
            started = time.perf_counter()
            api.start()
            print(
                f"tickwork local --roles api on {HOST}:{api.port}:"
                f" up in {time.perf_counter() - started:.1f} s"
            )
            print(f"server: threading WSGI server, a thread per connection, {backlog_note()}")
            for n in range(WARMUP):  # the first requests build the handler's state; not measured
                for kind in ("POST", "GET"):
                    one_request(api.port, kind, -1 - n, args.timeout)
            created = 0
            for size in args.sizes:
                for kind in ("POST", "GET"):
                    time.sleep(PAUSE)
                    results.append(burst(api.port, kind, size, args.timeout, created))
                    created += size if kind == "POST" else 0
        finally:
            stopping = time.perf_counter()
            api.stop()
            if api.process is not None:
                print(f"tickwork local stopped in {time.perf_counter() - stopping:.1f} s")
    print("\nparallel requests, a new connection each (latency: connect to last byte, ms)")
    print(
        f"  {'request':10} {'n':>5} {'2xx':>5} {'non-2xx':>8} {'p50':>8} {'p99':>8} {'max':>8}"
        f" {'max connect':>11} {'wall s':>7} {'req/s':>6}  connection errors"
    )
    for result in results:
        print(report(result))
    return 1 if any(result.failed for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
