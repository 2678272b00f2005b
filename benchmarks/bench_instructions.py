"""Instructions per run of the floor's path (bench_floor.py: claim, HTTP call, finish, on the SQLite engine),
counted by valgrind's callgrind, for this checkout and, side by side, for a git ref.

Why: this machine's speed moves by up to 1.76x within minutes (docs/benchmarks.md), so two timed runs
minutes apart cannot tell a change of a few percent. An instruction count does not depend on how busy the
machine is: the same code gives the same count to within about 0.1%, so the counts of both checkouts run at
once, and one invocation settles what a timed pair cannot.

Each checkout's floor runs twice under callgrind, with SMALL and LARGE runs in its loop; (count(LARGE) -
count(SMALL)) / (LARGE - SMALL) is one run's instructions: the start-up (imports, the local Tickwork's API,
the job, the warm-up) cancels out. Only the floor's own process is counted: its target and its local
Tickwork are processes of their own. The counts are user-space instructions (Python, SQLite, the C
library): the kernel's share of a run (the HTTP call's system calls, the writes to SQLite's WAL) is not in
them, and an instruction is not a fixed time (a cache miss costs more than a hit).

    python benchmarks/bench_instructions.py --ref 3ecde0f
    python benchmarks/bench_instructions.py --small 200 --large 800
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import baseline_checkout
from _e2e import exit_cleanly_on_sigterm, machine

HERE = Path(__file__).resolve().parents[1]
# How long one count may take (callgrind runs Python about 40 times slower; 800 runs take about 2 minutes
# with four counts sharing two cores).
COUNT_TIMEOUT_SECONDS = 1200
# How long a count stopped by SIGTERM gets to stop its target and its local Tickwork before SIGKILL.
STOP_SECONDS = 30


@dataclass
class Count:
    """One floor under callgrind: its checkout, runs in the loop, and its process."""

    label: str
    runs: int
    out: Path
    process: subprocess.Popen[str]

    def instructions(self) -> int:
        """The total the callgrind output file gives (its `totals:` or `summary:` line)."""
        output, _ = self.process.communicate(timeout=COUNT_TIMEOUT_SECONDS)
        if self.process.returncode != 0:
            raise RuntimeError(f"{self.label} floor of {self.runs} runs failed:\n{output[-3000:]}")
        match = re.search(r"^(?:totals|summary): (\d+)", self.out.read_text(), re.MULTILINE)
        if match is None:
            raise RuntimeError(f"no instruction total in {self.out}")
        return int(match.group(1))


def start(label: str, checkout: Path, runs: int, workdir: Path) -> Count:
    out = workdir / f"callgrind.{label}.{runs}"
    environment = {**os.environ, "PYTHONPATH": f"{checkout / 'functions'}{os.pathsep}{checkout}"}
    process = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "benchmarks/bench_floor.py",
            "--runs",
            str(runs),
            "--burst",
            "0",
        ],
        cwd=checkout,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: stopped as one below, whatever ends this script
    )
    return Count(label, runs, out, process)


def stop(count: Count) -> None:
    """SIGTERM first (the floor then stops its target and its local Tickwork), SIGKILL if it lingers."""
    if count.process.poll() is not None:
        return
    os.killpg(count.process.pid, signal.SIGTERM)
    try:
        count.process.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(count.process.pid, signal.SIGKILL)
        count.process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ref", help="also count the floor as of this git commit (a temporary worktree)")
    parser.add_argument("--small", type=int, default=200, help="runs in the shorter loop")
    parser.add_argument("--large", type=int, default=800, help="runs in the longer loop")
    args = parser.parse_args()
    if args.large <= args.small:
        parser.error("--large must be more runs than --small")
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: `make bench-install` installs it (Debian's valgrind package)")
    exit_cleanly_on_sigterm()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="tickwork-instructions-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        checkouts = {"this checkout": HERE}
        if args.ref:
            checkouts = {
                f"@{args.ref}": stack.enter_context(baseline_checkout(args.ref, workdir)),
                **checkouts,
            }
        counts = [
            start(re.sub(r"\W", "-", label), checkout, runs, workdir)
            for label, checkout in checkouts.items()
            for runs in (args.small, args.large)
        ]
        for count in counts:
            stack.callback(stop, count)
        per_run: dict[str, float] = {}
        for label, (small, large) in zip(checkouts, zip(counts[::2], counts[1::2], strict=True), strict=True):
            per_run[label] = (large.instructions() - small.instructions()) / (args.large - args.small)
        print(
            f"  instructions per run of the floor (claim, HTTP call, finish; SQLite), counted by callgrind "
            f"over {args.small:,} and {args.large:,} runs:"
        )
        for label, instructions in per_run.items():
            print(f"    {label:<20} {instructions / 1e6:7.3f} million")
        if args.ref:
            before, after = per_run[f"@{args.ref}"], per_run["this checkout"]
            print(f"    this checkout against @{args.ref}: {after / before:.3f}x")


if __name__ == "__main__":
    main()
