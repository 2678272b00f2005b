"""Every scheduler on the same burst, one after another in one invocation: N jobs due in the same second,
each calling the same loopback HTTP target once. For each size, one table and the chart.

Schedulers (each script says how it is set up, and why, setting by setting):
- Tickwork, `tickwork local` on SQLite (peer_tickwork.py);
- APScheduler 3 on SQLite (peer_aps.py);
- Celery beat + RedBeat on Redis, AOF with fsync every second (peer_celery.py);
- Temporal's dev server on SQLite (peer_temporal.py).
Each gets the same worker concurrency (Tickwork's cap, PeerSettings.concurrency), the same call timeout and
up to the same attempts, and durable storage.

Figures (every one from this invocation):
- start delay: the first arrival of each run at the target - the scheduled second: p50, p99, the last;
- CPU per fire: CPU of every process of the scheduler (its services included: Redis, Temporal's server)
  from one second before the due second until its own record says the last run is done, / runs done.
  Tickwork plans ahead: the tick that planned the burst is added (peer_tickwork.py);
- idle CPU per second: over PeerSettings.idle_seconds after the burst, the N jobs still registered;
- peak RSS of every process; lost runs (never reached the target), duplicate arrivals;
- in the notes, the whole machine over each burst window: its busy CPU beside the scheduler's, and the time
  the hypervisor stole (MachineMeter): a run the machine disturbed shows it.

    python benchmarks/bench_peers.py 1000 10000 --chart docs/burst_start_delay.png     # make bench-peers
    python benchmarks/bench_peers.py 1000 --only tickwork,aps
    python benchmarks/bench_peers.py 1000 --tickwork-ref 2d957c7    # Tickwork as of that commit
    python benchmarks/bench_peers.py 1000 --only tickwork,aps --rounds 3   # alternated, ratios per round
    python benchmarks/bench_peers.py --chart docs/burst_start_delay.png --from-json 1000.json 10000.json

With `--rounds R`, each size runs every scheduler R times, alternating: the order is reversed every other
round, so a drift of the shared machine (another tenant, the page cache) weighs on no scheduler alone. Each
round prints its table; then the ratios the targets name, round by round, and their medians. The JSON keeps
every round ("rounds", written after each), and the first under "results"; the chart draws the first.

Every service is started by this script and stopped by PID when it ends, whatever ends it (peers' Services;
`tickwork local` stops its role processes on SIGINT).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import baseline_checkout
from _e2e import Target, machine, other_benchmarks
from _peers import MachineMeter, PeerResult, PeerSettings, Services, machine_note

Runner = Callable[[int, Target, PeerSettings, Path, Services], PeerResult]
ORDER = ("tickwork-before", "tickwork", "aps", "celery", "temporal")
COLORS = {
    "tickwork-before": "#7f7f7f",
    "tickwork": "#1f77b4",
    "aps": "#d62728",
    "celery": "#2ca02c",
    "temporal": "#9467bd",
}


def runners(before: Path | None, before_ref: str, executors: int | None) -> dict[str, Runner]:
    """Each scheduler's runner; `before`: a checkout of an earlier Tickwork, measured as its own row."""
    from peer_aps import run_aps
    from peer_celery import run_celery
    from peer_temporal import run_temporal
    from peer_tickwork import local_settings, run_tickwork

    def tickwork(
        n: int, target: Target, settings: PeerSettings, workdir: Path, services: Services
    ) -> PeerResult:
        local = local_settings(settings, executors)
        return run_tickwork(n, target, settings, workdir, services, local=local)

    def tickwork_before(
        n: int, target: Target, settings: PeerSettings, workdir: Path, services: Services
    ) -> PeerResult:
        assert before is not None
        # Its own defaults (it may not know options this checkout has).
        local = local_settings(settings)
        label = f"Tickwork @{before_ref[:10]}"
        return run_tickwork(n, target, settings, workdir, services, local=local, label=label, source=before)

    found: dict[str, Runner] = {"tickwork": tickwork, "aps": run_aps, "celery": run_celery}
    found["temporal"] = run_temporal
    if before is not None:
        found["tickwork-before"] = tickwork_before
    return found


