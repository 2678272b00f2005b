"""The part of the SQS API the embedded queues speak (adapters/sqlite/queue.py, adapters/memory/queue.py),
so that SQS-speaking code (adapters/sqs.py, local/executor_pool.py) runs over either unchanged: SQS's
limits, its error codes and error shapes, the argument checks, the response shapes, and each queue's
configuration from `tickwork.resources`. Pure: no storage, no clock."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from tickwork.adapters.sqs_provision import dispatch_queue_name
from tickwork.resources import DISPATCH, DISPATCH_DLQ, ResourceNames

# SQS's limits.
BATCH_LIMIT = 10
MAX_DELAY_SECONDS = 900
MAX_VISIBILITY_SECONDS = 12 * 3600
MAX_WAIT_SECONDS = 20

NON_EXISTENT_QUEUE = "AWS.SimpleQueueService.NonExistentQueue"
RECEIPT_INVALID = "ReceiptHandleIsInvalid"
TOO_MANY_ENTRIES = "TooManyEntriesInBatchRequest"
THROTTLED = "RequestThrottled"

SYSTEM_ATTRIBUTES = ("SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp")
COUNT_ATTRIBUTES = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesDelayed",
    "ApproximateNumberOfMessagesNotVisible",
)


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """One queue: its default visibility timeout, and where a message goes after max_receive_count
    receives (both or neither)."""

    visibility_timeout_seconds: int
    max_receive_count: int | None = None
    dead_letter: str | None = None

    def __post_init__(self) -> None:
        if (self.max_receive_count is None) != (self.dead_letter is None):
            raise ValueError("max_receive_count and dead_letter go together")
        if self.max_receive_count is not None and self.max_receive_count < 1:
            raise ValueError("max_receive_count must be at least 1")
        if not 0 <= self.visibility_timeout_seconds <= MAX_VISIBILITY_SECONDS:
            raise ValueError(f"visibility_timeout_seconds must be within 0..{MAX_VISIBILITY_SECONDS}")

    def dead_lettered_after(self, receive_count: int) -> bool:
        """Whether a message received `receive_count` times goes to the dead-letter queue instead of being
        delivered again."""
        return self.max_receive_count is not None and receive_count >= self.max_receive_count


def queue_configs(
    names: ResourceNames, dispatch_queues: int
) -> tuple[list[str], str, dict[str, QueueConfig]]:
    """The dispatch queues' names, the DLQ's name, and every queue's config, from `tickwork.resources`
    (the names are the ones the SQS provisioning gives the same queues)."""
    if dispatch_queues < 1:
        raise ValueError("at least one dispatch queue is needed")
    dlq = names.queue(DISPATCH_DLQ)
    dispatch = [dispatch_queue_name(names, index) for index in range(dispatch_queues)]
    configs = {dlq: QueueConfig(DISPATCH_DLQ.visibility_timeout_seconds)}
    for name in dispatch:
        configs[name] = QueueConfig(DISPATCH.visibility_timeout_seconds, DISPATCH.max_receive_count, dlq)
    return dispatch, dlq, configs


def check_dead_letters(queues: Mapping[str, QueueConfig]) -> None:
    """Every dead-letter queue a queue names is one of the queues."""
    for name, config in queues.items():
        if config.dead_letter is not None and config.dead_letter not in queues:
            raise ValueError(f"queue {name}'s dead-letter queue {config.dead_letter} is not defined")


def client_error(code: str, message: str, operation: str, status: int = 400) -> ClientError:
    """An error shaped like the one boto3 raises for the SQS error `code`."""
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {
                "RequestId": "",
                "HostId": "",
                "HTTPStatusCode": status,
                "HTTPHeaders": {},
                "RetryAttempts": 0,
            },
        },
        operation,
    )


def no_such_queue(queue: str, operation: str) -> ClientError:
    return client_error(NON_EXISTENT_QUEUE, f"The specified queue {queue} does not exist.", operation)


def md5_of(body: str) -> str:
    return hashlib.md5(body.encode(), usedforsecurity=False).hexdigest()


def check_batch(entries: Sequence[Mapping[str, Any]], operation: str) -> None:
    if not entries:
        raise client_error(
            "EmptyBatchRequest", "There should be at least one entry in the request.", operation
        )
    if len(entries) > BATCH_LIMIT:
        raise client_error(
            TOO_MANY_ENTRIES, f"Maximum number of entries per request are {BATCH_LIMIT}.", operation
        )
    ids = [str(e["Id"]) for e in entries]
    if len(set(ids)) != len(ids):
        raise client_error(
            "BatchEntryIdsNotDistinct", "Two or more batch entries have the same Id.", operation
        )


def check_delays(delays: Sequence[int], operation: str) -> None:
    for delay in delays:
        if not 0 <= delay <= MAX_DELAY_SECONDS:
            raise client_error(
                "InvalidParameterValue", f"DelaySeconds must be within 0..{MAX_DELAY_SECONDS}", operation
            )


def check_visibility(seconds: int, operation: str) -> None:
    if not 0 <= seconds <= MAX_VISIBILITY_SECONDS:
        raise client_error(
            "InvalidParameterValue",
            f"VisibilityTimeout must be within 0..{MAX_VISIBILITY_SECONDS}",
            operation,
        )


def check_receive(max_messages: int, wait_seconds: int, operation: str) -> None:
    if not 1 <= max_messages <= BATCH_LIMIT:
        raise client_error(
            "InvalidParameterValue", f"MaxNumberOfMessages must be within 1..{BATCH_LIMIT}", operation
        )
    if not 0 <= wait_seconds <= MAX_WAIT_SECONDS:
        raise client_error(
            "InvalidParameterValue", f"WaitTimeSeconds must be within 0..{MAX_WAIT_SECONDS}", operation
        )


def system_attributes(*asked: Sequence[str]) -> tuple[str, ...]:
    """The system attributes a receive asked for, in either spelling ("All": every one)."""
    wanted = {name for names in asked for name in names}
    return SYSTEM_ATTRIBUTES if "All" in wanted else tuple(a for a in SYSTEM_ATTRIBUTES if a in wanted)


def count_attributes(asked: Sequence[str], counts: Sequence[int], operation: str) -> dict[str, Any]:
    """A GetQueueAttributes answer: the counts asked for ("All": every one), as SQS's strings. `counts`
    are visible, delayed and in-flight, in COUNT_ATTRIBUTES' order."""
    unknown = set(asked) - {*COUNT_ATTRIBUTES, "All"}
    if unknown:
        raise client_error("InvalidAttributeName", f"unsupported attributes: {sorted(unknown)}", operation)
    by_name = dict(zip(COUNT_ATTRIBUTES, counts, strict=True))
    wanted = COUNT_ATTRIBUTES if "All" in asked else asked
    return {"Attributes": {name: str(by_name[name]) for name in wanted}}


