"""Chaos run: `tickwork local` under a steady load while its role processes (ticker, executor, sweeper, api)
are SIGKILLed at random; the supervisor restarts each. Then every fire of the window is checked: each has
exactly one run record, every run succeeded, and the target saw every run at least once (at least once:
a repeated call is counted, not a failure).

The ticker is killed most often: it sends a run's message before committing the run, so a kill between the
two leaves a message without a run (it must be dropped later) and a job not advanced (the next tick must
plan the fire again). Ticks come every 2 s with a 20 s lookahead so that kills land inside ticks.

    python benchmarks/chaos.py [--minutes 5] [--jobs 60] [--kill-every 6] [--engine sqlite|emulator]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

from _common import machine
from _e2e import LocalSettings, LocalTickwork, Target, exit_cleanly_on_sigterm, scan_table, seed_jobs
from tickwork.domain.timekeys import parse_instant
from tickwork.resources import RUNS

EVERY_SECONDS = 10  # the API's fastest schedule
# Kill weights: the ticker's commit point is what changed; the executor holds messages and leases.
ROLES = ("ticker", "ticker", "executor", "executor", "sweeper", "api")


def fires_between(start: datetime, end: datetime) -> list[datetime]:
    first = start.replace(microsecond=0) + timedelta(seconds=-start.second % EVERY_SECONDS)
    if first < start:
        first += timedelta(seconds=EVERY_SECONDS)
    fires = []
    while first <= end:
        fires.append(first)
        first += timedelta(seconds=EVERY_SECONDS)
    return fires


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long processes are killed")
    parser.add_argument("--jobs", type=int, default=60, help=f"jobs, each firing every {EVERY_SECONDS} s")
    parser.add_argument("--kill-every", type=float, default=6.0, help="mean seconds between kills")
    parser.add_argument("--engine", default="sqlite", choices=["sqlite", "emulator"])
    parser.add_argument("--settle", type=float, default=300.0, help="seconds to wait for the last runs")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    exit_cleanly_on_sigterm()  # `timeout` or a kill unwinds through the finally blocks: nothing is left
    print(f"machine: {machine()}")
    settings = LocalSettings(
        shards=4, queues=2, cap=200, lookahead=20, tick_interval=2.0, sweep_interval=10.0, engine=args.engine
    )
    target = Target().start()
    kills: Counter[str] = Counter()
    try:
        with tempfile.TemporaryDirectory(prefix="tickwork-chaos-") as tmp:
            local = LocalTickwork(Path(tmp) / "state", settings).start()
            try:
                parts = local.components()
                # Calls take 0.5 s, so some are under way when the executor dies (they retry by lease).
                job_ids, seconds = seed_jobs(
                    parts, args.jobs, f"*/{EVERY_SECONDS} * * * * *", f"{target.url}/slow?sleep=0.5"
                )
                print(f"seeded {len(job_ids)} jobs in {seconds:.1f} s ({settings.describe()})")
                window_start = datetime.now(UTC) + timedelta(seconds=5)
                chaos_end = time.monotonic() + args.minutes * 60
                while time.monotonic() < chaos_end:
                    time.sleep(rng.expovariate(1 / args.kill_every))
                    role = rng.choice(ROLES)
                    pid = local.pids().get(role)
                    if pid is None:
                        continue
                    try:
                        os.kill(pid, signal.SIGKILL)
                        kills[role] += 1
                    except ProcessLookupError:
                        pass  # it was restarting already
                window_end = datetime.now(UTC) - timedelta(seconds=1)
                print(f"chaos over: {sum(kills.values())} kills {dict(kills)}; settling")
                expected = {
                    (job_id, fire) for job_id in job_ids for fire in fires_between(window_start, window_end)
                }
                runs_table = parts.settings.resource_names.table(RUNS)
                deadline = time.monotonic() + args.settle
                while True:
                    runs = {
                        (str(item["job_id"]), parse_instant(str(item["scheduled_for"]))): str(item["state"])
                        for item in scan_table(parts, runs_table)
                    }
                    in_window = {key: runs.get(key) for key in expected}
                    open_ = [k for k, state in in_window.items() if state not in ("succeeded", "failed")]
                    if not open_ or time.monotonic() > deadline:
                        break
                    time.sleep(5)
            finally:
                local.stop()
            cli_out = (Path(tmp) / "state" / "cli.out").read_text()
    finally:
        target.stop()

    missing = [k for k, state in in_window.items() if state is None]
    states = Counter(state for state in in_window.values() if state is not None)
    calls = Counter(a.key for a in target.arrivals)
    wanted = {f"{job}:{fire.strftime('%Y%m%dT%H%M%SZ')}" for job, fire in expected}
    called = {key for key in calls if key in wanted}
    repeated = sum(n - 1 for key, n in calls.items() if key in wanted and n > 1)
    restarts = cli_out.count("restarted")
    print(f"fires in the window: {len(expected)} ({args.jobs} jobs x {len(expected) // max(1, args.jobs)})")
    print(
        f"run records: {len(expected) - len(missing)}; missing (lost): {len(missing)}; states {dict(states)}"
    )
    print(f"target: {len(called)} of {len(wanted)} runs called; repeated calls (at least once): {repeated}")
    print(f"kills: {dict(kills)}; role restarts seen by the supervisor: {restarts}")
    ok = not missing and states.get("succeeded", 0) == len(expected) and called == wanted
    print("OK: nothing lost, every run succeeded" if ok else "FAILED")
    if missing:
        print("  first missing:", sorted(missing)[:5])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
