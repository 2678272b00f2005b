"""E-mail channels (issue 32) through the stack's notifications topic, on moto: an address is subscribed with
a filter on itself, and a message to it reaches that subscription alone (an SQS queue subscribed with the
same filter stands in for the mailbox, one with another address's filter gets nothing)."""

from __future__ import annotations

import json

import boto3
import pytest

from tickwork.adapters.email import ADDRESS_ATTRIBUTE, SnsEmail

REGION = "us-east-1"


@pytest.fixture
def topic(moto: None) -> str:
    return str(boto3.client("sns", region_name=REGION).create_topic(Name="test-notifications")["TopicArn"])


def mailbox(topic: str, address: str) -> str:
    """An SQS queue subscribed to the topic with the filter an e-mail subscription of `address` has."""
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName=f"box-{abs(hash(address))}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    boto3.client("sns", region_name=REGION).subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=arn,
        Attributes={"FilterPolicy": json.dumps({ADDRESS_ATTRIBUTE: [address]}), "RawMessageDelivery": "true"},
    )
    return str(url)


def received(url: str) -> list[str]:
    sqs = boto3.client("sqs", region_name=REGION)
    return [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])]


def test_an_address_is_subscribed_with_a_filter_on_itself_and_gets_only_its_own(topic: str) -> None:
    sns = boto3.client("sns", region_name=REGION)
    email = SnsEmail(sns, topic)
    email.subscribe("ops@example.com")
    [subscription] = [
        s
        for s in sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
        if s["Protocol"] == "email"
    ]
    assert subscription["Endpoint"] == "ops@example.com"
    attributes = sns.get_subscription_attributes(SubscriptionArn=subscription["SubscriptionArn"])[
        "Attributes"
    ]
    assert json.loads(attributes["FilterPolicy"]) == {ADDRESS_ATTRIBUTE: ["ops@example.com"]}

    ops, other = mailbox(topic, "ops@example.com"), mailbox(topic, "someone@example.com")
    result = email.send("ops@example.com", "Tickwork: run_failed of job j", "the body", "j|run_failed|r|t")
    assert result.ok, result
    assert received(ops) == ["the body"]
    assert received(other) == []


def test_a_topic_that_is_gone_is_a_failure_not_an_error(moto: None) -> None:
    sns = boto3.client("sns", region_name=REGION)
    gone = SnsEmail(sns, "arn:aws:sns:us-east-1:123456789012:no-such-topic")
    result = gone.send("ops@example.com", "s", "b", "id")
    assert not result.ok and not result.retryable and result.status == "NotFound"
