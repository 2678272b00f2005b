"""Tickwork's row in bench_peers.py: `tickwork local` on the SQLite engine with every role process (API,
executors, ticker, sweeper, watcher) and the supervisor itself, as `make run` starts them, N jobs created
through the job service, each due in the same second and calling the loopback target once.

Settings: the command's defaults (a tick a minute, planning 120 s ahead, a status line every 5 s), but the
cap on runs executing at once is PeerSettings.concurrency (every peer's worker concurrency). Jobs time out
after PeerSettings.timeout_s and make up to 3 attempts (Tickwork's default retry policy). The SQLite file is
in WAL mode: the API's writes synchronous=FULL, the run bookkeeping NORMAL (local/runtime.py says why).

Tickwork plans ahead: the tick that plans the burst runs up to 120 s before the due second. Its CPU (every
role process, over that tick) is added to the burst's, as the group `planning (tick)`, so the CPU per fire
counts planning as the peers' figures count their scheduler deciding at the due second.

On SQLite every write of every process takes one lock, one transaction at a time, so the lock can bound a
burst before the cores do. Each role process publishes how long it held it after each of its commits (the
gauges WriteTransactions and WriteLockHeldSeconds in its metric snapshot, written at most once a second);
the notes give how long it was held from one second before the due second until the snapshots read
SNAPSHOT_LAG after the last run was done (the burst's last deletes and changes), and that as a share of the
burst (until the last run was done).

    python benchmarks/peer_tickwork.py 1000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _e2e import LocalSettings, LocalTickwork, Target, fixed_second, seed_jobs, sleep_until, wait_for
from _peers import (
    PLANNING_GROUP,
    PeerResult,
    PeerSettings,
    ProcessMeter,
    Services,
    arrivals_for,
    measure_idle,
    report,
)
from bench_burst import ticker_ticks
from tickwork.local.status import snapshots_by_file

WriteLock = dict[str, tuple[float, float]]  # snapshot file -> (commits, seconds the write lock was held)

SEED_THREADS = 8
ROLES = "api,executor,ticker,sweeper,watcher"  # `tickwork local`'s default roles
LABEL = "Tickwork, SQLite engine"


def local_settings(settings: PeerSettings, executors: int | None = None) -> LocalSettings:
    """`tickwork local`'s defaults but the cap (the tick and lookahead as a user gets them)."""
    return LocalSettings(
        cap=settings.concurrency, tick_interval=60.0, lookahead=120, sweep_interval=60.0, executors=executors
    )


