from __future__ import annotations

import ipaddress
import os
import socket
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


# --- tiers: what a test needs beyond this process --------------------------------------------------------
# Markers (registered in pyproject.toml) say it. The fast tier (`make test-fast`, `pytest --fast`) is every
# test that needs none of OUTSIDE: in this process, offline (`offline` below), with no AWS double.

TESTS = Path(__file__).resolve().parent
# Every test under these paths (relative to tests/) needs what they name, and the fast tier does not even
# import them: the CDK's jsii runtime is a node process (importing it starts one), tests/local starts
# `tickwork local`, tests/browser Chromium, tests/e2e_aws a deployment; schemathesis generates the API
# contract's coverage cases when its module is collected (20-40 s), all of them for tests on moto.
PATH_NEEDS = {
    "infra": "process",
    "local": "process",
    "browser": "browser",
    "e2e_aws": "e2e_aws",
    "api/test_openapi_contract.py": "moto",
}
# A test using one of these fixtures, directly or through another fixture, needs what it names; so does a
# test parametrized with one of them as a value (the contract suites' engines: "moto", "ministack").
FIXTURE_NEEDS = {"ministack": "ministack", "moto": "moto"}
OUTSIDE = frozenset({"moto", "ministack", "e2e_aws", "process", "network", "browser"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="only the fast tier: the tests that need no process, emulator, AWS double, network or browser",
    )


def _path_need(path: Path) -> str | None:
    if not path.is_relative_to(TESTS):
        return None
    relative = path.relative_to(TESTS).as_posix()
    return next(
        (need for key, need in PATH_NEEDS.items() if relative == key or relative.startswith(f"{key}/")), None
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With --fast, the paths whose every test is outside the tier are not even imported."""
    if config.getoption("--fast") and _path_need(collection_path) is not None:
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        need = _path_need(item.path)
        if need is not None:
            item.add_marker(need)
        callspec = getattr(item, "callspec", None)
        values = [] if callspec is None else [v for v in callspec.params.values() if isinstance(v, str)]
        for fixture, need in FIXTURE_NEEDS.items():
            if fixture in getattr(item, "fixturenames", ()) or fixture in values:
                item.add_marker(need)
    if config.getoption("--fast"):
        outside = [item for item in items if _needs_outside(item)]
        if outside:
            config.hook.pytest_deselected(items=outside)
            items[:] = [item for item in items if not _needs_outside(item)]


def _needs_outside(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(name) is not None for name in OUTSIDE)


class NetworkRefusedError(OSError):
    """A fast-tier test tried to reach the network: mark it `network` (or give it a fake) instead."""


def _refuse_connect(sock: socket.socket, address: Any) -> None:
    raise NetworkRefusedError(f"the fast tier runs offline: connect to {address!r} refused")


@pytest.fixture(autouse=True)
def offline(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test of the fast tier runs with the network off: every socket connect, and every name lookup,
    raises NetworkRefusedError (an OSError, as a refused connection is). Tests marked with one of OUTSIDE
    keep the network."""
    if _needs_outside(request.node):
        return
    lookup = socket.getaddrinfo

    def literal_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            ipaddress.ip_address(host.decode() if isinstance(host, bytes) else str(host))
        except ValueError:
            raise NetworkRefusedError(f"the fast tier runs offline: lookup of {host!r} refused") from None
        return lookup(host, *args, **kwargs)  # a literal address: no resolver asked

    monkeypatch.setattr(socket.socket, "connect", _refuse_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse_connect)
    monkeypatch.setattr(socket, "getaddrinfo", literal_only)


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
def dynamo_store(dynamodb: Any) -> DynamoStore:
    return DynamoStore(dynamodb, TableNames.from_resources(NAMES))


@pytest.fixture
def store(dynamo_store: DynamoStore) -> DynamoStore:
    """The DynamoDB store on moto (the service tests, tests/services, run on the in-memory one instead)."""
    return dynamo_store


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


def moto_clients() -> dict[str, Any]:
    """The clients `build_components` uses besides DynamoDB's. Under moto, boto3 makes a client in some
    40 ms (it copies moto's event hooks): a test that builds components many times makes these once."""
    return {
        "sqs": boto3.client("sqs", region_name="us-east-1"),
        # secret header values (domain/secrets.py), as in the deployed stack
        "secretsmanager": boto3.client("secretsmanager", region_name="us-east-1"),
        "sns": boto3.client("sns", region_name="us-east-1"),  # e-mail channels' notifications topic
    }


def build_components(dynamodb: Any, clock: FakeClock, clients: dict[str, Any] | None = None) -> Components:
    """The deployment's components on moto: tables, two dispatch queues and a DLQ, local mode (loopback
    targets allowed), metrics kept in memory. `clients`: moto_clients() made earlier (None: new ones)."""
    clients = {"dynamodb": dynamodb, **(moto_clients() if clients is None else clients)}
    queue_urls, dlq_url = ensure_queues(clients["sqs"], NAMES, dispatch_queues=2)
    settings = Settings(
        table_prefix=NAMES.prefix,
        shard_count=2,
        mode="local",
        dispatch_queue_urls=tuple(queue_urls),
        dead_letter_queue_url=dlq_url,
        signing_secret="s3cret",
    )
    return Components(settings, clock, clients.__getitem__, RecordingMetrics())
