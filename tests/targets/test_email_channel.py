"""E-mail channels (issue 32) through SNS on moto: a topic per address, created by the first owner who names
it and tagged with that owner; the address subscribed to it; another owner naming the same address is
refused (nobody's alerts reach an inbox its owner did not ask for); a message to an address reaches its
topic alone (an SQS queue subscribed to it stands in for the mailbox)."""

from __future__ import annotations

import boto3
import pytest

from tickwork.adapters.email import SNS_KEY, SnsEmail
from tickwork.domain.errors import ValidationError

REGION = "us-east-1"
PREFIX = "arn:aws:sns:us-east-1:123456789012:test-mail-"


@pytest.fixture
def email(moto: None) -> SnsEmail:
    return SnsEmail(boto3.client("sns", region_name=REGION), PREFIX)


def mailbox(topic_arn: str) -> str:
    """An SQS queue subscribed to the address's topic: what the address would get."""
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName=f"box-{topic_arn.rsplit('-', 1)[-1]}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    boto3.client("sns", region_name=REGION).subscribe(
        TopicArn=topic_arn, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"}
    )
    return str(url)


def received(url: str) -> list[str]:
    sqs = boto3.client("sqs", region_name=REGION)
    return [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])]


def test_an_address_gets_a_topic_of_its_own_and_only_its_own_messages(email: SnsEmail) -> None:
    sns = boto3.client("sns", region_name=REGION)
    email.subscribe("alice", "ops@example.com")
    email.subscribe("alice", "ops@example.com")  # again: nothing more
    topic = email.topic_arn("ops@example.com")
    assert topic.startswith(PREFIX) and "ops" not in topic  # the address is not in the name
    [subscription] = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert subscription["Protocol"] == "email" and subscription["Endpoint"] == "ops@example.com"
    assert sns.get_topic_attributes(TopicArn=topic)["Attributes"]["KmsMasterKeyId"] == SNS_KEY

    email.subscribe("alice", "other@example.com")
    ops, other = mailbox(topic), mailbox(email.topic_arn("other@example.com"))
    result = email.send("ops@example.com", "Tickwork: run_failed\nof job j", "the body", "j|run_failed|r|t")
    assert result.ok, result
    assert received(ops) == ["the body"] and received(other) == []


def test_an_address_another_owner_holds_is_refused(email: SnsEmail) -> None:
    email.subscribe("alice", "ops@example.com")
    with pytest.raises(ValidationError, match="another owner's"):
        email.subscribe("bob", "ops@example.com")
    with pytest.raises(ValidationError, match="another owner's"):
        email.subscribe("bob", "OPS@example.com ")  # the same address, written otherwise
    topic = email.topic_arn("ops@example.com")
    subscriptions = boto3.client("sns", region_name=REGION).list_subscriptions_by_topic(TopicArn=topic)
    assert len(subscriptions["Subscriptions"]) == 1


def test_a_topic_that_is_gone_is_a_failure_not_an_error(email: SnsEmail) -> None:
    result = email.send("never@example.com", "s", "b", "id")
    assert not result.ok and not result.retryable and result.status == "NotFound"
