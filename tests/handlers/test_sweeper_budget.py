"""The sweep's time budget comes from where it runs (issue 11): the Lambda's remaining time less 5 s for
reporting, and the local sweeper's interval (it is done before the next sweep is due)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.handlers.test_lambda_handlers import LambdaContext, deployed, load
from tickwork.composition import Components
from tickwork.handlers import sweeper
from tickwork.local import roles
from tickwork.services.sweeping import Sweeper, SweepReport

__all__ = ["deployed"]  # fixtures used here


class ContextWithTime(LambdaContext):
    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@pytest.fixture
def budgets(monkeypatch: pytest.MonkeyPatch) -> list[timedelta | None]:
    seen: list[timedelta | None] = []
    real = Sweeper.sweep

    def spy(self: Sweeper, now: datetime | None = None, budget: timedelta | None = None) -> SweepReport:
        seen.append(budget)
        return real(self, now, budget)

    monkeypatch.setattr(Sweeper, "sweep", spy)
    return seen


@pytest.mark.parametrize(
    ("remaining_ms", "budget"),
    [
        (55_000, timedelta(seconds=50)),  # a fresh 55 s invocation
        (12_500, timedelta(seconds=7.5)),  # a late start: what is left, less 5 s to report
        (3_000, timedelta(0)),  # nearly out of time: repair nothing (not the default 50 s)
    ],
)
def test_the_lambda_sweeps_within_its_remaining_time(
    deployed: Components, budgets: list[timedelta | None], remaining_ms: int, budget: timedelta
) -> None:
    sweeper.handler(load("sweeper.json"), ContextWithTime(remaining_ms))

    assert budgets == [budget]


def test_the_local_sweeper_sweeps_within_its_interval(
    monkeypatch: pytest.MonkeyPatch, budgets: list[timedelta | None], deployed: Components
) -> None:
    monkeypatch.setenv("TICKWORK_SWEEP_INTERVAL", "2")
    stop = threading.Event()

    class Parts:
        def sweeper(self) -> Any:
            made = deployed.sweeper()
            real = made.sweep

            def once(now: datetime | None = None, budget: timedelta | None = None) -> SweepReport:
                stop.set()
                return real(now, budget)

            made.sweep = once  # type: ignore[method-assign]
            return made

        def expire_runs(self) -> int | None:
            return deployed.expire_runs()

        def auditor(self) -> Any:
            return deployed.auditor()

        @property
        def clock(self) -> Any:
            return deployed.clock

    roles.run_sweeper(Parts(), stop)  # type: ignore[arg-type]

    assert budgets == [timedelta(seconds=1.6)]  # 80 % of the interval
