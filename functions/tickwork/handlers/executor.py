"""Executor Lambda: an SQS batch, its runs executed concurrently (targets are I/O bound), with partial
batch failure reporting so only failed messages come back."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork.domain.dispatch import RunMessage
from tickwork.handlers.runtime import components, logger, metrics
from tickwork.services.executing import Executor, Outcome


def _execute(executor: Executor, record: dict[str, Any]) -> Outcome:
    message = RunMessage.from_json(record["body"])
    return executor.execute(message.with_sent_at_ms(record.get("attributes", {}).get("SentTimestamp")))


@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    records: list[dict[str, Any]] = event.get("Records", [])
    if not records:
        return {"batchItemFailures": []}
    executor = components().executor(worker_id=getattr(context, "aws_request_id", None))
    failures: list[dict[str, str]] = []
    with ThreadPoolExecutor(max_workers=len(records)) as pool:
        futures = [(record["messageId"], pool.submit(_execute, executor, record)) for record in records]
        for message_id, future in futures:
            error = future.exception()
            if error is not None:
                # The message comes back after its visibility timeout; after max_receive_count it goes to
                # the DLQ and the sweeper records the run as failed.
                logger.error("run message failed", extra={"message_id": message_id, "error": repr(error)})
                failures.append({"itemIdentifier": message_id})
            else:
                logger.debug(
                    "run message done", extra={"message_id": message_id, "outcome": str(future.result())}
                )
    return {"batchItemFailures": failures}
