"""The load model: every rough number of the design from one stated job mix (issue 29, part 1).

The mix is an assumption, stated here with its reasons; the constants are measured, each with the command
that measured it. Everything else is derived: the fires come from the real schedule engine over 24 hours.

    python benchmarks/load_model.py             # print the model
    python benchmarks/load_model.py --write     # rewrite docs/design.md's "Rough numbers" block from it
    tickwork -o json jobs list --all > jobs.json && python benchmarks/load_model.py --jobs jobs.json
                                                # a running instance: the next 24 h, its peak, the jitter

tests/test_load_model.py keeps the block equal to what this prints.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.config import DeploymentConfig, burst_write_units

from tickwork.domain.schedule import Schedule, next_fire_after, parse_schedule

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
SHARDS = DeploymentConfig().shard_count  # the stack's default
CAP = 10_000  # the product's runs in flight
TICK_BUDGET_S = 40.0  # the ticker's 50 s timeout less its 10 s reserve (handlers/ticker.py)
# The least lead a fire has: the planner looks 120 s ahead and the ticks come a minute apart, scheduled for
# second :00 (infra/constructs/scheduler.py), so a fire is first planned 60-120 s before it (on-the-minute
# fires, the burst's, 120 s less the tick's lag); 10 s of that is kept for the lag (TickerLag).
LEAD_S = 60.0 - 10.0
RUN_SECONDS = (1, 30, 60)


# Write units by table (`bench_cost_modes.py`): planning writes the job (its advance and `due` index
# moves) and the run; executing claims and finishes the run and takes and gives back a slot.
PLAN_WCU = {"jobs": 4, "runs": 2}
EXEC_WCU = {"runs": 2, "slots": 2}


def audit_row() -> str:
    scan, queries = audit_read_units_a_pass()
    an_hour = (scan + queries) * AUDIT_PASSES_AN_HOUR
    dollars = an_hour * 24 * 30 * PRICE_RRU
    return (
        f"| reconciliation audit | {an_hour / 1e6:.2f} M read units an hour "
        f"({scan:,.0f} Scan + {queries:,.0f} Query a pass, {AUDIT_PASSES_AN_HOUR:.0f} passes), "
        f"${dollars:,.0f} a month; "
        "writes only to repair "
        f"| every job once a pass: its item scanned, its runs of the last {AUDIT_WINDOW_MINUTES} min read "
        "(strongly consistent, >= 1 unit); `audit_segments` sets the passes |"
    )


def warm_writes(burst: int, plan_s: float, cap: int = CAP) -> dict[str, tuple[int, int]]:
    """Per table: (the write units a second the burst takes at its busiest, what production warms it to)."""
    warmed = burst_write_units(cap)
    need = {
        table: max(round(burst / plan_s * PLAN_WCU.get(table, 0)), min(cap, burst) * EXEC_WCU.get(table, 0))
        for table in warmed
    }
    return {table: (need[table], warmed[table]) for table in warmed}


# The reconciliation audit (domain/audit.py), per pass over every job (`audit_segments` minutes): the jobs'
# Scan (eventually consistent: 0.5 read units per 4 KB) and one strongly consistent Query of each job's runs
# over its window (1 unit per 4 KB, at least 1). Item sizes from `python benchmarks/write_units.py` (job
# 619 B, finished run 756 B) plus DynamoDB's 100 B per item.
JOB_ITEM_BYTES = 619 + 100
FINISHED_RUN_BYTES = 756 + 100
PRICE_RRU = 0.125 / 1e6  # on-demand read request units (bench_cost.py's prices)
AUDIT_WINDOW_MINUTES = 31.5  # a 60 s timeout + 30 s lease margin + 10 min grace + 2 passes of 10 minutes
AUDIT_PASSES_AN_HOUR = 60 / 10


def audit_read_units_a_pass(day: datetime = datetime(2026, 12, 2, tzinfo=UTC)) -> tuple[float, float]:
    """(the Scan's read units, the Queries' read units) of one audit pass over the mix."""
    jobs = sum(share.jobs for share in MIX)
    scan = jobs * JOB_ITEM_BYTES / 4096 * 0.5
    queries = 0.0
    for share in MIX:
        runs_a_day = sum(fires_per_minute(day, (share,)).values()) / share.jobs
        in_window = runs_a_day * AUDIT_WINDOW_MINUTES / 1440
        queries += share.jobs * max(1.0, math.ceil(in_window * FINISHED_RUN_BYTES / 4096))
    return scan, queries


def shards_for(burst: int) -> int:
    """The fewest shards whose share of `burst` plans twice inside the lead and within a tick's budget."""
    return math.ceil(burst * PLAN_SECONDS_PER_FIRE_PER_SHARD / min(LEAD_S / 2, TICK_BUDGET_S))


def _add_fires(per_minute: Counter[datetime], schedule: Schedule, jobs: int, start: datetime) -> None:
    """Count `jobs` runs in each minute where `schedule` fires, over the 24 hours from `start`."""
    end = start + timedelta(days=1)
    fire = next_fire_after(schedule, start - timedelta(seconds=1))
    while fire is not None and fire < end:
        per_minute[fire.replace(second=0)] += jobs
        fire = next_fire_after(schedule, fire)


