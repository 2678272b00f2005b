"""Sweeper Lambda: minutely; repairs stalled runs and drains the dead-letter queue."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork.handlers.runtime import components, logger, metrics, tracer


@metrics.log_metrics
@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = asdict(components().sweeper().sweep())
    logger.info("sweep done", extra=report)
    return report
