"""The Celery peer of bench_peers.py: Celery beat with the RedBeat scheduler, a Celery worker and Redis
(broker, result backend and RedBeat's schedule), on the same burst as every other peer: N jobs due in the
same second, each run one HTTP POST to the loopback target.

What it measures (a `PeerResult`): start delay (arrival at the target - the due second), runs the result
backend recorded as succeeded, lost and duplicate runs at the target, CPU of redis + beat + worker (each
with its children) from 1 s before the due second to the last run recorded done, per run; CPU per second
over an idle window after the burst (the N jobs still registered, nothing due); peak RSS of each process.

Celery's crontab has no seconds field: the jobs are `crontab(minute=M, hour=H)` and the burst is due at that
minute's second :00, chosen far enough ahead that registering the N jobs (through RedBeat's own entry API,
one by one, while beat runs) is over first.

    .venv/bin/python benchmarks/peer_celery.py 200          # try it alone: N jobs (default 1000)
    .venv/bin/python benchmarks/peer_celery.py 1000 --idle 10

redis-server is Debian's (`/usr/bin/redis-server`), started here on a free loopback port and stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib.metadata import version
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _celery_app import (
    BEAT_MAX_LOOP_INTERVAL_S,
    REDBEAT_LOCK_TIMEOUT_S,
    TASK_NAME,
    environment,
    make_app,
)
from _e2e import Target, free_port, sleep_until, wait_for
from _peers import PeerResult, PeerSettings, ProcessMeter, Services, arrivals_for, measure_idle, report

SCHEDULER = "Celery beat + RedBeat on Redis"
HERE = Path(__file__).resolve().parent
RESULT_PREFIX = "celery-task-meta-"  # the Redis result backend's key (and channel) per task id
# Registering one entry through RedBeat's API (build + save: one pipelined round trip) took ~0.3 ms here;
# the due minute is chosen with 1 ms per job, beat's loop interval and this margin ahead.
SEED_ESTIMATE_PER_JOB_S = 0.001
SEED_MARGIN_S = 5.0


def redis_server() -> str:
    return shutil.which("redis-server") or "/usr/bin/redis-server"


def redis_args(port: int, data_dir: Path) -> list[str]:
    return [
        redis_server(),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",  # loopback only
        "--protected-mode",
        "yes",
        "--dir",
        str(data_dir),
        # Durable as Redis is usually run for a broker and a schedule one cares about: every write appended
        # to the AOF, fsync'd once a second (Redis's recommended trade-off; Tickwork's SQLite engine also
        # commits to disk).
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        # No RDB snapshots besides: without a config file Redis 7 snapshots after 10,000 writes in 60 s (a
        # fork and a full dump in the middle of registering 10,000 jobs), and the AOF is already the
        # durable copy.
        "--save",
        "",
        "--daemonize",
        "no",
        "--logfile",
        "",  # stdout: the service's log
    ]


def worker_args(settings: PeerSettings) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "_celery_app",
        "worker",
        # Threads, not prefork: Tickwork's executor is one process with a thread per run in flight, and the
        # task waits on I/O. A prefork pool of `concurrency` (200) processes would not fit in this machine's
        # memory and is not what anyone runs for I/O-bound tasks.
        "--pool",
        "threads",
        "--concurrency",
        str(settings.concurrency),  # runs executing at once: the same cap every peer gets
        # Celery's default level: no line per task received and succeeded (which would cost the worker CPU
        # that the other peers do not spend on logging).
        "--loglevel",
        "WARNING",
        # One worker and nothing listening to the cluster's event bus (no Flower, no other worker): gossip,
        # mingle (a start-up sync with other workers) and the worker heartbeat events every 2 s would only
        # add traffic to Redis. Turning them off is the common advice for Redis brokers; remote control
        # (`celery inspect`, the ping this script uses to know the worker is up) stays on.
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--hostname",
        "bench@%h",
    ]


def beat_args() -> list[str]:
    # The loop interval and RedBeat's lock timeout are set in _celery_app.py (with their reasons).
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "_celery_app",
        "beat",
        "-S",
        "redbeat.RedBeatScheduler",
        "--loglevel",
        "WARNING",  # Celery's default: no line per task sent
    ]


def versions() -> dict[str, str]:
    out = subprocess.run([redis_server(), "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"v=(\S+)", out)
    return {
        "celery": version("celery"),
        "celery-redbeat": version("celery-redbeat"),
        "redis-server": match.group(1) if match else out.strip(),
        "redis-py": version("redis"),
    }


def due_minute(n: int, now: float) -> float:
    """The first whole minute far enough ahead that registering `n` jobs, then one loop interval of beat's
    (it must have read its schedule since), are over first."""
    ready = now + n * SEED_ESTIMATE_PER_JOB_S + BEAT_MAX_LOOP_INTERVAL_S + SEED_MARGIN_S
    return float(math.ceil(ready / 60) * 60)


@dataclass
class Outcome:
    """The result backend's records of the jobs' runs: per job key, the task ids of its runs by final state
    (with `result_extended` a record carries the task's args, whose second is the job's key)."""

    keys: set[str]
    succeeded: dict[str, set[str]] = field(default_factory=dict)
    failed: dict[str, set[str]] = field(default_factory=dict)
    last_at: float = 0.0  # when the last final record arrived

    def add(self, record: object, at: float) -> None:
        if not isinstance(record, dict):
            return
        args = record.get("args")
        if not isinstance(args, list) or len(args) != 2 or args[1] not in self.keys:
            return
        key, task_id = str(args[1]), str(record.get("task_id"))
        if record.get("status") == "SUCCESS":
            self.succeeded.setdefault(key, set()).add(task_id)
            self.failed.get(key, set()).discard(task_id)
        elif record.get("status") == "FAILURE":
            self.failed.setdefault(key, set()).add(task_id)
        else:
            return  # RETRY: the run is not over
        self.last_at = at

    def finished(self) -> int:
        """Jobs whose run is over (succeeded, or failed after its last attempt)."""
        return len(self.succeeded.keys() | {k for k, ids in self.failed.items() if ids})


def wait_for_results(pubsub: redis.client.PubSub, deadline: float, outcome: Outcome) -> bool:
    """Read the result records as the backend stores them (it publishes each on its key's channel): no
    polling of Redis while the burst runs. True when every job's run is over."""
    while outcome.finished() < len(outcome.keys) and time.time() < deadline:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=min(1.0, deadline - time.time()))
        if message is None or message["type"] != "pmessage":
            continue
        outcome.add(json.loads(message["data"]), time.time())
    return outcome.finished() >= len(outcome.keys)


