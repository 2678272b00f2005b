"""Burst: N jobs all due in the same second, end to end through `tickwork local` to a loopback HTTP target.

Each job has a 6-field expression fixing one second (`S M H * * *`) far enough ahead that the ticker, not the
create call, plans it (the create plans only fires inside its own lookahead). Reports start delay from the
run records (start delay = first claim time - due time) and from the target (arrival - the scheduled second),
the time until the last run started, runs not succeeded, and where the time went: planning (ticker commits +
dispatch sends) vs execution (receive, claim, call, finish), with the CPU of every process per phase and the
emulator's answer time to a tiny GetItem in each phase.

    python benchmarks/bench_burst.py [N ...]          # default: 1000
    python benchmarks/bench_burst.py 10000 --lookahead 240 --tick-interval 20
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _e2e import (
    CpuMeter,
    CpuSampler,
    LocalSettings,
    LocalTickwork,
    Probe,
    QueueSampler,
    Target,
    count_items,
    exit_cleanly_on_sigterm,
    fixed_second,
    fmt_ms,
    iso,
    machine,
    other_benchmarks,
    parse_ms,
    seed_jobs,
    sleep_until,
    summary,
    wait_for,
)
from tickwork.resources import RUNS
from tickwork.services.jobs import Author

SEED_THREADS = 8
CALIBRATION_JOBS = 100


@dataclass
class BurstResult:
    n: int
    settings: LocalSettings
    due: float
    seed_seconds: float = 0.0
    self_planned: int = 0
    delays_record: list[float] = field(default_factory=list)  # seconds
    delays_target: list[float] = field(default_factory=list)
    states: dict[str, int] = field(default_factory=dict)
    arrivals: int = 0
    duplicates: int = 0
    last_started: float = float("nan")  # seconds after the due second
    last_arrival: float = float("nan")
    last_finished: float = float("nan")
    planning: dict[str, float] = field(default_factory=dict)
    execution: dict[str, Any] = field(default_factory=dict)
    cpu_burst: dict[str, float] = field(default_factory=dict)  # seed end .. last finished, per process
    cpu_phases: dict[str, dict[str, float]] = field(default_factory=dict)
    probe_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    log_notes: list[str] = field(default_factory=list)
    concurrent: list[str] = field(default_factory=list)

    @property
    def fires(self) -> int:
        return self.states.get("succeeded", 0)

    def cpu_per_fire_ms(self) -> float:
        total = sum(v for k, v in self.cpu_burst.items() if not k.startswith("_"))
        return total / max(1, self.fires) * 1000


def _log_notes(run_dir: Path) -> list[str]:
    """Warnings and errors the role processes logged (counted by kind), and the ticker's tick lines."""
    notes: list[str] = []
    for log in sorted(run_dir.glob("*.log")):
        kinds: collections.Counter[str] = collections.Counter()
        for line in log.read_text(errors="replace").splitlines():
            if re.search(r"WARNING|ERROR|Traceback|pool is full", line):
                kinds[re.sub(r"[0-9a-f]{8,}|\d+", "#", line.split(" ", 3)[-1])[:110]] += 1
        notes.extend(f"{log.name}: {count} x {kind}" for kind, count in kinds.most_common(5))
    return notes


TICK_LINE = re.compile(r"^(\S+ \S+) +ticker tick at (\S+) planned through (\S+)")


def ticker_ticks(log: Path) -> list[tuple[float, float, float]]:
    """(tick started, tick ended, planned through) for every tick in the ticker's log: the log line is
    written when all shards are planned, its text names the tick's start and horizon."""
    ticks = []
    for line in log.read_text(errors="replace").splitlines():
        match = TICK_LINE.match(line)
        if match:
            ended = time.mktime(time.strptime(match[1].split(",")[0], "%Y-%m-%d %H:%M:%S"))
            ended += int(match[1].split(",")[1]) / 1000
            started, horizon = parse_ms(match[2]), parse_ms(match[3])
            if started is not None and horizon is not None:
                ticks.append((started, ended, horizon))
    return ticks


