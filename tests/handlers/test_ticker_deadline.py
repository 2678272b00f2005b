"""The ticker's deadline comes from the invocation (issue 29): its remaining time less TICK_RESERVE for the
last round, the watermarks and the metrics; no context time (a test, the local runtime): no deadline."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.handlers.test_lambda_handlers import LambdaContext, deployed, load
from tests.handlers.test_sweeper_budget import ContextWithTime
from tickwork.composition import Components
from tickwork.domain.errors import ScalingError
from tickwork.handlers import ticker
from tickwork.services.planning import Planner, TickSummary

__all__ = ["deployed"]  # fixtures used here


@pytest.fixture
def deadlines(monkeypatch: pytest.MonkeyPatch) -> list[timedelta | None]:
    """What each tick's deadline left it, from its `now`."""
    seen: list[timedelta | None] = []
    real = Planner.plan_shards

    def spy(
        self: Planner,
        shards: list[int],
        now: datetime,
        max_threads: int = 16,
        deadline: datetime | None = None,
    ) -> TickSummary:
        seen.append(None if deadline is None else deadline - now)
        return real(self, shards, now, max_threads, deadline)

    monkeypatch.setattr(Planner, "plan_shards", spy)
    return seen


def test_the_lambda_plans_within_its_remaining_time_less_the_reserve(
    deployed: Components, deadlines: list[timedelta | None]
) -> None:
    summary = ticker.handler(load("ticker.json"), ContextWithTime(48_000))

    assert deadlines == [timedelta(seconds=48) - ticker.TICK_RESERVE]
    assert summary["jobs_left_at_deadline"] == 0 and "ShardsOutOfTime" in summary


def test_an_invocation_out_of_time_plans_nothing_and_says_so(
    deployed: Components, deadlines: list[timedelta | None]
) -> None:
    summary = ticker.handler(load("ticker.json"), ContextWithTime(5_000))

    assert deadlines == [timedelta(seconds=5) - ticker.TICK_RESERVE]
    assert summary["ShardsOutOfTime"] == summary["shards"] and summary["RunsPlanned"] == 0


def test_without_the_invocations_time_there_is_no_deadline(
    deployed: Components, deadlines: list[timedelta | None]
) -> None:
    ticker.handler(load("ticker.json"), LambdaContext())  # type: ignore[arg-type]

    assert deadlines == [None]


class FakePrescaler:
    """What the handler asks of the prescaler (its logic: tests/services/test_prescaling.py)."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.ticks: list[TickSummary] = []

    def after_tick(self, tick: TickSummary, now: datetime) -> dict[str, int]:
        self.ticks.append(tick)
        if self.fail:
            raise ScalingError("injected: TooManyRequestsException")
        return {"mapping-1": 7}


@pytest.mark.parametrize("fail", [False, True])
def test_the_ticker_starts_the_executor_warm_after_planning_and_a_failure_never_fails_the_tick(
    deployed: Components, fail: bool, caplog: pytest.LogCaptureFixture
) -> None:
    prescaler = FakePrescaler(fail)
    deployed.__dict__["prescaler"] = prescaler  # the cached property, as the stack wires it on AWS

    summary = ticker.handler(load("ticker.json"), ContextWithTime(48_000))

    assert summary["incomplete_shards"] == [] and len(prescaler.ticks) == 1
    if fail:
        assert summary["min_pollers"] is None and "could not set the executor's warm pollers" in caplog.text
    else:
        assert summary["min_pollers"] == {"mapping-1": 7}
