"""The local runtime's role processes: `python -m tickwork.local.roles <ticker|executor|sweeper|api>`.
Each is its own OS process, so any one can be killed and restarted without the others noticing."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tickwork.adapters.targets.aws import boto3_client_factory
from tickwork.composition import Components
from tickwork.domain.clock import SystemClock
from tickwork.local.executor_pool import ExecutorPool
from tickwork.local.status import SnapshotMetrics
from tickwork.settings import Settings, SettingsError

logger = logging.getLogger("tickwork.local")

ROLES = ("ticker", "executor", "sweeper", "api")


def _float_env(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError as error:
        raise SettingsError(f"{name}={raw!r} is not a number") from error


def _every(interval: float, stop: threading.Event, work: Callable[[], None]) -> None:
    """Run `work` at each multiple of `interval` on the wall clock (a 60 s ticker ticks on the minute)."""
    while not stop.is_set():
        now = time.time()
        next_boundary = (now // interval + 1) * interval
        if stop.wait(next_boundary - now):
            return
        work()


def _snapshots(metrics: SnapshotMetrics, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        metrics.write()
    metrics.write()


def run_ticker(parts: Components, stop: threading.Event) -> None:
    planner = parts.planner()
    interval = _float_env("TICKWORK_TICK_INTERVAL", 60.0)

    shards = list(range(parts.settings.shard_count))

    def tick() -> None:
        now = parts.clock.now()
        # Shards are planned in parallel and isolated, as the Lambda ticker does.
        for name, value in planner.plan_shards(shards, now, max_threads=8).counts().items():
            parts.metrics.count(name, value)
        logger.info(
            "tick at %s planned through %s", now.isoformat(), (now + parts.settings.lookahead).isoformat()
        )

    tick()  # catch up at once on start (after a restart the watermark says what is missing)
    _every(interval, stop, tick)


def run_sweeper(parts: Components, stop: threading.Event) -> None:
    sweeper = parts.sweeper()
    _every(
        _float_env("TICKWORK_SWEEP_INTERVAL", 60.0), stop, lambda: logger.info("sweep: %s", sweeper.sweep())
    )


def run_executor(parts: Components, stop: threading.Event) -> None:
    pool = ExecutorPool(
        parts.client_for("sqs"),
        parts.settings.dispatch_queue_urls,
        lambda: parts.executor(worker_id=f"local-{os.getpid()}"),
        cap=parts.settings.concurrency_cap,
    )
    metrics = parts.metrics

    def report_in_flight() -> None:
        while not stop.wait(0.5):
            if isinstance(metrics, SnapshotMetrics):
                metrics.gauge("RunsInFlight", pool.stats.in_flight)
                metrics.gauge("PeakRunsInFlight", pool.stats.peak_in_flight)

    threading.Thread(target=report_in_flight, daemon=True).start()
    pool.run(stop)


def run_api(parts: Components, stop: threading.Event) -> None:
    from tickwork.local.api_server import serve

    serve(parts, stop)


RUNNERS: dict[str, Callable[[Components, threading.Event], None]] = {
    "ticker": run_ticker,
    "executor": run_executor,
    "sweeper": run_sweeper,
    "api": run_api,
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in RUNNERS:
        print(f"usage: python -m tickwork.local.roles <{'|'.join(ROLES)}>", file=sys.stderr)  # noqa: T201
        return 2
    role = argv[0]
    logging.basicConfig(
        level=os.environ.get("TICKWORK_LOG_LEVEL", "INFO"), format=f"%(asctime)s {role:>8} %(message)s"
    )
    run_dir = Path(os.environ.get("TICKWORK_LOCAL_RUN_DIR", ".tickwork/run"))
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = Settings.from_env(os.environ)
    metrics = SnapshotMetrics(run_dir / f"metrics-{role}.json")
    # Unsigned requests only against the emulator this runtime started itself (it checks no signatures).
    unsigned = os.environ.get("TICKWORK_LOCAL_UNSIGNED") == "1"
    clients = boto3_client_factory(region_name=settings.region, unsigned=unsigned)
    parts = Components(settings, SystemClock(), clients, metrics)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    writer = threading.Thread(target=_snapshots, args=(metrics, stop), daemon=True)
    writer.start()
    RUNNERS[role](parts, stop)
    stop.set()
    writer.join(timeout=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
