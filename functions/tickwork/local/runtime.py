"""`tickwork local`: the engine, the resources, and one process per role, supervised.

Two engines. The default, `sqlite`, keeps every table and queue in one SQLite database in the state dir
(adapters/sqlite): every committed write is on disk, so a SIGKILL of any or every process loses nothing.
`emulator` runs the MiniStack emulator as its own process (or uses `--endpoint-url`), for AWS fidelity.

Each role is its own process, restarted by the supervisor if it dies. Ctrl-C, SIGTERM or SIGHUP stop the
roles, then the emulator (if any), which writes its state to disk, so the next start continues where this
one stopped.

No process outlives the supervisor, however it dies: each role and the emulator get SIGTERM from the kernel
when it does (see lifeline.py). A dead or hung emulator is detected and everything stops with
EMULATOR_DIED_EXIT: MiniStack writes its state only on a graceful stop, so an emulator restarted after a
crash would silently roll every table and queue back to the last clean stop under running schedulers;
the operator decides instead (the next start continues from that saved state)."""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.adapters.secret_files import FileHeaderSecrets
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.queue import SqliteQueues, queue_configs
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.adapters.sqs_provision import ensure_queues
from tickwork.domain.errors import TickworkError
from tickwork.domain.layout import Layout, shrinking
from tickwork.domain.planning import MIN_REREAD_SECONDS
from tickwork.local.emulator import Emulator, EmulatorConfig, client_env
from tickwork.local.status import WINDOW_SECONDS, read_snapshots, summarize, write_json_atomically
from tickwork.resources import JOBS, ResourceNames
from tickwork.settings import LOCAL_API_FILE
from tickwork.signing import ROTATION_OVERLAP_SECONDS

logger = logging.getLogger("tickwork.local")

ROLE_ORDER = ("api", "executor", "ticker", "sweeper", "watcher")
ENGINES = ("sqlite", "emulator")
# How often the supervisor looks at its role processes (a dead one is restarted restart_delay after it is
# seen); each look wakes it, so not more often than a restart needs.
SUPERVISE_SECONDS = 1.0
# A cached status is read again this often even with nothing committed: a message whose visibility ran out
# (its executor was killed) is back in the queue's depth without a commit.
STATUS_MAX_AGE_SECONDS = 30.0
HEALTH_FILE = "health.json"  # in the run dir: the console's health page (see _write_health)
DATABASE_FILE = "tickwork.db"  # the SQLite engine's database, in the state dir
# Each role's SQLite durability (adapters/sqlite/db.py). The API acknowledges job writes to users: each is
# on disk before it answers. The ticker, executor and sweeper keep run bookkeeping, whose lost tail after a
# power cut the at-least-once design recovers: a plan lost with its job's advance is planned again, a lost
# claim or finish runs the run again (its message's delete was later, so it was lost too). A crash of any
# process loses nothing either way.
SQLITE_SYNCHRONOUS = {
    "api": "FULL",
    "ticker": "NORMAL",
    "executor": "NORMAL",
    "sweeper": "NORMAL",
    # Its commits survive in order: a lost tail loses the feed's deletes with the events, seen again.
    "watcher": "NORMAL",
}
EMULATOR_DIED_EXIT = 3  # the exit code of `tickwork local` when its emulator died or stopped answering
ROLE_STOP_SECONDS = 15.0  # a role still running this long after SIGTERM is killed
# Executor processes share the cap (each runs its share of it): one executor process spends most of a burst
# in Python, under one GIL, so a second core is used only by a second process. The cores this process may
# run on (a taskset or a container's cpuset), not the machine's.
DEFAULT_EXECUTORS = max(
    1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
)


def process_names(role: str, executors: int) -> list[str]:
    """The processes of a role: `executor`, `executor-2`, ... for the executors, the role's name otherwise."""
    if role != "executor":
        return [role]
    return ["executor"] + [f"executor-{i}" for i in range(2, executors + 1)]


