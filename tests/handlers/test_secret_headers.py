"""Secret header values are references (issue 31): a job made through the API handler, planned by the ticker
handler and run by the executor handler, on moto with Secrets Manager as the deployed stack has it. The
target receives the values; a scan of every table and every index afterwards, and the logs, hold none."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from tests.api.conftest import Api, job_body
from tests.conftest import build_components
from tests.scans import everything_in
from tickwork.api.models import JobCreate
from tickwork.composition import Components
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.models import RunState
from tickwork.handlers import executor, runtime, ticker

CREATED_AT = datetime(2026, 12, 2, 12, 0, 30, tzinfo=UTC)
FIRE = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)
BEARER = "Bearer tw-secret-4f1c9e7a0b"  # a credential-like header: secret without being marked
MARKED = "tw-secret-marked-8d2e61"  # marked secret in `secret_headers`
PLAIN = "tw-plain-value-77aa01"  # an ordinary header: stored as it is (the scan's control)


class LambdaContext:
    function_name = "tickwork-test"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tickwork-test"
    aws_request_id = "req-1"


@pytest.fixture
def deployed(dynamodb: Any) -> Iterator[Components]:
    parts = build_components(dynamodb, FakeClock(CREATED_AT))
    runtime.reset_for_tests(parts)
    yield parts
    runtime.reset_for_tests(None)


def run_once(parts: Components, job_id: str) -> None:
    clock = parts.clock
    assert isinstance(clock, FakeClock)
    clock.set(datetime(2026, 12, 2, 12, 3, 0, tzinfo=UTC))
    event = {"version": "0", "source": "aws.events", "time": "2026-12-02T12:03:00Z", "shards": [0, 1]}
    assert ticker.handler(event, LambdaContext())["RunsPlanned"] == 1  # type: ignore[arg-type]
    run = parts.store.get_run(job_id, FIRE)
    assert run is not None
    clock.set(datetime(2026, 12, 2, 12, 5, 0, 200000, tzinfo=UTC))
    queue = parts.settings.dispatch_queue_urls[0]
    record = {
        "messageId": "m-1",
        "receiptHandle": "r-1",
        "body": RunMessage.for_run(run).to_json(),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1764676980100"},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{queue.rsplit('/', 1)[1]}",
        "awsRegion": "us-east-1",
    }
    response = executor.handler({"Records": [record]}, LambdaContext())  # type: ignore[arg-type]
    assert response == {"batchItemFailures": []}


def test_a_run_calls_with_the_secret_values_and_no_table_index_or_log_holds_them(
    deployed: Components,
    receiver: tuple[str, list[dict[str, str]]],
    dynamodb: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)  # (botocore logs request bodies at DEBUG)
    caplog.set_level(logging.DEBUG, logger="tickwork")
    url, received = receiver
    assert isinstance(deployed.clock, FakeClock)
    call = Api(deployed, deployed.clock)
    config = {
        "url": url,
        "headers": {"Authorization": BEARER, "X-Plain": PLAIN},
        "secret_headers": {"X-Signing-Token": MARKED},
    }
    created = call("POST", "/jobs", body=job_body(target={"kind": "http", "config": config}))
    assert created.status == 201, created.body
    shown = created.body["target"]["config"]
    assert shown["headers"] == {
        "Authorization": "<redacted>",
        "X-Plain": PLAIN,
        "X-Signing-Token": "<redacted>",
    }
    assert "secret_headers" not in shown and "secret_refs" not in shown

    run_once(deployed, created.body["id"])

    run = deployed.store.get_run(created.body["id"], FIRE)
    assert run is not None and run.state is RunState.SUCCEEDED
    [headers] = received
    assert headers["Authorization"] == BEARER and headers["X-Signing-Token"] == MARKED
    assert headers["X-Plain"] == PLAIN
    stored = everything_in(dynamodb)
    assert PLAIN in stored  # the scan sees what the tables hold: an ordinary header is there
    assert BEARER not in stored and "tw-secret-4f1c9e7a0b" not in stored and MARKED not in stored
    assert BEARER.split()[1] not in caplog.text and MARKED not in caplog.text
    # The values are in Secrets Manager, one secret each, under the deployment's prefix.
    secrets = boto3.client("secretsmanager", region_name="us-east-1").list_secrets()["SecretList"]
    names = sorted(s["Name"] for s in secrets)
    assert len(names) == 2 and all(n.startswith(f"{deployed.settings.table_prefix}/headers/") for n in names)


def test_another_owners_reference_resolves_to_nothing(deployed: Components) -> None:
    secrets = deployed.header_secrets
    reference = secrets.put("alice", MARKED)
    assert secrets.put("alice", MARKED) == reference  # the same value of one owner: one secret
    assert secrets.put("bob", MARKED) != reference
    assert secrets.get("alice", reference) == MARKED
    from tickwork.domain.secrets import SecretUnavailableError

    with pytest.raises(SecretUnavailableError, match="another owner") as refused:
        secrets.get("bob", reference)
    assert refused.value.retryable is False
    with pytest.raises(SecretUnavailableError, match="not a header secret"):
        secrets.get("alice", "tickwork/signing-secret")  # only the header secrets' names resolve


def test_an_idempotent_create_stores_a_fingerprint_of_references_and_replays_the_same_request(
    deployed: Components, dynamodb: Any
) -> None:
    assert isinstance(deployed.clock, FakeClock)
    call = Api(deployed, deployed.clock)
    config = {"url": "https://hooks.example.com/x", "headers": {"Authorization": BEARER}}
    body = job_body(target={"kind": "http", "config": config})
    first = call("POST", "/jobs", body=body, headers={"Idempotency-Key": "k-1"})
    again = call("POST", "/jobs", body=body, headers={"Idempotency-Key": "k-1"})
    assert (first.status, again.status) == (201, 200) and again.body["id"] == first.body["id"]
    other = job_body(
        target={"kind": "http", "config": {**config, "headers": {"Authorization": BEARER + "x"}}}
    )
    changed = call("POST", "/jobs", body=other, headers={"Idempotency-Key": "k-1"})
    assert changed.status == 409, changed.body  # another value: another request
    found = deployed.store.get_job_fingerprint(first.body["id"])
    assert found is not None
    job, fingerprint = found
    request = JobCreate.model_validate(body)
    assert fingerprint == request.fingerprint(job.target.config["secret_refs"])
    assert fingerprint != request.fingerprint()  # the values are not what it covers
    stored = everything_in(dynamodb)
    assert BEARER.split()[1] not in stored and hashlib.sha256(BEARER.encode()).hexdigest() not in stored
