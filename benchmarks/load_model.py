"""The load model: every rough number of the design from one stated job mix (issue 29, part 1).

The mix is an assumption, stated here with its reasons; the constants are measured, each with the command
that measured it. Everything else is derived: the fires come from the real schedule engine over 24 hours.

    python benchmarks/load_model.py             # print the model
    python benchmarks/load_model.py --write     # rewrite docs/design.md's "Rough numbers" block from it

tests/test_load_model.py keeps the block equal to what this prints.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

from tickwork.domain.schedule import next_fire_after, parse_schedule

DOC = Path(__file__).resolve().parent.parent / "docs" / "design.md"
START = "<!-- rough numbers: written by `python benchmarks/load_model.py --write` -->"
END = "<!-- end of rough numbers -->"


@dataclass(frozen=True, slots=True)
class Share:
    jobs: int
    expressions: tuple[str, ...]  # spread round-robin over the jobs
    why: str


# 100,000 jobs. Cron lines cluster on round times: most hourly jobs run on the hour, and */5, */15 and
# every-minute jobs fire at :00 as well; the rest are spread (hashed minutes, daily jobs at their own time).
MIX: tuple[Share, ...] = (
    Share(40_000, ("0 * * * *",), "hourly, on the hour (the most common cron line)"),
    Share(10_000, ("*/15 * * * *",), "every 15 minutes"),
    Share(5_000, ("*/5 * * * *",), "every 5 minutes"),
    Share(5_000, ("* * * * *",), "every minute"),
    Share(30_000, tuple(f"{m} * * * *" for m in range(1, 60)), "hourly at a spread minute"),
    Share(10_000, tuple(f"{m % 60} {h} * * *" for h in range(24) for m in range(7, 60, 13)), "daily, spread"),
)

# Measured constants, each with its command (docs/benchmarks.md has the runs).
WCU_PER_RUN = 10.0  # response mode: `python benchmarks/bench_cost_modes.py 1000`
EXEC_WCU_PER_RUN = 4.0  # of them at execution: claim, finish (runs table), slot take, give back (slots)
PLAN_WCU_PER_RUN = 6.0  # of them at planning: put the run 2, advance the job 4
DOLLARS_PER_M_RUNS = 6.78  # DynamoDB and SQS, response mode: `bench_cost_modes.py 1000`
RUN_ITEM_BYTES = 1_100  # at most: a finish is 1 WCU (<= 1 KB), plus DynamoDB's 100 B per item
PRICE_GB_MONTH = 0.25  # DynamoDB storage, us-east-1 (bench_cost.py's prices)
RETENTION_DAYS = 30  # a run's default retention (domain/models.py)
# Planning at a region's latencies: one shard's 3,750 fires in 8.7 s with 8 commit threads
# (`python benchmarks/bench_plan_latency.py`, commits 10-20 ms and sends 5-15 ms assumed).
PLAN_SECONDS_PER_FIRE_PER_SHARD = 8.7 / 3_750
SHARDS = 16  # the stack's default `shard_count`
CAP = 10_000  # the product's runs in flight
TICK_BUDGET_S = 40.0  # the ticker's 50 s timeout less its 10 s reserve (handlers/ticker.py)
LEAD_S = 50.0  # the least the two ticks before a fire have (docs/design.md, "The tick")
RUN_SECONDS = (1, 30, 60)


def fires_per_minute(day: datetime, mix: tuple[Share, ...] = MIX) -> Counter[datetime]:
    """How many runs fire in each minute of the 24 hours from `day`, over the whole mix."""
    per_minute: Counter[datetime] = Counter()
    end = day + timedelta(days=1)
    for share in mix:
        count = Counter(share.expressions[i % len(share.expressions)] for i in range(share.jobs))
        for expression, jobs in count.items():
            schedule = parse_schedule(expression)
            fire = next_fire_after(schedule, day - timedelta(seconds=1))
            while fire is not None and fire < end:
                per_minute[fire.replace(second=0)] += jobs
                fire = next_fire_after(schedule, fire)
    return per_minute


def mix_rows(day: datetime = datetime(2026, 12, 2, tzinfo=UTC)) -> list[tuple[float, str, float]]:
    """The mix as the cost benchmarks take it: (share of the jobs, what they are, runs a day per job)."""
    jobs = sum(s.jobs for s in MIX)
    rows = []
    for share in MIX:
        alone = fires_per_minute(day, (share,))
        rows.append((share.jobs / jobs, share.why, sum(alone.values()) / share.jobs))
    return rows


def model() -> list[str]:
    day = datetime(2026, 12, 2, tzinfo=UTC)  # a Wednesday; the mix has no weekday rules
    per_minute = fires_per_minute(day)
    runs_per_day = sum(per_minute.values())
    peak_minute, burst = max(per_minute.items(), key=lambda item: (item[1], -item[0].timestamp()))
    midnight = per_minute[day]
    per_shard = math.ceil(burst / SHARDS)
    plan_s = per_shard * PLAN_SECONDS_PER_FIRE_PER_SHARD
    rate_s = runs_per_day / 86_400
    jobs = sum(s.jobs for s in MIX)
    lines = [
        f"The mix (`benchmarks/load_model.py`, an assumption): {jobs:,} jobs; "
        + "; ".join(f"{s.jobs:,} {s.why}" for s in MIX)
        + ".",
        "",
        "| quantity | value | how |",
        "|---|---|---|",
        f"| runs a day | {runs_per_day:,} | the schedule engine over 24 h |",
        f"| average fire rate | {runs_per_day / 1440:,.0f} a minute, {rate_s:,.0f} a second "
        "| runs a day / 1,440 |",
        f"| burst (the peak minute) | {burst:,} at :{peak_minute.minute:02d} "
        f"({midnight:,} at midnight UTC) "
        "| the busiest minute of the day: on-the-hour, */15, */5 and every-minute jobs together |",
        f"| planning per shard | {per_shard:,} fires, {plan_s:.1f} s | burst / {SHARDS} shards x "
        f"{PLAN_SECONDS_PER_FIRE_PER_SHARD * 1000:.2f} ms a fire (`bench_plan_latency.py`); budget "
        f"{TICK_BUDGET_S:.0f} s: {'fits' if plan_s <= TICK_BUDGET_S else 'does not fit'}, "
        f"{LEAD_S / plan_s:.1f}x inside the {LEAD_S:.0f} s lead |",
    ]
    # The fewest shards whose share of the burst plans twice inside the lead time and within the budget.
    needed = math.ceil(burst * PLAN_SECONDS_PER_FIRE_PER_SHARD / min(LEAD_S / 2, TICK_BUDGET_S))
    lines.append(
        f"| shards for the burst | at least {needed} ({SHARDS} deployed by default) | burst x "
        f"{PLAN_SECONDS_PER_FIRE_PER_SHARD * 1000:.2f} ms / min(lead / 2, budget); `shard_count` only rises |"
    )
    for seconds in RUN_SECONDS:
        waves = math.ceil(burst / CAP)
        lines.append(
            f"| drain, runs of {seconds} s | {waves * seconds:,} s, "
            f"last start at {(waves - 1) * seconds:,} s "
            f"| ceil(burst / cap {CAP:,}) = {waves} waves of {seconds} s, at best (slots, no ramp) |"
        )
    average_in_flight = rate_s * 1
    lines += [
        f"| runs in flight | {average_in_flight:,.0f} on average (1 s runs), "
        f"{min(CAP, burst):,} at the burst "
        "| fire rate x run time; the cap bounds the burst |",
        f"| write units a second | {rate_s * WCU_PER_RUN:,.0f} on average; "
        f"{burst / plan_s * PLAN_WCU_PER_RUN:,.0f} while the burst is planned; "
        f"{min(CAP, burst) * EXEC_WCU_PER_RUN:,.0f} while 1 s runs drain at the cap "
        f"| {WCU_PER_RUN:.0f} a run (`bench_cost_modes.py`): {PLAN_WCU_PER_RUN:.0f} planning, "
        f"{EXEC_WCU_PER_RUN:.0f} executing |",
        f"| run history | {runs_per_day * RETENTION_DAYS / 1e6:,.0f} M runs, "
        f"{runs_per_day * RETENTION_DAYS * RUN_ITEM_BYTES / 1e9:,.0f} GB at most "
        f"| {RETENTION_DAYS} days' retention x <= {RUN_ITEM_BYTES:,} B a run item |",
        f"| monthly cost (DynamoDB, SQS) | ${runs_per_day * 30 / 1e6 * DOLLARS_PER_M_RUNS:,.0f} for runs + "
        f"${runs_per_day * RETENTION_DAYS * RUN_ITEM_BYTES / 1e9 * PRICE_GB_MONTH:,.0f} storage "
        f"| ${DOLLARS_PER_M_RUNS} a million runs (`bench_cost_modes.py`), ${PRICE_GB_MONTH}/GB-month; "
        "Lambda time not included |",
    ]
    return lines


def write() -> None:
    text = DOC.read_text()
    begin, finish = text.index(START) + len(START), text.index(END)
    DOC.write_text(text[:begin] + "\n" + "\n".join(model()) + "\n" + text[finish:])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--write", action="store_true", help="rewrite docs/design.md's rough numbers")
    args = parser.parse_args()
    if args.write:
        write()
    print("\n".join(model()))


if __name__ == "__main__":
    main()