def role_of(process_name: str) -> str:
    return process_name.split("-", 1)[0]


def executor_index(process_name: str) -> int:
    """`executor` is 0, `executor-2` is 1, ..."""
    _, _, number = process_name.partition("-")
    return int(number) - 1 if number.isdigit() else 0


class EmulatorDiedError(RuntimeError):
    """The embedded emulator exited, or stopped answering, while the runtime ran."""


class LayoutShrinkError(ValueError):
    """`--shards` or `--queues` below what this state directory was started with (domain/layout.py)."""


LAYOUT_FILE = "layout.json"  # the largest shard and queue counts this state directory has run with


@dataclass
class LocalConfig:
    state_dir: Path = Path(".tickwork")
    engine: str = "sqlite"  # "emulator": MiniStack, or the AWS-compatible endpoint_url
    api_port: int = 8080
    endpoint_url: str | None = (
        None  # an AWS-compatible endpoint the user already runs; None: embedded MiniStack
    )
    shard_count: int = 4
    dispatch_queues: int = 2
    concurrency_cap: int = 200
    tick_interval: float = 60.0
    lookahead_seconds: int = 120
    sweep_interval: float = 60.0
    status_interval: float = 5.0
    restart_delay: float = 1.0  # before a dead role process is started again
    health_interval: float = 2.0  # between checks that the embedded emulator answers
    emulator_unresponsive_limit: float = 30.0  # an emulator not answering this long counts as dead
    lease_margin_seconds: int = 30
    tokens: dict[str, str] = field(default_factory=lambda: {"local-dev-token": "local-user"})
    grants: dict[str, list[str]] | None = None  # owner -> AWS resource patterns (None: no registry)
    quotas: dict[str, str] = field(default_factory=dict)  # TICKWORK_OWNER_* settings (domain/quotas.py)
    operators: tuple[str, ...] = ()  # owners with the operator scope
    roles: tuple[str, ...] = ROLE_ORDER
    executors: int = 1  # executor processes (the CLI's default: DEFAULT_EXECUTORS)
    demo: bool = False


@dataclass
class RoleProcess:
    role: str
    process: subprocess.Popen[bytes]
    restarts: int = 0


