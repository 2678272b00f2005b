"""The ticker's trigger (issue 29): an EventBridge Scheduler schedule for second :00 of each minute, whose
input carries its scheduled time; the ticker records how late it started (TickerLag), the lead it lost."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.handlers.test_lambda_handlers import LambdaContext, deployed, load
from tests.handlers.test_sweeper_metric import emitted
from tickwork.composition import Components
from tickwork.domain.clock import FakeClock
from tickwork.handlers import ticker

__all__ = ["deployed"]  # fixtures used here


def test_the_tick_records_how_late_it_started_after_its_scheduled_second(
    deployed: Components, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = deployed.clock
    assert isinstance(clock, FakeClock)
    clock.set(datetime(2026, 12, 2, 12, 3, 1, 250000, tzinfo=UTC))

    ticker.handler(load("ticker.json"), LambdaContext())  # scheduled for 12:03:00

    assert emitted(capsys.readouterr().out, "TickerLag") == ("Seconds", 1.25)


def test_an_unfilled_scheduled_time_plans_anyway_without_a_lag(
    deployed: Components, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # MiniStack passes `<aws.scheduler.scheduled-time>` through as written.
    event = {**load("ticker.json"), "time": "<aws.scheduler.scheduled-time>"}

    summary = ticker.handler(event, LambdaContext())

    out = capsys.readouterr().out
    assert summary["shards"] == 2 and summary["incomplete_shards"] == []
    assert emitted(out, "RunsPlanned")[0] == "Count"  # the tick's metrics were flushed
    with pytest.raises(AssertionError, match="TickerLag not emitted"):
        emitted(out, "TickerLag")
    assert any("scheduled time unfilled" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("time", ["soon", 1733140980])
def test_a_scheduled_time_that_is_no_instant_is_refused(deployed: Components, time: object) -> None:
    with pytest.raises(ValueError):
        ticker.handler({**load("ticker.json"), "time": time}, LambdaContext())
