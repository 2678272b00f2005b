"""What every scheduler in bench_peers.py is measured with: the services it starts (by PID, stopped on any
exit), a meter of every process's CPU and RSS, the settings every peer gets, and one result shape.

CPU is utime + stime of each process and its descendants (all threads), sampled every 0.2 s; a figure
between two instants is interpolated between the samples around them. RSS is sampled at the same time; the
peak is the largest sample per process.
"""

from __future__ import annotations

import atexit
import bisect
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

import psutil  # type: ignore[import-untyped]

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _e2e import Target, summary


@dataclass(frozen=True)
class PeerSettings:
    """The same work for every scheduler (each peer's script says how it maps these onto its own knobs)."""

    concurrency: int = 200  # runs executing at once: Tickwork's cap, each peer's worker concurrency
    timeout_s: int = 60  # one call to the target
    max_attempts: int = 3  # a failed call is tried again, up to this many attempts in all
    idle_seconds: float = 60.0  # the idle window after the burst: one tick of Tickwork's default interval
    settle_seconds: float = 5.0  # after the last run is done, before the idle window starts
    drain_timeout: float = 900.0  # the burst must be done this long after its due second


@dataclass
class PeerResult:
    scheduler: str  # the table's row label
    n: int
    due: float  # the scheduled second (epoch seconds)
    seed_seconds: float = 0.0  # registering the n jobs
    delays: list[float] = field(default_factory=list)  # first arrival at the target - due, per run
    fires_done: int = 0  # runs the scheduler recorded as done (succeeded)
    lost: int = 0  # runs that never reached the target
    duplicates: int = 0  # arrivals beyond the first for the same run
    burst_cpu_s: dict[str, float] = field(default_factory=dict)  # per process group, due - 1 s .. done
    burst_seconds: float = 0.0
    idle_cpu_s: dict[str, float] = field(default_factory=dict)  # per process group, over the idle window
    idle_seconds: float = 0.0
    peak_rss_mb: dict[str, float] = field(default_factory=dict)  # per process
    notes: list[str] = field(default_factory=list)  # settings, quirks, anything the table cannot say

    @property
    def cpu_per_fire_ms(self) -> float:
        return sum(self.burst_cpu_s.values()) / max(1, self.fires_done) * 1000

    @property
    def idle_cpu_per_s(self) -> float:
        return sum(self.idle_cpu_s.values()) / self.idle_seconds if self.idle_seconds else float("nan")

    def stats(self) -> dict[str, float]:
        return summary(self.delays)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --- services started by PID ------------------------------------------------------------------------


