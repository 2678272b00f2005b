"""Starting warm: the executor's pollers raised before a burst the ticker has already planned. Pure.

A mapping in provisioned mode starts a burst from its warm minimum (`executor_min_pollers`, 2 by default:
20 invocations, 200 runs a queue) and ramps up from there, while the runs of the top of the hour are all
due in the same second (benchmarks/bench_top_of_hour.py: the ramp makes the last of 60,000 one-second runs
start at 1.5-3.2x the drain floor; pre-scaled, at 0.9x). The ticker plans each fire 60-120 s ahead, so the
tick that plans a burst knows it: it raises the mappings' minimum to what the burst needs. Nothing is
remembered between ticks (a Lambda environment is not the same one every minute): the mappings themselves
say what they are set to and when they last changed, and a raised minimum comes down only once it is
older than HOLD, by which time the burst it was raised for has started."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

INVOCATIONS_PER_POLLER = 10  # AWS: each poller drives up to 10 concurrent invocations
MAX_MIN_POLLERS = 200  # AWS: an SQS mapping's MinimumPollers is 2..200
# A raised minimum stays at least this long after its last change: the burst it was raised for is planned at
# most 120 s ahead, and its first minute is the one the ramp would slow.
HOLD = timedelta(minutes=4)


@dataclass(frozen=True, slots=True)
class MappingState:
    min_pollers: int
    last_modified: datetime


def burst_ahead(planned_by_minute: Mapping[datetime, int], shards_seen: int, shard_count: int) -> int:
    """The most runs a tick planned for one minute, in the shards it saw, scaled to every shard (runs are
    spread over shards by a hash of the job id)."""
    if shards_seen < 1 or not planned_by_minute:
        return 0
    return math.ceil(max(planned_by_minute.values()) * shard_count / shards_seen)


def pollers_for(runs: int, queues: int, batch_size: int, floor: int, ceiling: int) -> int:
    """Each mapping's minimum pollers to start `runs` at once (spread over `queues`), within its bounds."""
    invocations = math.ceil(runs / batch_size / queues)
    top = max(floor, min(ceiling, MAX_MIN_POLLERS))
    return max(floor, min(top, math.ceil(invocations / INVOCATIONS_PER_POLLER)))


def changes(states: Mapping[str, MappingState], wanted: int, floor: int, now: datetime) -> dict[str, int]:
    """The mappings to set, and to what: raised at once to `wanted`; lowered (never below the floor) only
    once their last change is older than HOLD. A mapping a failed call left behind is caught up here."""
    out: dict[str, int] = {}
    for mapping_id, state in states.items():
        if wanted > state.min_pollers:
            out[mapping_id] = wanted
        elif state.min_pollers > max(wanted, floor) and now - state.last_modified >= HOLD:
            out[mapping_id] = max(wanted, floor)
    return out
