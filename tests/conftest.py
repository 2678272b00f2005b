from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.domain.clock import FakeClock
from tickwork.resources import ResourceNames

# A fixed anchor: every test's "now" is derived from it, never from the wall clock.
ANCHOR = datetime(2026, 12, 2, 12, 0, 30, tzinfo=UTC)
NAMES = ResourceNames(prefix="test")


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture
def moto(aws_env: None) -> Iterator[None]:
    with mock_aws():
        yield


@pytest.fixture
def dynamodb(moto: None) -> Any:
    client = boto3.client("dynamodb", region_name="us-east-1")
    ensure_tables(client, NAMES)
    return client


@pytest.fixture
def store(dynamodb: Any) -> DynamoStore:
    return DynamoStore(dynamodb, TableNames.from_resources(NAMES))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ANCHOR)


def pytest_report_header() -> str:
    return f"tickwork tests; AWS endpoint override: {os.environ.get('AWS_ENDPOINT_URL', 'none (moto)')}"