class LocalRuntime:
    def __init__(self, config: LocalConfig) -> None:
        self.config = config
        self.emulator: Emulator | None = None
        self.endpoint_url = config.endpoint_url or ""
        self.env: dict[str, str] = {}
        self.processes: dict[str, RoleProcess] = {}
        self._clients: dict[str, Any] = {}
        self._db: Database | None = None
        # (key, read again after this monotonic time, status): see status().
        self._status_cache: tuple[tuple[Any, ...], float, dict[str, Any]] | None = None
        self._stop = threading.Event()
        self.run_dir = config.state_dir / "run"
        self._history: deque[tuple[float, dict[str, Any]]] = deque()

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        self._keep_layout()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for stale in [*self.run_dir.glob("metrics-*.json"), *self.run_dir.glob(HEALTH_FILE)]:
            stale.unlink()
        if self.config.engine == "emulator" and not self.endpoint_url:
            self.emulator = Emulator(
                EmulatorConfig(
                    state_dir=self.config.state_dir / "emulator", log_file=self.run_dir / "emulator.log"
                )
            )
            self.emulator.start()
            self.endpoint_url = self.emulator.endpoint_url
        self.env = self._environment()
        # To start a role by hand against this runtime (tests stop and restart the ticker this way).
        env_file = self.run_dir / "env.json"
        env_file.write_text(
            json.dumps({k: v for k, v in self.env.items() if k.startswith(("AWS_", "TICKWORK_"))})
        )
        env_file.chmod(0o600)
        # Where the `tickwork` CLI finds this instance (`tickwork --state-dir DIR jobs list`): the API's URL
        # and the first token. Owner-only, like the tokens in env.json.
        api_file = self.config.state_dir / LOCAL_API_FILE
        api_file.write_text(
            json.dumps(
                {
                    "url": f"http://127.0.0.1:{self.config.api_port}",
                    "token": next(iter(self.config.tokens), None),
                }
            )
        )
        api_file.chmod(0o600)
        for role in self.config.roles:
            for name in process_names(role, self.executor_processes):
                self._spawn(name)

    def stop(self) -> None:
        """Stop the roles (SIGTERM, then SIGKILL after ROLE_STOP_SECONDS), then the emulator, which writes
        its state. Signals that would interrupt it are ignored meanwhile: a second Ctrl-C or SIGTERM must
        not leave half of it undone."""
        self._stop.set()
        previous = {
            signum: signal.signal(signum, signal.SIG_IGN)
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        }
        try:
            for running in self.processes.values():
                if running.process.poll() is None:
                    running.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + ROLE_STOP_SECONDS
            for running in self.processes.values():
                try:
                    running.process.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    running.process.kill()
                    running.process.wait()
            if self.emulator is not None:
                self.emulator.stop()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def supervise(self) -> None:
        """Restart a role process that died; print a status line every few seconds; until stopped.
        Raises EmulatorDiedError when the embedded emulator exits or stops answering."""
        last_status = 0.0
        last_health = time.monotonic()
        unresponsive_since: float | None = None
        died_at: dict[str, float] = {}
        while not self._stop.wait(SUPERVISE_SECONDS):
            if time.monotonic() - last_health >= self.config.health_interval:
                last_health = time.monotonic()
                unresponsive_since = self._check_emulator(unresponsive_since)
            for role, running in list(self.processes.items()):
                code = running.process.poll()
                if code is None or self._stop.is_set():
                    continue
                first_seen = died_at.setdefault(role, time.monotonic())
                if time.monotonic() - first_seen >= self.config.restart_delay:
                    print(f"{role} exited with {code}; restarted", flush=True)  # noqa: T201
                    del died_at[role]
                    self._spawn(role, restarts=running.restarts + 1)
            if time.monotonic() - last_status >= self.config.status_interval:
                last_status = time.monotonic()
                try:
                    print(self.status_line(), flush=True)  # noqa: T201
                except (
                    BotoCoreError,
                    ClientError,
                    TickworkError,
                ) as error:  # never a reason to stop scheduling
                    print(f"tickwork: status unavailable: {error}", file=sys.stderr, flush=True)  # noqa: T201

    def _check_emulator(self, unresponsive_since: float | None) -> float | None:
        """Raise EmulatorDiedError if the embedded emulator exited or has not answered for too long;
        returns since when it has not answered (None: it answers)."""
        emulator = self.emulator
        if emulator is None:
            return None
        code = emulator.returncode
        if code is not None:
            how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with {code}"
            raise EmulatorDiedError(f"the emulator (pid {emulator.last_pid}) died: it {how}")
        if emulator.healthy(timeout=min(2.0, self.config.health_interval)):
            return None
        now = time.monotonic()
        since = unresponsive_since if unresponsive_since is not None else now
        if now - since >= self.config.emulator_unresponsive_limit:
            raise EmulatorDiedError(
                f"the emulator (pid {emulator.pid}) died: it has not answered {emulator.endpoint_url} "
                f"for {now - since:.0f} s"
            )
        if unresponsive_since is None:
            print(  # noqa: T201
                f"tickwork: the emulator (pid {emulator.pid}) is not answering {emulator.endpoint_url}; "
                f"stopping if it does not answer within {self.config.emulator_unresponsive_limit:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        return since

    def write_pids(self) -> None:
        pids = {role: p.process.pid for role, p in self.processes.items()}
        if self.emulator is not None and self.emulator.pid is not None:
            pids["emulator"] = self.emulator.pid
        (self.run_dir / "pids.json").write_text(json.dumps(pids))

    def kill_role(self, role: str) -> None:
        """SIGKILL one role process (crash tests); the supervisor restarts it."""
        self.processes[role].process.kill()

    # --- resources and processes -------------------------------------------------------------------

    @property
    def executor_processes(self) -> int:
        """`--executors`, but never more processes than the cap has runs: each runs at least one."""
        return max(1, min(self.config.executors, self.config.concurrency_cap))

    @property
    def database_path(self) -> Path:
        return self.config.state_dir / DATABASE_FILE

    def _database(self) -> Database:
        """The supervisor's own handle on the SQLite engine's database (bootstrap, status)."""
        if self._db is None:
            self._db = Database(self.database_path).open()
        return self._db

    def _keep_layout(self) -> None:
        """Refuse fewer shards or queues than this state has run with (their jobs and messages would be
        stranded); remember the layout otherwise."""
        path = self.config.state_dir / LAYOUT_FILE
        wanted = Layout(shard_count=self.config.shard_count, queue_count=self.config.dispatch_queues)
        before = None
        if path.exists():
            recorded = json.loads(path.read_text())
            before = Layout(
                shard_count=int(recorded["shard_count"]), queue_count=int(recorded["queue_count"])
            )
        problems = shrinking(before, wanted)
        if problems:
            raise LayoutShrinkError(
                " ".join(problems).replace("shard_count", "--shards").replace("queue_count", "--queues")
            )
        path.write_text(json.dumps({"shard_count": wanted.shard_count, "queue_count": wanted.queue_count}))

    def _engine_environment(self, names: ResourceNames) -> dict[str, str]:
        """Create (or migrate) the engine's tables and queues; the settings the roles need to reach them."""
        if self.config.engine == "sqlite":
            self._database()  # created or migrated here, once, before any role starts
            queue_urls, dlq_url, _ = queue_configs(names, self.config.dispatch_queues)
            return {
                "TICKWORK_ENGINE": "sqlite",
                "TICKWORK_DATABASE": str(self.database_path.resolve()),
                "TICKWORK_DISPATCH_QUEUE_URLS": ",".join(queue_urls),
                "TICKWORK_DLQ_URL": dlq_url,
                "TICKWORK_LOCAL_UNSIGNED": "0",
            }
        ensure_tables(self._client("dynamodb"), names)
        queue_urls, dlq_url = ensure_queues(self._client("sqs"), names, self.config.dispatch_queues)
        return {
            **client_env(self.endpoint_url),
            "TICKWORK_ENGINE": "dynamodb",
            "TICKWORK_DISPATCH_QUEUE_URLS": ",".join(queue_urls),
            "TICKWORK_DLQ_URL": dlq_url,
            "TICKWORK_LOCAL_UNSIGNED": "1" if self.emulator is not None else "0",
        }

    def _environment(self) -> dict[str, str]:
        names = ResourceNames(prefix="tickwork")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TICKWORK_"))}
        env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        env.update(self._engine_environment(names))
        env.update(
            {
                "TICKWORK_MODE": "local",
                "TICKWORK_TABLE_PREFIX": names.prefix,
                "TICKWORK_SHARD_COUNT": str(self.config.shard_count),
                "TICKWORK_LOOKAHEAD_SECONDS": str(self.config.lookahead_seconds),
                "TICKWORK_REREAD_SECONDS": str(max(self.config.lookahead_seconds, MIN_REREAD_SECONDS)),
                "TICKWORK_CONCURRENCY_CAP": str(self.config.concurrency_cap),
                "TICKWORK_LEASE_MARGIN_SECONDS": str(self.config.lease_margin_seconds),
                "TICKWORK_SIGNING_SECRET": self._signing_secret(),
                "TICKWORK_SIGNING_SECRET_PREVIOUS": self._previous_signing_secret(),
                "TICKWORK_TICK_INTERVAL": str(self.config.tick_interval),
                "TICKWORK_SWEEP_INTERVAL": str(self.config.sweep_interval),
                "TICKWORK_API_PORT": str(self.config.api_port),
                # Callback runs report to this instance's own API (loopback).
                "TICKWORK_CALLBACK_URL": f"http://127.0.0.1:{self.config.api_port}",
                "TICKWORK_LOCAL_TOKENS": json.dumps(self.config.tokens),
                **(
                    {}
                    if self.config.grants is None
                    else {"TICKWORK_TARGET_GRANTS": json.dumps(self.config.grants)}
                ),
                **self.config.quotas,
                "TICKWORK_OPERATORS": ",".join(self.config.operators),
                "TICKWORK_LOCAL_RUN_DIR": str(self.run_dir.resolve()),
                "TICKWORK_SECRETS_DIR": str(self._secrets_dir().resolve()),
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def _secrets_dir(self) -> Path:
        """Where secret header values are kept, encrypted (adapters/secret_files.py): its key is made here,
        once, before any role reads it."""
        directory = self.config.state_dir / "secrets"
        FileHeaderSecrets(directory)
        return directory

    def _client(self, service: Literal["dynamodb", "sqs"]) -> Any:
        """The supervisor's own clients (bootstrap, status), pointed at the emulator; built once."""
        if service not in self._clients:
            aws_env = client_env(self.endpoint_url)
            self._clients[service] = boto3.client(
                service,
                endpoint_url=self.endpoint_url,
                region_name=aws_env["AWS_DEFAULT_REGION"],
                aws_access_key_id=aws_env["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=aws_env["AWS_SECRET_ACCESS_KEY"],
            )
        return self._clients[service]

    def _signing_secret(self) -> str:
        """One secret per local installation, kept with its state, so receivers can verify across restarts."""
        path = self.config.state_dir / "signing-secret"
        if not path.exists():
            path.write_text(secrets.token_urlsafe(32))
            path.chmod(0o600)
        return path.read_text().strip()

    def _previous_signing_secret(self) -> str:
        """A rotation, locally: move `signing-secret` to `signing-secret.previous` and start again. The old
        secret keeps signing beside the new one for a day after the new one was made
        (signing.ROTATION_OVERLAP_SECONDS), so receivers have time to fetch their new keys."""
        path = self.config.state_dir / "signing-secret.previous"
        current = self.config.state_dir / "signing-secret"
        if not path.exists() or not current.exists():
            return ""
        if time.time() - current.stat().st_mtime >= ROTATION_OVERLAP_SECONDS:
            return ""
        return path.read_text().strip()

    def _spawn(self, name: str, restarts: int = 0) -> None:
        role = role_of(name)
        log = (self.run_dir / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [sys.executable, "-m", "tickwork.local.roles", role],
            # The role stops when this pid is no longer its parent (see lifeline.py).
            env={
                **self.env,
                "TICKWORK_PARENT_PID": str(os.getpid()),
                "TICKWORK_SQLITE_SYNCHRONOUS": SQLITE_SYNCHRONOUS.get(role, "FULL"),
                "TICKWORK_PROCESS_NAME": name,
                "TICKWORK_EXECUTOR_PROCESSES": str(self.executor_processes),
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.processes[name] = RoleProcess(role, process, restarts)
        self.write_pids()

    # --- status ------------------------------------------------------------------------------------

    def _write_health(self, status: dict[str, Any]) -> None:
        """The status as the web console's health page reads it (run/health.json, through the local API):
        the counters, runs a minute by outcome over the last minute, runs in flight against the cap."""
        now = time.time()
        self._history.append((now, status))
        while len(self._history) > 1 and now - self._history[0][0] > WINDOW_SECONDS:
            self._history.popleft()
        then, before = self._history[0]
        minutes = max((now - then) / 60, 1 / 60)
        per_minute = {
            name: round((status[name] - before[name]) / minutes, 1)
            for name in ("planned", "succeeded", "failed", "retries")
        }
        health = {
            **status,
            "at": now,
            "cap": self.config.concurrency_cap,
            "per_minute": per_minute,
            "window_seconds": round(now - then, 1),
        }
        write_json_atomically(self.run_dir / HEALTH_FILE, health)

    def status(self) -> dict[str, Any]:
        """The status line's figures. On the SQLite engine they are read again only when a commit landed or
        a role rewrote its snapshot since the last status, and every STATUS_MAX_AGE_SECONDS: counting
        10,000 jobs every few seconds was most of an idle supervisor's CPU."""
        key = self._status_key()
        cached = self._status_cache
        if key is not None and cached is not None and cached[0] == key and time.monotonic() < cached[1]:
            return dict(cached[2])
        status = self._read_status()
        if key is not None:
            self._status_cache = (key, time.monotonic() + STATUS_MAX_AGE_SECONDS, status)
        return dict(status)

    def _status_key(self) -> tuple[Any, ...] | None:
        """What the status depends on: the database's data_version and each snapshot file (None on the
        emulator, whose tables have no such number). A replaced snapshot is a new file (inode)."""
        if self.config.engine != "sqlite":
            return None
        try:
            snapshots = tuple(
                (p.name, stat.st_ino, stat.st_mtime_ns, stat.st_size)
                for p in sorted(self.run_dir.glob("metrics-*.json"))
                for stat in (p.stat(),)
            )
        except OSError:  # a snapshot gone between the listing and its stat: read everything this time
            return None
        return (self._database().data_version(), snapshots)

    def _read_status(self) -> dict[str, Any]:
        summary = summarize(read_snapshots(self.run_dir))
        counts = summary["counts"]
        sqs = self._queues()
        depth = 0
        for url in self.env.get("TICKWORK_DISPATCH_QUEUE_URLS", "").split(","):
            if url:
                attributes = sqs.get_queue_attributes(
                    QueueUrl=url,
                    AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"],
                )["Attributes"]
                depth += sum(int(v) for v in attributes.values())
        return {
            "planned": int(counts.get("RunsPlanned", 0)),
            "jobs": self._job_count(),
            "running": int(summary["gauges"].get("RunsInFlight", 0)),
            "succeeded": int(counts.get("RunsSucceeded", 0)),
            "failed": int(counts.get("RunsFailed", 0)),
            "retries": int(counts.get("Retries", 0)),
            "queue_depth": depth,
            "start_delay_p50_ms": summary["start_delay_p50"],
            "start_delay_p99_ms": summary["start_delay_p99"],
        }

    def _queues(self) -> Any:
        """The queues as the status line reads them (SQS, or the SQLite engine's SQS-shaped queues)."""
        if self.config.engine != "sqlite":
            return self._client("sqs")
        if "queues" not in self._clients:
            _, _, configs = queue_configs(ResourceNames(prefix="tickwork"), self.config.dispatch_queues)
            self._clients["queues"] = SqliteQueues(self._database(), configs, lambda: int(time.time() * 1000))
        return self._clients["queues"]

    def _job_count(self) -> int:
        if self.config.engine == "sqlite":
            return SqliteStore(self._database()).job_count()
        table = self._client("dynamodb").describe_table(
            TableName=ResourceNames(prefix="tickwork").table(JOBS)
        )["Table"]
        return int(table.get("ItemCount", 0))

    def status_line(self) -> str:
        s = self.status()
        self._write_health(s)

        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.0f} ms"

        return (
            f"jobs {s['jobs']}  runs planned {s['planned']}  running {s['running']}"
            f"  succeeded {s['succeeded']}  failed {s['failed']}  retries {s['retries']}"
            f"  queue {s['queue_depth']}"
            f"  start delay p50 {ms(s['start_delay_p50_ms'])}"
            f" p99 {ms(s['start_delay_p99_ms'])} (last minute)"
        )


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