def stored_outcome(client: redis.Redis, keys: set[str]) -> Outcome:
    """The result backend's stored records, read once after the burst (the authoritative count)."""
    outcome = Outcome(keys)
    batch: list[str] = []

    def read(names: list[str]) -> None:
        for raw in client.mget(names):
            if raw:
                outcome.add(json.loads(raw), 0.0)

    for name in client.scan_iter(match=RESULT_PREFIX + "*", count=1000):
        batch.append(name)
        if len(batch) >= 1000:
            read(batch)
            batch = []
    if batch:
        read(batch)
    return outcome


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """_e2e.wait_for, and an error naming `what` if it did not happen in time."""
    if not wait_for(condition, timeout):
        raise RuntimeError(f"{what} did not come up within {timeout:.0f} s")


def run_celery(
    n: int, target: Target, settings: PeerSettings, workdir: Path, services: Services
) -> PeerResult:
    from celery.schedules import crontab  # type: ignore[import-untyped]
    from redbeat import RedBeatSchedulerEntry  # type: ignore[import-untyped]
    from redbeat.schedulers import ensure_conf  # type: ignore[import-untyped]

    base = workdir / "celery"
    base.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix=f"redis-{n}-", dir=base))  # a fresh Redis, whatever ran before
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    result = PeerResult(scheduler=SCHEDULER, n=n, due=0.0)
    app = make_app(url, settings.timeout_s, settings.max_attempts)  # this process's handle on the same app
    client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
    started: list[str] = []
    meter: ProcessMeter | None = None
    try:
        # Services are named celery-*, so stopping them by name never touches another peer's processes; the
        # meter's groups are redis, worker and beat.
        procs = {"redis": services.start("celery-redis", redis_args(port, data_dir), log=base / "redis.log")}
        started.append("celery-redis")

        def pong() -> bool:
            if procs["redis"].poll() is not None:
                raise RuntimeError(f"redis-server exited: see {base / 'redis.log'}")
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        wait_until(pong, 30, "redis-server")

        env = {**os.environ, **environment(url, settings.timeout_s, settings.max_attempts)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
        for name, args in (("worker", worker_args(settings)), ("beat", beat_args())):
            procs[name] = services.start(f"celery-{name}", args, log=base / f"{name}.log", env=env, cwd=base)
            started.append(f"celery-{name}")

        def alive() -> None:
            for name, process in procs.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}: see {base / f'{name}.log'}")

        def worker_up() -> bool:
            alive()
            return bool(app.control.ping(timeout=0.5))

        wait_until(worker_up, 90, "the Celery worker")
        conf = ensure_conf(app)  # RedBeat's settings (key names) for this app

        def beat_up() -> bool:
            alive()
            return bool(client.exists(conf.lock_key))  # beat holds RedBeat's lock once its scheduler runs

        wait_until(beat_up, 90, "Celery beat")

        meter = ProcessMeter({name: process.pid for name, process in procs.items()}).start()

        # Register the jobs while beat runs, one by one through RedBeat's own entry API (what an application
        # adding jobs at run time does): each save() writes the definition and meta hashes and the entry's
        # score (next due time) in the schedule's sorted set, which beat reads at every tick. Each entry
        # is built right before its save: its last_run_at is then its creation time (RedBeat's default), so
        # it is next due at the chosen minute, not at once (an entry that never ran is due immediately).
        # (RedBeat's score is the next due time computed from "now" and truncated to the second, so it is
        # 1 s early: a tick that falls in the second before the due one loads every entry, finds none due
        # and sleeps to the due second, where it loads them again. That is how RedBeat runs; left as is.)
        seed_start = time.time()
        due = due_minute(n, seed_start)
        moment = time.gmtime(due)
        schedule = crontab(minute=moment.tm_min, hour=moment.tm_hour, app=app)
        keys = {f"celery-{i}" for i in range(n)}
        for i in range(n):
            RedBeatSchedulerEntry(
                name=f"celery-{i}",
                task=TASK_NAME,
                schedule=schedule,
                args=[target.url + "/celery", f"celery-{i}"],
                app=app,
            ).save()
        seed_end = time.time()
        result.due = due
        result.seed_seconds = seed_end - seed_start
        if seed_end > due - BEAT_MAX_LOOP_INTERVAL_S - 1:
            raise RuntimeError(
                f"registering {n} jobs took {result.seed_seconds:.1f} s: too close to the due minute"
            )
        registered = client.zcard(conf.schedule_key)
        if registered != n:
            raise RuntimeError(f"RedBeat's schedule holds {registered} entries, not {n}")

        # Done = the backend's record of every run: the Redis backend publishes each record on its key's
        # channel as it stores it, so this process listens instead of polling (SCANning thousands of keys
        # every fraction of a second would spend Redis CPU that is measured).
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        pubsub.psubscribe(RESULT_PREFIX + "*")
        target.reset()
        sleep_until(due - 1)
        outcome = Outcome(keys)
        done = wait_for_results(pubsub, due + settings.drain_timeout, outcome)
        done_at = outcome.last_at if done else time.time()
        pubsub.close()
        alive()
        time.sleep(meter.every * 2)  # a sample after done_at
        result.burst_cpu_s = meter.cpu_between(due - 1, done_at)
        result.burst_seconds = done_at - (due - 1)

        # The stored records, read once after the burst (before the idle window's settle time): the
        # count of jobs whose run succeeded, and any job that ran more than once.
        stored = stored_outcome(client, keys)
        result.fires_done = len(stored.succeeded)
        runs = sum(len(ids) for ids in stored.succeeded.values())
        arrivals_for(target, keys, due, result)
        result.notes.append("Celery's crontab has minute granularity: its burst is due at second :00")
        if not done:
            result.notes.append(
                f"not done {settings.drain_timeout:.0f} s after the due second: {outcome.finished()} of {n} "
                f"runs over; the burst's CPU is counted to the timeout"
            )
        if stored.failed:
            result.notes.append(f"{sum(1 for ids in stored.failed.values() if ids)} jobs' runs FAILED")
        if runs != result.fires_done:
            result.notes.append(f"{runs} succeeded task records for {result.fires_done} jobs")

        measure_idle(meter, settings, result)
        result.peak_rss_mb = meter.peak_rss_mb()
        meter.stop()
        meter = None
        versions_text = ", ".join(f"{k} {v}" for k, v in versions().items())
        result.notes += [
            versions_text,
            f"worker: --pool threads --concurrency {settings.concurrency}, prefetch multiplier 1, "
            f"acks_late + reject_on_worker_lost, no gossip/mingle/heartbeat; task: one POST, timeout "
            f"{settings.timeout_s} s, up to {settings.max_attempts} attempts (autoretry on OSError, backoff "
            f"10..600 s with jitter); results in Redis (result_extended)",
            f"beat: RedBeat, max loop interval {BEAT_MAX_LOOP_INTERVAL_S:g} s, lock timeout "
            f"{REDBEAT_LOCK_TIMEOUT_S} s; jobs registered one by one with RedBeatSchedulerEntry.save() while "
            f"beat ran ({result.seed_seconds:.1f} s)",
            "redis: loopback, AOF appendfsync everysec, no RDB snapshots",
        ]
        return result
    finally:
        if meter is not None:
            meter.stop()
        # Beat first (it sends no more), then the worker (warm shutdown: runs in flight finish), then Redis.
        for name in ("celery-beat", "celery-worker", "celery-redis"):
            if name in started:
                services.stop(name)
        client.close()
        redbeat_client = getattr(app, "redbeat_redis", None)  # the client RedBeat's get_redis() made
        if redbeat_client is not None:
            redbeat_client.close()
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=1000)
    parser.add_argument("--idle", type=float, help="idle window, seconds (default: PeerSettings')")
    parser.add_argument("--workdir", type=Path, help="keep the logs and Redis's files here")
    args = parser.parse_args()
    settings = PeerSettings()
    if args.idle is not None:
        settings = replace(settings, idle_seconds=args.idle)
    services = Services()
    services.cleanup_on_exit()
    target = Target().start()
    try:
        if args.workdir is not None:
            report(run_celery(args.n, target, settings, args.workdir, services))
        else:
            with tempfile.TemporaryDirectory(prefix="peer-celery-") as tmp:
                report(run_celery(args.n, target, settings, Path(tmp), services))
    finally:
        services.stop()
        target.stop()


if __name__ == "__main__":
    main()
