"""The local server: a real HTTP request on loopback becomes an API Gateway v2 event for the handler."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import ALICE, BOB, Api, job_body
from tickwork.handlers import api
from tickwork.local.http_api import HttpApiApp, make_api_server, serve_until

# The local API server on loopback, called over real HTTP.
pytestmark = pytest.mark.network

TOKENS = {"alice-token": ALICE, "bob-token": BOB}


@pytest.fixture
def base_url(call: Api) -> Iterator[str]:
    server = make_api_server(HttpApiApp(api.handler, TOKENS), port=0)
    stop = threading.Event()
    thread = threading.Thread(target=serve_until, args=(server, stop), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    stop.set()
    thread.join(timeout=10)


def http(
    method: str, url: str, token: str | None = None, body: Any = None
) -> tuple[int, dict[str, str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers.items()), error.read()


def test_a_bearer_token_is_the_owner_over_real_http(base_url: str) -> None:
    status, headers, raw = http("POST", f"{base_url}/jobs", "alice-token", job_body(name="über-job"))
    assert status == 201 and headers["ETag"] == '"1"'
    job = json.loads(raw)
    assert job["name"] == "über-job"

    status, _, raw = http("GET", f"{base_url}/jobs/{job['id']}", "alice-token")
    assert status == 200 and json.loads(raw)["id"] == job["id"]
    status, headers, _ = http("GET", f"{base_url}/jobs/{job['id']}", "bob-token")
    assert status == 404 and headers["Content-Type"] == "application/problem+json"
    for token in (None, "stolen"):
        status, headers, raw = http("GET", f"{base_url}/jobs", token)
        assert status == 401 and json.loads(raw)["title"] == "Unauthorized"


def test_swagger_ui_and_the_openapi_document_are_served(base_url: str) -> None:
    status, headers, raw = http("GET", f"{base_url}/docs")
    assert status == 200 and headers["Content-Type"].startswith("text/html") and b"swagger" in raw.lower()
    status, _, raw = http("GET", f"{base_url}/openapi.json")
    assert status == 200 and json.loads(raw) == json.loads(api.openapi_json())
    assert http("GET", f"{base_url}/health")[0] == 200


def test_the_event_has_the_shape_api_gateway_sends() -> None:
    app = HttpApiApp(lambda event, context: {"statusCode": 204}, TOKENS)
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/jobs/j 1",
        "QUERY_STRING": "state=active&tag=a%3Db&tag=c%3Dd",
        "HTTP_AUTHORIZATION": "Bearer alice-token",
        "HTTP_IF_MATCH": '"3"',
    }
    event = app.event_for(environ)
    assert event["rawPath"] == "/jobs/j%201" and event["requestContext"]["http"]["path"] == "/jobs/j 1"
    assert event["queryStringParameters"] == {"state": "active", "tag": "a=b,c=d"}
    assert event["headers"] == {"if-match": '"3"'}  # the token never reaches the handler
    assert event["requestContext"]["authorizer"]["iam"]["userArn"] == ALICE


def test_the_health_page_is_the_operators_alone(call: Api, tmp_path: Any) -> None:
    # The first token's owner runs the instance; the counters add up every owner's jobs and runs.
    health_file = tmp_path / "health.json"
    app = HttpApiApp(api.handler, TOKENS, health_file=health_file)
    server = make_api_server(app, port=0)
    stop = threading.Event()
    thread = threading.Thread(target=serve_until, args=(server, stop), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/ui/health.json"
    try:
        status, _, raw = http("GET", url, "alice-token")
        assert status == 503 and "not written" in json.loads(raw)["detail"]  # before the first status line
        health_file.write_text(json.dumps({"jobs": 7, "running": 1, "cap": 200}))
        status, headers, raw = http("GET", url, "alice-token")
        assert status == 200 and json.loads(raw)["jobs"] == 7
        assert headers["Cache-Control"] == "no-store" and headers["X-Content-Type-Options"] == "nosniff"
        status, headers, raw = http("GET", url, "bob-token")
        assert status == 403 and headers["Content-Type"] == "application/problem+json"
        assert "only its operator" in json.loads(raw)["detail"] and b"7" not in raw
        assert http("GET", url, None)[0] == 401
    finally:
        stop.set()
        thread.join(timeout=10)


def test_the_idle_server_sleeps_until_a_connection_or_the_stop(
    call: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No wake-up to look for a shutdown (serve_forever's, twice a second): each `select` returns for a
    connection or for the stop, and after the stop the port is closed."""
    import selectors
    import socket
    import time

    selects: list[float] = []

    class CountingSelector(selectors.DefaultSelector):
        def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            selects.append(time.monotonic())
            return list(super().select(timeout))

    monkeypatch.setattr(selectors, "DefaultSelector", CountingSelector)
    server = make_api_server(HttpApiApp(api.handler, TOKENS), port=0)
    port = server.server_address[1]
    stop = threading.Event()
    thread = threading.Thread(target=serve_until, args=(server, stop), daemon=True)
    thread.start()
    time.sleep(1.5)  # serve_forever(poll_interval=0.5) would have looked three times by now
    assert len(selects) == 1

    status, _, _ = http("GET", f"http://127.0.0.1:{port}/jobs", "alice-token")
    assert status == 200
    deadline = time.monotonic() + 5
    while len(selects) < 2 and time.monotonic() < deadline:  # the accepting thread goes back to sleep
        time.sleep(0.01)
    time.sleep(0.6)
    assert len(selects) == 2  # woken by the connection, then asleep again

    stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive() and len(selects) == 2
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
