"""The floor (issue 34, part 3): what one run must cost on this machine, and the burst's CPU per fire as a
multiple of it, measured in one invocation.

The floor is the executor's own path for one run and nothing else: its claim, one HTTP call to a loopback
target, its finish, on the SQLite engine, one run after another in a tight loop. It runs the composition
root's real `Executor` (its store, its concurrency slots, its HTTP invoker) over the store of a `tickwork
local` started with the API role only (no ticker, executor, sweeper or watcher to share the work), on runs
restored as planned (no planning, no queue), each due a moment ago. Its writes are as durable as the
executor processes' (synchronous=NORMAL, local/runtime.py), not the API's FULL, whose fsync per commit the
burst's executors never pay. The target is a process of its own, so the CPU counted is this process's
alone: the claim, the call's client side, the finish.

Then the burst, as `bench_burst.py` measures it: N jobs due in the same second through a whole `tickwork
local` (ticker, queue, executors), its CPU per fire over every Tickwork process from one second before the
due second until the last run is done. The ratio says how far the burst is from what a run must cost.

    python benchmarks/bench_floor.py                  # floor over 2,000 runs, burst of 1,000
    python benchmarks/bench_floor.py --runs 5000 --burst 0   # the floor alone
    python benchmarks/bench_floor.py --runs 1000 --burst 0 --cprofile   # where its time goes
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _e2e import LocalSettings, LocalTickwork, Target, exit_cleanly_on_sigterm, free_port, machine
from bench_burst import run_tickwork_burst
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Run, RunState, Trigger
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.targets import validate_target

# A loopback target in a process of its own: 204 to every POST, nothing else.
TARGET = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""
WARMUP = 50
CHUNK = 25  # runs restored per store call


def wait_listening(port: int, timeout: float = 10.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"the target did not listen on {port}")


def floor(
    runs: int,
    workdir: Path,
    profile: cProfile.Profile | None = None,
    on_loop: Callable[[], None] | None = None,
) -> tuple[float, float, list[float]]:
    """(CPU ms per run, wall ms per run, each run's wall ms) over `runs` runs after a warm-up; `profile`, if
    given, profiles the timed loop (then slower: its figures say where the time goes, not the floor);
    `on_loop`, if given, is called right before the timed loop (after the seeding and the warm-up)."""
    port = free_port()
    target = subprocess.Popen([sys.executable, "-c", TARGET, str(port)])
    try:
        wait_listening(port)
        settings = LocalSettings(shards=4, queues=1, cap=500, tick_interval=600.0, sweep_interval=600.0)
        with LocalTickwork(workdir / "floor", settings, roles="api") as local:
            parts = local.components(role="executor")  # the executor's durability, as in the burst
            http = validate_target("http", {"url": f"http://127.0.0.1:{port}/floor", "method": "POST"})
            spec = JobSpec(name="floor", schedule=parse_schedule("0 3 * * *"), target=http)
            job = parts.job_service().create("floor-owner", spec)
            due = datetime.now(UTC) - timedelta(seconds=5)
            planned = [
                Run.for_fire(job, due + timedelta(milliseconds=i + 1), now=due, trigger=Trigger.MANUAL,
                             state=RunState.PLANNED)
                for i in range(runs + WARMUP)
            ]  # fmt: skip
            for start in range(0, len(planned), CHUNK):
                parts.store.restore_runs(planned[start : start + CHUNK])
            executor = parts.executor("floor")
            for run in planned[:WARMUP]:
                executor.execute(RunMessage.for_run(run))
            each: list[float] = []
            if on_loop is not None:
                on_loop()
            cpu, wall = time.process_time(), time.monotonic()
            if profile is not None:
                profile.enable()
            for run in planned[WARMUP:]:
                started = time.monotonic()
                executor.execute(RunMessage.for_run(run))
                each.append((time.monotonic() - started) * 1000)
            if profile is not None:
                profile.disable()
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            done = [parts.store.get_run(job.job_id, run.scheduled_for) for run in planned[WARMUP:]]
            succeeded = sum(1 for run in done if run is not None and run.state is RunState.SUCCEEDED)
            if succeeded != runs:
                raise RuntimeError(f"{runs - succeeded} of the floor's runs did not succeed")
    finally:
        target.terminate()
        target.wait(timeout=10)
    return cpu / runs * 1000, wall / runs * 1000, each


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2000, help="runs in the floor's loop")
    parser.add_argument("--burst", type=int, default=1000, help="jobs due in the same second (0: no burst)")
    parser.add_argument(
        "--cprofile", action="store_true", help="where the floor's time goes (cProfile of the loop, slower)"
    )
    args = parser.parse_args()
    exit_cleanly_on_sigterm()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="tickwork-floor-") as tmp:
        profile = cProfile.Profile() if args.cprofile else None
        cpu_ms, wall_ms, each = floor(args.runs, Path(tmp), profile)
        if profile is not None:
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        p50, p99 = statistics.median(each), sorted(each)[int(0.99 * (len(each) - 1))]
        print(
            f"  floor ({args.runs:,} runs: claim, HTTP call, finish; SQLite): {cpu_ms:.2f} ms CPU per run "
            f"(this process), {wall_ms:.2f} ms wall per run (p50 {p50:.2f} ms, p99 {p99:.2f} ms)"
        )
        if args.burst:
            target = Target().start()
            try:
                result = run_tickwork_burst(args.burst, target, LocalSettings(), Path(tmp))
            finally:
                target.stop()
            burst = result.cpu_per_fire_ms()
            print(
                f"  burst of {args.burst:,} (bench_burst.py's method): {burst:.2f} ms CPU per fire, every "
                f"Tickwork process; {burst / cpu_ms:.1f}x the floor"
            )


if __name__ == "__main__":
    main()
