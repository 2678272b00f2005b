from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from moto import mock_aws

from tests.fakes import RecordingMetrics
from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.queue import SqliteQueues, queue_configs
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.adapters.sqs_provision import ensure_queues
from tickwork.composition import Components
from tickwork.domain.clock import FakeClock
from tickwork.local.emulator import Emulator, EmulatorConfig
from tickwork.resources import ResourceNames
from tickwork.settings import Settings

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


@pytest.fixture(scope="session")
def ministack() -> Iterator[Emulator]:
    """One embedded MiniStack for the session (its own venv; installed by `make install`)."""
    emulator = Emulator(EmulatorConfig())
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()


def ministack_client(emulator: Emulator, service: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=emulator.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"max_attempts": 2, "mode": "standard"}, max_pool_connections=32),
    )


@pytest.fixture
def ministack_names(ministack: Emulator) -> ResourceNames:
    """Fresh tables per test: a unique prefix, so tests never see each other's items."""
    names = ResourceNames(prefix=f"t{uuid.uuid4().hex[:10]}")
    ensure_tables(ministack_client(ministack, "dynamodb"), names)
    return names


class RacingEngine:
    """A store engine for races: `store()` gives a new store with its own connection each time, as separate
    processes or Lambda environments have (SQLite: its own `Database`, so racing writers meet in SQLite's
    file lock, not in one process's write lock); `queues()` its SQS-shaped queue client."""

    def __init__(self, name: str, store: Callable[[], Any], queues: Callable[[], Any], names: ResourceNames):
        self.name = name
        self.store = store
        self.queues = queues
        self.names = names


@pytest.fixture(params=[pytest.param("ministack", marks=pytest.mark.ministack), "sqlite"])
def racing_engine(request: pytest.FixtureRequest, tmp_path: Path) -> RacingEngine:
    if request.param == "sqlite":
        path = tmp_path / "tickwork.db"
        Database(path).open()
        _, _, configs = queue_configs(ResourceNames(), 2)
        now_ms = lambda: int(time.time() * 1000)  # noqa: E731 - the queue's clock: wall time, as in production
        return RacingEngine(
            "sqlite",
            lambda: SqliteStore(Database(path).open()),
            lambda: SqliteQueues(Database(path).open(), configs, now_ms),
            ResourceNames(),
        )
    emulator: Emulator = request.getfixturevalue("ministack")
    names: ResourceNames = request.getfixturevalue("ministack_names")
    tables = TableNames.from_resources(names)
    return RacingEngine(
        "ministack",
        lambda: DynamoStore(ministack_client(emulator, "dynamodb"), tables),
        lambda: ministack_client(emulator, "sqs"),
        names,
    )


def build_components(dynamodb: Any, clock: FakeClock) -> Components:
    """The deployment's components on moto: tables, two dispatch queues and a DLQ, local mode (loopback
    targets allowed), metrics kept in memory."""
    sqs = boto3.client("sqs", region_name="us-east-1")
    queue_urls, dlq_url = ensure_queues(sqs, NAMES, dispatch_queues=2)
    settings = Settings(
        table_prefix=NAMES.prefix,
        shard_count=2,
        mode="local",
        dispatch_queue_urls=tuple(queue_urls),
        dead_letter_queue_url=dlq_url,
        signing_secret="s3cret",
    )
    clients = {"dynamodb": dynamodb, "sqs": sqs}
    return Components(settings, clock, clients.__getitem__, RecordingMetrics())
