"""Runs spread evenly over the dispatch queues whatever the shard and queue counts."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.domain.dispatch import queue_index
from tickwork.domain.models import make_run_id, shard_of

START = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def run_ids(jobs: int, fires: int) -> list[str]:
    """Minutely fires of `jobs` jobs: the shape of a top-of-hour burst repeated."""
    return [
        make_run_id(f"job_{j:020x}", START + timedelta(minutes=m)) for j in range(jobs) for m in range(fires)
    ]


def imbalance(loads: Counter[int], queue_count: int) -> float:
    per_queue = [loads.get(q, 0) for q in range(queue_count)]
    return max(per_queue) / min(per_queue)


IDS = run_ids(jobs=10_000, fires=10)  # 100,000 runs


def test_16_shards_on_10_queues_load_the_queues_evenly() -> None:
    loads = Counter(queue_index(run_id, 10) for run_id in IDS)
    assert imbalance(loads, 10) < 1.05


def test_the_old_shard_modulo_rule_fails_the_same_bound() -> None:
    """The check above has teeth: routing by shard % queue_count puts two shards on six of ten queues."""
    loads = Counter(shard_of(run_id.rpartition(":")[0], 16) % 10 for run_id in IDS)
    assert imbalance(loads, 10) > 1.8


@pytest.mark.parametrize("queue_count", [1, 3, 7, 10, 16])
def test_every_queue_gets_its_share_for_any_count(queue_count: int) -> None:
    loads = Counter(queue_index(run_id, queue_count) for run_id in IDS)
    assert set(loads) == set(range(queue_count))
    assert imbalance(loads, queue_count) < 1.06  # 16 queues of 6,250: 1.045 measured


def test_a_run_always_goes_to_the_same_queue() -> None:
    """Stable across processes (no salted hash()): every message of a run lands on one queue."""
    run_id = make_run_id("job_example", START)
    assert {queue_index(run_id, 10) for _ in range(5)} == {queue_index(run_id, 10)}
    assert queue_index(run_id, 10) == 4


def test_zero_queues_is_refused() -> None:
    with pytest.raises(ValueError, match="queue_count"):
        queue_index("job:20261202T120000Z", 0)
