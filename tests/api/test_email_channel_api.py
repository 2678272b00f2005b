"""An e-mail channel at the API (issue 32): refused where the deployment has no notifications topic (422,
nothing stored), subscribed where it has one."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import boto3

from tests.api.conftest import ALICE, Api, job_body

REGION = "us-east-1"


def test_a_job_with_an_email_channel_needs_the_stacks_topic_and_subscribes_the_address(call: Api) -> None:
    topic = boto3.client("sns", region_name=REGION).create_topic(Name="test-notifications")["TopicArn"]
    alerts: dict[str, Any] = {"channels": [{"kind": "email", "address": "ops@example.com"}]}
    refused = call("POST", "/jobs", body=job_body(alerts=alerts), owner=ALICE)
    assert refused.status == 422 and refused.body["errors"][0]["field"] == "alerts.channels[0].address"
    bad = call("POST", "/jobs", body=job_body(alerts={"channels": [{"kind": "email", "address": "no"}]}))
    assert bad.status == 422
    assert call("GET", "/jobs", owner=ALICE).body["items"] == []

    call.parts.settings = replace(call.parts.settings, notifications_topic_arn=topic)
    call.parts.__dict__.pop("email", None)  # (cached: built again from the settings)
    made = call("POST", "/jobs", body=job_body(alerts=alerts), owner=ALICE)
    assert made.status == 201, made.body
    assert made.body["alerts"]["channels"] == alerts["channels"]
    subscriptions = boto3.client("sns", region_name=REGION).list_subscriptions_by_topic(TopicArn=topic)
    assert [s["Endpoint"] for s in subscriptions["Subscriptions"]] == ["ops@example.com"]
