"""Pieces every target adapter shares: checking the target before the call, and timing it."""

from __future__ import annotations

import time
from collections.abc import Callable

from tickwork.domain.errors import ValidationError
from tickwork.domain.models import Target
from tickwork.domain.targets import TargetResult, validate_target

INVALID_TARGET = "InvalidTarget"


def invalid_target(detail: str) -> TargetResult:
    """A target that can never be called as stored: the run fails for good, the executor does not crash."""
    return TargetResult(ok=False, retryable=False, status=INVALID_TARGET, latency_ms=0, detail=detail)


def checked_target(target: Target, kinds: frozenset[str]) -> Target | TargetResult:
    """The normalised target, or a non-retryable result when it cannot be called.

    Targets are validated when a job is written; checking again here costs microseconds and turns a job stored
    under older rules (or written around the API) into a failed run instead of a crashed executor.
    """
    if target.kind not in kinds:
        return invalid_target(f"this invoker does not call {target.kind!r} targets")
    try:
        return validate_target(target.kind, target.config, stored=True)
    except ValidationError as error:
        return invalid_target(str(error))


class Stopwatch:
    """Milliseconds since creation, on a monotonic clock (latency is a duration, not a wall time)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._start = monotonic()

    def elapsed_ms(self) -> int:
        return max(0, round((self._monotonic() - self._start) * 1000))

    def elapsed_s(self) -> float:
        return self._monotonic() - self._start
