"""Stop latency: SIGTERM to the whole process group of `tickwork local` (what Ctrl-C in a terminal and
systemd's default stop do) while a burst of 1,000 fires is in flight; the time until every process exited.

Each round starts `tickwork local` (SQLite engine) in a fresh state dir and in a session of its own, creates
N jobs due in the same second (each create plans its own run) calling a loopback target, waits until the
burst reaches the target (a random point in its first 60%), signals the group, and waits for the supervisor
and each role to exit: a role gets the signal twice, from the group and from the supervisor. Prints every
stop, then max and p50; exits 1 if a stop took `--limit` seconds or more (the supervisor SIGKILLs a role
still running 15 s after its SIGTERM; a stop still running after 20 s is ended by this script).

`--stacks` dumps the Python stack of every thread of a role still running `--limit` seconds after the
signal into its log (faulthandler, SIGABRT, which ends it) and prints it: what a hung role was waiting for.
faulthandler prints 100 threads, the newest first: an executor's main thread is past them.

Nothing outlives the script: `tickwork local` runs under a parent-death signal (tickwork.local.lifeline),
so even a SIGKILL of this script stops it; SIGTERM unwinds like Ctrl-C and kills whatever is left.

    python benchmarks/stop_latency.py [--rounds 50] [--jobs 1000] [--limit 3] [--seed 5] [--stacks]
        [--source OTHER_CHECKOUT]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import json
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.request import urlopen

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _e2e import (
    LocalSettings,
    LocalTickwork,
    Target,
    count_items,
    exit_cleanly_on_sigterm,
    fixed_second,
    iso,
    machine,
    pct,
    seed_jobs,
    wait_for,
)
from tickwork.resources import RUNS

GIVE_UP_SECONDS = 20.0  # past the supervisor's 15 s SIGKILL of a role: the stop hung for good
LEAD_SECONDS = 3.0  # at least, from the start of the creates to the due second
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


@dataclass
class Stop:
    seconds: float  # from the group SIGTERM until the last process exited
    exited: dict[str, float]  # each process: seconds after the signal (inf: still running when given up)
    calls_at_signal: int  # target calls of the burst when the signal went out
    burst: int  # runs planned for the due second
    setup: dict[str, float]  # seconds: tickwork local's start, the creates

    def describe(self) -> str:
        last = max(self.exited, key=lambda name: self.exited[name])
        order = ", ".join(f"{name} {at:.2f}" for name, at in sorted(self.exited.items(), key=lambda i: i[1]))
        return (
            f"{self.seconds:6.2f} s  (signal at call {self.calls_at_signal} of {self.burst}; "
            f"last to exit: {last}; exits: {order}; start {self.setup['start']:.1f} s, "
            f"creates {self.setup['creates']:.1f} s)"
        )


class GroupTickwork(LocalTickwork):
    """`tickwork local` as LocalTickwork runs it, but leading a session of its own: the process group that
    a terminal's Ctrl-C or systemd signals. Started through tickwork.local.lifeline, so it is sent SIGTERM
    when this script dies, however it dies."""

    def start(self, timeout: float = 90.0) -> GroupTickwork:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        args = [
            sys.executable, "-m", "tickwork.local.lifeline", str(os.getpid()), "--",
            sys.executable, "-m", "tickwork.cli", "local",
            "--port", str(self.port), "--state-dir", str(self.state_dir),
            "--status-interval", "3600", *self.settings.args(),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TICKWORK_"))}
        if self.source is not None:
            env["PYTHONPATH"] = str(self.source / "functions")  # ahead of the editable install's path
        with (self.state_dir / "cli.out").open("wb") as out:
            self.process = subprocess.Popen(
                args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            if not wait_for(self._up, timeout, every=0.2):
                raise RuntimeError("tickwork local did not come up: " + self.output())
        except BaseException:
            self.stop()
            raise
        self.env = json.loads((self.state_dir / "run" / "env.json").read_text())
        return self

    def _up(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"tickwork local exited with {self.process.returncode}: {self.output()}")
        if len(self.pids_if_written()) < 4:
            return False
        try:
            with urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def pids_if_written(self) -> dict[str, int]:
        with contextlib.suppress(OSError, ValueError):  # not written yet, or being rewritten
            return self.pids()
        return {}

    def output(self) -> str:
        return (self.state_dir / "cli.out").read_text(errors="replace")[-3000:]

    def logs(self) -> str:
        """The end of each role's log and of the supervisor's output."""
        logs = sorted((self.state_dir / "run").glob("*.log"))
        tails = [f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}" for log in logs]
        return "\n".join([*tails, f"--- cli.out\n{self.output()}"])

    def stop(self) -> None:
        """Kill whatever is left of it (the group: the supervisor and its roles) and reap it."""
        roles = self.pids_if_written()
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        for pid in roles.values():  # orphans re-parented to this script (a subreaper) are reaped here
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def become_subreaper() -> None:
    """A role orphaned by its supervisor is re-parented to this script (which reaps it), not to PID 1."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def signal_group_and_wait(local: GroupTickwork, limit: float, stacks: bool) -> dict[str, float]:
    """SIGTERM to the group; when each process exited, in seconds after the signal (a pidfd per process,
    opened before the signal, so a pid reused meanwhile cannot be mistaken for it)."""
    assert local.process is not None
    processes = {"supervisor": local.process.pid, **local.pids()}
    fds = {os.pidfd_open(pid): name for name, pid in processes.items()}
    exited: dict[str, float] = {}
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    sent = time.monotonic()
    dumped = False
    try:
        os.killpg(local.process.pid, signal.SIGTERM)
        while len(exited) < len(fds):
            elapsed = time.monotonic() - sent
            if elapsed >= GIVE_UP_SECONDS:
                break
            if stacks and not dumped and elapsed >= limit:
                dumped = True
                dump_stacks(local, {name: processes[name] for name in fds.values() if name not in exited})
            wait = (limit if stacks and not dumped else GIVE_UP_SECONDS) - elapsed
            for fd, _ in poller.poll(max(1, int(wait * 1000))):
                exited[fds[fd]] = time.monotonic() - sent
                poller.unregister(fd)
    finally:
        for fd in fds:
            os.close(fd)
    return {name: exited.get(name, float("inf")) for name in fds.values()}