def fires_per_minute(day: datetime, mix: tuple[Share, ...] = MIX) -> Counter[datetime]:
    """How many runs fire in each minute of the 24 hours from `day`, over the whole mix."""
    per_minute: Counter[datetime] = Counter()
    for share in mix:
        count = Counter(share.expressions[i % len(share.expressions)] for i in range(share.jobs))
        for expression, jobs in count.items():
            _add_fires(per_minute, parse_schedule(expression), jobs, day)
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
    needed = shards_for(burst)
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
        "| warm writes a table, production at this cap | "
        + "; ".join(
            f"{table} needs {need:,}, warmed to {warmed:,}"
            for table, (need, warmed) in warm_writes(burst, plan_s).items()
        )
        + " | the most units a second a table takes while the burst is planned or drains (4 a fire on jobs, "
        "2 on runs; 2 a run on runs and slots) beside `infra/config.burst_write_units` |",
        audit_row(),
        f"| run history | {runs_per_day * RETENTION_DAYS / 1e6:,.0f} M runs, "
        f"{runs_per_day * RETENTION_DAYS * RUN_ITEM_BYTES / 1e9:,.0f} GB at most "
        f"| {RETENTION_DAYS} days' retention x <= {RUN_ITEM_BYTES:,} B a run item |",
        f"| monthly cost (DynamoDB, SQS) | ${runs_per_day * 30 / 1e6 * DOLLARS_PER_M_RUNS:,.0f} for runs + "
        f"${runs_per_day * RETENTION_DAYS * RUN_ITEM_BYTES / 1e9 * PRICE_GB_MONTH:,.0f} storage "
        f"| ${DOLLARS_PER_M_RUNS} a million runs (`bench_cost_modes.py`), ${PRICE_GB_MONTH}/GB-month; "
        "Lambda time not included |",
    ]
    return lines


def instance_per_minute(jobs: list[dict[str, Any]], start: datetime) -> Counter[datetime]:
    """The fires of a running instance's active jobs (`tickwork -o json jobs list --all`) in each minute of
    the 24 hours from `start`, from their own schedules (one computation per distinct schedule)."""
    keys: Counter[tuple[Any, ...]] = Counter()
    for job in jobs:
        if job.get("state", "active") != "active":
            continue
        s = job["schedule"]
        keys[(s["expression"], s.get("timezone", "UTC"), s.get("start_at"), s.get("end_at"))] += 1
    per_minute: Counter[datetime] = Counter()
    for (expression, timezone, start_at, end_at), count in keys.items():
        schedule = parse_schedule(
            expression,
            timezone,
            start_at=datetime.fromisoformat(start_at) if start_at else None,
            end_at=datetime.fromisoformat(end_at) if end_at else None,
        )
        _add_fires(per_minute, schedule, count, start)
    return per_minute


def instance_report(jobs: list[dict[str, Any]], start: datetime, cap: int) -> list[str]:
    """For a running instance: the next 24 hours' fires by hour, the peak minute, what the peak asks of the
    account at `cap`, and the jitter that would flatten it."""
    per_minute = instance_per_minute(jobs, start)
    if not per_minute:
        return [f"{len(jobs)} jobs, none active with a fire in the 24 h from {start.isoformat()}"]
    peak_minute, peak = max(per_minute.items(), key=lambda item: (item[1], -item[0].timestamp()))
    lines = [
        f"{sum(1 for j in jobs if j.get('state', 'active') == 'active'):,} active jobs: "
        f"{sum(per_minute.values()):,} runs in the 24 h from {start.isoformat()}",
        f"peak minute {peak_minute.isoformat()}: {peak:,} runs; the busiest minutes: "
        + ", ".join(f"{m.strftime('%H:%M')} {n:,}" for m, n in per_minute.most_common(5)),
        "runs by hour (UTC):",
    ]
    by_hour: Counter[datetime] = Counter()
    for minute, count in per_minute.items():
        by_hour[minute.replace(minute=0)] += count
    widest = max(by_hour.values())
    for hour in sorted(by_hour):
        bar = "#" * max(1, round(40 * by_hour[hour] / widest))
        lines.append(f"  {hour.strftime('%H:00')} {by_hour[hour]:>10,} {bar}")
    waves = math.ceil(peak / cap)
    shards = shards_for(peak)
    lines += [
        f"at a cap of {cap:,}: the peak minute drains in {waves} waves of a run's length (1 s runs: "
        f"{waves} s); shards for it: at least {shards}; "
        "DynamoDB writes a second at the peak (what production warms; name `<table>_warm_writes` if less): "
        + ", ".join(
            f"{table} {need:,} ({warmed:,})"
            for table, (need, warmed) in warm_writes(
                peak, peak / max(SHARDS, shards) * PLAN_SECONDS_PER_FIRE_PER_SHARD, cap
            ).items()
        )
        + "; Lambda "
        f"concurrency: `python -m infra.preflight -c concurrency_cap={cap}` names the quota to ask for",
        f"jitter: `jitter_seconds` J on the peak minute's jobs spreads its {peak:,} runs over J s: "
        + ", ".join(f"J={j}: {math.ceil(peak / j):,} a second" for j in (10, 30, 60))
        + f"; at most the cap ({cap:,}) a second needs J >= {math.ceil(peak / cap)}",
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
    parser.add_argument(
        "--jobs",
        type=Path,
        help="a running instance's jobs instead of the mix: `tickwork -o json jobs list --all`",
    )
    parser.add_argument("--start", help="the 24 hours from this UTC instant (ISO 8601; default: now)")
    parser.add_argument("--cap", type=int, default=CAP, help="the deployment's concurrency_cap")
    args = parser.parse_args()
    if args.jobs is not None:
        start = datetime.fromisoformat(args.start) if args.start else datetime.now(UTC)
        start = start.replace(second=0, microsecond=0)
        listed = json.loads(args.jobs.read_text())
        jobs = listed["items"] if isinstance(listed, dict) else listed
        print("\n".join(instance_report(jobs, start, args.cap)))
        return
    if args.write:
        write()
    print("\n".join(model()))


if __name__ == "__main__":
    main()
