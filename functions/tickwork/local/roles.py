"""The local runtime's role processes: `python -m tickwork.local.roles <ticker|executor|sweeper|api>`.
Each is its own OS process, so any one can be killed and restarted without the others noticing."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from pathlib import Path
from types import FrameType

from tickwork.adapters.targets.aws import DEFAULT_POOL_CONNECTIONS, boto3_client_factory
from tickwork.composition import Components
from tickwork.domain.alerts import SeenChange
from tickwork.domain.clock import SystemClock
from tickwork.domain.errors import ConflictError, TickworkError, TransientStoreError
from tickwork.domain.slots import ALL, Pool
from tickwork.local.executor_pool import ExecutorPool
from tickwork.local.lifeline import (
    WATCHDOG_BACKSTOP_SECONDS,
    WATCHDOG_INTERVAL_SECONDS,
    set_parent_death_signal,
    watch_parent,
)
from tickwork.local.runtime import executor_index
from tickwork.local.status import SnapshotMetrics
from tickwork.services.ports import RunChangeFeed, WatchQuiet
from tickwork.services.watching import Watcher
from tickwork.settings import Settings, SettingsError

logger = logging.getLogger("tickwork.local")

ROLES = ("ticker", "executor", "sweeper", "watcher", "api")


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


def _process_name(role: str) -> str:
    """This process's name in the runtime (`executor-2` for the second executor), the role's by default."""
    return os.environ.get("TICKWORK_PROCESS_NAME") or role


def _share(cap: int) -> int:
    """This executor process's share of the cap (the whole cap when started alone, or by hand)."""
    processes = int(os.environ.get("TICKWORK_EXECUTOR_PROCESSES") or 1)
    return executor_share(cap, processes, executor_index(_process_name("executor")))


def _snapshots(metrics: SnapshotMetrics, stop: threading.Event) -> None:
    """Write the metrics' snapshot when they change, at most once a second; the last one on stop."""
    while not stop.is_set():
        metrics.wait_for_change()
        if stop.is_set():
            break
        metrics.write_if_due()
        stop.wait(SNAPSHOT_SECONDS)
    metrics.write()


SNAPSHOT_SECONDS = 1.0  # a busy role's snapshot is this fresh


def _gauge_write_lock(metrics: SnapshotMetrics, commits: int, held_seconds: float) -> None:
    """The process's SQLite write lock after a commit, in its snapshot: on SQLite every process's writes take
    that one lock in turn, and a burst can be bound by it (benchmarks/peer_tickwork.py adds them up)."""
    metrics.gauge("WriteTransactions", commits)
    metrics.gauge("WriteLockHeldSeconds", round(held_seconds, 6))


def run_ticker(parts: Components, stop: threading.Event) -> None:
    planner = parts.planner()
    interval = _float_env("TICKWORK_TICK_INTERVAL", 60.0)

    shards = list(range(parts.settings.shard_count))

    def tick() -> None:
        now = parts.clock.now()
        # Shards are planned isolated, as the Lambda ticker does; side by side on the emulator, in turn on
        # the SQLite file, which has one writer (PlannerConfig.shard_threads).
        for name, value in planner.plan_shards(shards, now).counts().items():
            parts.metrics.count(name, value)
        logger.info(
            "tick at %s planned through %s", now.isoformat(), (now + parts.settings.lookahead).isoformat()
        )

    tick()  # catch up at once on start (after a restart the watermark says what is missing)
    _every(interval, stop, tick)