def invalid_receipt(entry_id: str) -> dict[str, Any]:
    """A batch's `Failed` entry for a receipt the message no longer holds."""
    return {
        "Id": entry_id,
        "SenderFault": True,
        "Code": RECEIPT_INVALID,
        "Message": "The receipt handle is not the message's latest: it was received again since, or deleted.",
    }


def batch_result(
    entries: Sequence[tuple[str, str, int | None]], failed: list[dict[str, Any]]
) -> dict[str, Any]:
    failed_ids = {f["Id"] for f in failed}
    return {"Successful": [{"Id": e[0]} for e in entries if e[0] not in failed_ids], "Failed": failed}


def delivered_message(
    message_id: str,
    receipt: str,
    body: str,
    *,
    sent_at_ms: int,
    receive_count: int,
    first_received_at_ms: int,
    attributes: Sequence[str],
) -> dict[str, Any]:
    """A received message as ReceiveMessage answers it, with the system attributes asked for."""
    message: dict[str, Any] = {
        "MessageId": message_id,
        "ReceiptHandle": receipt,
        "MD5OfBody": md5_of(body),
        "Body": body,
    }
    values = {
        "SentTimestamp": sent_at_ms,
        "ApproximateReceiveCount": receive_count,
        "ApproximateFirstReceiveTimestamp": first_received_at_ms,
    }
    if attributes:
        message["Attributes"] = {name: str(values[name]) for name in attributes}
    return message
