"""Fixtures for target tests: a real HTTP server on loopback, fake AWS credentials, a fixed invocation."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

from tickwork.domain.targets import Invocation

SECRET = b"test-signing-secret"
EPOCH = 1_800_000_000  # the fixed "now" the HTTP invoker signs with
SCHEDULED_FOR = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)
# The fixed invocation's slots either side (a five-minutely schedule's) and the rest of its context.
PREVIOUS_SLOT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
NEXT_SLOT = datetime(2026, 12, 2, 12, 10, tzinfo=UTC)
CONTEXT_REST = {
    "revision": 4,
    "trigger": "catch-up",
    "previous_slot": "2026-12-02T12:00:00Z",
    "next_slot": "2026-12-02T12:10:00Z",
}
BIG_BODY_BYTES = 100 * 1024


def invocation(
    *, attempt: int = 1, timeout: float = 2.0, job_id: str = "job-1", scheduled_for: datetime = SCHEDULED_FOR
) -> Invocation:
    return Invocation(
        run_id=f"{job_id}:{scheduled_for.strftime('%Y%m%dT%H%M%SZ')}",
        job_id=job_id,
        scheduled_for=scheduled_for,
        attempt=attempt,
        timeout_seconds=timeout,
        owner="alice",
        trigger="catch-up",
        revision=4,
        previous_slot=PREVIOUS_SLOT,
        next_slot=NEXT_SLOT,
    )


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes


class RecordingServer(ThreadingHTTPServer):
    """Answers by path: /status/<code>, /slow/<seconds>, /big; records every request it reads."""

    daemon_threads = True  # a handler still sleeping after its client gave up must not block shutdown

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[Recorded] = []
        self.connections = 0

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def url(self, path: str = "/status/200", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def get_request(self) -> tuple[socket.socket, Any]:
        self.connections += 1
        return super().get_request()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The timeout test abandons a sleeping handler; its late write to the closed socket is expected.
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RecordingServer

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        self.server.requests.append(
            Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        )
        parts = urlsplit(self.path).path.strip("/").split("/")
        code, payload = 200, b'{"ok": true}'
        if parts[0] == "status":
            code = int(parts[1])
            payload = json.dumps({"status": code}).encode()
        elif parts[0] == "slow":
            time.sleep(float(parts[1]))
        elif parts[0] == "big":
            payload = b"x" * BIG_BODY_BYTES
        self.send_response(code)
        if 300 <= code < 400:
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    srv = RecordingServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=2)
