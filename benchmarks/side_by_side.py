"""Run one benchmark script twice in one invocation: from a baseline commit (a git worktree) and from this
checkout, one after the other on the same machine, then print the lines that match `--grep` from each.

    python benchmarks/side_by_side.py --baseline 4ccecb6 --grep "per successful run" -- bench_cost.py 1000

The baseline's script runs with the baseline's own `functions/` (each benchmark puts its checkout's
`functions/` first on sys.path). Each run is a child process in its own process group: whatever stops this
script (Ctrl-C, SIGTERM) stops the child and everything it started.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from _common import baseline_checkout

HERE = Path(__file__).resolve().parent


def run(script: Path, args: list[str]) -> tuple[str, float]:
    """The script's output and wall time. Its process group is killed if this process is stopped."""
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )

    def stop(signum: int, frame: FrameType | None) -> None:
        os.killpg(child.pid, signal.SIGTERM)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        output, _ = child.communicate()
    except KeyboardInterrupt:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if child.returncode != 0:
        sys.stdout.write(output)
        raise SystemExit(f"{script} exited with {child.returncode}")
    return output, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="commit to measure first (a git ref)")
    parser.add_argument("--grep", default="", help="show only the output lines matching this regex")
    parser.add_argument("script", help="a script in benchmarks/, e.g. bench_cost.py")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    args = [a for a in options.args if a != "--"]
    pattern = re.compile(options.grep)
    results = []
    with tempfile.TemporaryDirectory(prefix="tickwork-side-by-side-") as tmp:
        with baseline_checkout(options.baseline, Path(tmp)) as source:
            results.append(
                (f"before ({options.baseline})", run(source / "benchmarks" / options.script, args))
            )
        results.append(("after (this checkout)", run(HERE / options.script, args)))
    for label, (output, seconds) in results:
        print(f"== {label}: {options.script} {' '.join(args)} ({seconds:.0f} s)")
        for line in output.splitlines():
            if pattern.search(line):
                print(f"   {line}")


if __name__ == "__main__":
    main()
