"""Starting warm: the executor's pollers raised before a burst the ticker has already planned. Pure.

A mapping in provisioned mode starts a burst from its warm minimum (`executor_min_pollers`, 2 by default:
20 invocations, 200 runs a queue) and ramps up from there, while the runs of the top of the hour are all
due in the same second (benchmarks/bench_top_of_hour.py: the ramp makes the last of 60,000 one-second runs
start at 1.5-3.2x the drain floor; pre-scaled, at 0.9x). The ticker plans each fire 60-120 s ahead, so it
knows the next minutes' bursts: it raises every mapping's minimum to what the largest of them needs, and
lowers it back once no burst is ahead."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta

INVOCATIONS_PER_POLLER = 10  # AWS: each poller drives up to 10 concurrent invocations
# Ticks a process must have seen before it lowers the pollers: a burst is planned by one tick (up to 120 s
# ahead) and the ticks after it plan nothing more of it, so a process that has not seen the tick that
# planned it cannot know it is still ahead. Raising never waits.
SETTLED_TICKS = 3


def scaled_to_all_shards(
    planned_by_minute: Mapping[datetime, int], shards_seen: int, shard_count: int
) -> Counter[datetime]:
    """What a tick planned in the shards it saw, scaled to every shard (runs spread over shards by a hash
    of the job id): the runs due in each minute over the whole deployment, as far as this tick added them."""
    if shards_seen < 1:
        return Counter()
    return Counter(
        {minute: math.ceil(count * shard_count / shards_seen) for minute, count in planned_by_minute.items()}
    )


def burst_ahead(due_by_minute: Mapping[datetime, int], now: datetime) -> int:
    """The most runs due in one minute from the current minute on (the planned ones: the lookahead)."""
    return max((n for minute, n in due_by_minute.items() if minute > now - timedelta(minutes=1)), default=0)


def pollers_for(runs: int, queues: int, batch_size: int, floor: int, ceiling: int) -> int:
    """Each mapping's minimum pollers to start `runs` at once (spread over `queues`), within its bounds."""
    invocations = math.ceil(runs / batch_size / queues)
    return max(floor, min(ceiling, math.ceil(invocations / INVOCATIONS_PER_POLLER)))
