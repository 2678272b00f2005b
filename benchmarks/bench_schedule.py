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

from tickwork.domain.schedule import next_fire_after, parse_schedule

ITERATIONS = 20_000
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
    """Steady state: a first pass over the same fires warms the per-zone-year offset tables (built once per
    zone and year, ~0.5 ms each) and the per-month day memo, as a long-running ticker would have them."""
    schedule = parse_schedule(expression, zone)
    after = ANCHOR
    for _ in range(ITERATIONS):
        after = next_fire_after(schedule, after) or ANCHOR
    after = ANCHOR
    samples = []
    for _ in range(ITERATIONS):
        started = time.perf_counter_ns()
        fire = next_fire_after(schedule, after)
        samples.append(time.perf_counter_ns() - started)
        after = fire or ANCHOR
    samples.sort()
    return statistics.fmean(samples) / 1000, samples[int(len(samples) * 0.99)] / 1000


def measure_cold_zone_year() -> float:
    """One uncached call: it builds a zone-year offset table (paid by the first job in a zone)."""
    schedule = parse_schedule("*/5 * * * *", "Europe/Paris")
    started = time.perf_counter_ns()
    next_fire_after(schedule, datetime(2031, 6, 1, tzinfo=UTC))
    return (time.perf_counter_ns() - started) / 1000


def main() -> None:
    print(f"next_fire_after, {ITERATIONS} iterations each, result fed back (us)")
    print(f"{'case':32} {'expression':22} {'zone':18} {'mean':>8} {'p99':>8}")
    for name, expression in CASES:
        for zone in ZONES:
            mean, p99 = measure(expression, zone)
            print(f"{name:32} {expression:22} {zone:18} {mean:8.2f} {p99:8.2f}")
    print(f"cold call (builds one zone-year offset table): {measure_cold_zone_year():.0f} us")


if __name__ == "__main__":
    main()
