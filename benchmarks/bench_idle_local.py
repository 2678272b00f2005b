"""Idle `tickwork local`: the CPU of each of its processes, and their wake-ups, with N jobs registered and
none due, on the SQLite engine, as `make run` starts it (every role, two executor processes, the
supervisor). With `--tickwork-ref`, the same for Tickwork as of that commit (a temporary worktree), then this
checkout, alternating `--rounds` times in one invocation.

bench_peers.py's idle column counts CPU from /proc's utime + stime, in 10 ms ticks: over 60 s a process that
is nearly idle shows 0, 1 or 2 of them. This reads each thread's /proc/PID/task/TID/schedstat instead: the
nanoseconds it ran and how often it was scheduled (its wake-ups), so a look that costs a tenth of a
millisecond counts as that.

The jobs fire once a day, three hours ahead: nothing is planned or run in the window. The window begins
`--settle` seconds after the last job was registered (the registration's own tail: snapshots, the watcher's
rounds over the creates). The sweeper audits a tenth of the jobs each minute, so a 60 s window holds one
audit segment and one tick.

    python benchmarks/bench_idle_local.py 10000 [--tickwork-ref REV] [--window 60] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import baseline_checkout, machine
from _e2e import LocalSettings, LocalTickwork, Target, fixed_second, seed_jobs
from _peers import Services

ROLES = "api,executor,ticker,sweeper,watcher"  # `tickwork local`'s default roles
Threads = dict[tuple[int, int], tuple[int, int]]  # (pid, tid) -> (ns on CPU, times scheduled)


def _threads(pid: int) -> Threads:
    """Every thread of `pid`: the nanoseconds it ran and how often it was scheduled (0 if it is gone)."""
    found: Threads = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            ran, _, scheduled = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
        except (OSError, ValueError):
            continue
        found[(pid, int(tid))] = (int(ran), int(scheduled))
    return found


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            for tid in os.listdir(f"/proc/{current}/task"):
                pending.extend(
                    int(child) for child in Path(f"/proc/{current}/task/{tid}/children").read_text().split()
                )
        except OSError:
            continue
    return found


def idle(
    n: int, workdir: Path, window: float, settle: float, source: Path | None
) -> dict[str, tuple[float, int]]:
    """Each process's CPU (ms) and wake-ups over `window` seconds of an idle runtime with `n` jobs."""
    target = Target().start()
    try:
        local = LocalSettings(cap=200, tick_interval=60.0, lookahead=120, sweep_interval=60.0)
        runtime = LocalTickwork(workdir, local, source=source, roles=ROLES, status_interval=5.0)
        with runtime:
            parts = runtime.components()
            _, expression = fixed_second(time.time() + 3 * 3600)
            seed_jobs(parts, n, expression, f"{target.url}/idle", 8)
            time.sleep(settle)
            assert runtime.process is not None
            roles = {"supervisor": [runtime.process.pid]} | {
                role: _descendants(pid) for role, pid in runtime.pids().items()
            }
            before = {
                role: {k: v for pid in pids for k, v in _threads(pid).items()} for role, pids in roles.items()
            }
            time.sleep(window)
            after = {
                role: {k: v for pid in pids for k, v in _threads(pid).items()} for role, pids in roles.items()
            }
    finally:
        target.stop()
    used: dict[str, tuple[float, int]] = {}
    for role, threads in after.items():
        ran = sum(ns - before[role].get(key, (0, 0))[0] for key, (ns, _) in threads.items())
        woke = sum(count - before[role].get(key, (0, 0))[1] for key, (_, count) in threads.items())
        used[role] = (ran / 1e6, woke)
    return used


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("jobs", type=int, nargs="?", default=10_000)
    parser.add_argument("--tickwork-ref", help="also Tickwork as of this git commit, first in each round")
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds after the registration")
    parser.add_argument("--rounds", type=int, default=1, help="alternations of the two (with --tickwork-ref)")
    args = parser.parse_args()
    services = Services()
    services.cleanup_on_exit()  # SIGTERM, SIGHUP and Ctrl-C unwind: every runtime started is stopped
    print(f"machine: {machine()}")
    print(f"{args.jobs:,} jobs registered, none due; {args.window:.0f} s measured {args.settle:.0f} s after")
    results: dict[str, list[dict[str, tuple[float, int]]]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="tickwork-idle-") as tmp, ExitStack() as stack:
        sources: list[tuple[str, Path | None]] = [("this checkout", None)]
        if args.tickwork_ref:
            before = stack.enter_context(baseline_checkout(args.tickwork_ref, Path(tmp)))
            sources.insert(0, (f"@{args.tickwork_ref}", before))
        for round_number in range(args.rounds):
            for label, source in sources:
                workdir = Path(tmp) / f"{label.strip('@').replace(' ', '_')}-{round_number}"
                used = idle(args.jobs, workdir, args.window, args.settle, source)
                results[label].append(used)
                total = sum(ms for ms, _ in used.values())
                print(
                    f"{label} (round {round_number + 1}): {total:.1f} ms = {total / args.window:.2f} ms/s",
                    flush=True,
                )
    print()
    print("| Tickwork | " + " | ".join(_ROLE_ORDER) + " | total | per second |")
    print("|---|" + "---|" * (len(_ROLE_ORDER) + 2))
    for label, rounds in results.items():
        for used in rounds:
            cells = [
                f"{used.get(role, (0.0, 0))[0]:.1f} ms ({used.get(role, (0.0, 0))[1]})"
                for role in _ROLE_ORDER
            ]
            total = sum(ms for ms, _ in used.values())
            print(
                f"| {label} | " + " | ".join(cells) + f" | {total:.1f} ms | {total / args.window:.2f} ms/s |"
            )
    print("(CPU over the window, ms, and in brackets the times its threads were scheduled: their wake-ups)")


_ROLE_ORDER = ("supervisor", "api", "executor", "executor-2", "ticker", "sweeper", "watcher")


if __name__ == "__main__":
    main()
