"""The registry routes by kind and fails unknown or invalid targets without raising."""

from __future__ import annotations

from typing import Any

import pytest

from tickwork.adapters.targets import AwsInvoker, HttpInvoker, TargetRegistry
from tickwork.domain.models import Target
from tickwork.domain.targets import Invocation, TargetInvoker, TargetResult

from .conftest import EPOCH, SECRET, RecordingServer, invocation


class _FakeAws(AwsInvoker):
    def __init__(self) -> None:
        super().__init__(lambda _service: None)
        self.calls: list[Target] = []

    def invoke(self, target: Target, invocation: Invocation) -> TargetResult:
        self.calls.append(target)
        return TargetResult(True, False, "200", 1, "fake")


def _registry() -> tuple[TargetRegistry, _FakeAws]:
    aws = _FakeAws()
    http = HttpInvoker(SECRET, clock_epoch=lambda: float(EPOCH), allow_loopback=True)
    return TargetRegistry(http, aws), aws


@pytest.mark.network  # the HTTP call reaches the loopback server
def test_routes_http_and_aws_kinds(server: RecordingServer) -> None:
    registry, aws = _registry()
    as_port: TargetInvoker = registry  # the executor's port

    assert as_port.invoke(Target("http", {"url": server.url()}), invocation()).ok
    assert len(server.requests) == 1
    for kind in ("sqs", "lambda", "stepfunctions", "sns", "eventbridge", "ecs"):
        registry.invoke(Target(kind, {}), invocation())
    assert [t.kind for t in aws.calls] == ["sqs", "lambda", "stepfunctions", "sns", "eventbridge", "ecs"]


def test_unknown_kind_is_a_final_failure() -> None:
    registry, aws = _registry()
    config: dict[str, Any] = {"url": "x"}

    result = registry.invoke(Target("carrier-pigeon", config), invocation())

    assert (result.ok, result.retryable, result.status) == (False, False, "InvalidTarget")
    assert "carrier-pigeon" in result.detail
    assert aws.calls == []