def run_sweeper(parts: Components, stop: threading.Event) -> None:
    sweeper = parts.sweeper()
    interval = _float_env("TICKWORK_SWEEP_INTERVAL", 60.0)
    budget = timedelta(seconds=max(1.0, 0.8 * interval))  # done before the next sweep is due

    auditor = parts.auditor()

    def sweep() -> None:
        started = parts.clock.now()
        logger.info("sweep: %s", sweeper.sweep(budget=budget))
        # One segment of the jobs, in what is left of the budget (services/auditing.py).
        left = budget - (parts.clock.now() - started)
        audit = auditor.audit(parts.clock.now(), budget=max(left, timedelta(seconds=1)))
        if audit.repairs or audit.failures or audit.cut_short:
            logger.warning("audit: %s", audit)
        expired = parts.expire_runs()  # the SQLite engine's run TTL (DynamoDB's TTL needs no help)
        if expired:
            logger.info("deleted %d runs past their retention", expired)

    _every(interval, stop, sweep)


def run_watcher(parts: Components, stop: threading.Event) -> None:
    """The runs' changes as they come (every WATCH_INTERVAL), then what the outbox owes: as the watcher
    Lambda does with its stream batches and its minutely schedule. A round that fails is tried again,
    less often each time; after WATCH_TRIES failed rounds its changes are taken one by one, and one that
    still fails is logged, counted (WatcherChangesDropped) and passed over, so it cannot stall the rest."""
    watcher = parts.watcher()
    bulk = parts.bulk_service()
    feed = parts.run_change_feed()
    quiet = parts.watch_quiet()  # an idle round costs a look, not its reads (services/ports.WatchQuiet)
    interval = _float_env("TICKWORK_WATCH_INTERVAL", 0.5)
    if quiet is not None:
        # A stop ends a rest at once; this thread sleeps until then.
        threading.Thread(target=_wake_on_stop, args=(quiet, stop), daemon=True).start()
    failed_rounds = 0
    while not stop.is_set():
        changes: Sequence[tuple[int, SeenChange]] = []
        worked = 0
        try:
            now = parts.clock.now()
            if quiet is not None and quiet.quiet(now):
                quiet.rest(now, interval)
                continue
            mark = None if quiet is None else quiet.round_begins()
            changes = feed.take_changes(1000)
            if changes and failed_rounds >= WATCH_TRIES:
                _watch_one_by_one(parts, watcher, feed, changes)
            elif changes:
                report = watcher.observe([change for _, change in changes])
                feed.forget_changes(changes[-1][0])
                if report.events:
                    logger.info("watch: %s", report)
            delivered = watcher.deliver()
            if delivered.sent or delivered.failed_sends or delivered.events:
                logger.info("outbox: %s", delivered)
            worked = bulk.work_due(f"local-watcher-{os.getpid()}", BULK_ROUND_SECONDS)
            if worked:
                logger.info("bulk actions: %d jobs or runs done", worked)
            if quiet is not None:
                quiet.round_ended(mark)
            failed_rounds = 0
        except TickworkError as error:  # a busy store or an unreachable emulator: tried again, later
            failed_rounds += 1
            logger.warning("watch round %d failed: %s", failed_rounds, error)
            stop.wait(min(30.0, interval * 2**failed_rounds))
            continue
        if not changes and not worked:
            stop.wait(interval)


WATCH_TRIES = 3


def _wake_on_stop(quiet: WatchQuiet, stop: threading.Event) -> None:
    stop.wait()
    quiet.wake()


# A watcher round works on due bulk actions this long at most (the runs' changes wait meanwhile).
BULK_ROUND_SECONDS = 2.0


def _watch_one_by_one(
    parts: Components, watcher: Watcher, feed: RunChangeFeed, changes: Sequence[tuple[int, SeenChange]]
) -> None:
    for position, change in changes:
        try:
            watcher.observe([change])
        except (TransientStoreError, ConflictError):
            raise  # not this change's fault: the round is tried again, nothing is passed over
        except TickworkError as error:
            # Named without its record: a record that cannot be decoded is what may have failed.
            logger.error(
                "change %d (a run of job %s, now %s) is passed over, its events untold: %s",
                position,
                change.job_id,
                change.state,
                error,
            )
            parts.metrics.count("WatcherChangesDropped")
    feed.forget_changes(changes[-1][0])


