"""Ticker Lambda: a minutely EventBridge rule; plans its shards in parallel (I/O bound)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork.domain.timekeys import parse_instant
from tickwork.handlers.runtime import components, logger, metrics, tracer
from tickwork.services.planning import TickReport

MAX_THREADS = 16


def _shards(event: dict[str, Any], shard_count: int) -> list[int]:
    shards = event.get("shards")
    if shards is None:
        return list(range(shard_count))
    if not isinstance(shards, list) or not all(isinstance(s, int) and 0 <= s < shard_count for s in shards):
        raise ValueError(f"event 'shards' must be a list of integers in 0..{shard_count - 1}")
    return shards


@metrics.log_metrics
@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    parts = components()
    planner = parts.planner()
    now = parts.clock.now()
    shards = _shards(event, parts.settings.shard_count)
    if "time" in event:
        # How late this tick started after the minute it was scheduled for.
        metrics.add_metric(
            name="TickerLag",
            unit=MetricUnit.Seconds,
            value=(now - parse_instant(event["time"])).total_seconds(),
        )
    with ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(shards))) as pool:
        reports: list[TickReport] = list(pool.map(lambda shard: planner.plan(shard, now), shards))
    elapsed = (parts.clock.now() - now).total_seconds()
    summary: dict[str, Any] = {
        "shards": len(reports),
        "runs_planned": sum(r.runs_planned for r in reports),
        "runs_catch_up": sum(r.runs_catch_up for r in reports),
        "runs_missed": sum(r.runs_missed for r in reports),
        "conflicts": sum(r.conflicts for r in reports),
        "dispatch_failures": sum(r.dispatch_failures for r in reports),
        "incomplete_shards": [r.shard for r in reports if not r.complete],
    }
    for name, key in (
        ("RunsPlanned", "runs_planned"),
        ("RunsCatchUp", "runs_catch_up"),
        ("RunsMissed", "runs_missed"),
        ("PlanConflicts", "conflicts"),
        ("DispatchFailures", "dispatch_failures"),
    ):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=summary[key])
    metrics.add_metric(name="TickerDuration", unit=MetricUnit.Seconds, value=elapsed)
    logger.info("tick done", extra=summary)
    return summary
