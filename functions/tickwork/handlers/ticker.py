"""Ticker Lambda: a minutely EventBridge Scheduler schedule; plans its shards in parallel (I/O bound)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork.composition import Components
from tickwork.domain.errors import TickworkError
from tickwork.domain.timekeys import parse_instant
from tickwork.handlers.runtime import components, logger, metrics, tracer
from tickwork.services.planning import TickSummary
from tickwork.settings import SettingsError

MAX_THREADS = 16
# What the invocation keeps after its last round may start: that round's commits (none starts later than
# planning.COMMIT_GRACE after the deadline), every shard's watermark write and the metrics flush. A tick that
# runs out of time leaves its unplanned jobs behind the watermark for the next tick instead of being cut off
# mid-round.
TICK_RESERVE = timedelta(seconds=10)


def _shards(event: dict[str, Any], shard_count: int) -> list[int]:
    shards = event.get("shards")
    if shards is None:
        return list(range(shard_count))
    if not isinstance(shards, list) or not all(isinstance(s, int) and 0 <= s < shard_count for s in shards):
        raise ValueError(f"event 'shards' must be a list of integers in 0..{shard_count - 1}")
    return shards


UNFILLED_ATTRIBUTE = "<aws."  # a context attribute the trigger did not replace (emulators pass it through)


def _scheduled_for(event: dict[str, Any]) -> datetime | None:
    """The minute the trigger scheduled this tick for, when it says (the schedule's input carries
    `<aws.scheduler.scheduled-time>`; a hand-started tick has none)."""
    text = event.get("time")
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError("event 'time' must be an ISO 8601 instant")
    if text.startswith(UNFILLED_ATTRIBUTE):
        logger.warning(
            "the trigger left its scheduled time unfilled; TickerLag not recorded", extra={"time": text}
        )
        return None
    return parse_instant(text)


def _start_warm(parts: Components, tick: TickSummary, now: datetime) -> dict[str, int] | None:
    """Raise (or lower) the executor's warm pollers for the burst this tick planned. Planning is done: a
    failure here is logged with its traceback and counted (PrescaleFailures), and the next tick catches up."""
    try:
        prescaler = parts.prescaler
        if prescaler is None:
            return None
        changed = prescaler.after_tick(tick, now)
    except (TickworkError, SettingsError):  # a scaling call refused, or the settings for it wrong
        logger.exception("could not set the executor's warm pollers")
        metrics.add_metric(name="PrescaleFailures", unit=MetricUnit.Count, value=1)
        return None
    if changed:
        metrics.add_metric(name="ExecutorMinPollers", unit=MetricUnit.Count, value=max(changed.values()))
    return changed


@metrics.log_metrics
@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    parts = components()
    planner = parts.planner()
    now = parts.clock.now()
    shards = _shards(event, parts.settings.shard_count)
    scheduled_for = _scheduled_for(event)
    if scheduled_for is not None:
        # How late this tick started after the second it was scheduled for: the lead the burst's planning
        # has is 120 s less this (services/planning.py, DEFAULT_LOOKAHEAD).
        metrics.add_metric(
            name="TickerLag", unit=MetricUnit.Seconds, value=(now - scheduled_for).total_seconds()
        )
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    deadline = None if remaining is None else now + timedelta(milliseconds=remaining()) - TICK_RESERVE
    tick = planner.plan_shards(shards, now, max_threads=MAX_THREADS, deadline=deadline)
    elapsed = (parts.clock.now() - now).total_seconds()
    counts = tick.counts()
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    summary: dict[str, Any] = {
        "shards": len(shards),
        **counts,
        "incomplete_shards": tick.incomplete_shards,
        "jobs_left_at_deadline": sum(r.jobs_left_at_deadline for r in tick.reports),
        "failed_shards": tick.failed_shards,
        "failed_jobs": [job for r in tick.reports for job in r.failed_jobs],
    }
    metrics.add_metric(name="TickerDuration", unit=MetricUnit.Seconds, value=elapsed)
    # One invocation decides a minute: the one given shard 0 (whether or not shard 0 could be planned).
    summary["min_pollers"] = _start_warm(parts, tick, now) if 0 in shards else None
    logger.info("tick done", extra=summary)
    return summary
