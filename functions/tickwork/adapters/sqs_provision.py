"""Create the dispatch queues and their DLQ from the shared definitions (local runtime and tests)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from tickwork.resources import DISPATCH, DISPATCH_DLQ, ResourceNames

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


def dispatch_queue_name(names: ResourceNames, index: int) -> str:
    return f"{names.queue(DISPATCH)}-{index}"


def ensure_queues(client: SQSClient, names: ResourceNames, dispatch_queues: int = 1) -> tuple[list[str], str]:
    """Create (idempotently) the DLQ and `dispatch_queues` dispatch queues redriving to it.
    Returns (dispatch queue URLs, DLQ URL)."""
    dlq_url = client.create_queue(
        QueueName=names.queue(DISPATCH_DLQ),
        Attributes={"MessageRetentionPeriod": str(DISPATCH_DLQ.retention_seconds)},
    )["QueueUrl"]
    dlq_arn = client.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(DISPATCH.max_receive_count)})
    urls = [
        client.create_queue(
            QueueName=dispatch_queue_name(names, index),
            Attributes={
                "VisibilityTimeout": str(DISPATCH.visibility_timeout_seconds),
                "MessageRetentionPeriod": str(DISPATCH.retention_seconds),
                "RedrivePolicy": redrive,
            },
        )["QueueUrl"]
        for index in range(dispatch_queues)
    ]
    return urls, dlq_url
