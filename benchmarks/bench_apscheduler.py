"""Side by side, same machine, same invocation: the Tickwork burst (`tickwork local`, see bench_burst.py) and
APScheduler 3 (BackgroundScheduler, SQLAlchemyJobStore on a SQLite file, ThreadPoolExecutor) with the same N
jobs on a cron trigger for one second, each calling the same loopback HTTP target.

Start delay = arrival at the target - the scheduled second, for both. CPU per fire:
- APScheduler: CPU time (user + system, all threads) of the scheduler process, which runs only the scheduler
  (the target runs in this process), from the last job added to the last fire done, / fires.
- Tickwork: CPU time of every process of `tickwork local` (api, executor, ticker, sweeper role processes, and
  the MiniStack emulator on that engine) from the last job seeded to the last run done (so the planning
  tick, the idle ticks while waiting and the execution), / fires. The supervisor (`tickwork local`
  itself) is not included.

    python benchmarks/bench_apscheduler.py [N ...]            # default: 1000, Tickwork on SQLite
    python benchmarks/bench_apscheduler.py 1000 --engines sqlite,emulator   # both local engines too
    python benchmarks/bench_apscheduler.py 10000 --side tickwork   # then --side aps: each under 10 min
    python benchmarks/bench_apscheduler.py --chart docs/burst_start_delay.png   # from saved results
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import baseline_checkout
from _e2e import (
    LocalSettings,
    Target,
    exit_cleanly_on_sigterm,
    fixed_second,
    fmt_ms,
    iso,
    machine,
    other_benchmarks,
    summary,
    wait_for,
)
from bench_burst import report, run_tickwork_burst

RESULTS = Path(tempfile.gettempdir()) / "tickwork-e2e-results"


# --- the APScheduler process ----------------------------------------------------------------------------


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def aps_worker(n: int, url: str, pool: int, grace: int | None, db: Path) -> None:
    """Runs in its own process: schedules N jobs for one second, waits for the burst, prints a JSON line."""
    from peer_aps import Burst

    burst = Burst(n, pool, grace, db)
    counts = burst.counts
    due, _ = fixed_second(time.time() + 15 + n * 0.006)
    seed_seconds = burst.add(url, due.timestamp())
    cpu_seed_end, seed_end = _cpu(), time.time()
    late_jobs = burst.not_on(due.timestamp())
    wait_for(lambda: sum(counts.values()) >= n, timeout=due.timestamp() - time.time() + 300, every=0.2)
    done_at, cpu_done = time.time(), _cpu()
    burst.scheduler.shutdown(wait=True)
    print(
        json.dumps(
            {
                "due": due.timestamp(),
                "seed_seconds": seed_seconds,
                "seed_end_before_due": due.timestamp() - seed_end,
                "jobs_not_on_the_due_second": late_jobs,
                "counts": counts,
                "cpu_seconds": cpu_done - cpu_seed_end,
                "window_seconds": done_at - seed_end,
            }
        ),
        flush=True,
    )


def run_apscheduler_burst(
    n: int, target: Target, pool: int, grace: int | None, workdir: Path
) -> dict[str, Any]:
    target.reset()
    db = workdir / f"aps-{n}.sqlite"
    args = [sys.executable, __file__, "--worker", str(n), "--url", target.url, "--pool", str(pool)]
    if grace is not None:
        args += ["--misfire-grace", str(grace)]
    started = time.time()
    process = subprocess.run(
        [*args, "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent)},
        check=False,
    )
    if process.returncode != 0:
        raise RuntimeError(f"APScheduler worker failed: {process.stderr[-3000:]}")
    outcome: dict[str, Any] = json.loads(process.stdout.strip().splitlines()[-1])
    due = float(outcome["due"])
    arrivals = [a for a in target.arrivals if a.key.startswith("aps-") and a.at >= started]
    first: dict[str, float] = {}
    for a in sorted(arrivals, key=lambda a: a.at):
        first.setdefault(a.key, a.at)
    outcome["delays_target"] = [at - due for at in first.values()]
    outcome["arrivals"] = len(arrivals)
    outcome["duplicates"] = len(arrivals) - len(first)
    outcome["last_arrival"] = max(first.values()) - due if first else float("nan")
    fires = outcome["counts"]["executed"]
    outcome["cpu_per_fire_ms"] = outcome["cpu_seconds"] / max(1, fires) * 1000
    return outcome


def report_aps(n: int, pool: int, grace: int | None, outcome: dict[str, Any]) -> None:
    counts = outcome["counts"]
    print(
        f"\nAPScheduler {_aps_version()} burst of {n} (BackgroundScheduler, SQLAlchemyJobStore on SQLite "
        f"file, ThreadPoolExecutor({pool}), misfire_grace_time={grace}, coalesce=False)"
    )
    print(f"  due second        {iso(outcome['due'])}")
    print(
        f"  jobs added        {outcome['seed_seconds']:.1f} s ({n / outcome['seed_seconds']:.0f} jobs/s), "
        f"{outcome['seed_end_before_due']:.0f} s before the due second; "
        f"jobs not on the due second: {outcome['jobs_not_on_the_due_second']}"
    )
    print(
        f"  fires             executed {counts['executed']}, errors {counts['error']}, "
        f"misfired {counts['missed']}; target calls {outcome['arrivals']} "
        f"(duplicates {outcome['duplicates']})"
    )
    print(f"  start delay (at target)   {fmt_ms(summary(outcome['delays_target']))}")
    print(f"  last call arrived {outcome['last_arrival']:.2f} s after the due second")
    print(
        f"  CPU               {outcome['cpu_seconds']:.1f} s over {outcome['window_seconds']:.0f} s "
        f"(scheduler process) = {outcome['cpu_per_fire_ms']:.2f} ms per fire"
    )


def _aps_version() -> str:
    from importlib.metadata import version

    return version("apscheduler")


# --- the chart ------------------------------------------------------------------------------------------


def chart(out: Path, results_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    files = sorted(results_dir.glob("side_by_side_*.json"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    if not files:
        raise SystemExit(f"no results in {results_dir}: run the benchmark first")
    fig, axes = plt.subplots(1, len(files), figsize=(6.2 * len(files), 4.6), squeeze=False)
    colors = {"tickwork": "#1f77b4", "tickwork_emulator": "#7f7f7f", "aps": "#d62728"}
    for ax, path in zip(axes[0], files, strict=True):
        data = json.loads(path.read_text())
        for key, label in LABELS.items():
            delays = data.get(key, {}).get("delays_target")
            if not delays:
                continue
            values = np.sort(np.maximum(np.asarray(delays), 1e-3))
            stats = summary(delays)
            ax.step(
                values,
                np.arange(1, len(values) + 1) / len(values) * 100,
                where="post",
                color=colors[key],
                linewidth=2,
                label=(
                    f"{label}\np50 {stats['p50']:.2f} s, p99 {stats['p99']:.2f} s, max {stats['max']:.2f} s"
                ),
            )
        ax.set_xscale("log")
        ax.set_xlabel("start delay: arrival at the target - scheduled second (s, log scale)")
        ax.set_ylabel("runs started (%)")
        ax.set_ylim(0, 101)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"{data['n']:,} jobs due in the same second")
        ax.legend(loc="upper left", fontsize=8.5)
    fig.suptitle(
        "Burst start delay, CDF: tickwork local on its two engines vs APScheduler 3 + SQLite, "
        "same 2-vCPU machine, same loopback HTTP target",
        fontsize=11,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"chart written to {out}")


# --- main -----------------------------------------------------------------------------------------------

# Where each engine's Tickwork results are kept in the saved JSON, and how the table and chart name them.
ENGINE_KEYS = {"sqlite": "tickwork", "emulator": "tickwork_emulator"}
LABELS = {
    "tickwork": "Tickwork, SQLite engine",
    "tickwork_emulator": "Tickwork, emulator engine",
    "aps": "APScheduler 3 + SQLite",
}


def side_by_side(n: int, saved: dict[str, Any]) -> None:
    """The last lines: every side measured for `n`, and the ratios to APScheduler."""
    aps = saved["aps"]
    a = summary(aps["delays_target"])
    print(f"\nside by side, {n} jobs due in the same second (start delay at the target)")
    print(f"  {'':28} {'p50':>9} {'p99':>9} {'max':>9} {'CPU/fire':>10} {'lost':>5} {'dup':>4}")
    rows: list[tuple[str, dict[str, Any]]] = []
    if "baseline" in saved:
        rows.append((f"Tickwork @{saved['baseline']['ref'][:10]}", saved["baseline"]))
    rows += [(LABELS[key], saved[key]) for key in ENGINE_KEYS.values() if key in saved]
    rows.append((LABELS["aps"], {**aps, "not_succeeded": aps["counts"]["missed"] + aps["counts"]["error"]}))
    for name, side in rows:
        s = summary(side["delays_target"])
        print(
            f"  {name:28} {s['p50']:8.2f}s {s['p99']:8.2f}s {s['max']:8.2f}s "
            f"{side['cpu_per_fire_ms']:8.2f}ms {side.get('not_succeeded', 0):5} {side.get('duplicates', 0):4}"
        )
    for key in ENGINE_KEYS.values():
        if key in saved:
            t = summary(saved[key]["delays_target"])
            print(
                f"  ratio {LABELS[key]} / APScheduler: p99 {t['p99'] / a['p99']:.2f}x, "
                f"last start {t['max'] / a['max']:.2f}x, CPU per fire "
                f"{saved[key]['cpu_per_fire_ms'] / aps['cpu_per_fire_ms']:.2f}x"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("counts", nargs="*", type=int, default=[1000])
    parser.add_argument("--pool", type=int, default=500, help="APScheduler thread pool (= Tickwork's cap)")
    parser.add_argument("--misfire-grace", type=int, default=300, help="APScheduler misfire_grace_time (s)")
    parser.add_argument(
        "--side",
        choices=["both", "tickwork", "aps"],
        default="both",
        help="run one side only (10,000 both sides take over 10 minutes: run them one after the other); "
        "results for the same N are merged",
    )
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="also run the Tickwork side from this git commit (a temporary worktree, on the first of "
        "--engines), in the same run",
    )
    parser.add_argument(
        "--engines", default="sqlite", help="Tickwork's engines to run, in order: sqlite, emulator"
    )
    parser.add_argument("--lookahead", type=int, default=180)
    parser.add_argument("--tick-interval", type=float, default=20.0)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--chart", type=Path, help="only draw the chart from saved results, to this PNG")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        aps_worker(args.worker, args.url, args.pool, args.misfire_grace, args.db)
        return
    if args.chart is not None:
        chart(args.chart, args.results_dir)
        return
    engines = [e for e in args.engines.split(",") if e]
    if not engines or set(engines) - set(ENGINE_KEYS):
        raise SystemExit(f"--engines: choose from {', '.join(ENGINE_KEYS)}")
    settings = LocalSettings(cap=args.pool, lookahead=args.lookahead, tick_interval=args.tick_interval)
    exit_cleanly_on_sigterm()
    print(f"machine: {machine()}")
    if others := other_benchmarks():
        print(f"note: other benchmarks running at start: {others}")
    target = Target().start()
    try:
        with tempfile.TemporaryDirectory(prefix="tickwork-side-by-side-") as tmp:
            for n in args.counts:
                path = args.results_dir / f"side_by_side_{n}.json"
                saved: dict[str, Any] = {"n": n}
                if args.side != "both" and path.exists():
                    saved = json.loads(path.read_text())
                if args.baseline and args.side in ("both", "tickwork"):
                    with baseline_checkout(args.baseline, Path(tmp)) as source:
                        # On the first of --engines, so before and after compare like with like.
                        before = run_tickwork_burst(
                            n, target, replace(settings, engine=engines[0]), Path(tmp), source=source
                        )
                    print(f"  (baseline: Tickwork at {args.baseline})")
                    report(before)
                    saved["baseline"] = {
                        "ref": args.baseline,
                        "delays_target": before.delays_target,
                        "cpu_per_fire_ms": before.cpu_per_fire_ms(),
                        "not_succeeded": n - before.states.get("succeeded", 0),
                    }
                for engine in engines if args.side in ("both", "tickwork") else []:
                    result = run_tickwork_burst(n, target, replace(settings, engine=engine), Path(tmp))
                    report(result)
                    saved[ENGINE_KEYS[engine]] = {
                        "delays_target": result.delays_target,
                        "delays_record": result.delays_record,
                        "cpu_per_fire_ms": result.cpu_per_fire_ms(),
                        "not_succeeded": n - result.states.get("succeeded", 0),
                        "duplicates": result.duplicates,
                    }
                if args.side in ("both", "aps"):
                    if others := other_benchmarks():
                        print(f"note: other benchmarks running before the APScheduler burst: {others}")
                    outcome = run_apscheduler_burst(n, target, args.pool, args.misfire_grace, Path(tmp))
                    report_aps(n, args.pool, args.misfire_grace, outcome)
                    saved["aps"] = outcome
                if "aps" in saved and any(key in saved for key in ENGINE_KEYS.values()):
                    side_by_side(n, saved)
                args.results_dir.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(saved))
    finally:
        target.stop()


if __name__ == "__main__":
    main()
