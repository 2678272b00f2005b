"""Two in-process synths for the whole session (each ~7 s, ~640 MB): the defaults and a production variant.
Bundling is skipped, so no pip, Docker, network or AWS credentials are involved."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
pytest.importorskip("aws_cdk", reason="the infra extra is not installed")

from aws_cdk import App
from aws_cdk.assertions import Template
from infra.app import build
from infra.stack import TickworkStack

SKIP_BUNDLING = {"aws:cdk:bundling-stacks": []}

PRODUCTION_CONTEXT: dict[str, Any] = {
    "prefix": "tw-prod",
    "production": "true",  # as `cdk deploy -c production=true` passes it
    "shard_count": 10,
    "ticker_shards_per_invocation": 3,
    "queue_count": 3,
    "concurrency_cap": 3000,
    "owner_concurrency_cap": 300,
    "alarm_email": "oncall@example.com",
    "jwt_issuer": "https://issuer.example.com/",
    "jwt_audience": "tickwork-api,tickwork-cli",
    "start_delay_objective_ms": 2500,
    "target_arns": [
        "arn:aws:lambda:eu-west-1:123456789012:function:billing-close",
        "arn:aws:sqs:eu-west-1:123456789012:reports",
    ],
}


@dataclass(frozen=True)
class Synth:
    app: App
    stack: TickworkStack
    template: Template

    def resources(self, type_name: str) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self.template.find_resources(type_name)
        return found


def _synth(context: dict[str, Any]) -> Synth:
    app, stack = build({**SKIP_BUNDLING, **context})
    return Synth(app, stack, Template.from_stack(stack))


@pytest.fixture(scope="session")
def default() -> Iterator[Synth]:
    yield _synth({})


@pytest.fixture(scope="session")
def production() -> Iterator[Synth]:
    yield _synth(PRODUCTION_CONTEXT)


def as_list(value: Any) -> list[Any]:
    """A policy field holds one value or a list of them."""
    return value if isinstance(value, list) else [value]


def policy_statements(resources: dict[str, dict[str, Any]], policy_key: str) -> list[dict[str, Any]]:
    """Every statement of the policy document under `policy_key` of each of the resources."""
    return [s for r in resources.values() for s in r["Properties"][policy_key]["Statement"]]


def alarm_topic(synth: Synth) -> tuple[str, dict[str, Any]]:
    """The alarms' topic, found by its name."""
    topics = synth.resources("AWS::SNS::Topic")
    found = [(k, v) for k, v in topics.items() if str(v["Properties"].get("TopicName")).endswith("-alarms")]
    assert len(found) == 1, topics
    return found[0]
