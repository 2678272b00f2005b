"""Executor Lambda: an SQS batch through Powertools' BatchProcessor (partial batch failure reporting, so
only failed messages come back), its runs executed concurrently (targets are I/O bound, and the concurrency
cap assumes a batch of 10 runs at once)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.base import FailureResponse
from aws_lambda_powertools.utilities.batch.exceptions import ExceptionInfo
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

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


def _execute(executor: Executor, record: SQSRecord) -> Outcome:
    message = RunMessage.from_json(record.body).with_sent_at_ms(record.attributes.get("SentTimestamp"))
    outcome = executor.execute(message)
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
            record_handler=lambda record: _execute(executor, record),
            processor=processor,
            context=context,
        )
    )
