"""Time is an input: services take a Clock, domain functions take `now`."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, tz-aware UTC."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait; a test clock advances instead."""
        ...


class SystemClock:
    """The real clock; the only place that reads the wall time."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class FakeClock:
    """A clock that moves only when told to (tests, simulations)."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a tz-aware start")
        self._now = start.astimezone(UTC)
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self._now += timedelta(seconds=seconds)

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now

    def set(self, instant: datetime) -> None:
        self._now = instant.astimezone(UTC)
