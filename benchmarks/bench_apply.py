"""How fast `tickwork jobs apply` writes jobs into a running `tickwork local` (SQLite engine).

Starts its own `tickwork local` in a temporary state dir, writes a file of N jobs (daily schedules spread
over the day, an HTTP target on a closed loopback port: nothing runs during the measurement), and runs the
apply three times through the CLI's own code (`tickwork.client.apply`), as `tickwork jobs apply -f FILE --yes`
would: the first creates N jobs, the second finds them all equal and changes nothing, the third updates a
tenth of them. Prints each pass's wall time and rate (changes a minute), and what the same apply would take
under the deployed API's stage throttle (requests a second, from infra/config.py).

    python benchmarks/bench_apply.py            # 10,000 jobs
    python benchmarks/bench_apply.py 2000 --concurrency 16
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra.config import DeploymentConfig

from _e2e import LocalSettings, LocalTickwork, machine
from tickwork.client import apply as applying
from tickwork.client.connection import ApiClient, local_endpoint


def jobs_file(path: Path, count: int, *, changed_every: int = 0) -> None:
    jobs = []
    for i in range(count):
        minute, hour = i % 60, (i // 60) % 24
        if changed_every and i % changed_every == 0:
            minute = (minute + 1) % 60
        jobs.append(
            {
                "name": f"bench-{i:06d}",
                "tags": {"bench": "apply"},
                "schedule": {"expression": f"{minute} {hour} * * *", "timezone": "Europe/Berlin"},
                "target": {"kind": "http", "config": {"url": "http://127.0.0.1:9/", "method": "POST"}},
            }
        )
    path.write_text(yaml.safe_dump({"jobs": jobs}, sort_keys=False))


def one_pass(client: ApiClient, path: Path, concurrency: int) -> tuple[dict[str, int], float, float, int]:
    """(counts, seconds to read the current jobs and plan, seconds to write, failures)."""
    started = time.monotonic()
    desired = applying.load_file(path)
    current = list(client.pages("/jobs"))
    changes = applying.plan(desired, current, prune=False)
    planned = time.monotonic()
    outcome = applying.execute(client, changes, concurrency=concurrency)
    written = time.monotonic()
    counts = {a.value: n for a, n in outcome.done.items()}
    return counts, planned - started, written - planned, len(outcome.failed)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("count", type=int, nargs="?", default=10_000)
    parser.add_argument("--concurrency", type=int, default=applying.DEFAULT_CONCURRENCY)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    throttle = DeploymentConfig().api_rate_limit
    with tempfile.TemporaryDirectory(prefix="tickwork-apply-") as tmp:
        state = Path(tmp) / "state"
        # A long tick: the ticker stays out of the measurement (the jobs are daily anyway).
        settings = LocalSettings(shards=4, queues=1, cap=50, tick_interval=600.0)
        with LocalTickwork(state, settings):
            client = ApiClient(local_endpoint(state))
            spec = Path(tmp) / "jobs.yaml"
            jobs_file(spec, args.count)
            for name in ("create", "unchanged", "update a tenth"):
                if name == "update a tenth":
                    jobs_file(spec, args.count, changed_every=10)
                counts, read, write, failed = one_pass(client, spec, args.concurrency)
                changes = sum(n for a, n in counts.items() if a != "unchanged")
                total = read + write
                rate = changes / write * 60 if write > 0 and changes else 0.0
                print(
                    f"  {name:<15} {counts}  read+plan {read:6.1f} s  write {write:6.1f} s  "
                    f"total {total:6.1f} s  {rate:8,.0f} changes/min  failed {failed}"
                )
                if name == "create":
                    at_throttle = args.count / throttle
                    print(
                        f"  the same {args.count:,} creates under the deployed API's stage throttle "
                        f"({throttle} requests/s, shared by every caller): at least {at_throttle:,.0f} s "
                        f"({throttle * 60:,} a minute); locally {rate / 60:,.0f} requests/s"
                    )


if __name__ == "__main__":
    main()
