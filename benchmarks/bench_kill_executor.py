"""SIGKILL the executor mid-run: N callback runs (the target answered 202 and heartbeats them) and N response
runs (the target holds each call S seconds, default 20) are in flight when the executor role is SIGKILLed;
the supervisor restarts it. Then, per run:

- response runs: the killed executor was in their call. Each attempt ends at its lease end (the job's
  timeout + --lease-margin after the claim) and is retried (backoff at most 1 s): how long after the lease
  end the attempt was ended and the retry called the target (seconds), and that each then succeeds on
  attempt 2;
- callback runs: nothing of theirs was in the executor. The target keeps heartbeating through the outage
  and completes them a few seconds after the kill: how long each completion took to be applied (by the
  restarted executor), and that each succeeds on attempt 1, called once.

Samples `running` from the SQLite file (read-only), and the concurrency slots' live holds when the file
has them (a crashed worker's slot must be free again by its run's lease end).

    python benchmarks/bench_kill_executor.py [--runs 100] [--sleep 20] [--timeout 25] [--lease-margin 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _callbacks import (
    Call,
    CallbackTarget,
    Tally,
    Timeline,
    exit_once_on_sigterm,
    job_spec,
    live_slot_holds,
    load_average,
    others_note,
    report,
    run_states,
    seed_specs,
)
from _e2e import (
    LocalSettings,
    LocalTickwork,
    fixed_second,
    iso,
    machine,
    other_benchmarks,
    parse_ms,
    sleep_until,
    wait_for,
)
from tickwork.domain.models import RetryPolicy


@dataclass(frozen=True)
class KillSettings(LocalSettings):
    lease_margin: int = 2

    def args(self) -> list[str]:
        return [*super().args(), "--lease-margin", str(self.lease_margin)]


def stats(values: Sequence[float]) -> str:
    if not values:
        return "n=0"
    ordered = sorted(values)
    return (
        f"min {ordered[0]:+.1f} s, p50 {ordered[len(ordered) // 2]:+.1f} s, "
        f"max {ordered[-1]:+.1f} s (n={len(ordered)})"
    )


def read_runs(database: Path) -> dict[str, dict[str, Any]]:
    """Every run item, by run id (read-only)."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)
    try:
        rows = connection.execute("SELECT item FROM runs").fetchall()
    finally:
        connection.close()
    items = [json.loads(row[0]) for row in rows]
    return {str(item["run_id"]): item for item in items}


def slot_rows(database: Path) -> dict[str, int]:
    """The `all` pool's holds, holder (`<run id>/<attempt>`) -> lease end (epoch ms); {} without slots."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)
    try:
        rows = connection.execute("SELECT holder, lease_ms FROM slot_holds WHERE pool = 'all'").fetchall()
    except sqlite3.Error:
        return {}
    finally:
        connection.close()
    return {str(holder): int(lease) for holder, lease in rows}


def held_by(holder: str) -> tuple[str, int]:
    """(run id, attempt) of a holder: `<run id>/<attempt>`, or `<run id>@<lease owner>/<attempt>`."""
    named, _, attempt = holder.rpartition("/")
    return named.split("@", 1)[0], int(attempt)


def freed_at(
    run_id: str, attempt: int, rows: list[tuple[float, dict[str, int]]], after: float
) -> float | None:
    """When the run attempt's holds stopped counting (after `after`): every row gone or past its lease."""
    for at, holders in rows:
        if at < after:
            continue
        leases = [lease for holder, lease in holders.items() if held_by(holder) == (run_id, attempt)]
        if all(lease / 1000 <= at for lease in leases):
            return max(lease / 1000 for lease in leases) if leases else at
    return None


