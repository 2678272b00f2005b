"""Starting warm: the executor's pollers raised before a burst the ticker has already planned. Pure.

A mapping in provisioned mode starts a burst from its warm minimum (`executor_min_pollers`, 2 by default:
20 invocations, 200 runs a queue) and ramps up from there, while the runs of the top of the hour are all
due in the same second (benchmarks/bench_top_of_hour.py: the ramp makes the last of 60,000 one-second runs
start at 1.5-3.2x the drain floor; pre-scaled, at 0.9x). The ticker plans each fire 60-120 s ahead, so it
knows the next minutes' bursts: it raises every mapping's minimum to what the largest of them needs, and
lowers it back once no burst is ahead."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta

INVOCATIONS_PER_POLLER = 10  # AWS: each poller drives up to 10 concurrent invocations
# The minutes ahead whose planned runs count: what the ticker plans (its 120 s lookahead) and the minute now.
AHEAD = timedelta(minutes=3)


def expected_burst(
    planned_by_minute: Mapping[datetime, int], now: datetime, shards_seen: int, shard_count: int
) -> int:
    """The most runs due in one minute from now on, over every shard: what the ticker planned in the
    shards it saw, scaled to all of them (runs spread over shards by a hash of the job id)."""
    if shards_seen < 1:
        return 0
    ahead = [
        count
        for minute, count in planned_by_minute.items()
        if now - timedelta(minutes=1) < minute < now + AHEAD
    ]
    return math.ceil(max(ahead, default=0) * shard_count / shards_seen)


def pollers_for(runs: int, queues: int, batch_size: int, floor: int, ceiling: int) -> int:
    """Each mapping's minimum pollers to start `runs` at once (spread over `queues`), within its bounds."""
    invocations = math.ceil(runs / batch_size / queues)
    return max(floor, min(ceiling, math.ceil(invocations / INVOCATIONS_PER_POLLER)))
