"""The deployment's layout rule: shards and dispatch queues are only ever added (pure)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Layout:
    shard_count: int
    queue_count: int


def shrinking(deployed: Layout | None, wanted: Layout) -> list[str]:
    """Why `wanted` may not replace `deployed`, one sentence per count it lowers (none: it may)."""
    if deployed is None:
        return []
    problems: list[str] = []
    if wanted.shard_count < deployed.shard_count:
        problems.append(
            f"shard_count {wanted.shard_count} is below the deployed {deployed.shard_count}: every job keeps "
            "the shard it was created in, and no ticker would read shards "
            f"{wanted.shard_count}..{deployed.shard_count - 1} again, so their jobs would never run. Shards "
            "can only be added."
        )
    if wanted.queue_count < deployed.queue_count:
        problems.append(
            f"queue_count {wanted.queue_count} is below the deployed {deployed.queue_count}: queues "
            f"{wanted.queue_count}..{deployed.queue_count - 1} would be deleted with the messages they hold "
            "(up to two minutes of planned runs, and every retry waiting in them). Queues can only be added."
        )
    return problems
