"""The `tickwork` command."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tickwork.adapters.metrics import InMemoryMetrics
from tickwork.adapters.sqlite.db import SchemaTooNewError
from tickwork.adapters.targets.aws import boto3_client_factory
from tickwork.composition import Components
from tickwork.domain.clock import SystemClock
from tickwork.local.demo import register_demo_jobs
from tickwork.local.echo import EchoServer
from tickwork.local.emulator import EmulatorError
from tickwork.local.runtime import (
    DEFAULT_EXECUTORS,
    EMULATOR_DIED_EXIT,
    ENGINES,
    ROLE_ORDER,
    EmulatorDiedError,
    LayoutShrinkError,
    LocalConfig,
    LocalRuntime,
)
from tickwork.settings import Settings


def _local_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    local = sub.add_parser(
        "local", help="run the whole scheduler on this machine (SQLite by default, or an emulator)"
    )
    local.add_argument(
        "--demo", action="store_true", help="register demo jobs against a built-in echo endpoint"
    )
    local.add_argument("--port", type=int, default=8080, help="API port on 127.0.0.1 (default 8080)")
    local.add_argument("--state-dir", type=Path, default=Path(".tickwork"), help="where state is kept")
    local.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="sqlite (default): one durable database file in the state dir; emulator: the embedded "
        "MiniStack (AWS fidelity), or the endpoint --endpoint-url names",
    )
    local.add_argument(
        "--endpoint-url",
        default=os.environ.get("TICKWORK_ENDPOINT_URL"),
        help="use this AWS-compatible endpoint (implies --engine emulator; env TICKWORK_ENDPOINT_URL)",
    )
    local.add_argument("--shards", type=int, default=4)
    local.add_argument("--queues", type=int, default=2, help="dispatch queues")
    local.add_argument("--cap", type=int, default=200, help="global cap on runs executing at once")
    local.add_argument("--tick-interval", type=float, default=60.0, help="seconds between ticks (default 60)")
    local.add_argument(
        "--lookahead", type=int, default=120, help="seconds the ticker plans ahead (default 120)"
    )
    local.add_argument("--sweep-interval", type=float, default=60.0)
    local.add_argument("--status-interval", type=float, default=5.0)
    local.add_argument(
        "--restart-delay", type=float, default=1.0, help="seconds before a dead process restarts"
    )
    local.add_argument(
        "--lease-margin", type=int, default=30, help="seconds past a job's timeout before retry"
    )
    local.add_argument("--roles", default=",".join(ROLE_ORDER), help="which role processes to start")
    local.add_argument(
        "--executors",
        type=int,
        default=DEFAULT_EXECUTORS,
        help=f"executor processes sharing the cap (default {DEFAULT_EXECUTORS}: one per core, up to 4)",
    )
    local.add_argument(
        "--owner-max-jobs", type=int, default=None, help="quota: jobs an owner may have (default: none)"
    )
    local.add_argument(
        "--owner-min-interval",
        type=int,
        default=None,
        metavar="SECONDS",
        help="quota: the shortest interval between two fires of an owner's job (default: none)",
    )
    local.add_argument(
        "--owner-max-backfill-rate",
        type=float,
        default=None,
        metavar="RUNS_PER_SECOND",
        help="quota: how fast an owner's backfill may start runs (default: none)",
    )
    local.add_argument(
        "--owner-cap",
        type=int,
        default=None,
        metavar="RUNS",
        help="each owner's share of --cap: at most this many of one owner's runs at once (default: none)",
    )
    local.add_argument(
        "--operator",
        action="append",
        default=[],
        metavar="OWNER",
        help="an owner with the operator scope: may list, pause and resume any owner's job (repeatable)",
    )
    local.add_argument(
        "--grant",
        action="append",
        default=[],
        metavar="OWNER=KIND:PATTERN",
        help="an AWS resource an owner's jobs may target, e.g. local-user=lambda:tickwork-target-* "
        "(repeatable; OWNER * for every owner). With none, jobs may target any (docs/targets.md)",
    )
    local.add_argument(
        "--token",
        action="append",
        default=[],
        metavar="TOKEN=OWNER",
        help="bearer token for the local API and the owner it maps to (repeatable); "
        "when given, the default local-dev-token is off",
    )


def _tokens(pairs: list[str]) -> dict[str, str]:
    """The local API's bearer tokens: `local-dev-token` only when no --token is given (a user who names
    their tokens means only those)."""
    if not pairs:
        return {"local-dev-token": "local-user"}
    tokens: dict[str, str] = {}
    for pair in pairs:
        token, sep, owner = pair.partition("=")
        if not sep or not token or not owner:
            raise SystemExit(f"tickwork: --token expects TOKEN=OWNER, got {pair!r}")
        tokens[token] = owner
    return tokens


def _engine(args: argparse.Namespace) -> str:
    """The engine asked for: an endpoint URL is an AWS-compatible engine, so it means `emulator`."""
    if args.endpoint_url and args.engine == "sqlite":
        raise SystemExit(
            "tickwork: --endpoint-url names an AWS-compatible endpoint; it needs --engine emulator"
        )
    if args.endpoint_url:
        return "emulator"
    return str(args.engine or "sqlite")


def _grants(pairs: list[str]) -> dict[str, list[str]] | None:
    if not pairs:
        return None
    grants: dict[str, list[str]] = {}
    for pair in pairs:
        owner, sep, pattern = pair.partition("=")
        if not sep or not owner or ":" not in pattern:
            raise SystemExit(f"tickwork: --grant expects OWNER=KIND:PATTERN, got {pair!r}")
        grants.setdefault(owner, []).append(pattern)
    return grants


def run_local(args: argparse.Namespace) -> int:
    roles = tuple(r for r in args.roles.split(",") if r)
    unknown = [r for r in roles if r not in ROLE_ORDER]
    if unknown:
        print(f"tickwork: unknown role(s) {unknown}; choose from {list(ROLE_ORDER)}", file=sys.stderr)
        return 2
    if args.executors < 1:
        print("tickwork: --executors must be at least 1", file=sys.stderr)
        return 2
    config = LocalConfig(
        state_dir=args.state_dir,
        engine=_engine(args),
        api_port=args.port,
        endpoint_url=args.endpoint_url,
        shard_count=args.shards,
        dispatch_queues=args.queues,
        concurrency_cap=args.cap,
        tick_interval=args.tick_interval,
        lookahead_seconds=args.lookahead,
        sweep_interval=args.sweep_interval,
        status_interval=args.status_interval,
        restart_delay=args.restart_delay,
        lease_margin_seconds=args.lease_margin,
        tokens=_tokens(args.token),
        grants=_grants(args.grant),
        operators=tuple(args.operator),
        quotas={
            name: str(value)
            for name, value in (
                ("TICKWORK_OWNER_MAX_JOBS", args.owner_max_jobs),
                ("TICKWORK_OWNER_MIN_INTERVAL_SECONDS", args.owner_min_interval),
                ("TICKWORK_OWNER_MAX_BACKFILL_RATE", args.owner_max_backfill_rate),
                ("TICKWORK_OWNER_CONCURRENCY_CAP", args.owner_cap),
            )
            if value is not None
        },
        roles=roles,
        executors=args.executors,
        demo=args.demo,
    )
    runtime = LocalRuntime(config)
    code = 0
    echo: EchoServer | None = None
    # systemd, `docker stop` and `kill` send SIGTERM, a closed terminal SIGHUP: both stop like Ctrl-C.
    _STOPPING.clear()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, _stop_requested)
    try:
        runtime.start()
        where = runtime.database_path.resolve() if config.engine == "sqlite" else runtime.endpoint_url
        print(f"tickwork local: engine     {config.engine}: {where}  (state in {config.state_dir.resolve()})")
        print(f"                API        http://127.0.0.1:{config.api_port}  (Swagger UI at /docs)")
        print(f"                tokens     {json.dumps(config.tokens)}  (Authorization: Bearer <token>)")
        pids = ", ".join(f"{role} pid {p.process.pid}" for role, p in runtime.processes.items())
        print(f"                processes  {pids}")
        print(f"                logs       {runtime.run_dir.resolve()}/<role>.log")
        if config.demo:
            # A fixed port (API port + 1), so demo jobs registered by an earlier start still reach it.
            echo = EchoServer(port=config.api_port + 1).start()
            parts = Components(
                Settings.from_env(runtime.env), SystemClock(), _local_clients(runtime.env), InMemoryMetrics()
            )
            jobs = register_demo_jobs(parts, echo.url)
            print(f"                demo       {len(jobs)} jobs calling {echo.url}:")
            for job in jobs:
                print(f"                           {job.job_id}  {job.name}")
        print("Ctrl-C stops everything and keeps the state.", flush=True)
        runtime.supervise()
    except (KeyboardInterrupt, StopRequestedError) as stop:
        name = "Ctrl-C" if isinstance(stop, KeyboardInterrupt) else str(stop)
        print(f"\n{name}: stopping ...", flush=True)
    except EmulatorDiedError as error:
        print(
            f"tickwork: {error}. Stopping everything (exit {EMULATOR_DIED_EXIT}); what changed since it "
            f"started is lost. Start `tickwork local` again to continue from the state it saved last.",
            file=sys.stderr,
            flush=True,
        )
        code = EMULATOR_DIED_EXIT
    except EmulatorError as error:
        print(f"tickwork: the embedded emulator failed: {error}", file=sys.stderr)
        code = 1
    except SchemaTooNewError as error:
        print(f"tickwork: {error}", file=sys.stderr)
        code = 2
    except LayoutShrinkError as error:
        print(f"tickwork: refused: {error}", file=sys.stderr)
        code = 2
    finally:
        started = time.monotonic()
        runtime.stop()
        if echo is not None:
            echo.stop()
        print(f"stopped in {time.monotonic() - started:.1f} s", flush=True)
        if _STOPPING.is_set():
            # Stopped as a signal asked: the ones still coming (systemd repeating itself, a second Ctrl-C)
            # are ignored to the end. Python's exit would reset their handlers to the default, and one
            # landing then would end an orderly stop as killed by it (exit -15).
            for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(signum, signal.SIG_IGN)
    return code


class StopRequestedError(Exception):
    """SIGTERM or SIGHUP arrived: stop as on Ctrl-C."""


# Set by the first stop signal. Later ones (a second Ctrl-C, `timeout` and `kill` both signalling, systemd
# repeating itself) must not interrupt the shutdown they asked for: runtime.stop() ends every process.
_STOPPING = threading.Event()


def _stop_requested(signum: int, _frame: object) -> None:
    if _STOPPING.is_set():
        return
    _STOPPING.set()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise StopRequestedError(signal.Signals(signum).name)


def _local_clients(env: dict[str, str]) -> Callable[[str], Any]:
    """Clients for the supervisor itself (demo registration), pointed at the same endpoint as the roles."""
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    return boto3_client_factory(region_name=env.get("AWS_DEFAULT_REGION", "us-east-1"))


def run_local_command(argv: list[str]) -> int:
    """`tickwork local ARGS`: parse the local runtime's options and run it until stopped."""
    parser = argparse.ArgumentParser(prog="tickwork", description="Tickwork: a serverless cron scheduler")
    sub = parser.add_subparsers(dest="command", required=True)
    _local_parser(sub)
    args = parser.parse_args(["local", *argv])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    return run_local(args)


def main(argv: list[str] | None = None) -> int:
    """`tickwork local ...` runs the scheduler here; every other command drives an API (client/commands.py,
    which needs the `cli` extra: click, rich, PyYAML)."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments[:1] == ["local"]:
        return run_local_command(arguments[1:])
    try:
        from tickwork.client.commands import main as client_main
    except ImportError as error:
        print(
            f"tickwork: the API commands need the cli extra ({error.name} is missing): "
            "pip install 'tickwork[cli]'. `tickwork local` works without it.",
            file=sys.stderr,
        )
        return 2
    return client_main(arguments)


if __name__ == "__main__":
    sys.exit(main())
