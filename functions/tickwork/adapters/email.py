"""E-mail channels (issue 32) through SNS: a topic of its own for each address (`<prefix>-mail-<hash>`, the
AWS-managed SNS key), created by the first owner who names the address and tagged with that owner (a hash
of it), with the address subscribed to it. Another owner naming the same address is refused: nobody's
alerts reach an inbox its owner did not ask for. SNS mails a new address a confirmation link first;
nothing is delivered before it is confirmed. A topic per address, not one topic with a filter policy per
address: filter policies are capped at 200 a topic (AWS documentation), topics at 100,000 an account."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.adapters.targets.aws import error_retryable
from tickwork.domain.errors import StoreError, TransientStoreError, ValidationError
from tickwork.domain.targets import TargetResult, truncate_detail

OWNER_TAG = "tickwork:owner"
MAX_SUBJECT_CHARS = 99  # SNS: an e-mail's subject is under 100 characters
SNS_KEY = "alias/aws/sns"


def _hash(text: str, chars: int = 32) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:chars]


def owner_tag(owner: str) -> str:
    """The owner as a tag value (an owner may hold characters tags refuse)."""
    return _hash(f"owner|{owner}")


class SnsEmail:
    def __init__(self, sns: Any, topic_prefix_arn: str) -> None:
        """`topic_prefix_arn`: `arn:aws:sns:<region>:<account>:<prefix>-mail-`."""
        self._sns = sns
        self._prefix = topic_prefix_arn

    def topic_arn(self, address: str) -> str:
        return f"{self._prefix}{_hash(address.strip().lower())}"

    def subscribe(self, owner: str, address: str) -> None:
        name = self.topic_arn(address).rsplit(":", 1)[-1]
        try:
            arn = self._sns.create_topic(
                Name=name,
                Attributes={"KmsMasterKeyId": SNS_KEY},
                Tags=[{"Key": OWNER_TAG, "Value": owner_tag(owner)}],
            )["TopicArn"]
            tags = self._sns.list_tags_for_resource(ResourceArn=arn)["Tags"]
            holder = next((t["Value"] for t in tags if t["Key"] == OWNER_TAG), None)
            if holder != owner_tag(owner):
                raise _taken()
            self._sns.subscribe(TopicArn=arn, Protocol="email", Endpoint=address, ReturnSubscriptionArn=True)
        except ClientError as error:
            raise _translated(error, "subscribe") from error
        except BotoCoreError as error:
            raise TransientStoreError(f"SNS: {error}") from error

    def send(self, address: str, subject: str, body: str, message_id: str) -> TargetResult:
        started = time.monotonic()
        line = "".join(c if c.isprintable() else " " for c in subject)
        try:
            self._sns.publish(
                TopicArn=self.topic_arn(address),
                Subject=" ".join(line.split())[:MAX_SUBJECT_CHARS],
                Message=body,
                MessageAttributes={"tickwork.message_id": {"DataType": "String", "StringValue": message_id}},
            )
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", "ClientError"))
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            retryable = error_retryable(code, status)
            return TargetResult(False, retryable, code, _ms(started), truncate_detail(str(error)))
        except BotoCoreError as error:
            return TargetResult(False, True, type(error).__name__, _ms(started), truncate_detail(str(error)))
        return TargetResult(True, False, "200", _ms(started), "published")


def _taken() -> ValidationError:
    return ValidationError("address", "this address is another owner's e-mail channel: use one of your own")


def _translated(error: ClientError, what: str) -> Exception:
    code = str(error.response.get("Error", {}).get("Code", ""))
    message = str(error.response.get("Error", {}).get("Message", ""))
    if code == "InvalidParameter" and "tag" in message.lower():
        return _taken()  # AWS: the topic exists with another owner's tag
    if code == "InvalidParameter":
        return ValidationError("address", f"SNS refuses it: {message}")
    if error_retryable(code, error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")):
        return TransientStoreError(f"SNS {what}: {code}")
    return StoreError(f"SNS {what}: {code}: {message}", code=code)


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
