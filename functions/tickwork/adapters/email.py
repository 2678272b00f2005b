"""E-mail channels (issue 32) through the stack's notifications topic: each address is subscribed with a
filter policy on itself, and a message to it is published with that address as its `tickwork.to`
attribute, so it reaches that subscription alone. SNS mails a new address a confirmation link first:
nothing is delivered to an address its owner has not confirmed."""

from __future__ import annotations

import json
import time
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.adapters.targets.aws import error_retryable
from tickwork.domain.errors import StoreError, TransientStoreError
from tickwork.domain.targets import TargetResult, truncate_detail

ADDRESS_ATTRIBUTE = "tickwork.to"
MAX_SUBJECT_CHARS = 100  # SNS's limit on an e-mail's subject


class SnsEmail:
    def __init__(self, sns: Any, topic_arn: str) -> None:
        self._sns = sns
        self._topic = topic_arn

    def subscribe(self, address: str) -> None:
        policy = json.dumps({ADDRESS_ATTRIBUTE: [address]})
        try:
            self._sns.subscribe(
                TopicArn=self._topic,
                Protocol="email",
                Endpoint=address,
                Attributes={"FilterPolicy": policy},
                ReturnSubscriptionArn=True,
            )
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            if error_retryable(code, error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")):
                raise TransientStoreError(f"SNS Subscribe: {code}") from error
            raise StoreError(f"SNS Subscribe: {code}: {error}", code=code) from error
        except BotoCoreError as error:
            raise TransientStoreError(f"SNS Subscribe: {error}") from error

    def send(self, address: str, subject: str, body: str, message_id: str) -> TargetResult:
        started = time.monotonic()
        try:
            self._sns.publish(
                TopicArn=self._topic,
                Subject=" ".join(subject.split())[:MAX_SUBJECT_CHARS],
                Message=body,
                MessageAttributes={
                    ADDRESS_ATTRIBUTE: {"DataType": "String", "StringValue": address},
                    "tickwork.message_id": {"DataType": "String", "StringValue": message_id},
                },
            )
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", "ClientError"))
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            retryable = error_retryable(code, status)
            return TargetResult(False, retryable, code, _ms(started), truncate_detail(str(error)))
        except BotoCoreError as error:
            return TargetResult(False, True, type(error).__name__, _ms(started), truncate_detail(str(error)))
        return TargetResult(True, False, "200", _ms(started), f"published to {address}")


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