def run_tickwork_burst(
    n: int,
    target: Target,
    settings: LocalSettings,
    workdir: Path,
    drain_timeout: float = 240.0,
    source: Path | None = None,
) -> BurstResult:
    name = f"tickwork-{settings.engine}-{n}" if source is None else f"tickwork-{n}-baseline"
    with LocalTickwork(workdir / name, settings, source=source) as local:
        parts = local.components()
        runs_table = parts.settings.resource_names.table(RUNS)
        meter = CpuMeter(local.pids())
        sampler = CpuSampler(meter, every=1.0).start()
        probe = Probe(parts).start()
        queues = QueueSampler(parts, workdir / name / "run")
        try:
            # How fast can we seed? (a few throwaway jobs that never fire, deleted again)
            _, expression_far = fixed_second(time.time() + 3 * 3600)
            calibration, calib_s = seed_jobs(
                parts, CALIBRATION_JOBS, expression_far, target.url, SEED_THREADS
            )
            service = parts.job_service()
            for job_id in calibration:
                service.delete("local-user", job_id, by=Author("local-user", "benchmark cleanup"))
            estimate = n * calib_s / CALIBRATION_JOBS * 1.3 + 10
            due_at, expression = fixed_second(time.time() + estimate + settings.lookahead + 10)
            result = BurstResult(n=n, settings=settings, due=due_at.timestamp())
            print(
                f"  seeding {n} jobs '{expression}' (due {iso(result.due)}), est. {estimate:.0f} s",
                flush=True,
            )
            target.reset()
            seed_started = time.time()
            _, result.seed_seconds = seed_jobs(parts, n, expression, f"{target.url}/burst", SEED_THREADS)
            seed_end = time.time()
            result.self_planned = count_items(parts, runs_table)
            print(
                f"  seeded in {result.seed_seconds:.1f} s ({n / result.seed_seconds:.0f} jobs/s); "
                f"runs planned by the create itself: {result.self_planned}; "
                f"waiting {result.due - time.time():.0f} s for the burst",
                flush=True,
            )
            cpu_seed_end = meter.read()
            sleep_until(result.due - 10)
            result.concurrent = other_benchmarks()
            queues.start()
            wait_for(
                lambda: target.completed >= n, timeout=drain_timeout + (result.due - time.time()), every=0.5
            )
            # The executor records the outcome after the target answered: wait for the last records.
            wait_for(lambda: False, timeout=3)
            burst_end = time.time()
            cpu_end = meter.read()
            runs = _scan_runs(parts, runs_table)
        finally:
            probe.stop()
            sampler.stop()
            if queues._thread.is_alive():
                queues.stop()
    ticks = ticker_ticks(workdir / name / "run" / "ticker.log")
    _analyse(result, runs, ticks, target, seed_started, seed_end, burst_end, sampler, probe)
    _queues(result, queues)
    result.cpu_burst = CpuMeter.delta(cpu_seed_end, cpu_end) | {"_seconds": burst_end - seed_end}
    result.log_notes = _log_notes(workdir / name / "run")
    return result


def _scan_runs(parts: Any, table: str) -> list[dict[str, Any]]:
    from _e2e import scan_table

    return scan_table(parts, table)


