"""Resolving secret header values at call time: the Secrets Manager adapter's cache, errors and writes, and
the HTTP invoker's use of the values (sent, never returned in a run's detail)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tickwork.adapters.secrets import HEADER_CACHE_SECONDS, SecretsManagerHeaderSecrets
from tickwork.adapters.targets.http import HttpInvoker
from tickwork.domain.errors import TransientStoreError, ValidationError
from tickwork.domain.models import Target
from tickwork.domain.secrets import SecretUnavailableError, sealed
from tickwork.domain.targets import Invocation, validate_target

PREFIX = "tw/headers/"


class FakeSecretsManager:
    def __init__(self) -> None:
        self.secrets: dict[str, str] = {}
        self.creates = 0
        self.reads = 0
        self.fail_with: str | None = None
        self.revoked: set[str] = set()

    def create_secret(self, Name: str, SecretString: str, **_: Any) -> None:
        self.creates += 1
        if self.fail_with:
            raise ClientError({"Error": {"Code": self.fail_with}}, "CreateSecret")
        if Name in self.revoked:
            raise ClientError({"Error": {"Code": "InvalidRequestException"}}, "CreateSecret")
        if Name in self.secrets:
            raise ClientError({"Error": {"Code": "ResourceExistsException"}}, "CreateSecret")
        self.secrets[Name] = SecretString

    def get_secret_value(self, SecretId: str) -> dict[str, str]:
        self.reads += 1
        if SecretId in self.revoked:
            raise ClientError({"Error": {"Code": "InvalidRequestException"}}, "GetSecretValue")
        if SecretId not in self.secrets:
            raise ClientError({"Error": {"Code": "ResourceNotFoundException"}}, "GetSecretValue")
        return {"SecretString": self.secrets[SecretId]}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_resolved_value_is_read_again_once_its_time_is_up_and_a_deleted_one_stops() -> None:
    client, clock = FakeSecretsManager(), Clock()
    store = SecretsManagerHeaderSecrets(client, PREFIX, lambda: b"k", monotonic=clock)
    reference = store.put("alice", "Bearer a")
    assert store.put("alice", "Bearer a") == reference and client.creates == 1  # stored once
    assert [store.get("alice", reference) for _ in range(3)] == ["Bearer a"] * 3 and client.reads == 1
    client.revoked.add(reference)  # an operator deletes a leaked token's secret (marked for deletion)
    clock.now += HEADER_CACHE_SECONDS
    with pytest.raises(SecretUnavailableError, match="InvalidRequestException") as refused:
        store.get("alice", reference)
    assert refused.value.retryable is False
    # not found may be a secret made a moment ago: the run's retries give it time
    with pytest.raises(SecretUnavailableError, match="ResourceNotFoundException") as unseen:
        store.get("alice", PREFIX + "0" * 40)
    assert unseen.value.retryable is True
    # the revoked value sent again is refused, not stored under a name that can no longer be read
    clock.now += HEADER_CACHE_SECONDS
    with pytest.raises(ValidationError, match="revoked"):
        store.put("alice", "Bearer a")


@pytest.mark.parametrize("code", ["ThrottlingException", "InternalServiceError"])
def test_a_throttled_store_is_a_transient_error_the_caller_retries(code: str) -> None:
    client = FakeSecretsManager()
    client.fail_with = code
    store = SecretsManagerHeaderSecrets(client, PREFIX, lambda: b"k")
    with pytest.raises(TransientStoreError, match=code):
        store.put("alice", "Bearer a")


@pytest.fixture
def echoing() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A target that answers 401 quoting the Authorization header it was sent."""
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append(dict(self.headers.items()))
            token = str(self.headers.get("Authorization")).split(" ", 1)[1]
            said = {"error": f"invalid token {token}", "sent": self.headers.get("Authorization")}
            body = json.dumps(said).encode()
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", seen
    server.shutdown()
    server.server_close()


@pytest.mark.network  # a loopback server
def test_the_value_is_sent_and_a_target_that_echoes_it_does_not_get_it_stored(
    echoing: tuple[str, list[dict[str, str]]],
) -> None:
    url, seen = echoing
    store = SecretsManagerHeaderSecrets(FakeSecretsManager(), PREFIX, lambda: b"k")
    given = validate_target("http", {"url": url, "headers": {"Authorization": "Bearer s3cr3t-t0k3n"}})
    target: Target = sealed(given, lambda _name, value: store.put("alice", value))
    invoker = HttpInvoker(b"signing", lambda: 1_764_676_800.0, allow_loopback=True, header_secrets=store)
    at = datetime(2026, 12, 2, 12, tzinfo=UTC)
    invocation = Invocation("job_1:20261202T120000Z", "job_1", at, 1, 10, owner="alice")

    result = invoker.invoke(target, invocation)

    assert seen[0]["Authorization"] == "Bearer s3cr3t-t0k3n"
    assert result.status == "401" and "s3cr3t-t0k3n" not in result.detail and "<redacted>" in result.detail
    other = invoker.invoke(target, Invocation("job_1:x", "job_1", at, 1, 10, owner="bob"))
    assert other.status == "SecretUnavailable" and other.retryable is False and len(seen) == 1
