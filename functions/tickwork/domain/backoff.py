"""Exponential backoff with full jitter (AWS Architecture Blog): spreads retries of a burst apart."""

from __future__ import annotations

from random import Random


def backoff_delay(attempt: int, base_seconds: float, cap_seconds: float, rng: Random) -> float:
    """Delay before retry `attempt` (1 = first retry): uniform in [0, min(cap, base * 2**(attempt-1))]."""
    if attempt < 1:
        raise ValueError("attempt starts at 1")
    ceiling = min(cap_seconds, base_seconds * (2 ** min(attempt - 1, 32)))
    return rng.uniform(0.0, ceiling)
