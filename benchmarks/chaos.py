"""Chaos run: `tickwork local` under a steady load while its role processes (ticker, executor, sweeper, api)
are SIGKILLed at random; the supervisor restarts each. Then every fire of the window is checked: each has
exactly one run record, every run succeeded, and the target saw every run at least once (at least once:
a repeated call is counted, not a failure).

The ticker is killed most often: it sends a run's message before committing the run, so a kill between the
two leaves a message without a run (it must be dropped later) and a job not advanced (the next tick must
plan the fire again). Ticks come every 2 s with a 20 s lookahead so that kills land inside ticks.

With `--callback-share F`, that share of the jobs are callback jobs (heartbeat 10 s): the target answers
their calls 202 and, per attempt, completes at once (half), forgets (a quarter: never reports, so the attempt
ends at its lease end and is retried), or heartbeats late (a quarter: one heartbeat in time, one after the
lease end, then completes if that one was taken). Every retry completes. The same check holds: one record per
fire, every run succeeded (none lost, none stuck).

    python benchmarks/chaos.py [--minutes 5] [--jobs 60] [--kill-every 6] [--engine sqlite|emulator]
    python benchmarks/chaos.py --minutes 6 --callback-share 0.3
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

from _callbacks import Call, CallbackTarget, Tally, Timeline, job_spec, report, seed_specs
from _common import machine
from _e2e import LocalSettings, LocalTickwork, exit_cleanly_on_sigterm, scan_table, seed_jobs
from tickwork.domain.models import RetryPolicy
from tickwork.domain.timekeys import parse_instant
from tickwork.resources import RUNS

EVERY_SECONDS = 10  # the API's fastest schedule
# Kill weights: the ticker's commit point is what changed; the executor holds messages and leases.
ROLES = ("ticker", "ticker", "executor", "executor", "sweeper", "api")
HEARTBEAT_SECONDS = 10  # the callback jobs' heartbeat_seconds (the API's shortest)
LEASE_MARGIN_SECONDS = 30  # tickwork local's default --lease-margin (the settings below keep it)
# A first attempt completes at once, forgets, or heartbeats late, in these shares; a retry always completes.
BEHAVIOURS = (("completes", 0.5), ("forgets", 0.25), ("late", 0.25))


class CallbackDriver:
    """The callback jobs' side of the target: what each attempt does after its 202, on one Timeline."""

    def __init__(self, timeline: Timeline, seed: int) -> None:
        self.timeline = timeline
        self.seed = seed
        self.tally = Tally()
        self.behaviour: dict[tuple[str, int], str] = {}  # (run id, attempt) -> what it did

    def on_call(self, call: Call) -> None:
        if not call.complete_url:
            return
        rng = random.Random(f"{self.seed}:{call.run_id}:{call.attempt}")
        roll, behaviour = rng.random(), "completes"
        if call.attempt == 1:
            for name, share in BEHAVIOURS:
                if roll < share:
                    behaviour = name
                    break
                roll -= share
        self.behaviour[(call.run_id, call.attempt)] = behaviour
        if behaviour == "completes":
            self.timeline.at(call.at + rng.uniform(0.0, 1.0), lambda: self._complete(call))
        elif behaviour == "late":
            # In time (before the 202's lease end), then after the new lease's end.
            first = call.at + 0.8 * HEARTBEAT_SECONDS
            second = first + HEARTBEAT_SECONDS + LEASE_MARGIN_SECONDS + 3
            self.timeline.at(first, lambda: self._beat(call, then=None))
            self.timeline.at(second, lambda: self._beat(call, then=self._complete))

    def _beat(self, call: Call, then: Any) -> None:
        status = report(call.heartbeat_url)
        self.tally.add("heartbeat", status)
        if status in (0, 503):  # the API was down (killed): the target tries again
            self.timeline.at(time.time() + 1, lambda: self._beat(call, then))
        elif status == 200 and then is not None:
            then(call)

    def _complete(self, call: Call) -> None:
        status = report(call.complete_url, {"outcome": "succeeded", "status": "0"})
        self.tally.add("complete", status)
        if status in (0, 503):
            self.timeline.at(time.time() + 1, lambda: self._complete(call))


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
    parser.add_argument(
        "--callback-share", type=float, default=0.0, help="share of the jobs that are callback jobs (0-1)"
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    exit_cleanly_on_sigterm()  # `timeout` or a kill unwinds through the finally blocks: nothing is left
    print(f"machine: {machine()}")
    settings = LocalSettings(
        shards=4,
        queues=2,
        cap=200,
        lookahead=20,
        tick_interval=2.0,
        sweep_interval=10.0,
        engine=args.engine,
        executors=1,  # it kills roles by name: one executor process, as measured before --executors
    )
    timeline = Timeline(workers=8).start()
    driver = CallbackDriver(timeline, args.seed)
    target = CallbackTarget(on_call=driver.on_call).start()
    kills: Counter[str] = Counter()
    callback_ids: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="tickwork-chaos-") as tmp:
            local = LocalTickwork(Path(tmp) / "state", settings).start()
            try:
                parts = local.components()
                # Calls take 0.5 s, so some are under way when the executor dies (they retry by lease).
                expression = f"*/{EVERY_SECONDS} * * * * *"
                callbacks = round(args.jobs * args.callback_share)
                job_ids, seconds = seed_jobs(
                    parts, args.jobs - callbacks, expression, f"{target.url}/slow?sleep=0.5"
                )
                if callbacks:
                    retry = RetryPolicy(max_attempts=5, backoff_base_seconds=1, backoff_max_seconds=5)
                    callback_ids, more = seed_specs(
                        parts,
                        callbacks,
                        lambda i: job_spec(
                            f"callback {i}",
                            expression,
                            f"{target.url}/work",
                            120,
                            heartbeat_seconds=HEARTBEAT_SECONDS,
                            retry=retry,
                        ),
                    )
                    job_ids, seconds = job_ids + callback_ids, seconds + more
                print(
                    f"seeded {len(job_ids)} jobs ({len(callback_ids)} callback) in {seconds:.1f} s "
                    f"({settings.describe()})"
                )
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
                    items = scan_table(parts, runs_table)
                    runs = {
                        (str(item["job_id"]), parse_instant(str(item["scheduled_for"]))): str(item["state"])
                        for item in items
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
        timeline.stop()
        target.stop()

    missing = [k for k, state in in_window.items() if state is None]
    states = Counter(state for state in in_window.values() if state is not None)
    calls = Counter(c.run_id for c in target.snapshot())
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
    stuck = [
        k for k, state in in_window.items() if state is not None and state not in ("succeeded", "failed")
    ]
    print(f"lost (no record): {len(missing)}; stuck (not ended after the settle): {len(stuck)}")
    if callback_ids:
        callback_report(driver, items, expected, set(callback_ids))
    ok = not missing and states.get("succeeded", 0) == len(expected) and called == wanted
    print("OK: nothing lost, every run succeeded" if ok else "FAILED")
    if missing:
        print("  first missing:", sorted(missing)[:5])
    return 0 if ok else 1


def callback_report(
    driver: CallbackDriver,
    items: list[dict[str, Any]],
    expected: set[tuple[str, datetime]],
    callback_ids: set[str],
) -> None:
    """What the callback runs of the window did: their first attempts' behaviour, how they ended, and the
    reports the target sent (409: that attempt was over)."""
    wanted = {f"{job}:{fire.strftime('%Y%m%dT%H%M%SZ')}" for job, fire in expected if job in callback_ids}
    records = {str(item["run_id"]): item for item in items if str(item["run_id"]) in wanted}
    first = Counter(driver.behaviour.get((run_id, 1), "not called") for run_id in wanted)
    attempts = Counter(int(item.get("attempt", 0)) for item in records.values())
    forgot = [r for r in wanted if driver.behaviour.get((r, 1)) == "forgets" and r in records]
    by_lease = sum(
        1 for r in forgot if (records[r].get("attempts") or [{}])[0].get("status") == "LeaseExpired"
    )
    print(
        f"callback runs in the window: {len(wanted)}; first attempt {dict(first)}; final attempt numbers "
        f"{dict(sorted(attempts.items()))}; states {dict(Counter(str(i['state']) for i in records.values()))}"
    )
    print(
        f"  forgotten first attempts ended by lease expiry: {by_lease} of {len(forgot)}; "
        f"heartbeats by status {driver.tally.of('heartbeat')}; completions by status "
        f"{driver.tally.of('complete')}"
    )
    # A first attempt that completed at once and still needed another: say what ended it.
    redone = sorted(
        r
        for r in wanted
        if driver.behaviour.get((r, 1)) == "completes" and int(records.get(r, {}).get("attempt", 0)) > 1
    )
    for run_id in redone[:5]:
        history = [(a.get("status"), a.get("detail", "")[:60]) for a in records[run_id].get("attempts", [])]
        print(f"  completed at once yet retried: {run_id}: {history}")


if __name__ == "__main__":
    raise SystemExit(main())
