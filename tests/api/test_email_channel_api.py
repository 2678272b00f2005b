"""An e-mail channel at the API (issue 32): refused where the deployment has no e-mail (422, nothing stored);
where it has, the address subscribed to a topic of its own for its first owner, and refused for another
owner (422 naming the channel, nothing stored); the owner's defaults subscribe it when they are set."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import boto3

from tests.api.conftest import ALICE, BOB, Api, job_body
from tickwork.adapters.email import SnsEmail

REGION = "us-east-1"
PREFIX = "arn:aws:sns:us-east-1:123456789012:test-mail-"
ALERTS: dict[str, Any] = {"channels": [{"kind": "email", "address": "ops@example.com"}]}


def subscribed(address: str) -> list[str]:
    topic = SnsEmail(None, PREFIX).topic_arn(address)
    found = boto3.client("sns", region_name=REGION).list_subscriptions_by_topic(TopicArn=topic)
    return [s["Endpoint"] for s in found["Subscriptions"]]


def with_email(call: Api) -> None:
    call.parts.settings = replace(call.parts.settings, email_topic_prefix=PREFIX)
    call.parts.__dict__.pop("email", None)  # (cached: built again from the settings)


def test_an_email_channel_needs_the_deployments_email(call: Api) -> None:
    refused = call("POST", "/jobs", body=job_body(alerts=ALERTS), owner=ALICE)
    assert refused.status == 422 and refused.body["errors"][0]["field"] == "alerts.channels[0].address"
    bad = call("POST", "/jobs", body=job_body(alerts={"channels": [{"kind": "email", "address": "no"}]}))
    assert bad.status == 422
    assert call("GET", "/jobs", owner=ALICE).body["items"] == []


def test_an_address_is_its_first_owners_and_refused_to_another(call: Api) -> None:
    with_email(call)
    made = call("POST", "/jobs", body=job_body(alerts=ALERTS), owner=ALICE)
    assert made.status == 201, made.body
    assert made.body["alerts"]["channels"] == ALERTS["channels"]
    assert subscribed("ops@example.com") == ["ops@example.com"]

    taken = call("POST", "/jobs", body=job_body(alerts=ALERTS), owner=BOB)
    assert taken.status == 422 and taken.body["errors"][0]["field"] == "alerts.channels[0].address"
    assert "another owner's" in taken.body["errors"][0]["message"]
    assert call("GET", "/jobs", owner=BOB).body["items"] == []
    assert call("PUT", "/alert-defaults", body=ALERTS, owner=BOB).status == 422

    # The owner's defaults subscribe their addresses when set; a job made from them does not again.
    mine = {"channels": [{"kind": "email", "address": "bob@example.com"}]}
    assert call("PUT", "/alert-defaults", body=mine, owner=BOB).status == 200
    assert subscribed("bob@example.com") == ["bob@example.com"]
    from_defaults = call("POST", "/jobs", body=job_body(), owner=BOB).body
    assert from_defaults["alerts"]["channels"] == mine["channels"]