class Beats:
    """Heartbeats each callback run's latest attempt every `every` s; completes them all when told."""

    def __init__(self, timeline: Timeline, every: float) -> None:
        self.timeline = timeline
        self.every = every
        self.tally = Tally()
        self.latest: dict[str, Call] = {}
        self.completing = False
        self.completed_at: dict[str, float] = {}  # run id -> when its completion was answered 202
        self._lock = threading.Lock()

    def on_call(self, call: Call) -> None:
        if not call.complete_url:
            return
        with self._lock:
            self.latest[call.run_id] = call
        self.timeline.at(call.at + self.every, lambda: self._beat(call))

    def _beat(self, call: Call) -> None:
        with self._lock:
            if self.completing or self.latest.get(call.run_id) is not call:
                return
        status = report(call.heartbeat_url)
        self.tally.add("heartbeat", status)
        if status != 409:
            self.timeline.at(time.time() + self.every, lambda: self._beat(call))

    def complete_all(self) -> None:
        with self._lock:
            self.completing = True
            calls = list(self.latest.values())
        for call in calls:
            self.timeline.at(time.time(), partial(self._complete, call))

    def _complete(self, call: Call) -> None:
        status = report(call.complete_url, {"outcome": "succeeded", "status": "0"})
        self.tally.add("complete", status)
        if status == 202:
            with self._lock:
                self.completed_at[call.run_id] = time.time()
        elif status in (0, 503):
            self.timeline.at(time.time() + 0.5, lambda: self._complete(call))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="callback runs, and as many response runs")
    parser.add_argument("--sleep", type=float, default=20.0, help="seconds the target holds a response call")
    parser.add_argument("--timeout", type=int, default=25, help="the response jobs' timeout_seconds")
    parser.add_argument("--lease-margin", type=int, default=2, help="tickwork local --lease-margin")
    parser.add_argument("--heartbeat-seconds", type=int, default=10, help="the callback jobs' heartbeat")
    parser.add_argument("--beat-every", type=float, default=4.0)
    parser.add_argument("--kill-after", type=float, default=3.0, help="seconds after every call arrived")
    parser.add_argument("--complete-after", type=float, default=5.0, help="seconds after the kill")
    parser.add_argument(
        "--cap",
        type=int,
        help="tickwork local --cap (default 2 x runs + 10: the retries need no slot the dead attempts hold; "
        "2 x runs: every retry needs a slot a dead attempt held)",
    )
    args = parser.parse_args()
    if args.sleep >= args.timeout:
        parser.error("--sleep must be under --timeout: the retry of a killed call must succeed")
    exit_once_on_sigterm()
    wall_start = time.time()
    print(f"machine: {machine()}; load average {load_average()}")
    if others := other_benchmarks():
        print(f"note: other benchmarks/tests running at start: {others_note(others)}")
    n: int = args.runs
    settings = KillSettings(
        shards=4,
        queues=2,
        cap=args.cap or 2 * n + 10,
        lookahead=20,
        tick_interval=2.0,
        sweep_interval=5.0,
        lease_margin=args.lease_margin,
        executors=1,  # it SIGKILLs the executor process by name
    )
    timeline = Timeline(workers=8).start()
    beats = Beats(timeline, args.beat_every)
    target = CallbackTarget(on_call=beats.on_call).start()
    samples: list[tuple[float, int, int | None]] = []  # at, running, live slot holds
    hold_rows: list[tuple[float, dict[str, int]]] = []  # at, the `all` pool's holder -> lease (epoch ms)
    stop = threading.Event()
    try:
        with tempfile.TemporaryDirectory(prefix="tickwork-kill-") as tmp:
            local = LocalTickwork(Path(tmp) / "tickwork", settings).start()
            database = local.state_dir / "tickwork.db"

            def sample() -> None:
                while not stop.wait(0.5):
                    try:
                        running = run_states(database).get("running", 0)
                    except sqlite3.Error:
                        continue
                    samples.append((time.time(), running, live_slot_holds(database)))
                    hold_rows.append((time.time(), slot_rows(database)))

            try:
                parts = local.components()
                # Beyond the lookahead: the ticker plans the runs, and each run's message carries it.
                due_at, expression = fixed_second(time.time() + settings.lookahead + 15 + n / 50)
                due = due_at.timestamp()
                callback_ids, _ = seed_specs(
                    parts,
                    n,
                    lambda i: job_spec(
                        f"callback {i}",
                        expression,
                        f"{target.url}/work",
                        600,
                        heartbeat_seconds=args.heartbeat_seconds,
                    ),
                )
                response_ids, _ = seed_specs(
                    parts,
                    n,
                    lambda i: job_spec(
                        f"response {i}",
                        expression,
                        f"{target.url}/slow?sleep={args.sleep}",
                        args.timeout,
                        callback=False,
                        retry=RetryPolicy(max_attempts=3, backoff_base_seconds=1, backoff_max_seconds=1),
                    ),
                )
                print(
                    f"seeded {n} callback + {n} response jobs '{expression}', due {iso(due)} "
                    f"({due - time.time():.0f} s)",
                    flush=True,
                )
                if time.time() > due - 2:
                    raise SystemExit("seeding ran past the fire second: rerun")
                sleep_until(due - 2)
                threading.Thread(target=sample, daemon=True, name="sampler").start()
                everything = wait_for(lambda: target.called_runs() >= 2 * n, timeout=60, every=0.1)
                last_call = max(c.at for c in target.snapshot())
                wait_for(lambda: bool(samples) and samples[-1][1] >= 2 * n, timeout=10, every=0.2)
                sleep_until(last_call + args.kill_after)
                before = read_runs(database)
                executor = local.pids()["executor"]
                os.kill(executor, signal.SIGKILL)
                killed = time.time()
                running_at_kill = sum(1 for r in before.values() if r["state"] == "running")
                print(
                    f"all {2 * n} called: {everything}, the last {last_call - due:.1f} s after the fire; "
                    f"SIGKILL executor pid {executor} at t={killed - due:.1f} s with {running_at_kill} "
                    "runs running",
                    flush=True,
                )
                wait_for(lambda: local.pids().get("executor") not in (None, executor), timeout=30, every=0.05)
                restarted = time.time()
                sleep_until(killed + args.complete_after)
                beats.complete_all()
                completing = time.time()

                seen_ended: dict[str, float] = {}  # run id -> when a poll first saw it ended

                def all_ended() -> bool:
                    now = time.time()
                    for run_id, item in read_runs(database).items():
                        if item["state"] in ("succeeded", "failed", "cancelled"):
                            seen_ended.setdefault(run_id, now)
                    return len(seen_ended) >= 2 * n

                drained = wait_for(
                    all_ended, timeout=args.timeout + args.lease_margin + args.sleep + 120, every=0.25
                )
                ended_at = time.time()
                time.sleep(1)
                after = read_runs(database)
                # The killed attempts' slots may count a while longer: sample until each stopped counting.
                killed_runs = [r for r in before if r.split(":")[0] in set(response_ids)]
                slots_back = wait_for(
                    lambda: all(freed_at(r, 1, hold_rows, killed) is not None for r in killed_runs),
                    timeout=180,
                    every=1,
                )
                restarts = (local.state_dir / "cli.out").read_text(errors="replace").count("restarted")
            finally:
                stop.set()
                local.stop()
    finally:
        timeline.stop()
        target.stop()

    calls = target.snapshot()
    by_run: dict[str, list[Call]] = {}
    for call in calls:
        by_run.setdefault(call.run_id, []).append(call)
    callback_runs = {r: item for r, item in after.items() if r.split(":")[0] in set(callback_ids)}
    response_runs = {r: item for r, item in after.items() if r.split(":")[0] in set(response_ids)}

    ended_after_lease: list[float] = []
    retried_after_lease: list[float] = []
    for run_id, item in response_runs.items():
        lease_end = parse_ms(before.get(run_id, {}).get("lease_expires_at"))
        if lease_end is None:
            continue
        attempts = item.get("attempts", [])
        if attempts and attempts[0].get("status") == "LeaseExpired":
            ended = parse_ms(attempts[0].get("finished_at"))
            if ended is not None:
                ended_after_lease.append(ended - lease_end)
        second = [c.at for c in by_run.get(run_id, []) if c.attempt == 2]
        if second:
            retried_after_lease.append(min(second) - lease_end)
    slot_back: list[float] = []  # the dead attempt's slot free again, after its run's lease end
    for run_id in response_runs:
        lease_end = parse_ms(before.get(run_id, {}).get("lease_expires_at"))
        free = freed_at(run_id, 1, hold_rows, killed)
        if lease_end is not None and free is not None:
            slot_back.append(free - lease_end)
    applied_after: list[float] = []
    for run_id in callback_runs:
        seen, answered = seen_ended.get(run_id), beats.completed_at.get(run_id)
        if seen is not None and answered is not None:
            applied_after.append(seen - answered)

    def summary_of(runs: dict[str, dict[str, Any]]) -> str:
        states = Counter(str(r["state"]) for r in runs.values())
        attempts = Counter(int(r.get("attempt", 0)) for r in runs.values())
        statuses = Counter(
            " ".join(str(a.get("status")) for a in r.get("attempts", [])) for r in runs.values()
        )
        return f"states {dict(states)}; attempts {dict(sorted(attempts.items()))}; history {dict(statuses)}"

    print(
        f"\nexecutor SIGKILLed mid-run: {n} callback runs + {n} response runs (target holds {args.sleep} s)"
    )
    print(f"  settings          tickwork local {settings.describe()}")
    print(
        f"  kill              t={killed - due:.1f} s after the fire; the supervisor restarted the executor "
        f"{restarted - killed:.1f} s later (pids.json); restarts in cli.out: {restarts}"
    )
    print(f"  response runs     {summary_of(response_runs)}")
    print(f"    attempt 1 ended after its lease end: {stats(ended_after_lease)}")
    print(f"    retry called after the lease end:    {stats(retried_after_lease)}")
    print(
        f"    the killed attempt's slot free again after the lease end (row gone or its lease passed; "
        f"samples every 0.5 s): {stats(slot_back)}" + ("" if slots_back else " (not all within 180 s)")
    )
    response_calls = Counter(len(by_run.get(r, [])) for r in response_runs)
    print(f"    target calls per run: {dict(response_calls)}")
    print(f"  callback runs     {summary_of(callback_runs)}")
    callback_calls = Counter(len(by_run.get(r, [])) for r in callback_runs)
    print(f"    target calls per run: {dict(callback_calls)}")
    print(
        f"    completions sent t={completing - due:.1f} s ({completing - killed:.1f} s after the kill): "
        f"{beats.tally.of('complete')}; seen ended after the 202 (polled every 0.25 s): "
        f"{stats(applied_after)}"
    )
    print(f"    heartbeats: {beats.tally.of('heartbeat')} (sent through the outage: the API answers them)")
    peak = max((s[1] for s in samples), default=0)
    holds = [s[2] for s in samples if s[2] is not None]
    after_kill = [s for s in samples if s[0] >= killed]
    print(
        f"  running           peak {peak} (cap {settings.cap}); at the kill {running_at_kill}; "
        f"slot holds {'peak ' + str(max(holds)) if holds else 'none in this database'}"
        + (f", live holds at the end {holds[-1]}" if holds else "")
    )
    if after_kill:
        zero = next((at for at, running, _ in after_kill if running == 0), None)
        if zero is not None:
            print(f"  all runs ended    t={zero - due:.1f} s after the fire")
    all_ok = (
        drained
        and all(r["state"] == "succeeded" for r in after.values())
        and len(callback_runs) == n
        and len(response_runs) == n
    )
    print(f"  every run succeeded: {all_ok}; drained in {ended_at - completing:.1f} s after the completions")
    print(f"  wall time {time.time() - wall_start:.0f} s; load average at the end {load_average()}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
