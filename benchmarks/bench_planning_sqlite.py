"""Planning alone on the SQLite engine: N jobs due in the same second, planned by one tick in one process,
and its CPU per fire; with --ref, the same for another commit's code, pairs run one after the other.

Each side is a child process whose `functions/` is its checkout's (PYTHONPATH ahead of the editable
install): it starts `tickwork local` with the API role only (nothing else plans or reads), creates the jobs
through the job service, due beyond the lookahead, then plans every shard once at an instant whose horizon
reaches the due second (`Planner.plan_shards`, as the ticker role calls it). The CPU counted is the child's
own over that call: the planner, its store writes and its sends to the queue.

    python benchmarks/bench_planning_sqlite.py 10000                 # this checkout
    python benchmarks/bench_planning_sqlite.py 10000 --ref 19ee173   # and 19ee173's, two pairs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _e2e import exit_cleanly_on_sigterm

REPO = Path(__file__).resolve().parent.parent
SHARDS = 16
QUEUES = 4  # `tickwork local`'s default: a round fills one batch per queue


def plan_once(n: int) -> dict[str, float]:
    """In this process: seed `n` jobs due in one second, plan them, and say what planning cost."""
    from _e2e import LocalSettings, LocalTickwork, fixed_second, seed_jobs

    with tempfile.TemporaryDirectory(prefix="tickwork-plan-") as tmp:
        settings = LocalSettings(
            shards=SHARDS, queues=QUEUES, cap=200, lookahead=120, tick_interval=600.0, sweep_interval=600.0
        )
        source = Path(os.environ["TICKWORK_SOURCE"])
        with LocalTickwork(Path(tmp) / "plan", settings, roles="api", source=source) as local:
            parts = local.components(role="ticker")
            due, expression = fixed_second(time.time() + n / 300 + 200)
            seed_jobs(parts, n, expression, "http://127.0.0.1:9/plan")
            planner = parts.planner()
            now = due - timedelta(seconds=100)  # the due second inside the 120 s lookahead
            cpu, wall = time.process_time(), time.monotonic()
            summary = planner.plan_shards(list(range(SHARDS)), now)
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    planned = sum(report.runs_planned for report in summary.reports)
    if planned != n:
        raise RuntimeError(f"planned {planned} of {n} fires")
    return {"planned": planned, "cpu_s": cpu, "wall_s": wall}


def side(n: int, source: Path) -> dict[str, float]:
    """One measurement in a child process on `source`'s code."""
    env = {**os.environ, "PYTHONPATH": f"{source / 'functions'}", "TICKWORK_SOURCE": str(source)}
    child = subprocess.Popen(
        [sys.executable, __file__, str(n), "--child"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = child.communicate()
    except BaseException:
        # SIGTERM, not SIGKILL: the child unwinds and stops its `tickwork local` before it exits.
        child.terminate()
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        raise
    if child.returncode != 0:
        raise RuntimeError(f"the planning child failed ({child.returncode}):\n{err[-2000:]}")
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("n", type=int, nargs="?", default=10000, help="jobs due in the same second")
    parser.add_argument("--ref", help="also measure this commit's code (a temporary worktree), pairs in turn")
    parser.add_argument("--pairs", type=int, default=2, help="measurements of each side, alternating")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    exit_cleanly_on_sigterm()  # SIGTERM unwinds: every process this started is stopped
    if args.child:
        print(json.dumps(plan_once(args.n)))
        return
    from _common import baseline_checkout
    from _e2e import machine

    print(f"machine: {machine()}")
    with ExitStack() as stack:
        sides = [("this checkout", REPO)]
        if args.ref:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tickwork-plan-ref-")))
            sides.insert(0, (f"@{args.ref}", stack.enter_context(baseline_checkout(args.ref, tmp))))
        results: dict[str, list[float]] = {label: [] for label, _ in sides}
        for _ in range(args.pairs):
            for label, source in sides:
                measured = side(args.n, source)
                per_fire = measured["cpu_s"] / measured["planned"] * 1000
                results[label].append(per_fire)
                print(f"  {label}: {measured['planned']:.0f} fires planned, {measured['cpu_s']:.2f} s CPU "
                      f"({per_fire:.3f} ms per fire), {measured['wall_s']:.2f} s wall")  # fmt: skip
    means = {label: sum(values) / len(values) for label, values in results.items()}
    for label, mean in means.items():
        print(f"{label}: {mean:.3f} ms CPU per fire planned (mean of {len(results[label])})")
    if args.ref:
        before, after = means[f"@{args.ref}"], means["this checkout"]
        print(f"this checkout / @{args.ref}: {after / before:.2f}x")


if __name__ == "__main__":
    main()
