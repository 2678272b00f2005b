"""Watcher Lambda: the runs table's stream (through its event source mapping) and a minutely schedule.
A batch of stream records is judged and recorded (services/watching.py), then what the outbox owes is sent;
the schedule sends what is owed later (retries, digests, deadlines)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork.adapters.dynamodb.stream import run_changes
from tickwork.domain.errors import TickworkError
from tickwork.handlers.runtime import components, logger, metrics, tracer

# What the invocation keeps after its deliveries: the last send's timeout and the report.
DELIVERY_MARGIN_SECONDS = 20.0


@metrics.log_metrics
@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    watcher = components().watcher()
    report: dict[str, Any] = {}
    records = event.get("Records")
    if records is not None:
        # An error here fails the batch: the mapping retries it (bisecting), then sends it to its
        # on-failure queue; a change is recorded once however often it is seen.
        report["observed"] = asdict(watcher.observe(run_changes(records)))
    # Within what is left of the invocation after its stream batch (a slow channel must not time out the
    # batch, which would stall the shard for every owner): the minutely pass sends the rest.
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    budget = None if remaining is None else max(0.0, remaining() / 1000 - DELIVERY_MARGIN_SECONDS)
    try:
        report["delivered"] = asdict(watcher.deliver(budget_seconds=budget))
    except TickworkError as error:
        # The batch is recorded: failing it now would only run it again. What is owed stays in the
        # outbox for the minutely pass (which fails loudly: WatcherErrors).
        if records is None:
            raise
        logger.error("outbox pass after a stream batch failed", extra={"error": str(error)})
        metrics.add_metric(name="WatcherDeliveryErrors", unit=MetricUnit.Count, value=1)
        report["delivered"] = None
    if records is None and budget is not None:
        # The minutely pass also works on the bulk actions that are due (pause, resume, retry of many
        # jobs), with what is left of the invocation: a large one goes on at the next pass, from its cursor.
        left = max(0.0, remaining() / 1000 - DELIVERY_MARGIN_SECONDS) if remaining is not None else 0.0
        report["bulk_done"] = components().bulk_service().work_due(f"watcher-{context.aws_request_id}", left)
    logger.info("watch done", extra=report)
    return report
