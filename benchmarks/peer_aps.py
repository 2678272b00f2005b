"""APScheduler's row in bench_peers.py: APScheduler 3 in a process of its own (BackgroundScheduler,
SQLAlchemyJobStore on a SQLite file, ThreadPoolExecutor), N jobs on a cron trigger for one second, each
calling the loopback target once.

Settings, and why:
- ThreadPoolExecutor(max_workers=PeerSettings.concurrency): Tickwork's cap on runs executing at once.
- SQLAlchemyJobStore on a SQLite file: durable storage, as Tickwork's SQLite file (SQLite's defaults there:
  a rollback journal, synchronous=FULL).
- misfire_grace_time 300 s: a fire that starts late because the pool is busy still runs (the default, 1 s,
  would skip most of a burst: Tickwork never skips a late fire), coalesce off, max_instances 1.
- The call's timeout is PeerSettings.timeout_s. APScheduler has no retries: a failed call is not tried
  again (a quirk stated in the table's notes; the target here never fails).

    python benchmarks/peer_aps.py 1000
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _e2e import Target, fixed_second, sleep_until, wait_for
from _peers import PeerResult, PeerSettings, ProcessMeter, Services, arrivals_for, measure_idle, report

LABEL = "APScheduler 3 + SQLite"
GRACE_SECONDS = 300


class Burst:
    """An APScheduler 3 that counts its fires (executed, error, missed) and can add the burst's N jobs."""

    def __init__(self, n: int, pool: int, grace: int | None, db: Path) -> None:
        from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED, JobEvent
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
        from apscheduler.schedulers.background import BackgroundScheduler

        self.n = n
        self.counts = {"executed": 0, "error": 0, "missed": 0}
        self.lock = threading.Lock()
        self.on_done: list[Any] = []  # called once, under the lock, when the n-th fire is counted
        kinds = {EVENT_JOB_EXECUTED: "executed", EVENT_JOB_ERROR: "error", EVENT_JOB_MISSED: "missed"}

        def listener(event: JobEvent) -> None:
            with self.lock:
                self.counts[kinds[event.code]] += 1
                if sum(self.counts.values()) == self.n:
                    for done in self.on_done:
                        done()

        self.scheduler = BackgroundScheduler(
            jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{db}")},
            executors={"default": ThreadPoolExecutor(max_workers=pool)},
            job_defaults={"misfire_grace_time": grace, "coalesce": False, "max_instances": 1},
            timezone="UTC",
        )
        self.scheduler.add_listener(listener, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)
        self.scheduler.start()

    def add(self, url: str, due: float) -> float:
        """The N jobs on a cron trigger for the due second, each calling `url`/aps once; seconds taken."""
        from apscheduler.triggers.cron import CronTrigger

        second, minute, hour = fixed_second_fields(due)
        started = time.perf_counter()
        for i in range(self.n):
            self.scheduler.add_job(
                "_e2e:call_target",
                CronTrigger(second=second, minute=minute, hour=hour, timezone="UTC"),
                args=[f"{url}/aps", f"aps-{i}"],
                id=f"aps-{i}",
            )
        return time.perf_counter() - started

    def not_on(self, due: float) -> int:
        """Jobs whose next fire is not the due second (added after it: they fire a day later)."""
        return sum(1 for job in self.scheduler.get_jobs() if job.next_run_time.timestamp() != due)


def worker(n: int, url: str, pool: int, due: float, db: Path, status: Path) -> None:
    """Runs in its own process: adds N jobs for the due second, then runs them, writing its counts to
    `status` (a JSON file, replaced) once added and when the last fire is counted; stays up until stopped."""
    burst = Burst(n, pool, GRACE_SECONDS, db)
    state: dict[str, float] = {}

    def write() -> None:
        temporary = status.with_suffix(".tmp")
        temporary.write_text(json.dumps({**state, **burst.counts}))
        os.replace(temporary, status)

    def done() -> None:
        state["done_at"] = time.time()
        write()

    burst.on_done.append(done)
    seed_seconds = burst.add(url, due)
    with burst.lock:
        state["seed_seconds"] = seed_seconds
        state["not_on_due"] = burst.not_on(due)
        write()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    burst.scheduler.shutdown(wait=False)


def fixed_second_fields(due: float) -> tuple[str, str, str]:
    stamp = time.gmtime(due)
    return str(stamp.tm_sec), str(stamp.tm_min), str(stamp.tm_hour)


def run_aps(n: int, target: Target, settings: PeerSettings, workdir: Path, services: Services) -> PeerResult:
    directory = workdir / f"aps-{n}"
    directory.mkdir(parents=True, exist_ok=True)
    due_at, _ = fixed_second(time.time() + 20 + n * 0.015)
    due = due_at.timestamp()
    status = directory / "status.json"
    result = PeerResult(LABEL, n, due)
    process = services.start(
        "apscheduler",
        [
            sys.executable,
            __file__,
            "--worker",
            str(n),
            "--url",
            target.url,
            "--pool",
            str(settings.concurrency),
            "--due",
            str(due),
            "--db",
            str(directory / "jobs.sqlite"),
            "--status",
            str(status),
        ],
        log=directory / "apscheduler.log",
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent)},
    )
    meter = ProcessMeter({"scheduler": process.pid}).start()
    try:
        if not wait_for(lambda: status.exists(), timeout=due - 1 - time.time(), every=0.2):
            raise RuntimeError(f"APScheduler had not added its {n} jobs a second before they were due")
        seeded = json.loads(status.read_text())
        result.seed_seconds = float(seeded.get("seed_seconds", float("nan")))
        if seeded.get("not_on_due"):
            result.notes.append(f"{seeded['not_on_due']} jobs were added after their second: next day")
        sleep_until(due - 1)
        wait_for(
            lambda: "done_at" in json.loads(status.read_text()), timeout=settings.drain_timeout, every=0.2
        )
        final = json.loads(status.read_text())
        done_at = float(final.get("done_at", time.time()))
        time.sleep(meter.every * 2)
        result.fires_done = int(final["executed"])
        result.burst_cpu_s = meter.cpu_between(due - 1, done_at)
        result.burst_seconds = done_at - (due - 1)
        keys = {f"aps-{i}" for i in range(n)}
        arrivals_for(target, keys, due, result)
        if final["missed"] or final["error"]:
            result.notes.append(f"APScheduler: {final['missed']} misfired, {final['error']} failed")
        measure_idle(meter, settings, result)
        result.peak_rss_mb = meter.peak_rss_mb()
        result.notes.append(
            f"APScheduler {_version()}: ThreadPoolExecutor({settings.concurrency}), SQLAlchemyJobStore on "
            f"SQLite, misfire_grace_time {GRACE_SECONDS} s, no retries (it has none)"
        )
    finally:
        meter.stop()
        services.stop("apscheduler")
    return result


def _version() -> str:
    from importlib.metadata import version

    return version("apscheduler")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("n", type=int, nargs="?", default=1000)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--pool", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--due", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--status", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.url, args.pool, args.due, args.db, args.status)
        return
    services = Services()
    services.cleanup_on_exit()
    target = Target().start()
    try:
        with tempfile.TemporaryDirectory(prefix="tickwork-peer-") as tmp:
            result = run_aps(args.n, target, PeerSettings(), Path(tmp), services)
    finally:
        target.stop()
    report(result)


if __name__ == "__main__":
    main()