def _analyse(
    result: BurstResult,
    runs: list[dict[str, Any]],
    ticks: list[tuple[float, float, float]],
    target: Target,
    seed_started: float,
    seed_end: float,
    burst_end: float,
    sampler: CpuSampler,
    probe: Probe,
) -> None:
    due = result.due
    result.states = dict(collections.Counter(str(r["state"]) for r in runs))
    result.delays_record = [
        (parse_ms(str(r["started_at"])) or 0.0) - (parse_ms(str(r["due_at"])) or 0.0)
        for r in runs
        if "started_at" in r
    ]
    burst_keys = {str(r["run_id"]) for r in runs}
    arrivals = [a for a in target.arrivals if a.key in burst_keys]
    result.arrivals = len(arrivals)
    result.duplicates = len(arrivals) - len({a.key for a in arrivals})
    first_arrival: dict[str, float] = {}
    for a in sorted(arrivals, key=lambda a: a.at):
        first_arrival.setdefault(a.key, a.at)
    result.delays_target = [at - due for at in first_arrival.values()]
    started = [t for r in runs if (t := parse_ms(r.get("started_at"))) is not None]
    finished = [t for r in runs if (t := parse_ms(r.get("finished_at"))) is not None]
    result.last_started = max(started) - due if started else float("nan")
    result.last_finished = max(finished) - due if finished else float("nan")
    result.last_arrival = max(first_arrival.values()) - due if first_arrival else float("nan")
    gaps = [
        first_arrival[str(r["run_id"])] - t
        for r in runs
        if (t := parse_ms(r.get("started_at"))) is not None and str(r["run_id"]) in first_arrival
    ]
    result.execution["claim_to_call"] = summary(gaps)
    # The tick that planned the burst: the first whose horizon reached the due second.
    planning_ticks = [t for t in ticks if t[2] >= due]
    if planning_ticks:
        tick_start, tick_end, _ = planning_ticks[0]
        span = tick_end - tick_start
        result.planning = {
            "tick_started_before_due": due - tick_start,
            "done_before_due": due - tick_end,
            "seconds": span,
            "runs_per_s": n_planned / span if (n_planned := len(runs)) and span > 0 else float("nan"),
            "idle_tick_seconds": statistics.median([e - s for s, e, _ in ticks if e < tick_start] or [0.0]),
        }
        result.cpu_phases["planning"] = sampler.between(tick_start - 0.5, tick_end + 0.5)
        result.probe_ms["planning"] = summary([x * 1000 for x in probe.between(tick_start, tick_end)])
        result.probe_ms["idle (seeded, before planning)"] = summary(
            [x * 1000 for x in probe.between(seed_end + 1, tick_start - 1)]
        )
    if started:
        span = max(started) - min(started)
        result.execution |= {
            "first_started_after_due": min(started) - due,
            "seconds_first_to_last_start": span,
            "starts_per_s": len(started) / span if span > 0 else float("inf"),
        }
        end = max(finished) if finished else burst_end
        result.cpu_phases["execution"] = sampler.between(due - 2, end + 1)
        result.probe_ms["execution"] = summary([x * 1000 for x in probe.between(due, end)])
    result.cpu_phases["seeding"] = sampler.between(seed_started, seed_end)
    result.probe_ms["seeding"] = summary([x * 1000 for x in probe.between(seed_started, seed_end)])


def _queues(result: BurstResult, queues: QueueSampler) -> None:
    """Between the due second and the last start: is work waiting in the queues (the receive loop is behind)
    or in the executor's pool (the pool or what it calls is behind)?"""
    window = queues.between(result.due, result.due + max(1.0, result.last_started))
    if window:
        result.execution["queue"] = {
            "samples": len(window),
            "visible_max": max(s[1] for s in window),
            "visible_median": statistics.median(s[1] for s in window),
            "received_not_deleted_median": statistics.median(s[2] for s in window),
            "received_not_deleted_max": max(s[2] for s in window),
            "executor_in_flight_median": statistics.median(s[4] for s in window),
            "executor_in_flight_max": max(s[4] for s in window),
        }


