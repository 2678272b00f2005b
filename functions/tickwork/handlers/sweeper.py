"""Sweeper Lambda: minutely; repairs stalled runs, drains the dead-letter queue, then audits one segment of
the jobs for what was lost around the code (services/auditing.py)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork.domain.slots import ALL, Pool
from tickwork.handlers.runtime import components, logger, metrics, tracer

# The audit's budget where the invocation's time is unknown (a test's context, an older emulator's).
AUDIT_BUDGET = timedelta(seconds=20)


@metrics.log_metrics
@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # Leave the function time to report after the sweep (the sweep's own budget applies if shorter). A
    # context without the method (a test's, an older emulator's) leaves the sweep's budget alone.
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    budget = None if remaining is None else timedelta(milliseconds=max(0, remaining() - 5_000))
    parts = components()
    started = parts.clock.now()
    report = asdict(parts.sweeper().sweep(budget=budget))
    # Then one segment of the jobs audited in what the sweep left (all of it when it had little to do; a
    # sweep that used it all leaves the segment to the next pass, counted as AuditCutShort).
    left = (budget if budget is not None else AUDIT_BUDGET) - (parts.clock.now() - started)
    audit = parts.auditor().audit(parts.clock.now(), budget=max(timedelta(0), left))
    report["audit"] = asdict(audit)
    # Emitted on every sweep, 0 included: its alarm always has data, and a sweeper that stopped shows as
    # missing data. From here, in Seconds: the services' metrics port only has counts and milliseconds.
    metrics.add_metric(
        name="OldestOverdueRunAge", unit=MetricUnit.Seconds, value=report["oldest_overdue_seconds"]
    )
    # The runs in flight as the concurrency bound counts them (live slot holds), every minute.
    in_flight = parts.slots.in_flight(Pool(ALL, parts.settings.concurrency_cap), parts.clock.now())
    metrics.add_metric(name="RunsInFlight", unit=MetricUnit.Count, value=in_flight)
    report["runs_in_flight"] = in_flight
    logger.info("sweep done", extra=report)
    return report
