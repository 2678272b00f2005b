"""The executor Lambda's carrier (issue 28, part 3): a run's deadline is what the invocation has left, and a
claim keeps the record's message hidden until the run's lease ends, so a dead executor's run comes back at
its lease end rather than the queue's 960 s visibility timeout; a failure to do so is logged, never raised
(the message then comes back later, not never)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from botocore.exceptions import ClientError

from tickwork.domain.clock import FakeClock
from tickwork.handlers.executor import MAX_VISIBILITY_SECONDS, InvocationCarrier

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
QUEUES = (
    "https://sqs.us-east-1.amazonaws.com/123456789012/tickwork-dispatch-0",
    "https://sqs.us-east-1.amazonaws.com/123456789012/tickwork-dispatch-1",
)


class RecordingSqs:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = fail

    def change_message_visibility(self, **arguments: Any) -> None:
        self.calls.append(arguments)
        if self.fail:
            raise ClientError({"Error": {"Code": "ReceiptHandleIsInvalid"}}, "ChangeMessageVisibility")


class Context:
    def get_remaining_time_in_millis(self) -> int:
        return 600_000


def a_record(queue: str = "tickwork-dispatch-1") -> SQSRecord:
    return SQSRecord(
        {
            "messageId": "m-1",
            "receiptHandle": "receipt-1",
            "body": "{}",
            "attributes": {},
            "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{queue}",
        }
    )


def test_the_deadline_is_what_the_invocation_has_left() -> None:
    carrier = InvocationCarrier(a_record(), Context(), RecordingSqs(), QUEUES, FakeClock(NOW))
    assert carrier.deadline == NOW + timedelta(minutes=10)


def test_a_claim_hides_the_message_until_the_lease_ends_on_its_own_queue() -> None:
    sqs = RecordingSqs()
    carrier = InvocationCarrier(a_record(), Context(), sqs, QUEUES, FakeClock(NOW))

    carrier.keep_hidden_until(NOW + timedelta(seconds=90))

    assert sqs.calls == [{"QueueUrl": QUEUES[1], "ReceiptHandle": "receipt-1", "VisibilityTimeout": 91}]


@pytest.mark.parametrize(
    ("lease", "expected"),
    [
        pytest.param(NOW - timedelta(seconds=5), 1, id="a_lease_already_over_still_hides_a_second"),
        pytest.param(NOW + timedelta(days=2), MAX_VISIBILITY_SECONDS, id="capped_at_sqs_maximum"),
    ],
)
def test_the_visibility_stays_in_sqs_range(lease: datetime, expected: int) -> None:
    sqs = RecordingSqs()
    InvocationCarrier(a_record(), Context(), sqs, QUEUES, FakeClock(NOW)).keep_hidden_until(lease)
    assert sqs.calls[0]["VisibilityTimeout"] == expected


def test_no_claim_or_an_unknown_queue_changes_nothing() -> None:
    sqs = RecordingSqs()
    InvocationCarrier(a_record(), Context(), sqs, QUEUES, FakeClock(NOW)).keep_hidden_until(None)
    InvocationCarrier(a_record("elsewhere"), Context(), sqs, QUEUES, FakeClock(NOW)).keep_hidden_until(NOW)
    assert sqs.calls == []


def test_a_refused_change_is_logged_and_the_delivery_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    sqs = RecordingSqs(fail=True)
    InvocationCarrier(a_record(), Context(), sqs, QUEUES, FakeClock(NOW)).keep_hidden_until(NOW)
    assert len(sqs.calls) == 1
    assert "could not keep the message hidden" in caplog.text