def report(result: BurstResult) -> None:
    n = result.n
    print(f"\nburst of {n} (tickwork local {result.settings.describe()})")
    print(f"  due second        {iso(result.due)}")
    print(
        f"  seed              {result.seed_seconds:.1f} s  ({n / result.seed_seconds:.0f} jobs/s, "
        f"JobService, "
        f"{SEED_THREADS} threads); self-planned at create: {result.self_planned}"
    )
    print(
        f"  runs              {sum(result.states.values())} recorded, states {result.states}; "
        f"target calls {result.arrivals} (duplicates {result.duplicates})"
    )
    not_ok = n - result.states.get("succeeded", 0)
    print(f"  not succeeded     {not_ok}")
    print(f"  start delay (run record)  {fmt_ms(summary(result.delays_record))}")
    print(f"  start delay (at target)   {fmt_ms(summary(result.delays_target))}")
    print(
        f"  last run started  {result.last_started:.2f} s after the due second "
        f"(last target arrival {result.last_arrival:.2f} s, last finished {result.last_finished:.2f} s)"
    )
    if result.planning:
        p = result.planning
        print(
            f"  planning          the tick that planned the burst took {p['seconds']:.1f} s "
            f"({p['runs_per_s']:.0f} runs/s; one TransactWriteItems + one SendMessageBatch per job; an idle "
            f"tick takes {p['idle_tick_seconds']:.2f} s), started {p['tick_started_before_due']:.0f} s and "
            f"done {p['done_before_due']:.0f} s before the due second"
        )
    if "first_started_after_due" in result.execution:
        e = result.execution
        print(
            f"  execution         first start {e['first_started_after_due']:.2f} s after due, starts spread "
            f"over {e['seconds_first_to_last_start']:.1f} s ({e['starts_per_s']:.0f} runs/s)"
        )
        print(
            f"  claim -> call     started_at (stamped before GetItem job + claim PutItem) to target arrival: "
            f"{fmt_ms(e['claim_to_call'])}"
        )
    if "queue" in result.execution:
        q = result.execution["queue"]
        print(
            f"  queues (1 s samples from the due second to the last start, n={q['samples']}): waiting "
            f"median {q['visible_median']:.0f} max {q['visible_max']}; received not yet deleted median "
            f"{q['received_not_deleted_median']:.0f} max {q['received_not_deleted_max']}; executor in flight "
            f"median {q['executor_in_flight_median']:.0f} max {q['executor_in_flight_max']} (cap "
            f"{result.settings.cap})"
        )
    for phase, cpu in result.cpu_phases.items():
        if cpu:
            seconds = cpu.get("_seconds", 0) or 1
            parts = ", ".join(
                f"{k} {v:.1f} s ({v / seconds * 100:.0f}%)" for k, v in cpu.items() if not k.startswith("_")
            )
            print(f"  CPU {phase:<13} over {seconds:.0f} s: {parts}")
    for phase, stats in result.probe_ms.items():
        if stats["n"]:
            print(
                f"  emulator GetItem latency {phase:<30} p50 {stats['p50']:6.1f} ms  "
                f"p99 {stats['p99']:7.1f} ms "
                f" max {stats['max']:7.1f} ms  (n={stats['n']:.0f})"
            )
    cpu_total = sum(v for k, v in result.cpu_burst.items() if not k.startswith("_"))
    by_process = ", ".join(f"{k} {v:.1f}" for k, v in result.cpu_burst.items() if not k.startswith("_"))
    print(
        f"  CPU seed end -> burst done ({result.cpu_burst.get('_seconds', 0):.0f} s): {cpu_total:.1f} s "
        f"[{by_process}] = {result.cpu_per_fire_ms():.1f} ms per fire"
    )
    for note in result.log_notes:
        print(f"  log: {note}")
    if result.concurrent:
        print(f"  other benchmarks running at the burst: {result.concurrent}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("counts", nargs="*", type=int, default=[1000])
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--cap", type=int, default=500)
    parser.add_argument("--lookahead", type=int, default=180)
    parser.add_argument("--tick-interval", type=float, default=20.0)
    parser.add_argument("--json", type=Path, help="write the delays and figures here")
    args = parser.parse_args()
    settings = LocalSettings(
        shards=args.shards,
        queues=args.queues,
        cap=args.cap,
        lookahead=args.lookahead,
        tick_interval=args.tick_interval,
    )
    exit_cleanly_on_sigterm()
    print(f"machine: {machine()}")
    if others := other_benchmarks():
        print(f"note: other benchmarks running at start: {others}")
    target = Target().start()
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="tickwork-burst-") as tmp:
            for n in args.counts:
                result = run_tickwork_burst(n, target, settings, Path(tmp))
                report(result)
                results.append(result)
    finally:
        target.stop()
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {"n": r.n, "delays_record": r.delays_record, "delays_target": r.delays_target}
                    for r in results
                ]
            )
        )


if __name__ == "__main__":
    main()