class Services:
    """Processes this benchmark starts, each in a session of its own; `stop()` ends each whole process group,
    SIGTERM first, SIGKILL after `grace`. `cleanup_on_exit()` makes every exit path call it: a normal
    return, an exception, SIGINT, SIGTERM or SIGHUP (SIGKILL cannot be caught: the sessions are then left,
    named by the PID files in `workdir`)."""

    def __init__(self) -> None:
        self._started: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._lock = threading.Lock()

    def start(
        self,
        name: str,
        args: Sequence[str],
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            process = subprocess.Popen(
                list(args),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        with self._lock:
            self._started.append((name, process))
        (log.parent / f"{name}.pid").write_text(str(process.pid))
        return process

    def stop(self, name: str | None = None, grace: float = 15.0, first: int = signal.SIGTERM) -> None:
        """Stop one service (by name) or all of them, the last started first: `first` (SIGINT for a program
        that writes its results on Ctrl-C), SIGKILL after `grace`. A second Ctrl-C or SIGTERM
        meanwhile must not break it off half-way: the stop signals are ignored until it is done (from the
        main thread; elsewhere they cannot be set, and the caller's handlers stay)."""
        with self._lock:
            chosen = [(n, p) for n, p in self._started if name is None or n == name]
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _STOP_SIGNALS}
        try:
            for _, process in reversed(chosen):
                _signal_group(process, first)
            deadline = time.monotonic() + grace
            for _, process in reversed(chosen):
                try:
                    process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    _signal_group(process, signal.SIGKILL)
                    process.wait()
                # Whatever the leader left behind in its group (worker children) goes too.
                _signal_group(process, signal.SIGKILL)
            with self._lock:  # forgotten only once stopped
                self._started = [(n, p) for n, p in self._started if (n, p) not in chosen]
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def cleanup_on_exit(self) -> None:
        atexit.register(self.stop)

        def unwind(signum: int, frame: object) -> None:
            raise SystemExit(128 + signum)  # finally blocks and atexit run

        for sig in _STOP_SIGNALS:
            signal.signal(sig, unwind)


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        return


# --- CPU and RSS of every process ------------------------------------------------------------------

# Tickwork's burst CPU group for the tick that planned the burst ahead of it (peer_tickwork.py): not in the
# burst's window, so the machine's figures over that window leave it out.
PLANNING_GROUP = "planning (tick)"


class Sampler:
    """Calls `_sample` at start, every `every` seconds in a thread, and once more at the stop."""

    def __init__(self, every: float, name: str) -> None:
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def start(self) -> Self:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def _sample(self) -> None:
        raise NotImplementedError


class ProcessMeter(Sampler):
    """Samples CPU seconds per group (a root PID and every process below it, found again at each sample: a
    prefork pool or a restarted child is counted) and RSS per process, every `every` seconds, in a thread."""

    def __init__(self, roots: dict[str, int], every: float = 0.2, own_only: set[str] | None = None) -> None:
        super().__init__(every, "process-meter")
        self.roots = dict(roots)
        self.own_only = own_only or set()  # groups counted without their descendants
        self.times: list[float] = []
        self.cpu: list[dict[str, float]] = []
        self.peak_rss: dict[str, float] = {}  # "group" or "group/pid": bytes
        self._procs: dict[int, psutil.Process] = {}
        self._gone_cpu: dict[str, float] = {name: 0.0 for name in roots}  # CPU of processes that ended
        self._last_cpu: dict[int, tuple[str, float]] = {}

    def add(self, name: str, pid: int) -> None:
        """A group started after the meter (read from its next sample)."""
        self.roots[name] = pid
        self._gone_cpu.setdefault(name, 0.0)

    def _members(self) -> Iterable[tuple[str, psutil.Process]]:
        for name, pid in list(self.roots.items()):
            root = self._proc(pid)
            if root is None:
                continue
            yield name, root
            if name in self.own_only:
                continue
            try:
                children = root.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                cached = self._proc(child.pid)
                if cached is not None:
                    yield name, cached

    def _proc(self, pid: int) -> psutil.Process | None:
        if pid not in self._procs:
            try:
                self._procs[pid] = psutil.Process(pid)
            except psutil.Error:
                return None
        return self._procs[pid]

    def _sample(self) -> None:
        now = time.time()
        seen: set[int] = set()
        totals = dict(self._gone_cpu)
        for name, proc in self._members():
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    rss = proc.memory_info().rss
            except psutil.NoSuchProcess:
                continue  # gone: it keeps the CPU of its last sample (below)
            except psutil.Error:
                # Alive but unreadable this time: its last reading stands, it is not taken for gone.
                if proc.pid in self._last_cpu:
                    seen.add(proc.pid)
                    totals[name] = totals.get(name, 0.0) + self._last_cpu[proc.pid][1]
                continue
            used = times.user + times.system
            seen.add(proc.pid)
            self._last_cpu[proc.pid] = (name, used)
            totals[name] = totals.get(name, 0.0) + used
            for key in (name, f"{name}/{proc.pid}"):
                self.peak_rss[key] = max(self.peak_rss.get(key, 0.0), rss)
        # A process that ended keeps the CPU it had used at its last sample.
        for pid in [p for p in self._last_cpu if p not in seen]:
            name, used = self._last_cpu.pop(pid)
            self._gone_cpu[name] = self._gone_cpu.get(name, 0.0) + used
            totals[name] = totals.get(name, 0.0) + used
            self._procs.pop(pid, None)
        self.times.append(now)
        self.cpu.append(totals)

    def cpu_at(self, at: float) -> dict[str, float]:
        """CPU seconds per group used up to `at`, interpolated between the samples around it."""
        if not self.times:
            return {}
        i = bisect.bisect_left(self.times, at)
        if i <= 0:
            return dict(self.cpu[0])
        if i >= len(self.times):
            return dict(self.cpu[-1])
        t0, t1 = self.times[i - 1], self.times[i]
        share = (at - t0) / (t1 - t0) if t1 > t0 else 1.0
        before, after = self.cpu[i - 1], self.cpu[i]
        return {k: before.get(k, 0.0) + (after.get(k, 0.0) - before.get(k, 0.0)) * share for k in after}

    def cpu_between(self, start: float, end: float) -> dict[str, float]:
        a, b = self.cpu_at(start), self.cpu_at(end)
        return {k: b[k] - a.get(k, 0.0) for k in b}

    def peak_rss_mb(self) -> dict[str, float]:
        """Peak RSS per process, named `group` when the group is one process, else `group/pid`."""
        per_group: dict[str, list[str]] = {}
        for key in self.peak_rss:
            if "/" in key:
                per_group.setdefault(key.split("/", 1)[0], []).append(key)
        out: dict[str, float] = {}
        for group, keys in per_group.items():
            if len(keys) == 1:
                out[group] = self.peak_rss[keys[0]] / 2**20
            else:
                out |= {key: self.peak_rss[key] / 2**20 for key in sorted(keys)}
        return out


class MachineMeter(Sampler):
    """The whole machine's CPU (psutil.cpu_times: every process, this one and its target included) and the
    time the hypervisor gave to other guests (steal), sampled every `every` seconds in a thread: a burst
    window where the machine was busy beyond the scheduler, or stolen from, says so in its notes."""

    def __init__(self, every: float = 0.5) -> None:
        super().__init__(every, "machine-meter")
        self.samples: list[tuple[float, float, float]] = []  # (epoch, busy CPU s, steal s), cumulative

    def _sample(self) -> None:
        times = psutil.cpu_times()
        idle = times.idle + getattr(times, "iowait", 0.0)
        steal = getattr(times, "steal", 0.0)
        busy = sum(times) - idle - steal - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
        self.samples.append((time.time(), busy, steal))

    def between(self, start: float, end: float) -> tuple[float, float] | None:
        """(busy CPU s, steal s) from the last sample at or before `start` to the first at or after `end`;
        None when the samples do not span the window."""
        before = [sample for sample in self.samples if sample[0] <= start]
        after = [sample for sample in self.samples if sample[0] >= end]
        if not before or not after:
            return None
        (_, busy0, steal0), (_, busy1, steal1) = before[-1], after[0]
        return busy1 - busy0, steal1 - steal0


def machine_note(machine_meter: MachineMeter, result: PeerResult) -> str | None:
    """The machine over the burst window (due - 1 s to the last run done): its busy CPU against the
    scheduler's own, and the steal."""
    start = result.due - 1
    seen = machine_meter.between(start, start + result.burst_seconds)
    if seen is None:
        return None
    busy, steal = seen
    own = sum(cpu for group, cpu in result.burst_cpu_s.items() if group != PLANNING_GROUP)
    return (
        f"the machine over the burst's {result.burst_seconds:.1f} s "
        f"(to the meter's {machine_meter.every:g} s samples): "
        f"{busy:.2f} s of CPU busy in all, the scheduler's {own:.2f} s of it; "
        f"{steal:.2f} s stolen by the host"
    )


# --- what the target saw ------------------------------------------------------------------------------------


def arrivals_for(target: Target, keys: set[str], due: float, result: PeerResult) -> None:
    """Start delays, lost and duplicate runs of `keys` (the n runs' keys, as the target receives them)."""
    first: dict[str, float] = {}
    count = 0
    for arrival in sorted(target.arrivals, key=lambda a: a.at):
        if arrival.key in keys:
            count += 1
            first.setdefault(arrival.key, arrival.at)
    result.delays = [at - due for at in first.values()]
    result.lost = len(keys) - len(first)
    result.duplicates = count - len(first)


def measure_idle(meter: ProcessMeter, settings: PeerSettings, result: PeerResult) -> None:
    """The idle window after the burst: the n jobs still registered, nothing due."""
    time.sleep(settings.settle_seconds)
    start = time.time()
    time.sleep(settings.idle_seconds)
    end = time.time()
    time.sleep(meter.every * 2)  # a sample after the window's end
    result.idle_cpu_s = meter.cpu_between(start, end)
    result.idle_seconds = end - start


def report(result: PeerResult) -> None:
    """What one scheduler's run measured, as the peers' own scripts print it when run alone."""
    stats = summary(result.delays)
    print(f"{result.scheduler}: {result.n} jobs due {time.strftime('%H:%M:%S', time.gmtime(result.due))} UTC")
    print(f"  registered in     {result.seed_seconds:.2f} s")
    print(
        f"  start delay       p50 {stats['p50']:.3f} s  p99 {stats['p99']:.3f} s  max {stats['max']:.3f} s "
        f"(n={stats['n']:.0f})"
    )
    print(f"  fires done        {result.fires_done}  lost {result.lost}  duplicates {result.duplicates}")
    burst = ", ".join(f"{k} {v:.2f}" for k, v in result.burst_cpu_s.items())
    print(
        f"  burst CPU         {sum(result.burst_cpu_s.values()):.2f} s over {result.burst_seconds:.1f} s "
        f"({burst}) = {result.cpu_per_fire_ms:.2f} ms per fire"
    )
    idle = ", ".join(f"{k} {v:.3f}" for k, v in result.idle_cpu_s.items())
    print(
        f"  idle CPU          {result.idle_cpu_per_s * 1000:.1f} ms/s "
        f"over {result.idle_seconds:.0f} s ({idle})"
    )
    print("  peak RSS          " + ", ".join(f"{k} {v:.0f} MB" for k, v in result.peak_rss_mb.items()))
    for note in result.notes:
        print(f"  note: {note}")
