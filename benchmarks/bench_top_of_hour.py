"""The top of the hour on AWS, simulated: when each of the burst's runs starts, given how the executor's
event source mappings and Lambda scale (issue 29, part 2). Planning is not simulated here: it is measured
at a region's latencies by `bench_plan_latency.py` (one shard's 3,750 fires in 8.7 s, all queued well
before :00); this script starts at :00 with every message visible.

A discrete-event simulation of the executor side, in one run for every scenario and run length:

- each dispatch queue has one event source mapping in provisioned mode; a mapping drives at most
  `pollers x 10` invocations at once and starts from its warm minimum (`executor_min_pollers`, 2), adding
  invocations at a ramp rate (AWS: standard mode adds up to 300 concurrent executions a minute, provisioned
  mode scales ~3x faster: ~1,000 a minute, docs/deploy.md; whether that is per mapping or per function is
  not documented: both are run);
- Lambda creates at most 1,000 execution environments every 10 seconds per function (toolchain.md); a new
  environment takes a cold start (assumed 1.0 s: Python with boto3 and Powertools; --cold-start);
- an invocation takes a batch of 10 messages and runs them side by side: each run starts after its claim
  (42 ms: the p50 `bench_executor_latency.py` measures on the real executor at the same assumed AWS call
  latencies; --claim-ms), the invocation ends when its runs end plus their finish (31 ms, the same
  benchmark's p50; --finish-ms);
- the bound (`cap`) counts runs: a batch starts only with slots for all its runs (the reservation sizes the
  invocations to cap / 10, so it never binds here).

Scenarios: the defaults (2 warm pollers a queue, few warm environments), what the stack did before part 4;
the same with the ramp per function; the pollers raised before :00 with the environments still cold, what
the deployed stack does (the ticker's prescaler, "start warm", part 4); and pre-scaled in full (pollers and
every environment warm), what provisioned concurrency on the executor would add on top.

    python benchmarks/bench_top_of_hour.py
    python benchmarks/bench_top_of_hour.py --burst 60000 --cap 10000 --queues 10 --run-seconds 1 30 60
"""

from __future__ import annotations

import argparse
import heapq
import math
from dataclasses import dataclass

