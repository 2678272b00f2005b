"""How long `tickwork jobs pause --group G --note ...` takes on N jobs of a running `tickwork local`
(SQLite engine), and its resume: one request each, worked through by the request's first slice and then
the watcher's rounds, the CLI following it with its progress bar.

Starts its own `tickwork local` in a temporary state dir, creates N daily jobs in group `bench` plus N/10
in the default group (the action must pass over them) with `tickwork jobs apply`, then runs the CLI itself
(the installed `tickwork` command, a process of its own, as a user would) for the pause and the resume,
and prints each one's wall time, jobs a second, and what the action reports it did.

    python benchmarks/bench_bulk_pause.py            # 10,000 jobs
    python benchmarks/bench_bulk_pause.py 2000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _e2e import LocalSettings, LocalTickwork, machine
from tickwork.client import apply as applying
from tickwork.client.connection import ApiClient, local_endpoint

TICKWORK = str(Path(sys.executable).parent / "tickwork")


def jobs_file(path: Path, count: int) -> None:
    jobs = []
    for i in range(count + count // 10):
        minute, hour = i % 60, (i // 60) % 24
        job = {
            "name": f"bulk-{i:06d}",
            "schedule": {"expression": f"{minute} {hour} * * *"},
            "target": {"kind": "http", "config": {"url": "http://127.0.0.1:9/", "method": "POST"}},
        }
        if i < count:
            job["group"] = "bench"
        jobs.append(job)
    path.write_text(yaml.safe_dump({"jobs": jobs}, sort_keys=False))


def cli(state: Path, *args: str) -> tuple[float, dict[str, object], str]:
    """The `tickwork` command in a process of its own: its wall time, its JSON answer, its progress bar."""
    started = time.monotonic()
    shown = subprocess.run(
        [TICKWORK, "--state-dir", str(state), *args],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "COLUMNS": "120"},
        check=True,
    )
    took = time.monotonic() - started
    answer = subprocess.run(
        [TICKWORK, "--state-dir", str(state), "-o", "json", "bulk", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    newest = json.loads(answer.stdout)["items"][0]
    return took, newest, shown.stderr.strip().splitlines()[-1] if shown.stderr.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("count", type=int, nargs="?", default=10_000)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="tickwork-bulk-") as tmp:
        state = Path(tmp) / "state"
        # A long tick: the ticker stays out of the measurement (the jobs are daily anyway).
        settings = LocalSettings(shards=4, queues=1, cap=50, tick_interval=600.0)
        # The watcher works on bulk actions past their request's first slice.
        with LocalTickwork(state, settings, roles="api,executor,ticker,sweeper,watcher"):
            client = ApiClient(local_endpoint(state))
            spec = Path(tmp) / "jobs.yaml"
            jobs_file(spec, args.count)
            started = time.monotonic()
            changes = applying.plan(applying.load_file(spec), [], prune=False)
            outcome = applying.execute(client, changes, concurrency=applying.DEFAULT_CONCURRENCY)
            print(f"  created {sum(outcome.done.values()):,} jobs in {time.monotonic() - started:.1f} s")
            for verb in ("pause", "resume"):
                took, action, bar = cli(
                    state, "jobs", verb, "--group", "bench", "--note", "bench maintenance"
                )
                p = action["progress"]
                assert isinstance(p, dict)
                print(
                    f"  tickwork jobs {verb} --group bench ({args.count:,} of {p['scanned']:,} jobs): "
                    f"{took:6.1f} s, {p['changed'] / took:6.0f} jobs/s; changed {p['changed']:,}, "
                    f"unchanged {p['unchanged']:,}, failed {p['failed']:,}; state {action['state']}"
                )
                print(f"    progress bar: {bar}")


if __name__ == "__main__":
    main()
