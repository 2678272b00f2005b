"""Every AWS target call ends within the job's `timeout_seconds`, botocore's retries and backoff included.

Behavioural: boto3 is pointed (`AWS_ENDPOINT_URL`) at a server on 127.0.0.1 that holds every request longer
than the job's timeout. Arithmetic: for every timeout a job can have, the worst case of the budget (every try
timing out, every backoff at its longest) fits in it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tickwork.adapters.targets.aws import (
    MAX_ATTEMPTS,
    AwsInvoker,
    Boto3Clients,
    boto3_client_factory,
    call_budget,
)
from tickwork.domain.models import Target

from .conftest import invocation

REGION = "us-east-1"
# How long the server sits on a request before answering 500: well past every timeout + slack below, so a
# call that returns in time was cut by its timeout, not answered by the server.
HOLD_SECONDS = 6.0
SLACK_SECONDS = 2.0  # scheduling and client set-up on a loaded, shared test machine (seen: 0.6 s)

TARGETS = {
    "sqs": Target("sqs", {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "message": "m"}),
    "sns": Target("sns", {"topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "message": "m"}),
    "eventbridge": Target("eventbridge", {"source": "s", "detail_type": "d"}),
    "lambda-sync": Target("lambda", {"function_name": "report", "invocation_type": "RequestResponse"}),
    "lambda-async": Target("lambda", {"function_name": "report", "invocation_type": "Event"}),
    "stepfunctions": Target(
        "stepfunctions", {"state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:m"}
    ),
    "ecs": Target(
        "ecs", {"cluster": "c", "task_definition": "t", "container": "main", "subnets": ["subnet-0a1b2c3d"]}
    ),
}


class _HoldingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Hold)
        self.requests = 0
        self.release = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        return None  # the client gave up before the late answer: expected


class _Hold(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HoldingServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests += 1
        self.server.release.wait(HOLD_SECONDS)
        self.send_response(500)  # no body: every protocol's parser (JSON, XML) reads it as a plain 500
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def holding(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[_HoldingServer]:
    server = _HoldingServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=2)


@pytest.mark.network  # the target is a loopback server that never answers
@pytest.mark.parametrize("kind", list(TARGETS))
def test_a_target_that_does_not_answer_times_out_within_the_jobs_timeout(
    holding: _HoldingServer, kind: str
) -> None:
    invoker = AwsInvoker(boto3_client_factory(region_name=REGION))
    timeout = 1.0

    started = time.monotonic()
    result = invoker.invoke(TARGETS[kind], invocation(timeout=timeout))
    elapsed = time.monotonic() - started

    assert (result.ok, result.retryable, result.status) == (False, True, "TimeoutError")
    assert elapsed <= timeout + SLACK_SECONDS, f"{kind}: {elapsed:.2f} s for a {timeout} s timeout"
    assert holding.requests == 1  # a 1 s budget leaves no room for a second try


@pytest.mark.network
@pytest.mark.parametrize(
    ("kind", "handle"),
    [
        ("stepfunctions", "arn:aws:states:us-east-1:123456789012:execution:m:run"),
        ("ecs", "arn:aws:ecs:us-east-1:123456789012:task/c/0123456789abcdef"),
    ],
)
def test_a_look_that_gets_no_answer_is_tried_again_later_within_its_own_timeout(
    holding: _HoldingServer, kind: str, handle: str
) -> None:
    timeout = 1.0
    invoker = AwsInvoker(boto3_client_factory(region_name=REGION), track_timeout_seconds=timeout)

    started = time.monotonic()
    result = invoker.track(TARGETS[kind], handle)
    elapsed = time.monotonic() - started

    assert result is None  # the look failed for now: the next one tries again
    assert elapsed <= timeout + SLACK_SECONDS
    assert holding.requests == 1


@pytest.mark.network
def test_retries_happen_only_within_the_jobs_timeout(holding: _HoldingServer) -> None:
    invoker = AwsInvoker(boto3_client_factory(region_name=REGION))
    timeout = 8.0  # room for 2 tries of 1 s each plus the longest backoff between them (6 s)

    started = time.monotonic()
    result = invoker.invoke(TARGETS["sqs"], invocation(timeout=timeout))
    elapsed = time.monotonic() - started

    assert (result.ok, result.retryable, result.status) == (False, True, "TimeoutError")
    assert holding.requests == 2
    assert elapsed <= timeout + SLACK_SECONDS


@pytest.mark.network
def test_a_synchronous_lambda_is_never_retried_by_botocore(holding: _HoldingServer) -> None:
    invoker = AwsInvoker(boto3_client_factory(region_name=REGION))
    timeout = 2.5

    started = time.monotonic()
    result = invoker.invoke(TARGETS["lambda-sync"], invocation(timeout=timeout))
    elapsed = time.monotonic() - started

    # One try of the whole budget (a retried read timeout would run the function twice).
    assert (result.ok, result.status) == (False, "TimeoutError")
    assert holding.requests == 1
    assert timeout - 1.0 <= elapsed <= timeout + SLACK_SECONDS


# Every timeout the API accepts (1-840 s), a few fractional ones, and every service a target calls.
TIMEOUTS = [0.2, 0.5, 1.5, *range(1, 841)]
SERVICES = ["sqs", "sns", "events", "lambda", "stepfunctions", "ecs"]


@pytest.mark.parametrize("service", SERVICES)
def test_the_worst_case_of_every_budget_fits_its_timeout(service: str) -> None:
    for timeout in TIMEOUTS:
        budget = call_budget(service, timeout)

        assert budget.worst_case_seconds() <= timeout + 1e-9, (service, timeout, budget)
        assert 1 <= budget.attempts <= MAX_ATTEMPTS
        assert budget.connect_timeout > 0 and budget.read_timeout > 0
        if service == "lambda":
            assert budget.attempts == 1
            assert budget.connect_timeout + budget.read_timeout == pytest.approx(timeout)


@pytest.mark.parametrize(
    ("service", "timeout", "attempts", "connect", "read"),
    [
        pytest.param("lambda", 60, 1, 5.0, 55.0, id="lambda-default-timeout"),
        pytest.param("lambda", 840, 1, 5.0, 835.0, id="lambda-longest-job"),
        pytest.param("lambda", 2, 1, 0.5, 1.5, id="lambda-short"),
        pytest.param(
            "sqs", 60, 3, 47 / 3 / 4, 47 / 3 * 3 / 4, id="sqs-default-timeout"
        ),  # (60 - 13 s backoff) / 3
        pytest.param("sqs", 840, 3, 5.0, 30.0, id="sqs-read-capped"),
        pytest.param("sqs", 8, 2, 0.25, 0.75, id="sqs-two-tries"),
        pytest.param("sqs", 5, 1, 1.25, 3.75, id="sqs-one-try"),
    ],
)
def test_budget_table(service: str, timeout: float, attempts: int, connect: float, read: float) -> None:
    budget = call_budget(service, timeout)

    assert (budget.attempts, budget.connect_timeout, budget.read_timeout) == pytest.approx(
        (attempts, connect, read)
    )


def test_timed_clients_carry_the_budget_and_are_reused_per_timeout(aws_env: None) -> None:
    clients = Boto3Clients(region_name=REGION, max_timed_clients=2)

    lambda_60 = clients.timed("lambda", 60)
    config = lambda_60.meta.config

    assert (config.connect_timeout, config.read_timeout) == (5.0, 55.0)
    assert config.retries["total_max_attempts"] == 1
    assert clients.timed("lambda", 60) is lambda_60
    assert clients.timed("sqs", 60).meta.config.retries == {"mode": "standard", "total_max_attempts": 3}
    # A third (service, timeout) evicts the least recently used one: the cache stays bounded.
    clients.timed("lambda", 30)
    assert clients.timed("sqs", 60) is not None
    assert clients.timed("lambda", 60) is not lambda_60
    # The general-purpose clients are untouched.
    assert clients("sqs").meta.config.read_timeout == 30


def test_clients_keep_as_many_connections_as_their_callers_threads(aws_env: None) -> None:
    assert Boto3Clients(region_name=REGION)("dynamodb").meta.config.max_pool_connections == 64
    # The local executor's cap of 500 threads: neither its store clients nor its timed target clients
    # drop connections beyond botocore's pool (the emulator engine logged "Connection pool is full").
    clients = Boto3Clients(region_name=REGION, max_pool_connections=500)
    assert clients("dynamodb").meta.config.max_pool_connections == 500
    assert clients.timed("sqs", 60).meta.config.max_pool_connections == 500


def test_a_plain_client_for_is_used_as_given(aws_env: None) -> None:
    asked: list[str] = []

    def client_for(service: str) -> Any:
        asked.append(service)
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError):
        AwsInvoker(client_for).invoke(TARGETS["sns"], invocation())
    assert asked == ["sns"]
