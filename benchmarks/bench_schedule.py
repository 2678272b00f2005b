"""Microseconds per `next_fire_after`, iterating (each result feeds the next call), as the ticker does.

Run: python benchmarks/bench_schedule.py   (with the package installed, or PYTHONPATH=functions)
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

from tickwork.domain.schedule import next_fire_after, parse_schedule  # noqa: E402

ITERATIONS = 20_000
WARMUP = 200
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)  # a fixed instant: the benchmark never reads the clock

CASES = [
    ("simple", "*/5 * * * *"),
    ("complex hours/months/weekdays", "0 9-17/2 * 1-11 1-5"),
    ("last day of month", "0 0 L * *"),
    ("third Friday", "0 12 * * 5#3"),
    ("seconds", "*/15 * * * * *"),
]
ZONES = ["UTC", "America/New_York"]


def measure(expression: str, zone: str) -> tuple[float, float]:
    schedule = parse_schedule(expression, zone)
    after = ANCHOR
    for _ in range(WARMUP):
        after = next_fire_after(schedule, after) or ANCHOR
    samples = []
    for _ in range(ITERATIONS):
        started = time.perf_counter_ns()
        fire = next_fire_after(schedule, after)
        samples.append(time.perf_counter_ns() - started)
        after = fire or ANCHOR
    samples.sort()
    return statistics.fmean(samples) / 1000, samples[int(len(samples) * 0.99)] / 1000


def main() -> None:
    print(f"next_fire_after, {ITERATIONS} iterations each, result fed back (us)")
    print(f"{'case':32} {'expression':22} {'zone':18} {'mean':>8} {'p99':>8}")
    for name, expression in CASES:
        for zone in ZONES:
            mean, p99 = measure(expression, zone)
            print(f"{name:32} {expression:22} {zone:18} {mean:8.2f} {p99:8.2f}")


if __name__ == "__main__":
    main()