def run_tickwork(
    n: int,
    target: Target,
    settings: PeerSettings,
    workdir: Path,
    services: Services,
    local: LocalSettings | None = None,
    label: str = LABEL,
    source: Path | None = None,
    profile: Path | None = None,
    profile_gil: bool = False,
) -> PeerResult:
    from tickwork.domain.models import make_run_id

    local = local or local_settings(settings)
    state = workdir / f"tickwork-{n}-{label.split(',')[0].replace(' ', '_')}"
    runtime = LocalTickwork(state, local, source=source, roles=ROLES, status_interval=5.0)
    with runtime:
        parts = runtime.components()
        assert runtime.process is not None
        roots = {"supervisor": runtime.process.pid} | runtime.pids()
        # The supervisor's own CPU only (its children are the role groups).
        meter = ProcessMeter(roots, own_only={"supervisor"}).start()
        try:
            # The create plans fires inside its own lookahead: due beyond it, so the ticker plans the burst.
            estimate = n / 300 + 5
            due_at, expression = fixed_second(time.time() + estimate + local.lookahead + 15)
            result = PeerResult(label, n, due_at.timestamp())
            result.notes.append(f"tickwork local {local.describe()}")
            started = time.perf_counter()
            job_ids, _ = seed_jobs(parts, n, expression, f"{target.url}/tickwork", SEED_THREADS)
            result.seed_seconds = time.perf_counter() - started
            if time.time() > result.due - local.lookahead:
                result.notes.append("seeding ran into the lookahead: some fires were planned by the create")
            keys = {make_run_id(job_id, due_at) for job_id in job_ids}
            if profile is not None:
                planning_at = _next_tick(result.due, local)
                sleep_until(planning_at - 2)
                spies = _spy(runtime.pids(), profile / f"{n}", services, gil=profile_gil)
            sleep_until(result.due - 1)
            lock_before = _write_lock(state / "run")
            wait_for(lambda: _arrived(target, keys) >= n, timeout=settings.drain_timeout, every=0.2)
            wait_for(lambda: _succeeded(parts) >= n, timeout=60, every=0.5)
            done_at = time.time()
            if profile is not None:
                _stop_spies(spies, services)
            time.sleep(SNAPSHOT_LAG)  # the role processes' snapshots of the burst's end (and the meter's)
            lock_after = _write_lock(state / "run")
            result.fires_done = _succeeded(parts)
            result.burst_cpu_s = meter.cpu_between(result.due - 1, done_at)
            result.burst_seconds = done_at - (result.due - 1)
            result.notes.append(_write_lock_note(lock_before, lock_after, result.burst_seconds, n))
            planning = _planning_tick(state / "run" / "ticker.log", result.due)
            if planning is not None:
                tick_cpu = meter.cpu_between(*planning)
                result.burst_cpu_s[PLANNING_GROUP] = sum(tick_cpu.values())
                by_role = ", ".join(f"{role} {cpu:.2f}" for role, cpu in tick_cpu.items() if cpu >= 0.005)
                result.notes.append(
                    f"the burst was planned by the tick {result.due - planning[0]:.0f} s before the due "
                    f"second, taking {planning[1] - planning[0]:.1f} s; its CPU s [{by_role}]"
                )
            else:
                result.notes.append("no ticker log line for the planning tick: its CPU is not counted")
            arrivals_for(target, keys, result.due, result)
            measure_idle(meter, settings, result)
            result.peak_rss_mb = meter.peak_rss_mb()
        finally:
            meter.stop()
    return result


SNAPSHOT_LAG = 1.5  # s: a role process writes its snapshot at most once a second (local/roles.py)


def _write_lock(run_dir: Path) -> WriteLock:
    """Each role process's SQLite write lock figures, as its latest snapshot says (none from a checkout
    from before they were published)."""
    found: WriteLock = {}
    for name, snapshot in snapshots_by_file(run_dir).items():
        gauges = snapshot.get("gauges", {})
        if "WriteLockHeldSeconds" in gauges:
            found[name] = (float(gauges.get("WriteTransactions", 0)), float(gauges["WriteLockHeldSeconds"]))
    return found


def _write_lock_note(before: WriteLock, after: WriteLock, seconds: float, n: int) -> str:
    """The lock's share of the window: each process's figures after, less before (0 for a process that had
    not written before the window)."""
    if not after:
        return "the SQLite write lock's hold time: not published by this checkout's role processes"
    commits = held = 0.0
    for name, (commits_after, held_after) in after.items():
        commits_before, held_before = before.get(name, (0.0, 0.0))
        if commits_after < commits_before:
            return f"the SQLite write lock's hold time: {name} restarted in the window, not comparable"
        commits, held = commits + commits_after - commits_before, held + held_after - held_before
    return (
        f"the SQLite write lock was held {held:.2f} s ({held / seconds:.0%} of the burst's {seconds:.1f} s; "
        f"its writes until {SNAPSHOT_LAG} s after the last run included), by {commits:.0f} commits: "
        f"{held / n * 1000:.2f} ms per run"
    )


