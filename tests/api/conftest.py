"""The API handler on moto: Components with a FakeClock, sample events from events/, and a caller."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ANCHOR, build_components
from tickwork.composition import Components
from tickwork.domain.clock import FakeClock
from tickwork.handlers import api, runtime

EVENTS = Path(__file__).resolve().parents[2] / "events"
ALICE = "arn:aws:iam::123456789012:user/alice"
BOB = "arn:aws:iam::123456789012:user/bob"
EXAMPLE_JOB = "job_88baa3bc317fa9786f56"  # what events/api_create_job.json's Idempotency-Key names for alice


class LambdaContext:
    function_name = "tickwork-api-test"
    function_version = "$LATEST"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tickwork-api-test"
    aws_request_id = "req-api-1"


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((EVENTS / name).read_text()))


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "")


def as_owner(event: dict[str, Any], owner: str | None) -> dict[str, Any]:
    event = copy.deepcopy(event)
    if owner is None:
        event["requestContext"].pop("authorizer", None)
    else:
        event["requestContext"]["authorizer"] = {"iam": {"userArn": owner}}
    return event


def request(
    method: str,
    path: str,
    *,
    body: Any = None,
    query: str = "",
    headers: dict[str, str] | None = None,
    owner: str | None = ALICE,
) -> dict[str, Any]:
    """An API Gateway HTTP API v2 event, shaped like the samples in events/."""
    event = load("api_get_job.json")
    event["rawPath"] = path
    event["requestContext"]["http"].update({"method": method, "path": path})
    event["rawQueryString"] = query
    if query:
        from urllib.parse import parse_qsl

        event["queryStringParameters"] = dict(parse_qsl(query, keep_blank_values=True))
    event["headers"] = {k.lower(): v for k, v in (headers or {}).items()}
    if body is not None:
        event["body"] = body if isinstance(body, str) else json.dumps(body)
        event["headers"].setdefault("content-type", "application/json")
    return as_owner(event, owner)


@dataclass
class Api:
    parts: Components
    clock: FakeClock
    calls: list[Reply] = field(default_factory=list)

    def send(self, event: dict[str, Any]) -> Reply:
        raw = api.handler(event, LambdaContext())  # type: ignore[arg-type]
        # Every proxy response carries a string body, "" for a 204 (MiniStack's gateway fails on null).
        assert isinstance(raw.get("body"), str), raw
        headers = {k: str(v) for k, v in (raw.get("headers") or {}).items()}
        text = raw.get("body") or ""
        body = json.loads(text) if text and "json" in headers.get("Content-Type", "") else text
        reply = Reply(int(raw["statusCode"]), headers, body)
        self.calls.append(reply)
        return reply

    def __call__(self, method: str, path: str, **kwargs: Any) -> Reply:
        return self.send(request(method, path, **kwargs))


def job_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "report",
        "schedule": {"expression": "*/5 * * * *"},
        "target": {"kind": "http", "config": {"url": "https://hooks.example.com/x"}},
    }
    body.update(overrides)
    return body


@pytest.fixture
def call(dynamodb: Any) -> Iterator[Api]:
    clock = FakeClock(ANCHOR)
    parts = build_components(dynamodb, clock)
    runtime.reset_for_tests(parts)
    yield Api(parts, clock)
    runtime.reset_for_tests(None)