INVOCATIONS_PER_POLLER = 10  # AWS: each poller drives up to 10 concurrent invocations
ENVIRONMENTS_PER_10_S = 1_000  # Lambda's scaling rate per function
BATCH = 10


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    ramp_per_minute: float  # invocations added per minute
    ramp_per_mapping: bool  # the ramp applies to each mapping (True) or to the function as a whole
    min_pollers: int  # each mapping's warm pollers at :00
    warm_environments: int  # execution environments already initialised at :00


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def simulate(scenario: Scenario, args: argparse.Namespace, run_seconds: float) -> dict[str, float]:
    """Start delays (s after :00) of every run of the burst."""
    queues = args.queues
    max_invocations = math.ceil(args.cap / BATCH)  # the reservation: cap / batch size
    per_queue_max = math.ceil(max_invocations / queues)
    warm_start = min(per_queue_max, scenario.min_pollers * INVOCATIONS_PER_POLLER)
    step = 0.01
    waiting = [args.burst // queues + (1 if q < args.burst % queues else 0) for q in range(queues)]
    busy = [0] * queues  # invocations in flight per mapping
    idle_environments = scenario.warm_environments
    created_budget = float(ENVIRONMENTS_PER_10_S)  # a token bucket refilled continuously
    ending: list[tuple[float, int]] = []  # (end time, mapping) of invocations in flight
    starts: list[float] = []
    runs_in_flight = 0
    t = 0.0
    while sum(waiting) > 0:
        while ending and ending[0][0] <= t:
            _, queue = heapq.heappop(ending)
            busy[queue] -= 1
            idle_environments += 1
            runs_in_flight -= BATCH
        created_budget = min(ENVIRONMENTS_PER_10_S, created_budget + ENVIRONMENTS_PER_10_S / 10 * step)
        if scenario.ramp_per_mapping:
            allowed = [min(per_queue_max, warm_start + scenario.ramp_per_minute * t / 60)] * queues
        else:
            total = min(max_invocations, warm_start * queues + scenario.ramp_per_minute * t / 60)
            allowed = [total / queues] * queues
        for queue in range(queues):
            while waiting[queue] > 0 and busy[queue] + 1 <= allowed[queue]:
                if runs_in_flight + BATCH > args.cap:
                    break
                if idle_environments > 0:
                    idle_environments -= 1
                    begin = t
                elif created_budget >= 1:
                    created_budget -= 1
                    begin = t + args.cold_start
                else:
                    break
                batch = min(BATCH, waiting[queue])
                waiting[queue] -= batch
                busy[queue] += 1
                runs_in_flight += BATCH
                starts.extend([begin + args.claim_ms / 1000] * batch)
                heapq.heappush(ending, (begin + (args.claim_ms + args.finish_ms) / 1000 + run_seconds, queue))
        t += step
    return {
        "p50": percentile(starts, 0.50),
        "p99": percentile(starts, 0.99),
        "last": max(starts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--burst", type=int, default=60_000, help="runs due at :00 (the load model's burst)")
    parser.add_argument("--cap", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--run-seconds", type=float, nargs="+", default=[1, 30, 60])
    parser.add_argument("--ramp", type=float, default=1_000, help="invocations a mapping adds a minute")
    parser.add_argument("--cold-start", type=float, default=1.0, help="seconds to initialise an environment")
    parser.add_argument(
        "--claim-ms",
        type=float,
        default=42.0,
        help="invocation start to the target call (bench_executor_latency.py)",
    )
    parser.add_argument(
        "--finish-ms",
        type=float,
        default=31.0,
        help="the target's answer to the run's end (bench_executor_latency.py)",
    )
    parser.add_argument("--warm-environments", type=int, default=20, help="environments warm at :00")
    args = parser.parse_args()

    invocations = math.ceil(args.cap / BATCH)
    max_pollers = math.ceil(invocations / (args.queues * INVOCATIONS_PER_POLLER))
    scenarios = [
        Scenario("defaults, ramp per mapping", args.ramp, True, 2, args.warm_environments),
        Scenario("defaults, ramp per function", args.ramp, False, 2, args.warm_environments),
        Scenario(
            f"pollers raised before :00 ({max_pollers} a queue: the ticker's prescaler, deployed), "
            f"{args.warm_environments} environments warm",
            args.ramp,
            True,
            max_pollers,
            args.warm_environments,
        ),
        Scenario(
            f"pre-scaled at :00 ({max_pollers} pollers a queue, {invocations} warm environments)",
            args.ramp,
            True,
            max_pollers,
            invocations,
        ),
    ]
    print(
        f"{args.burst:,} runs visible at :00, cap {args.cap:,}, {args.queues} queues; ramp {args.ramp:,.0f} "
        f"invocations a minute, cold start {args.cold_start} s, claim {args.claim_ms:g} ms, "
        f"finish {args.finish_ms:g} ms; "
        f"{args.warm_environments} environments warm at :00 unless pre-scaled"
    )
    for run_seconds in args.run_seconds:
        floor = math.ceil(args.burst / args.cap) * run_seconds
        print(f"\nruns of {run_seconds:g} s: drain floor {floor:g} s (ceil(burst / cap) waves)")
        for scenario in scenarios:
            r = simulate(scenario, args, run_seconds)
            print(
                f"  {scenario.name}\n"
                f"    start delay p50 {r['p50']:.1f} s, p99 {r['p99']:.1f} s; last start {r['last']:.1f} s "
                f"= {r['last'] / floor:.2f}x the drain floor"
            )


if __name__ == "__main__":
    main()