def dump_stacks(local: GroupTickwork, running: dict[str, int]) -> None:
    """Each role still running: its threads' Python stacks (faulthandler on SIGABRT), printed from its log."""
    for name, pid in running.items():
        if name == "supervisor":
            continue
        log = local.state_dir / "run" / f"{name}.log"
        before = log.stat().st_size
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGABRT)
        time.sleep(0.5)
        with log.open("rb") as text:
            text.seek(before)
            print(f"--- {name} (pid {pid}), still running: its threads ---")
            print(text.read().decode(errors="replace").strip())


class LateCreatesError(RuntimeError):
    """The creates were not done before their due second (the machine is busy): the round is run again."""


def one_round(
    workdir: Path, settings: LocalSettings, target: Target, at_call: int, lead: float, args: Any
) -> Stop:
    """One start, burst and group SIGTERM. `lead`: seconds from the start of the creates to the due second.
    `args`: the command line's --jobs, --limit, --stacks and --source."""
    began = time.monotonic()
    local = GroupTickwork(workdir / "state", settings, source=args.source).start()
    try:
        parts = local.components()
        up = time.monotonic()
        # A daily expression for one second: the creates plan this second's runs themselves.
        due, expression = fixed_second(time.time() + lead)
        target.reset()
        _, seeding = seed_jobs(parts, args.jobs, expression, f"{target.url}/stop")
        if time.time() >= due.timestamp() - 0.2:
            raise LateCreatesError(f"the creates took {seeding:.1f} s, until {iso(time.time())}")
        burst = count_items(parts, parts.settings.resource_names.table(RUNS))
        if not wait_for(lambda: target.count() >= at_call, timeout=30, every=0.002):
            raise RuntimeError(
                f"the burst did not reach the target: {target.count()} calls of {burst}\n{local.logs()}"
            )
        calls_at_signal = target.count()
        exited = signal_group_and_wait(local, args.limit, args.stacks)
        setup = {"start": up - began, "creates": seeding}
        return Stop(max(exited.values()), exited, calls_at_signal, burst, setup)
    finally:
        local.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50, help="group SIGTERMs, each in its own burst")
    parser.add_argument("--jobs", type=int, default=1000, help="fires in each burst")
    parser.add_argument("--limit", type=float, default=3.0, help="a stop this long or longer fails")
    parser.add_argument("--seed", type=int, default=5, help="where in each burst the signal goes out")
    parser.add_argument("--stacks", action="store_true", help="dump a hung role's threads at --limit")
    parser.add_argument(
        "--source", type=Path, help="another checkout whose functions/ tickwork local runs (a baseline)"
    )
    args = parser.parse_args()
    exit_cleanly_on_sigterm()  # `timeout` or a kill unwinds through the finally blocks: nothing is left
    become_subreaper()
    if args.stacks:
        os.environ["PYTHONFAULTHANDLER"] = "1"  # inherited by tickwork local and its roles
    rng = random.Random(args.seed)
    # The defaults of `tickwork local`.
    settings = LocalSettings(
        shards=4, queues=2, cap=200, lookahead=120, tick_interval=60.0, sweep_interval=60.0
    )
    print(f"machine: {machine()}")
    print(
        f"{args.rounds} rounds of {args.jobs} fires due in one second; tickwork local {settings.describe()}"
    )
    started = time.monotonic()
    stops: list[Stop] = []
    target = Target().start()
    lead = LEAD_SECONDS
    try:
        while len(stops) < args.rounds:
            at_call = rng.randint(1, max(1, args.jobs * 6 // 10))
            with tempfile.TemporaryDirectory(prefix="tickwork-stop-") as tmp:
                try:
                    stop = one_round(Path(tmp), settings, target, at_call, lead, args)
                except LateCreatesError as late:
                    lead *= 2
                    print(f"again, the due second {lead:.0f} s after the creates start: {late}", flush=True)
                    continue
            stops.append(stop)
            lead = max(LEAD_SECONDS, 1.0 + 2 * stop.setup["creates"])
            print(f"stop {len(stops):3d}: {stop.describe()}", flush=True)
    finally:
        target.stop()
    seconds = [stop.seconds for stop in stops]
    slow = [number for number, stop in enumerate(stops, 1) if stop.seconds >= args.limit]
    print(
        f"{len(stops)} stops: max {max(seconds):.2f} s, p50 {pct(seconds, 50):.2f} s, "
        f"p90 {pct(seconds, 90):.2f} s; {len(slow)} at or over {args.limit:.0f} s {slow or ''}; "
        f"signal at call {min(s.calls_at_signal for s in stops)}-{max(s.calls_at_signal for s in stops)} "
        f"of bursts of {min(s.burst for s in stops)}-{max(s.burst for s in stops)}; "
        f"the script took {time.monotonic() - started:.0f} s (start p50 "
        f"{pct([s.setup['start'] for s in stops], 50):.1f} s, creates p50 "
        f"{pct([s.setup['creates'] for s in stops], 50):.1f} s a round)"
    )
    by_process = {name: [stop.exited[name] for stop in stops] for name in stops[0].exited}
    print(
        "each process's exit after the signal: "
        + "; ".join(
            f"{name} p50 {pct(times, 50):.2f} s max {max(times):.2f} s" for name, times in by_process.items()
        )
    )
    return 1 if slow else 0


if __name__ == "__main__":
    raise SystemExit(main())