def table(n: int, results: dict[str, PeerResult], floor_ms: float = 0.0) -> str:
    lines = [f"\n{n:,} jobs due in the same second ({machine()})"]
    header = (
        f"  {'':34} {'p50':>8} {'p99':>8} {'last':>8} {'CPU/fire':>9} {'idle CPU':>10} "
        f"{'lost':>5} {'dup':>4}  peak RSS (MB)"
    )
    lines.append(header)
    for key in ORDER:
        if key not in results:
            continue
        r = results[key]
        s = r.stats()
        rss = ", ".join(f"{k} {v:.0f}" for k, v in r.peak_rss_mb.items())
        lines.append(
            f"  {r.scheduler:34} {s['p50']:7.2f}s {s['p99']:7.2f}s {s['max']:7.2f}s "
            f"{r.cpu_per_fire_ms:7.2f}ms "
            f"{r.idle_cpu_per_s * 1000:6.2f}ms/s {r.lost:5} {r.duplicates:4}  {rss}"
        )
    lines.append("  (idle CPU: CPU seconds per second of every process of the scheduler, N jobs registered)")
    for key in ORDER:
        if key not in results:
            continue
        r = results[key]
        burst = ", ".join(f"{k} {v:.2f}" for k, v in r.burst_cpu_s.items())
        idle = ", ".join(f"{k} {v:.3f}" for k, v in r.idle_cpu_s.items())
        lines.append(
            f"  {r.scheduler}: done {r.fires_done}/{n}; registered in {r.seed_seconds:.1f} s; burst CPU s "
            f"[{burst}] over {r.burst_seconds:.1f} s; idle CPU s [{idle}] over {r.idle_seconds:.0f} s"
        )
        lines.extend(f"    {note}" for note in r.notes)
    if floor_ms:
        for key in ("tickwork-before", "tickwork"):
            if key in results:
                r = results[key]
                lines.append(
                    f"  {r.scheduler}: CPU per fire {r.cpu_per_fire_ms:.2f} ms = "
                    f"{r.cpu_per_fire_ms / floor_ms:.2f}x the floor ({floor_ms:.2f} ms per run)"
                )
    if "tickwork" in results:
        t = results["tickwork"]
        best, p99_ratio, cpu_ratio = target_ratios(results, "tickwork")
        if best is not None:
            lines.append(f"  Tickwork p99 / best peer's ({best.scheduler}): {p99_ratio:.2f}x")
        if "aps" in results:
            a = results["aps"]
            cpu = "n/a (APScheduler used no CPU)" if cpu_ratio is None else f"{cpu_ratio:.2f}x"
            lines.append(
                f"  Tickwork / APScheduler: CPU per fire {cpu}, "
                f"idle CPU {t.idle_cpu_per_s * 1000:.2f} vs {a.idle_cpu_per_s * 1000:.2f} ms/s"
            )
    return "\n".join(lines)


def target_ratios(
    results: dict[str, PeerResult], key: str
) -> tuple[PeerResult | None, float | None, float | None]:
    """What the targets compare for Tickwork's row `key` among one run of each scheduler: the best peer by
    p99 and that row's p99 over the peer's, and its CPU per fire over APScheduler's (None: nothing to
    compare with)."""
    row = results[key]
    peers = [r for k, r in results.items() if not k.startswith("tickwork") and r.delays]
    best = min(peers, key=lambda r: r.stats()["p99"]) if peers else None
    p99_ratio = row.stats()["p99"] / best.stats()["p99"] if best is not None else None
    aps = results.get("aps")
    cpu_ratio = row.cpu_per_fire_ms / aps.cpu_per_fire_ms if aps is not None and aps.cpu_per_fire_ms else None
    return best, p99_ratio, cpu_ratio


