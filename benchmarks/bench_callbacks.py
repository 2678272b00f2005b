"""Callback runs held in flight: N callback jobs (default 10,000) fire in the same second through
`tickwork local` (SQLite); the loopback target answers each call 202 at once (it takes the work), then a
driver heartbeats every run every ~2 min and completes them all once they have all been in flight for the
hold (default 600 s). Every few seconds: how many runs are `running` (the SQLite file, read-only; and the
concurrency slots' live holds when the file has them), the executor's RSS, threads and CPU, the API's
CPU. Then a table and a summary: peak running against the cap, executor RSS, CPU seconds per role over the
hold, heartbeats and completions sent and refused, final states, wall time.

The driver holds no thread per run: one heap of due instants and a small pool for the HTTP calls.

    python benchmarks/bench_callbacks.py                       # 10,000 runs, 600 s hold, cap 10,000
    python benchmarks/bench_callbacks.py --runs 500 --hold 60  # a quick run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _callbacks import (
    Call,
    CallbackTarget,
    RoleWatch,
    Tally,
    Timeline,
    exit_once_on_sigterm,
    job_spec,
    live_slot_holds,
    load_average,
    others_note,
    proc_status,
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
    sleep_until,
)
from tickwork.services.jobs import Author

CALIBRATION_JOBS = 100
SEED_THREADS = 8


@dataclass
class Sample:
    at: float
    states: Counter[str]
    holds: int | None
    executor_rss_mib: float
    executor_threads: int
    cpu: dict[str, float]  # cumulative CPU seconds per role (and "bench": this process)
    heartbeats: int
    load: str

    @property
    def running(self) -> int:
        return self.states.get("running", 0)


@dataclass
class Driver:
    """Heartbeats each accepted run's attempt every `every` s (the first at a random point of the first
    interval, so the beats spread out) until `complete_at` is known and reached, then completes it."""

    timeline: Timeline
    every: float
    rng: random.Random
    tally: Tally = field(default_factory=Tally)
    complete_at: float | None = None
    latest: dict[str, Call] = field(default_factory=dict)  # run id -> the call of its latest attempt
    completed: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on_call(self, call: Call) -> None:
        if not call.complete_url:
            return
        with self._lock:
            self.latest[call.run_id] = call
            complete_at = self.complete_at
        if complete_at is not None and time.time() >= complete_at:
            self.timeline.at(time.time(), lambda: self._complete(call), "complete")
        else:
            first = call.at + self.every * self.rng.uniform(0.5, 1.0)
            self.timeline.at(first, lambda: self._beat(call), "heartbeat")

    def _current(self, call: Call) -> bool:
        with self._lock:
            return self.latest.get(call.run_id) is call

    def _beat(self, call: Call) -> None:
        if not self._current(call):
            return  # a newer attempt took over: its own chain beats
        with self._lock:
            complete_at = self.complete_at
        if complete_at is not None and time.time() >= complete_at:
            return  # completions take over
        status = report(call.heartbeat_url)
        self.tally.add("heartbeat", status)
        if status in (200, 0, 503):  # a refused one (409) ends the chain: that attempt is over
            self.timeline.at(time.time() + self.every, lambda: self._beat(call), "heartbeat")

    def complete_all(self, at: float) -> None:
        with self._lock:
            self.complete_at = at
            calls = list(self.latest.values())
        for call in calls:
            self.timeline.at(at, partial(self._complete, call), "complete")

    def _complete(self, call: Call) -> None:
        if not self._current(call):
            return
        status = report(call.complete_url, {"outcome": "succeeded", "status": "0", "detail": "bench"})
        self.tally.add("complete", status)
        if status == 202:
            with self._lock:
                self.completed.add(call.run_id)
        elif status in (0, 503):
            self.timeline.at(time.time() + 1, lambda: self._complete(call), "complete")

    def heartbeats_sent(self) -> int:
        return sum(self.tally.of("heartbeat").values())


class Sampler:
    def __init__(self, local: LocalTickwork, driver: Driver, every: float) -> None:
        self.database = local.state_dir / "tickwork.db"
        self.roles = RoleWatch(local.pids)
        self.driver = driver
        self.every = every
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def take(self) -> Sample:
        pids, cpu = self.roles.read()
        cpu["bench"] = sum(os.times()[:2])
        status = proc_status(pids.get("executor", 0))
        try:
            states = run_states(self.database)
        except sqlite3.Error as error:  # a busy file: the sample says so and the run goes on
            print(f"  (sample: runs not counted: {error})", flush=True)
            states = Counter()
        sample = Sample(
            at=time.time(),
            states=states,
            holds=live_slot_holds(self.database),
            executor_rss_mib=status.get("VmRSS", 0) / 1024,
            executor_threads=status.get("Threads", 0),
            cpu=cpu,
            heartbeats=self.driver.heartbeats_sent(),
            load=load_average(),
        )
        self.samples.append(sample)
        return sample

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.take()

    def start(self) -> Sampler:
        self.take()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def last(self) -> Sample:
        return self.samples[-1]


def cpu_between(samples: list[Sample], start: float, end: float) -> dict[str, float]:
    inside = [s for s in samples if start <= s.at <= end]
    if len(inside) < 2:
        return {}
    first, last = inside[0], inside[-1]
    return {role: last.cpu.get(role, 0.0) - first.cpu.get(role, 0.0) for role in last.cpu} | {
        "_seconds": last.at - first.at
    }


def row(sample: Sample, previous: Sample | None, origin: float) -> str:
    def pct(role: str) -> str:
        if previous is None or sample.at <= previous.at:
            return "    -"
        used = sample.cpu.get(role, 0.0) - previous.cpu.get(role, 0.0)
        return f"{used / (sample.at - previous.at) * 100:4.0f}%"

    holds = "-" if sample.holds is None else str(sample.holds)
    others = {k: v for k, v in sample.states.items() if k not in ("running", "succeeded")}
    return (
        f"{sample.at - origin:7.0f} {sample.running:7d} {holds:>6} {sample.states.get('succeeded', 0):7d} "
        f"{sum(others.values()):6d} {sample.executor_rss_mib:7.0f} {sample.executor_threads:6d} "
        f"{pct('executor')} {pct('api')} {pct('ticker')} {pct('sweeper')} {pct('bench')} "
        f"{sample.heartbeats:8d}  {sample.load}"
    )


HEADER = (
    "  t(s) running  holds    done  other  ex RSS ex thr  exec   api  tick sweep bench  beats   load avg\n"
    "                                        (MiB)       (CPU% since the previous row)"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000, help="callback jobs, all firing in one second")
    parser.add_argument("--hold", type=float, default=600.0, help="seconds every run stays in flight")
    parser.add_argument("--cap", type=int, default=10_000, help="tickwork local --cap")
    parser.add_argument("--heartbeat-seconds", type=int, default=300, help="the jobs' heartbeat_seconds")
    parser.add_argument(
        "--beat-every",
        type=float,
        help="seconds between a run's heartbeats (default: 120, or hold / 4 if less)",
    )
    parser.add_argument("--timeout", type=int, default=3600, help="the jobs' timeout_seconds")
    parser.add_argument("--sample-every", type=float, default=5.0)
    parser.add_argument("--print-every", type=float, default=30.0, help="seconds between table rows")
    parser.add_argument("--workers", type=int, default=16, help="driver threads for the HTTP calls")
    parser.add_argument("--lookahead", type=int, default=60)
    parser.add_argument("--tick-interval", type=float, default=10.0)
    parser.add_argument(
        "--planned-by",
        choices=["ticker", "create"],
        default="ticker",
        help="ticker (default): the fire lies beyond the lookahead, so the ticker plans the runs and each "
        "run's message watches it (queue-carried); create: the creates plan them, the sweeper watches them",
    )
    parser.add_argument("--drain-timeout", type=float, default=900.0, help="seconds for the last runs to end")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.beat_every is None:
        args.beat_every = min(120.0, args.hold / 4)
    if args.timeout < args.hold + args.heartbeat_seconds:
        parser.error("--timeout must cover the hold and a heartbeat interval")
    exit_once_on_sigterm()
    wall_start = time.time()
    print(f"machine: {machine()}; load average {load_average()}")
    if others := other_benchmarks():
        print(f"note: other benchmarks/tests running at start: {others_note(others)}")
    settings = LocalSettings(
        shards=16,
        queues=4,
        cap=args.cap,
        lookahead=args.lookahead,
        tick_interval=args.tick_interval,
        executors=1,  # it reads the executor process's status and metrics by name
    )
    timeline = Timeline(workers=args.workers).start()
    driver = Driver(timeline, args.beat_every, random.Random(args.seed))
    target = CallbackTarget(on_call=driver.on_call).start()
    sampler: Sampler | None = None
    result: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="tickwork-callbacks-") as tmp:
            local = LocalTickwork(Path(tmp) / "tickwork", settings).start()
            try:
                result = run(args, local, target, driver, timeline, wall_start)
                sampler = result.pop("sampler")
            finally:
                local.stop()
    finally:
        timeline.stop()
        target.stop()
    assert sampler is not None
    return summarise(args, settings, result, sampler, driver, timeline, target, wall_start)


def run(
    args: argparse.Namespace,
    local: LocalTickwork,
    target: CallbackTarget,
    driver: Driver,
    timeline: Timeline,
    wall_start: float,
) -> dict[str, Any]:
    parts = local.components()
    n = args.runs

    def spec(expression: str) -> Any:
        return lambda i: job_spec(
            f"callback {i}",
            expression,
            f"{target.url}/work",
            args.timeout,
            heartbeat_seconds=args.heartbeat_seconds,
        )

    # How fast can we seed? (a few jobs that never fire in this run, deleted again)
    _, far = fixed_second(time.time() + 3 * 3600)
    calibration, calibration_seconds = seed_specs(parts, CALIBRATION_JOBS, spec(far), SEED_THREADS)
    service = parts.job_service()
    for job_id in calibration:
        service.delete("local-user", job_id, by=Author("local-user", "benchmark cleanup"))
    estimate = n * calibration_seconds / CALIBRATION_JOBS * 1.5 + 20
    beyond = args.lookahead if args.planned_by == "ticker" else 0
    due_at, expression = fixed_second(time.time() + estimate + beyond + 15)
    due = due_at.timestamp()
    print(f"seeding {n} callback jobs '{expression}' (due {iso(due)}, est. {estimate:.0f} s)", flush=True)
    _, seed_seconds = seed_specs(parts, n, spec(expression), SEED_THREADS)
    planned = run_states(local.state_dir / "tickwork.db").total()
    print(
        f"seeded in {seed_seconds:.1f} s ({n / seed_seconds:.0f} jobs/s); runs planned by the creates "
        f"{planned}; {due - time.time():.0f} s to the fire",
        flush=True,
    )
    if time.time() > due - 2:
        raise SystemExit("seeding ran past the fire second: rerun (the machine is slower than calibrated)")
    sleep_until(due - 5)
    sampler = Sampler(local, driver, args.sample_every).start()
    print(HEADER, flush=True)
    printed: list[Sample] = [sampler.last()]
    print(row(sampler.last(), None, due), flush=True)

    def print_rows() -> None:
        if sampler.last().at - printed[-1].at >= args.print_every - 0.01:
            print(row(sampler.last(), printed[-1], due), flush=True)
            printed.append(sampler.last())

    def wait(condition: Any, until: float) -> bool:
        while time.time() < until:
            if condition():
                return True
            print_rows()
            time.sleep(0.5)
        return bool(condition())

    all_called = wait(lambda: target.called_runs() >= n, due + 600)
    called_at = max((c.at for c in target.snapshot()), default=time.time())
    # In flight: every run running (the 202 written), or the calls all made and a while waited.
    wait(lambda: sampler.last().running >= n, called_at + 60)
    hold_start = time.time()
    complete_at = hold_start + args.hold
    print(
        f"-- {target.called_runs()} runs called (all: {all_called}), the last {called_at - due:.1f} s after "
        f"the fire; {sampler.last().running} running; hold of {args.hold:.0f} s starts at "
        f"t={hold_start - due:.0f} s",
        flush=True,
    )
    driver.complete_all(complete_at)
    wait(lambda: False, complete_at)
    print(f"-- completing at t={complete_at - due:.0f} s", flush=True)

    def ended() -> bool:
        states = sampler.last().states
        return states.get("running", 0) == 0 and states.get("succeeded", 0) + states.get("failed", 0) >= n

    drained = wait(ended, complete_at + args.drain_timeout)
    ended_at = time.time()
    time.sleep(args.sample_every + 0.5)
    print(row(sampler.take(), printed[-1], due), flush=True)
    sampler.stop()
    run_dir = local.state_dir / "run"
    metrics = {}
    for role in ("executor", "api", "sweeper"):
        path = run_dir / f"metrics-{role}.json"
        if path.exists():
            metrics[role] = json.loads(path.read_text()).get("counts", {})
    return {
        "sampler": sampler,
        "due": due,
        "seed_seconds": seed_seconds,
        "planned_by_creates": planned,
        "hold_start": hold_start,
        "complete_at": complete_at,
        "ended_at": ended_at,
        "drained": drained,
        "metrics": metrics,
        "restarts": dict(sampler.roles.restarts),
        "others_at_fire": other_benchmarks(),
    }


def summarise(
    args: argparse.Namespace,
    settings: LocalSettings,
    result: dict[str, Any],
    sampler: Sampler,
    driver: Driver,
    timeline: Timeline,
    target: CallbackTarget,
    wall_start: float,
) -> int:
    samples = sampler.samples
    due, hold_start, complete_at = result["due"], result["hold_start"], result["complete_at"]
    n = args.runs
    peak = max(samples, key=lambda s: s.running)
    holds = [s.holds for s in samples if s.holds is not None]
    during_hold = [s for s in samples if hold_start <= s.at <= complete_at]
    rss = [s.executor_rss_mib for s in during_hold] or [s.executor_rss_mib for s in samples]
    threads = [s.executor_threads for s in samples]
    final = samples[-1].states
    calls = Counter(c.run_id for c in target.snapshot())
    hold_cpu = cpu_between(samples, hold_start, complete_at)
    all_cpu = cpu_between(samples, samples[0].at, samples[-1].at)
    in_hold_min = min((s.running for s in during_hold), default=0)
    print(f"\ncallback runs in flight: {n} jobs firing at {iso(due)}, hold {args.hold:.0f} s")
    print(f"  settings          tickwork local {settings.describe()}")
    by_creates = result["planned_by_creates"]
    print(
        f"  planned by        {'the ticker' if by_creates == 0 else f'the creates ({by_creates} runs)'}: "
        + (
            "each run's message watches it (queue-carried)"
            if by_creates == 0
            else "the sweeper watches them (sent after their commit)"
        )
    )
    print(
        f"  jobs              completion callback, heartbeat_seconds {args.heartbeat_seconds}, timeout "
        f"{args.timeout} s; driver beats every {args.beat_every:.0f} s with {args.workers} threads"
    )
    print(
        f"  peak running      {peak.running} at t={peak.at - due:.0f} s (cap {args.cap}): "
        f"{'NEVER above the cap' if peak.running <= args.cap else 'ABOVE THE CAP'}; "
        f"min running during the hold {in_hold_min} ({len(during_hold)} samples every "
        f"{args.sample_every:.0f} s)"
    )
    if holds and max(holds) > 0:
        print(
            f"  slot holds (all)  peak {max(holds)} live holds (what the bound counts; cap {args.cap}): "
            f"{'never above the cap' if max(holds) <= args.cap else 'ABOVE THE CAP'}"
        )
    elif holds:
        print("  slot holds (all)  0 live holds all along: no run took a slot on this build")
    else:
        print("  slot holds        none in this database (no concurrency slots on this build)")
    print(
        f"  executor          RSS {min(rss):.0f}-{max(rss):.0f} MiB during the hold (whole run "
        f"{min(s.executor_rss_mib for s in samples):.0f}-{max(s.executor_rss_mib for s in samples):.0f}); "
        f"threads {min(threads)}-{max(threads)}"
    )
    for label, cpu in (("over the hold", hold_cpu), ("whole sampled run", all_cpu)):
        if cpu:
            seconds = cpu["_seconds"]
            print(
                f"  CPU {label:17s} {seconds:.0f} s: "
                + ", ".join(
                    f"{role} {cpu[role]:.1f} s ({cpu[role] / seconds * 100:.1f}%)"
                    for role in ("executor", "api", "ticker", "sweeper", "bench")
                    if role in cpu
                )
            )
    beats, completes = driver.tally.of("heartbeat"), driver.tally.of("complete")
    print(f"  heartbeats        sent {sum(beats.values())}: by status {beats} (409 = refused; 0 = no answer)")
    print(f"  completions       sent {sum(completes.values())}: by status {completes}")
    for kind in ("heartbeat", "complete"):
        lag = timeline.lag(kind)
        print(
            f"  driver lag        {kind}s: p50 {lag['p50']:.2f} s, p99 {lag['p99']:.2f} s, max "
            f"{lag['max']:.2f} s over {lag['n']:.0f} (how late they went out: {args.workers} threads)"
        )
    print(f"  driver errors     {timeline.errors} actions raised")
    print(
        f"  target calls      {sum(calls.values())} for {len(calls)} runs; runs called more than once: "
        f"{sum(1 for v in calls.values() if v > 1)}"
    )
    all_ok = final.get("succeeded", 0) == n and sum(final.values()) == n
    print(f"  final states      {dict(final)}: {'all succeeded' if all_ok else 'NOT all succeeded'}")
    if result["ended_at"] and result["drained"]:
        print(f"  completion drain  {result['ended_at'] - complete_at:.0f} s from the completions' start")
    print(f"  role restarts     {result['restarts'] or 'none'}")
    interesting = (
        "RunsAccepted",
        "FinishesApplied",
        "RunsSucceeded",
        "ExpiredLeases",
        "StaleCompletions",
        "RunsFailed",
    )
    executor = result["metrics"].get("executor", {})
    print("  executor counts   " + ", ".join(f"{k} {executor.get(k, 0):.0f}" for k in interesting))
    print(f"  wall time         {time.time() - wall_start:.0f} s; load average at the end {load_average()}")
    if result["others_at_fire"]:
        print(f"  note: other benchmarks/tests running at the fire: {others_note(result['others_at_fire'])}")
    ok = all_ok and peak.running <= args.cap and max(holds, default=0) <= args.cap
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
