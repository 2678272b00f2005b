"""The local server's own edges (issue 12): its refusals are problem+json, and chunked bodies arrive."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator

import pytest

from tests.api.conftest import Api, job_body
from tests.api.test_local_http import base_url as base_url

# The local API server on loopback, called over raw sockets.
pytestmark = pytest.mark.network


@pytest.fixture
def port(base_url: str) -> Iterator[int]:
    yield int(base_url.rsplit(":", 1)[1])


def _raw(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()


def test_a_uri_too_long_is_414_in_problem_json(port: int) -> None:
    status, headers, body = _raw(port, b"GET /jobs?" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 414 and headers["content-type"] == "application/problem+json"
    assert json.loads(body)["status"] == 414


def test_headers_too_large_are_431_in_problem_json(port: int) -> None:
    many = b"".join(b"X-Filler-%d: y\r\n" % n for n in range(150))
    status, headers, body = _raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
    assert status == 431 and headers["content-type"] == "application/problem+json"
    assert json.loads(body)["status"] == 431


def test_a_chunked_body_is_read(call: Api, port: int) -> None:
    payload = json.dumps(job_body(name="chunked")).encode()
    chunks = (
        b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (payload[:10], payload[10:])) + b"0\r\n\r\n"
    )
    request = (
        b"POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-token\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks
    )
    status, _, body = _raw(port, request)
    assert status == 201, body
    assert json.loads(body)["name"] == "chunked"