def round_order(chosen: list[str], round_index: int) -> list[str]:
    """The schedulers' order in a round: as chosen in even rounds, reversed in odd ones."""
    return list(chosen) if round_index % 2 == 0 else list(reversed(chosen))


def ratios_by_round(n: int, rounds: list[dict[str, PeerResult]]) -> str:
    """The targets' ratios in every round and their medians: each Tickwork row's p99 over the best peer's
    p99 in the same round, and its CPU per fire over APScheduler's in the same round."""
    lines = [f"\n{n:,} jobs, {len(rounds)} rounds: the ratios round by round (median last)"]
    for key in ("tickwork-before", "tickwork"):
        p99s: list[float] = []
        cpus: list[float] = []
        bests: set[str] = set()
        for results in rounds:
            if key not in results:
                continue
            best, p99_ratio, cpu_ratio = target_ratios(results, key)
            if best is not None and p99_ratio is not None and results[key].delays:
                p99s.append(p99_ratio)
                bests.add(best.scheduler)
            if cpu_ratio is not None:
                cpus.append(cpu_ratio)
        if not p99s and not cpus:
            continue
        label = rounds[0][key].scheduler if key in rounds[0] else key
        if p99s:
            lines.append(
                f"  {label}: p99 / best peer's ({', '.join(sorted(bests))}): "
                f"{', '.join(f'{r:.2f}x' for r in p99s)}; "
                f"median {statistics.median(p99s):.2f}x"
            )
        if cpus:
            lines.append(
                f"  {label}: CPU per fire / APScheduler's: {', '.join(f'{r:.2f}x' for r in cpus)}; "
                f"median {statistics.median(cpus):.2f}x"
            )
    return "\n".join(lines)


