"""Retry transient store errors (throttling, transaction conflicts) with backoff; never drop the work. The
one place store retries happen: the composition root wraps the store once (`retrying`), and the services
call it plainly."""

from __future__ import annotations

import functools
from collections.abc import Callable
from random import Random
from typing import Any, TypeVar, cast

from tickwork.domain.backoff import backoff_delay
from tickwork.domain.clock import Clock
from tickwork.domain.errors import TransientStoreError

T = TypeVar("T")
S = TypeVar("S")


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


def retrying(store: S, clock: Clock, rng: Random) -> S:
    """`store` with every method call retried on TransientStoreError (`with_store_retries`). A method that
    returns an iterator is retried only for the call itself: the adapters return lists where a caller needs
    a read retried whole."""
    return cast(S, _Retrying(store, clock, rng))


class _Retrying:
    def __init__(self, inner: Any, clock: Clock, rng: Random) -> None:
        self._inner = inner
        self._clock = clock
        self._rng = rng

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def call(*args: Any, **kwargs: Any) -> Any:
            return with_store_retries(lambda: attribute(*args, **kwargs), self._clock, self._rng)

        # Kept, so the next call finds it without coming here: building it costs more than a store call's
        # own Python, and a run makes about ten.
        self.__dict__[name] = call
        return call
