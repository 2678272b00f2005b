"""Every function handler runs inside the Powertools tracer's handler subsegment (X-Ray in Lambda)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.handlers.test_lambda_handlers import LambdaContext, deployed, load
from tickwork.composition import Components
from tickwork.handlers import api, executor, runtime, sweeper, ticker

__all__ = ["deployed"]  # fixtures used here
EVENTS = Path(__file__).resolve().parents[2] / "events"


@dataclass
class Subsegment:
    name: str
    annotations: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def put_annotation(self, key: str, value: Any) -> None:
        self.annotations[key] = value

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        self.metadata[key] = value

    def add_exception(self, exception: BaseException, stack: Any = None, remote: bool = False) -> None:
        self.metadata["exception"] = exception


@dataclass
class RecordingProvider:
    subsegments: list[Subsegment] = field(default_factory=list)

    @contextlib.contextmanager
    def in_subsegment(self, name: str) -> Iterator[Subsegment]:
        subsegment = Subsegment(name)
        self.subsegments.append(subsegment)
        yield subsegment


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> RecordingProvider:
    recording = RecordingProvider()
    monkeypatch.setattr(runtime.tracer, "provider", recording)
    return recording


def test_ticker_executor_sweeper_and_api_are_traced(
    deployed: Components, provider: RecordingProvider
) -> None:
    context = LambdaContext()
    ticker.handler(load("ticker.json"), context)
    executor.handler(load("executor.json"), context)
    sweeper.handler(load("sweeper.json"), context)
    reply = api.handler(json.loads((EVENTS / "api_get_job.json").read_text()), context)

    assert [s.name for s in provider.subsegments] == ["## handler"] * 4
    assert all(s.annotations["Service"] == runtime.SERVICE for s in provider.subsegments)
    ticked, _, swept, served = provider.subsegments
    assert "handler response" in ticked.metadata and "handler response" in swept.metadata
    # The API's responses carry owners' job data: kept out of the trace.
    assert reply["statusCode"] == 404 and served.metadata == {}