def chart(out: Path, by_size: dict[int, dict[str, dict[str, Any]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from _e2e import summary

    sizes = sorted(by_size)
    fig, axes = plt.subplots(1, len(sizes), figsize=(6.4 * len(sizes), 4.8), squeeze=False)
    for ax, n in zip(axes[0], sizes, strict=True):
        for key in ORDER:
            data = by_size[n].get(key)
            if not data or not data["delays"]:
                continue
            values = np.sort(np.maximum(np.asarray(data["delays"]), 1e-3))
            stats = summary(data["delays"])
            cpu = sum(data["burst_cpu_s"].values()) / max(1, data["fires_done"]) * 1000
            ax.step(
                values,
                np.arange(1, len(values) + 1) / n * 100,
                where="post",
                color=COLORS[key],
                linewidth=2,
                label=f"{data['scheduler']}\np50 {stats['p50']:.2f} s, p99 {stats['p99']:.2f} s, "
                f"{cpu:.2f} ms CPU/fire",
            )
        ax.set_xscale("log")
        ax.set_xlabel("start delay: arrival at the target - scheduled second (s, log scale)")
        ax.set_ylabel("runs started (% of N)")
        ax.set_ylim(0, 101)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"{n:,} jobs due in the same second")
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(
        "Burst start delay, CDF, one invocation per size: python benchmarks/bench_peers.py "
        + " ".join(str(n) for n in sizes),
        fontsize=10,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    print(f"chart written to {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("counts", nargs="*", type=int, default=[1000])
    parser.add_argument("--only", default=",".join(ORDER), help=f"schedulers, in order: {', '.join(ORDER)}")
    parser.add_argument("--concurrency", type=int, default=PeerSettings.concurrency)
    parser.add_argument("--idle-seconds", type=float, default=PeerSettings.idle_seconds)
    parser.add_argument("--executors", type=int, help="Tickwork's executor processes (default: its own)")
    parser.add_argument(
        "--tickwork-ref",
        help="also run Tickwork as of this git commit (a temporary worktree): first, last in reversed rounds",
    )
    parser.add_argument(
        "--floor",
        type=int,
        default=0,
        metavar="RUNS",
        help="first measure the floor (bench_floor.py) over RUNS",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every scheduler this many times per size, the order reversed every other round",
    )
    parser.add_argument("--json", type=Path, help="write every result here")
    parser.add_argument("--chart", type=Path, help="draw the chart (docs/burst_start_delay.png)")
    parser.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        help="only draw the chart from --json files (a size per invocation)",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: at least 1")

    def of_round(round_index: int) -> str:
        return f" (round {round_index + 1} of {args.rounds})" if args.rounds > 1 else ""

    if args.from_json:
        merged: dict[int, dict[str, dict[str, Any]]] = {}
        for path in args.from_json:
            merged |= {int(n): r for n, r in json.loads(path.read_text())["results"].items()}
        chart(args.chart, merged)
        return
    chosen = [k for k in args.only.split(",") if k]
    if set(chosen) - set(ORDER):
        raise SystemExit(f"--only: choose from {', '.join(ORDER)}")
    settings = PeerSettings(concurrency=args.concurrency, idle_seconds=args.idle_seconds)
    services = Services()
    services.cleanup_on_exit()
    print(f"machine: {machine()}")
    if others := other_benchmarks():
        print(f"note: other benchmarks running at start: {others}")
    by_size: dict[int, dict[str, dict[str, Any]]] = {}  # the first round's (the chart's)
    every_round: dict[int, list[dict[str, dict[str, Any]]]] = {}
    tables = []
    target = Target().start()
    machine_meter = MachineMeter().start()
    try:
        with tempfile.TemporaryDirectory(prefix="tickwork-peers-") as tmp, ExitStack() as stack:
            before = None
            if args.tickwork_ref:
                before = stack.enter_context(baseline_checkout(args.tickwork_ref, Path(tmp)))
            run = runners(before, args.tickwork_ref or "", args.executors)
            floor_ms = 0.0
            if args.floor:
                from bench_floor import floor

                floor_ms, _, _ = floor(args.floor, Path(tmp))
                print(
                    f"the floor ({args.floor:,} runs, bench_floor.py): {floor_ms:.2f} ms CPU per run",
                    flush=True,
                )
            if before is not None and "tickwork-before" not in chosen:
                chosen.insert(0, "tickwork-before")
            for n in args.counts:
                rounds: list[dict[str, PeerResult]] = []
                for round_index in range(args.rounds):
                    results: dict[str, PeerResult] = {}
                    for key in round_order(chosen, round_index):
                        started = time.time()
                        print(f"{n}: {key}{of_round(round_index)} ...", flush=True)
                        target.reset()
                        # A directory per round: a peer's files of the last round (APScheduler's job store,
                        # Temporal's schedules) must not be found by this one.
                        workdir = Path(tmp) / f"round-{round_index + 1}" if args.rounds > 1 else Path(tmp)
                        results[key] = run[key](n, target, settings, workdir, services)
                        if note := machine_note(machine_meter, results[key]):
                            results[key].notes.append(note)
                        s = results[key].stats()
                        print(
                            f"{n}: {key}{of_round(round_index)} done in {time.time() - started:.0f} s: p50 "
                            f"{s['p50']:.2f} s, p99 "
                            f"{s['p99']:.2f} s, {results[key].cpu_per_fire_ms:.2f} ms CPU per fire",
                            flush=True,
                        )
                    rounds.append(results)
                    every_round.setdefault(n, []).append({k: r.to_json() for k, r in results.items()})
                    by_size[n] = every_round[n][0]
                    if args.json:  # after each round: a failure in a later one keeps the earlier
                        args.json.write_text(
                            json.dumps({"machine": machine(), "results": by_size, "rounds": every_round})
                        )
                    tables.append(table(n, results, floor_ms))
                    if args.rounds > 1:
                        tables[-1] += f"\n {of_round(round_index)}"
                    print(tables[-1], flush=True)
                if args.rounds > 1:
                    tables.append(ratios_by_round(n, rounds))
                    print(tables[-1], flush=True)
    finally:
        machine_meter.stop()
        target.stop()
        services.stop()
    print("\n".join(tables))
    if args.chart:
        chart(args.chart, by_size)


if __name__ == "__main__":
    main()
