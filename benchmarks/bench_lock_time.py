"""Where the SQLite write lock's time goes: in the floor's tight loop and in a burst, measured side by side in
one invocation (issue 34: at 1,000 the burst's start delay follows the time the write lock is held).

Both run with `sql_meter/sitecustomize.py`: every statement timed, and every write transaction (BEGIN
IMMEDIATE to COMMIT) timed three ways: its wall time (the lock held), its statements' wall time, and its
thread's CPU meanwhile. The lock held minus that CPU is time the holder did not run: waiting to take the GIL
back after a statement (the sqlite3 module lets it go around each one), or for a core.

- The floor: bench_floor.py's loop (one claim, one HTTP call, one finish, one run after another) in this
  process, with nothing else running in it.
- The burst: bench_burst.py's N jobs due in one second through a whole `tickwork local`; each role process
  loads the meter (its directory on PYTHONPATH) and reports over its whole life, divided by the burst's
  fires: the executors' write transactions are the burst's (an idle executor's polls only read), the
  ticker's the planning and its idle ticks.

    python benchmarks/bench_lock_time.py                  # floor over 1,500 runs, burst of 1,000
    python benchmarks/bench_lock_time.py --burst 3000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _e2e import LocalSettings, Target, exit_cleanly_on_sigterm, machine
from bench_burst import run_tickwork_burst
from bench_floor import floor

SITE = Path(__file__).resolve().parent / "sql_meter"
# The statements whose mean is compared, floor against burst (the executor's claim and finish, its slots).
COMPARED = 8


def load_meter() -> ModuleType:
    """The meter, in this process (the role processes import it as their sitecustomize)."""
    spec = importlib.util.spec_from_file_location("bench_sql_meter", SITE / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def role_of(argv: list[str]) -> str:
    """A role process runs `roles.py <role>`; the supervisor is `tickwork local ...`."""
    if argv and argv[0].endswith("roles.py"):
        return argv[-1]
    return "supervisor" if "local" in argv else Path(argv[0]).name if argv else "?"


def burst_reports(directory: Path) -> dict[str, dict[str, Any]]:
    """Each role process's report, by role (a second process of one role: role-2)."""
    reports: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        report = json.loads(path.read_text())
        if not report["holds"]["transactions"]:
            continue
        role = name = role_of(report["argv"])
        number = 1
        while name in reports:
            number += 1
            name = f"{role}-{number}"
        reports[name] = report
    return reports


def hold_line(name: str, report: dict[str, Any], runs: int) -> str:
    holds = report["holds"]
    wall, sql, cpu = holds["wall"], holds["sql"], holds["thread_cpu"]
    idle = max(0.0, wall - cpu)  # the lock held, the holder not running
    return (
        f"  {name:<12} {holds['transactions']:>6,} write transactions; the lock held {wall:6.3f} s "
        f"({wall / runs * 1000:.3f} ms a run): statements {sql:6.3f} s, the holder's CPU {cpu:6.3f} s, "
        f"not running {idle:6.3f} s ({idle / wall * 100 if wall else 0:.0f}%)"
    )


def statements_in_hold(report: dict[str, Any]) -> dict[str, tuple[int, float]]:
    """Statement kind -> (count, wall s inside write transactions)."""
    return {kind: (int(c), float(w)) for kind, (_, _, c, w) in report["statements"].items() if c > 0}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1500, help="runs in the floor's loop")
    parser.add_argument("--burst", type=int, default=1000, help="jobs due in the same second")
    args = parser.parse_args()
    exit_cleanly_on_sigterm()
    print(f"machine: {machine()}")
    meter = load_meter()
    meter.install()
    with tempfile.TemporaryDirectory(prefix="tickwork-lock-") as tmp:
        cpu_ms, _, _ = floor(args.runs, Path(tmp), on_loop=meter.METER.reset)
        floor_report = meter.METER.snapshot()
        reports_dir = Path(tmp) / "meter"
        reports_dir.mkdir()
        os.environ[meter.ENV] = str(reports_dir)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")]))
        target = Target().start()
        try:
            result = run_tickwork_burst(args.burst, target, LocalSettings(), Path(tmp))
        finally:
            target.stop()
            del os.environ[meter.ENV]
        reports = burst_reports(reports_dir)
    print(f"\nthe floor: {args.runs:,} runs one after another, {cpu_ms:.2f} ms CPU a run (this process)")
    print(hold_line("floor", floor_report, args.runs))
    print(
        f"the burst: {args.burst:,} jobs due in one second, {result.cpu_per_fire_ms():.2f} ms CPU a fire "
        "(every Tickwork process)"
    )
    for role, report in reports.items():
        print(hold_line(role, report, args.burst))
    executors = [report for role, report in reports.items() if role.startswith("executor")]
    floor_kinds = statements_in_hold(floor_report)
    burst_kinds: dict[str, tuple[int, float]] = {}
    for report in executors:
        for kind, (count, wall) in statements_in_hold(report).items():
            before = burst_kinds.get(kind, (0, 0.0))
            burst_kinds[kind] = (before[0] + count, before[1] + wall)
    print("\nstatements inside write transactions, the executors' in the burst against the floor's loop:")
    print(f"  {'statement':<50} {'floor µs':>9} {'a run':>6} {'burst µs':>9} {'a run':>6}")
    ranked = sorted(burst_kinds.items(), key=lambda item: -item[1][1])[:COMPARED]
    for kind, (count, wall) in ranked:
        f_count, f_wall = floor_kinds.get(kind, (0, 0.0))
        f_mean = f"{f_wall / f_count * 1e6:9.1f}" if f_count else f"{'-':>9}"
        print(
            f"  {kind:<50} {f_mean} {f_count / args.runs:6.2f} {wall / count * 1e6:9.1f} "
            f"{count / args.burst:6.2f}"
        )


if __name__ == "__main__":
    main()
