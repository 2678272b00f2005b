"""Concurrency: a burst larger than the cap against a slow target, end to end through `tickwork local`.

N jobs (default 600) due in the same second, cap C (default 100), each call held S seconds (default 1) by the
loopback target. The target counts the calls it holds at once (server-side, sampled every 20 ms and exactly at
each arrival): the peak must never exceed the cap. Throughput at the cap: runs completed per second while the
queue was non-empty, against the ideal cap / S. On SQLite it also counts the runs `running` in the store
every 0.1 s (what the bound counts), and the concurrency slots' live holds when the file has them.

`--completion callback`: the jobs are callback jobs; the target answers each call 202 at once and completes
the run through its completion URL S seconds later, so a run is `running` with no executor in its call: only
the store's count says whether the cap holds.

    python benchmarks/bench_concurrency.py [--jobs 600] [--cap 100] [--sleep 1]
    python benchmarks/bench_concurrency.py --jobs 1000 --cap 100 --completion callback
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _callbacks import Call, CallbackTarget, StoreSampler, Timeline, job_spec, report, run_states, seed_specs
from _e2e import (
    LocalSettings,
    LocalTickwork,
    Target,
    count_items,
    exit_cleanly_on_sigterm,
    fixed_second,
    fmt_ms,
    iso,
    machine,
    other_benchmarks,
    parse_ms,
    scan_table,
    seed_jobs,
    sleep_until,
    summary,
    wait_for,
)
from tickwork.resources import RUNS


def peak_rss_mib(pid: int) -> float:
    """A process's peak resident memory (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def sample_in_flight(target: Target, stop: threading.Event, out: list[tuple[float, int]]) -> None:
    while not stop.wait(0.02):
        out.append((time.time(), target.in_flight))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--cap", type=int, default=100)
    parser.add_argument("--sleep", type=float, default=1.0, help="seconds the target holds each call")
    parser.add_argument("--lookahead", type=int, default=60)
    parser.add_argument("--tick-interval", type=float, default=10.0)
    parser.add_argument("--engine", choices=["sqlite", "emulator"], default="sqlite")
    parser.add_argument(
        "--completion",
        choices=["response", "callback"],
        default="response",
        help="callback: the target answers 202 and completes each run --sleep s later (SQLite only)",
    )
    args = parser.parse_args()
    if args.completion == "callback" and args.engine != "sqlite":
        parser.error("--completion callback counts running runs in the SQLite file: --engine sqlite")
    n, cap = args.jobs, args.cap
    settings = LocalSettings(
        shards=16,
        queues=4,
        cap=cap,
        lookahead=args.lookahead,
        tick_interval=args.tick_interval,
        engine=args.engine,
    )
    exit_cleanly_on_sigterm()
    print(f"machine: {machine()}")
    if others := other_benchmarks():
        print(f"note: other benchmarks running at start: {others}")
    if args.completion == "callback":
        callback_burst(args, settings)
        return
    target = Target().start()
    store: StoreSampler | None = None
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="tickwork-concurrency-") as tmp,
            LocalTickwork(Path(tmp) / "tickwork", settings) as local,
        ):
            parts = local.components()
            due_at, expression = fixed_second(time.time() + n / 100 + settings.lookahead + 15)
            due = due_at.timestamp()
            _, seed_seconds = seed_jobs(parts, n, expression, f"{target.url}/slow?sleep={args.sleep}")
            self_planned = count_items(parts, parts.settings.resource_names.table(RUNS))
            print(
                f"seeded {n} jobs '{expression}' in {seed_seconds:.1f} s (self-planned {self_planned}); "
                f"due {iso(due)}, waiting {due - time.time():.0f} s",
                flush=True,
            )
            sleep_until(due - 5)
            concurrent = other_benchmarks()
            sampler = threading.Thread(target=sample_in_flight, args=(target, stop, samples), daemon=True)
            sampler.start()
            if args.engine == "sqlite":
                store = StoreSampler(local.state_dir / "tickwork.db").start()
            drained = wait_for(
                lambda: target.completed >= n, timeout=n / cap * args.sleep * 4 + 120, every=0.2
            )
            wait_for(lambda: False, timeout=3)  # let the executor record the last outcomes
            stop.set()
            sampler.join()
            if store is not None:
                store.stop()
            runs = scan_table(parts, parts.settings.resource_names.table(RUNS))
            executor_metrics = json.loads(
                (Path(tmp) / "tickwork" / "run" / "metrics-executor.json").read_text()
            )
            peak_rss = {role: peak_rss_mib(pid) for role, pid in local.pids().items()}
    finally:
        stop.set()
        target.stop()

    arrivals = sorted(a.at for a in target.arrivals)
    states = collections.Counter(str(r["state"]) for r in runs)
    first, last_arrival = arrivals[0], arrivals[-1]
    last_done = last_arrival + args.sleep  # the target answers `sleep` s after the arrival
    span = last_done - first
    ideal = cap / args.sleep
    # Steady state: whole seconds between the first and the last arrival, completions per second.
    per_second = collections.Counter(int(at + args.sleep - first) for at in arrivals)
    full_seconds = [per_second[s] for s in range(1, int(last_arrival - first))]
    peak = max(target.peak_in_flight, max((v for _, v in samples), default=0))
    at_cap = sum(1 for _, v in samples if v >= cap * 0.9) / max(1, len(samples))
    print(f"\nconcurrency: {n} jobs due in the same second, cap {cap}, target holds each call {args.sleep} s")
    print(f"  settings          tickwork local {settings.describe()}")
    print(f"  drained           {drained}; runs {dict(states)}; target calls {len(arrivals)}")
    print(
        f"  peak in flight    {peak} at the target (cap {cap}); executor's own peak gauge "
        f"{executor_metrics.get('gauges', {}).get('PeakRunsInFlight')}"
    )
    print(f"  above the cap     {'NEVER' if peak <= cap else 'YES: cap exceeded'}")
    if store is not None:
        print(f"  in the store      {store.describe(cap)}")
    reached = next((at for at, v in samples if v >= peak), None)
    if reached is not None:
        print(f"  peak reached      {reached - due:.2f} s after the due second (target samples every 20 ms)")
    print(
        "  peak memory (RSS) "
        + ", ".join(f"{role} {mib:.0f} MiB" for role, mib in peak_rss.items())
        + f"; the benchmark's own process (the target) {peak_rss_mib(os.getpid()):.0f} MiB"
    )
    print(
        f"  first call        {first - due:.2f} s after the due second; last call {last_arrival - due:.2f} s"
    )
    print(
        f"  throughput        {n / span:.1f} runs/s over {span:.1f} s (ideal {ideal:.0f} runs/s: "
        f"{n / ideal:.1f} s) = {n / span / ideal * 100:.0f}% of ideal"
    )
    if full_seconds:
        print(
            f"  steady state      {sum(full_seconds) / len(full_seconds):.1f} runs/s completed "
            f"per whole second "
            f"(min {min(full_seconds)}, max {max(full_seconds)}); time with >= 90% of the cap in flight: "
            f"{at_cap * 100:.0f}% of the samples"
        )
    print(f"  start delay (at target)   {fmt_ms(summary([a - due for a in arrivals]))}")
    held = [
        f - s for r in runs if (s := parse_ms(r.get("started_at"))) and (f := parse_ms(r.get("finished_at")))
    ]
    print(
        f"  slot time         started_at -> finished_at in the run record {fmt_ms(summary(held))}: each run "
        f"holds its slot for the call ({args.sleep} s) plus the claim, the call set-up and the outcome write"
    )
    if concurrent:
        print(f"  other benchmarks running at the burst: {concurrent}")