def executor_share(cap: int, processes: int, index: int) -> int:
    """The calls the `index`th (from 0) of `processes` executor processes makes at once: its share of the
    cap, the shares adding up to it (the runtime starts no more processes than the cap). The cap's slots (the
    bound in the store) hold the total to the cap whichever process takes them, callback runs included."""
    processes = max(1, processes)
    return max(1, cap // processes + (1 if index < cap % processes else 0))


def run_executor(parts: Components, stop: threading.Event) -> None:
    # The SQLite engine's receivers sleep until a send rings its doorbell (adapters/sqlite/doorbell.py): they
    # long-poll as SQS allows, and the pool's stop interrupts them. The emulator's SQS is asked each second.
    sqlite = parts.settings.engine == "sqlite"
    pool = ExecutorPool(
        parts.queues,
        parts.settings.dispatch_queue_urls,
        lambda: parts.executor(worker_id=f"local-{os.getpid()}"),
        cap=_share(parts.settings.concurrency_cap),
        poll_wait_seconds=SQLITE_RECEIVE_WAIT_SECONDS if sqlite else 1,
        stop_waiting=parts.queues.stop_waiting if sqlite else None,
    )
    metrics = parts.metrics
    # The bound counts every process's runs: one process reports it, or the status would add it up twice.
    reports_bound = _process_name("executor") == "executor"

    bound = Pool(ALL, parts.settings.concurrency_cap)

    def report_in_flight() -> None:
        # The runs in flight as the bound counts them (live slot holds: callback runs included, which hold
        # no executor thread), and the calls this process is making.
        peak, in_flight = 0, 0
        # Every second while anything is in flight; an idle process looks every IDLE_REPORT_SECONDS (a look
        # wakes it), so a burst shows in the status line up to that late.
        while not stop.wait(1.0 if in_flight or pool.stats.in_flight else IDLE_REPORT_SECONDS):
            if isinstance(metrics, SnapshotMetrics):
                if reports_bound:
                    in_flight = parts.slots.in_flight(bound, parts.clock.now())
                    peak = max(peak, in_flight)
                    metrics.gauge("RunsInFlight", in_flight)
                    metrics.gauge("PeakRunsInFlight", peak)
                metrics.gauge("CallsInFlight", pool.stats.in_flight)

    threading.Thread(target=report_in_flight, daemon=True).start()
    pool.run(stop)


IDLE_REPORT_SECONDS = 5.0
SQLITE_RECEIVE_WAIT_SECONDS = 20  # SQS's longest long poll


def run_api(parts: Components, stop: threading.Event) -> None:
    from tickwork.local.api_server import serve

    serve(parts, stop)


# An orphaned role (its supervisor died) stops as it would on SIGTERM, but nobody will SIGKILL it if a run
# hangs: it exits on its own after this long.
ORPHAN_EXIT_SECONDS = 3.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _stop_signal_noted(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler of the stop signals, which does nothing: see `_Lifetime`."""


class _Lifetime:
    """When a role stops: on SIGTERM/SIGINT/SIGHUP, and when its supervisor dies, however it died (the
    parent-death signal, then a parent-pid watchdog, see lifeline.py).

    No stop signal is acted on in its handler. A Python signal handler runs in the main thread between two
    bytecodes of whatever it interrupted, so it must not take a lock that code may hold: `Event.set()`
    there deadlocked the role until the supervisor's SIGKILL 15 s later, when a signal landed while the
    main thread held the Event's lock, in `stop.wait()` or in the previous signal's `set()` (a stopping
    role gets SIGTERM twice, from its process group and from the supervisor). Ignoring the signals after
    the first would not cover the first one landing in `stop.wait()`. So the C-level handler writes the
    signal's number to a pipe (`signal.set_wakeup_fd`: no lock, no Python code), the Python-level handler
    does nothing, and a thread of its own reads the pipe and calls `request_stop()`."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        # The supervisor passes its pid; a role started by hand is tied to whoever started it.
        self.parent = int(os.environ.get("TICKWORK_PARENT_PID") or os.getppid())
        self._orphaned = False
        self._lock = threading.Lock()  # the signal thread and the parent watchdog may both call request_stop

    def tie_to_parent(self) -> None:
        """Arm the stop signals and the parent watch. From the main thread (signal handlers are set there)."""
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)  # a full pipe drops the byte: a stop is pending anyway
        threading.Thread(
            target=self._stop_on_signals, args=(read_end,), name="tickwork-stop-signals", daemon=True
        ).start()
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        for signum in STOP_SIGNALS:
            signal.signal(signum, _stop_signal_noted)
        armed = set_parent_death_signal(signal.SIGTERM)
        watch_parent(
            self.parent,
            self.request_stop,
            interval=WATCHDOG_BACKSTOP_SECONDS if armed else WATCHDOG_INTERVAL_SECONDS,
        )
        if os.getppid() != self.parent:  # it died before the signal was armed
            self.request_stop()

    def _stop_on_signals(self, read_end: int) -> None:
        """Call request_stop for each stop signal the C-level handler wrote to the pipe."""
        while received := os.read(read_end, 64):
            if any(signum in STOP_SIGNALS for signum in received):
                self.request_stop()

    def request_stop(self) -> None:
        """Stop the role; once its supervisor is gone, exit ORPHAN_EXIT_SECONDS later at the latest. Safe
        from several threads at once; never from a signal handler (it takes locks, see the class)."""
        self.stop.set()
        with self._lock:
            if self._orphaned or os.getppid() == self.parent:
                return
            self._orphaned = True
        logger.warning(
            "supervisor %d is gone: stopping (exit in %.0f s at most)", self.parent, ORPHAN_EXIT_SECONDS
        )
        timer = threading.Timer(ORPHAN_EXIT_SECONDS, os._exit, args=(1,))
        timer.daemon = True
        timer.start()


RUNNERS: dict[str, Callable[[Components, threading.Event], None]] = {
    "ticker": run_ticker,
    "executor": run_executor,
    "sweeper": run_sweeper,
    "watcher": run_watcher,
    "api": run_api,
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in RUNNERS:
        print(f"usage: python -m tickwork.local.roles <{'|'.join(ROLES)}>", file=sys.stderr)  # noqa: T201
        return 2
    role = argv[0]
    stop = threading.Event()
    _Lifetime(stop).tie_to_parent()  # first: an orphan must not start working
    logging.basicConfig(
        level=os.environ.get("TICKWORK_LOG_LEVEL", "INFO"), format=f"%(asctime)s {role:>8} %(message)s"
    )
    run_dir = Path(os.environ.get("TICKWORK_LOCAL_RUN_DIR", ".tickwork/run"))
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = Settings.from_env(os.environ)
    metrics = SnapshotMetrics(run_dir / f"metrics-{_process_name(role)}.json")
    # Unsigned requests only against the emulator this runtime started itself (it checks no signatures).
    unsigned = os.environ.get("TICKWORK_LOCAL_UNSIGNED") == "1"
    # The executor calls from up to `cap` threads at once: a smaller pool would drop and reopen connections.
    pool = max(DEFAULT_POOL_CONNECTIONS, _share(settings.concurrency_cap) if role == "executor" else 0)
    clients = boto3_client_factory(region_name=settings.region, unsigned=unsigned, max_pool_connections=pool)
    parts = Components(settings, SystemClock(), clients, metrics)
    parts.on_write_commit = partial(_gauge_write_lock, metrics)
    writer = threading.Thread(target=_snapshots, args=(metrics, stop), daemon=True)
    writer.start()
    RUNNERS[role](parts, stop)
    stop.set()
    metrics.wake()
    writer.join(timeout=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