def _next_tick(due: float, local: LocalSettings) -> float:
    """When the tick that plans the burst starts: the first tick on the interval's grid within the
    lookahead of the due second."""
    first = due - local.lookahead
    return (first // local.tick_interval + (first % local.tick_interval > 0)) * local.tick_interval


def _spy(pids: dict[str, int], directory: Path, services: Services, *, gil: bool) -> list[tuple[str, Path]]:
    """py-spy on every role process, from before the planning tick until the burst is done: a flame graph
    per process (SVG), summarised by _stop_spies. `gil`: only the thread holding the GIL is sampled, so
    the samples follow the process's Python CPU; without it py-spy also samples threads blocked in a lock
    or a socket (it does not tell them idle here), which shows where the wall time goes."""
    directory.mkdir(parents=True, exist_ok=True)
    spies = []
    for role, pid in pids.items():
        svg = directory / f"{role}.svg"
        services.start(
            f"py-spy-{role}",
            [
                str(Path(sys.executable).parent / "py-spy"),
                "record",
                "-p",
                str(pid),
                "-o",
                str(svg),
                "--nonblocking",
                *(["--gil"] if gil else []),
                "-F",
                "-r",
                "50",
            ],
            log=directory / f"py-spy-{role}.log",
        )
        spies.append((role, svg))
    return spies


def _stop_spies(spies: list[tuple[str, Path]], services: Services) -> None:
    """Stop each py-spy with SIGINT (it writes its flame graph then), and print where each process's samples
    went: the functions in the most samples (inclusive), from the SVG's frame titles."""
    import re
    import signal

    for role, _ in spies:
        services.stop(f"py-spy-{role}", grace=20, first=signal.SIGINT)
    title = re.compile(r"<title>(.*?) \(([\d,]+) samples, ([\d.]+)%\)</title>")
    for role, svg in spies:
        if not svg.exists():
            print(f"  profile {role}: no flame graph written (see {svg.parent}/py-spy-{role}.log)")
            continue
        inclusive: dict[str, int] = {}
        total = 0
        for frame, samples, _ in title.findall(svg.read_text(errors="replace")):
            count = int(samples.replace(",", ""))
            if frame == "all":
                total = count
                continue
            name = re.sub(r" \(.*", "", frame) + " " + (re.findall(r"\(([^)]*)\)", frame) or [""])[0]
            inclusive[name] = max(inclusive.get(name, 0), 0) + count
        top = sorted(inclusive.items(), key=lambda kv: -kv[1])[:25]
        print(f"  profile {role}: {total} samples (50/s), {svg}")
        for name, count in top:
            print(f"    {count / max(1, total) * 100:5.1f}%  {name}")


def _arrived(target: Target, keys: set[str]) -> int:
    with target._lock:
        return len({a.key for a in target.arrivals if a.key in keys})


def _succeeded(parts: object) -> int:
    from _e2e import _sqlite_table
    from tickwork.resources import RUNS

    table = _sqlite_table(parts, parts.settings.resource_names.table(RUNS))  # type: ignore[attr-defined]
    with parts.database.read() as connection:  # type: ignore[attr-defined]
        row = connection.execute(
            f"SELECT COUNT(*) FROM {table} WHERE json_extract(item, '$.state') = 'succeeded'"
        ).fetchone()
    return int(row[0])


def _planning_tick(log: Path, due: float) -> tuple[float, float] | None:
    """The span of the first tick whose horizon reached the due second (a little either side)."""
    for started, ended, horizon in ticker_ticks(log):
        if horizon >= due:
            return started - 0.2, ended + 0.2
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("n", type=int, nargs="?", default=1000)
    parser.add_argument("--executors", type=int, help="executor processes (default: the command's)")
    parser.add_argument("--profile", type=Path, help="py-spy flame graphs of every role process, here")
    parser.add_argument(
        "--profile-gil", action="store_true", help="sample only the thread holding the GIL (its Python CPU)"
    )
    args = parser.parse_args()
    services = Services()
    services.cleanup_on_exit()
    target = Target().start()
    settings = PeerSettings()
    try:
        with tempfile.TemporaryDirectory(prefix="tickwork-peer-") as tmp:
            local = replace(local_settings(settings), executors=args.executors)
            result = run_tickwork(
                args.n,
                target,
                settings,
                Path(tmp),
                services,
                local=local,
                profile=args.profile,
                profile_gil=args.profile_gil,
            )
    finally:
        target.stop()
    report(result)


if __name__ == "__main__":
    main()