def callback_burst(args: argparse.Namespace, settings: LocalSettings) -> None:
    """The burst with callback jobs: each call is answered 202 at once and its run completed `--sleep` s
    later through its completion URL. Reports the store's count of running runs against the cap."""
    n, cap = args.jobs, args.cap
    timeline = Timeline(workers=16).start()
    completions: collections.Counter[int] = collections.Counter()

    def complete(call: Call) -> None:
        status = report(call.complete_url, {"outcome": "succeeded", "status": "0"})
        completions[status] += 1
        if status in (0, 503):
            timeline.at(time.time() + 0.5, lambda: complete(call))

    def on_call(call: Call) -> None:
        if call.complete_url:
            timeline.at(call.at + args.sleep, lambda: complete(call))

    target = CallbackTarget(on_call=on_call).start()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="tickwork-concurrency-") as tmp,
            LocalTickwork(Path(tmp) / "tickwork", settings) as local,
        ):
            parts = local.components()
            database = local.state_dir / "tickwork.db"
            due_at, expression = fixed_second(time.time() + n / 100 + settings.lookahead + 15)
            due = due_at.timestamp()
            _, seed_seconds = seed_specs(
                parts, n, lambda i: job_spec(f"callback {i}", expression, f"{target.url}/work", 60)
            )
            print(
                f"seeded {n} callback jobs '{expression}' in {seed_seconds:.1f} s; due {iso(due)}", flush=True
            )
            sleep_until(due - 5)
            concurrent = other_benchmarks()
            store = StoreSampler(database).start()

            def ended() -> bool:
                states = run_states(database)
                return bool(states.get("succeeded", 0) + states.get("failed", 0) >= n)

            drained = wait_for(ended, timeout=n / cap * args.sleep * 4 + 120, every=0.5)
            store.stop()
            states = dict(run_states(database))
    finally:
        timeline.stop()
        target.stop()
    arrivals = sorted(c.at for c in target.snapshot())
    print(
        f"\nconcurrency, callback runs: {n} jobs due in the same second, cap {cap}, each completed "
        f"{args.sleep} s after its call"
    )
    print(f"  settings          tickwork local {settings.describe()}")
    print(
        f"  drained           {drained}; runs {states}; target calls {len(arrivals)}; "
        f"completions by status {dict(completions)}"
    )
    print(f"  in the store      {store.describe(cap)}")
    print(f"  above the cap     {'NEVER' if store.peak() <= cap else 'YES: cap exceeded'}")
    if arrivals:
        print(
            f"  calls             first {arrivals[0] - due:.2f} s after the due second, "
            f"last {arrivals[-1] - due:.2f} s"
        )
        span = arrivals[-1] + args.sleep - arrivals[0]
        print(
            f"  throughput        {n / span:.1f} runs/s over {span:.1f} s "
            f"(ideal {cap / args.sleep:.0f} runs/s): "
            "a run's slot is held from its claim to its completion's finish, and a message finding the "
            "bound full asks again later"
        )
    if concurrent:
        print(f"  other benchmarks running at the burst: {len(concurrent)} processes")


if __name__ == "__main__":
    main()
