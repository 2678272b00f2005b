"""Retry transient store errors (throttling, transaction conflicts) with backoff; never drop the work."""

from __future__ import annotations

from collections.abc import Callable
from random import Random
from typing import TypeVar

from tickwork.domain.backoff import backoff_delay
from tickwork.domain.clock import Clock
from tickwork.domain.errors import TransientStoreError

T = TypeVar("T")


def with_store_retries(
    operation: Callable[[], T],
    clock: Clock,
    rng: Random,
    *,
    attempts: int = 6,
    base: float = 0.05,
    cap: float = 2.0,
) -> T:
    """Run `operation`, retrying TransientStoreError; after `attempts` the error propagates, so the caller
    leaves its work for the next tick instead of losing it."""
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except TransientStoreError:
            if attempt == attempts:
                raise
            clock.sleep(backoff_delay(attempt, base, cap, rng))
    raise AssertionError("unreachable")
