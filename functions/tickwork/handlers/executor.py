"""Executor Lambda: an SQS batch through Powertools' BatchProcessor (partial batch failure reporting, so
only failed messages come back), its runs executed concurrently (targets are I/O bound, and the concurrency
cap assumes a batch of 10 runs at once)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.base import FailureResponse
from aws_lambda_powertools.utilities.batch.exceptions import ExceptionInfo
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from tickwork.domain.clock import Clock
from tickwork.domain.dispatch import RunMessage
from tickwork.handlers.runtime import components, logger, metrics, tracer
from tickwork.services.executing import Executor, Outcome


class ConcurrentBatchProcessor(BatchProcessor):
    """BatchProcessor whose `process` runs the records on one thread each instead of one after another.
    Powertools has no threaded processor for synchronous handlers; each record still goes through the
    base class's `_process_record`, so success / failure bookkeeping and the response are Powertools'."""

    def process(self) -> list[tuple[Any, ...]]:
        if not self.records:
            return []
        with ThreadPoolExecutor(max_workers=len(self.records), thread_name_prefix="tickwork-run") as pool:
            results = list(pool.map(self._process_record, self.records))
        # Threads finish in any order: report failures in the batch's order.
        position = {record["messageId"]: index for index, record in enumerate(self.records)}

        def batch_order(message: object) -> int:
            message_id = message.message_id if isinstance(message, SQSRecord) else None
            return position.get(message_id or "", len(position))

        self.fail_messages.sort(key=batch_order)
        return results

    def failure_handler(self, record: Any, exception: ExceptionInfo) -> FailureResponse:
        logger.error(
            "run message failed",
            extra={"message_id": getattr(record, "message_id", None), "error": repr(exception[1])},
        )
        return super().failure_handler(record, exception)


# SQS's longest visibility timeout.
MAX_VISIBILITY_SECONDS = 12 * 3600


class InvocationCarrier:
    """One SQS record in one Lambda invocation (services.ports.Carrier): the run's deadline is what the
    invocation has left, and a claim keeps the record's message hidden until the run's lease ends, so that
    a dead executor's run comes back at its lease end instead of the queue's visibility timeout (960 s)."""

    def __init__(
        self, record: SQSRecord, context: Any, sqs: Any, queue_urls: Sequence[str], clock: Clock
    ) -> None:
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        self.deadline = None if remaining is None else clock.now() + timedelta(milliseconds=remaining())
        name = str(record.event_source_arn or "").rsplit(":", 1)[-1]
        self._queue_url = next((url for url in queue_urls if name and url.endswith(f"/{name}")), None)
        self._receipt = record.receipt_handle
        self._sqs = sqs
        self._clock = clock

    def keep_hidden_until(self, instant: datetime | None) -> None:
        if instant is None or self._queue_url is None:
            return
        seconds = math.ceil((instant - self._clock.now()).total_seconds()) + 1
        try:
            self._sqs.change_message_visibility(
                QueueUrl=self._queue_url,
                ReceiptHandle=self._receipt,
                VisibilityTimeout=max(1, min(MAX_VISIBILITY_SECONDS, seconds)),
            )
        except (ClientError, BotoCoreError) as error:
            # Not hidden for the lease: a dead executor's run then comes back at the queue's own visibility
            # timeout, later but not lost.
            logger.warning("could not keep the message hidden for its lease", extra={"error": repr(error)})


def _execute(executor: Executor, record: SQSRecord, context: Any) -> Outcome:
    message = RunMessage.from_json(record.body).with_sent_at_ms(record.attributes.get("SentTimestamp"))
    parts = components()
    settings = parts.settings
    queue_urls = (*settings.dispatch_queue_urls, *filter(None, [settings.long_call_queue_url]))
    carrier = InvocationCarrier(record, context, parts.queues, queue_urls, parts.clock)
    outcome = executor.execute(message, carrier)
    logger.debug("run message done", extra={"message_id": record.message_id, "outcome": str(outcome)})
    return outcome


@metrics.log_metrics
@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if not event.get("Records"):
        return {"batchItemFailures": []}
    executor = components().executor(worker_id=getattr(context, "aws_request_id", None))
    # A failed record comes back after its visibility timeout; after max_receive_count it goes to the DLQ
    # and the sweeper records the run as failed. A batch whose every record failed is reported the same
    # way, record by record (raise_on_entire_batch_failure=False): raising would redeliver exactly the
    # same messages, but also count an invocation error for failures that are per message and already
    # handled, and turn the executor's error alarm into a poison-message alarm.
    processor = ConcurrentBatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    return dict(
        process_partial_response(
            event=event,
            record_handler=lambda record: _execute(executor, record, context),
            processor=processor,
            context=context,
        )
    )
