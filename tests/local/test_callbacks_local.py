"""Callback runs end to end through `tickwork local` on SQLite (issue 28): a target that answers 202 keeps
its run running while it heartbeats, and its completion ends the run with one call; a target that answers
202 and goes silent has its attempt ended at the lease end and retried, after which a report carrying the
first attempt's URL is refused (409) and changes nothing; a token this deployment did not sign is a 403.

The runs fire once (a fixed second, daily) a few seconds after the jobs are made; the heartbeat is the
API's shortest (10 s) and the lease margin 2 s, so the silent attempt ends about 12 s after its 202. About
25-35 s in all; every process started is killed on the way out, and the test checks none is left."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest

from tests.local.harness import Supervisor, wait_until

HEARTBEAT_SECONDS = 10  # the API's shortest
LEASE_MARGIN_SECONDS = 2  # the harness's --lease-margin


@dataclass
class Call:
    at: float
    run_id: str
    attempt: int
    complete_url: str
    heartbeat_url: str


@dataclass
class CallbackTarget:
    """A loopback target that takes every call's work (202) and records the URLs the call carried."""

    calls: list[Call] = field(default_factory=list)
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def __enter__(self) -> CallbackTarget:
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
                call = Call(
                    at=time.time(),
                    run_id=self.headers.get("Idempotency-Key", ""),
                    attempt=int(self.headers.get("X-Tickwork-Attempt", "0")),
                    complete_url=self.headers.get("X-Tickwork-Completion-Url", ""),
                    heartbeat_url=self.headers.get("X-Tickwork-Heartbeat-Url", ""),
                )
                with target._lock:
                    target.calls.append(call)
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def of(self, job_id: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.run_id.startswith(f"{job_id}:")]


def report(url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """POST to a callback URL as a target does: no credentials but the token in the URL."""
    request = Request(
        url,
        method="POST",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def instant(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Supervisor]:
    supervisor = Supervisor(tmp_path, "--engine", "sqlite")
    try:
        supervisor.start()
        yield supervisor
    finally:
        supervisor.cleanup()
        assert not supervisor.children_alive(), "processes left behind"


@pytest.fixture
def target() -> Iterator[CallbackTarget]:
    with CallbackTarget() as t:
        yield t


def test_callback_runs_complete_expire_and_refuse_stale_or_forged_reports(
    local: Supervisor, target: CallbackTarget
) -> None:
    # Both jobs fire once, at the same second, a few seconds from now.
    fire = datetime.fromtimestamp(int(time.time()) + 8, UTC)
    expression = f"{fire.second} {fire.minute} {fire.hour} * * *"
    common: dict[str, Any] = {
        "expression": expression,
        "completion": "callback",
        "heartbeat_seconds": HEARTBEAT_SECONDS,
        "policies": {"retry": {"max_attempts": 3, "backoff_base_seconds": 0.5, "backoff_max_seconds": 1}},
    }
    completes = local.create("reports", f"{target.url}/work", timeout_seconds=120, **common)
    silent = local.create("goes silent", f"{target.url}/work", timeout_seconds=120, **common)
    stamp = fire.strftime("%Y%m%dT%H%M%SZ")
    completes_run, silent_run = f"{completes}:{stamp}", f"{silent}:{stamp}"

    def run(run_id: str) -> dict[str, Any]:
        job_id = run_id.split(":")[0]
        status, body = local.call("GET", f"/jobs/{job_id}/runs/{run_id}")
        assert status == 200, body
        return dict(body)

    wait_until("both runs called", lambda: bool(target.of(completes) and target.of(silent)), 40)
    [first] = target.of(completes)
    [silent_first] = target.of(silent)
    callbacks = f"http://127.0.0.1:{local.port}/callbacks/"
    for call in (first, silent_first):
        assert call.attempt == 1
        assert call.complete_url.startswith(callbacks) and call.complete_url.endswith("/complete")
        assert call.heartbeat_url == call.complete_url.removesuffix("/complete") + "/heartbeat"
    wait_until("the 202 to be written", lambda: run(completes_run)["state"] == "running", 10)

    # A target that reports: heartbeats move the lease (never back), then the completion ends the run.
    leases = []
    for _ in range(3):
        status, beat = report(first.heartbeat_url)
        assert status == 200, beat
        assert beat["run_id"] == completes_run and beat["attempt"] == 1 and beat["state"] == "running"
        leases.append(instant(beat["lease_expires_at"]))
        assert leases[-1] >= time.time() + HEARTBEAT_SECONDS  # the next beat's due time plus the margin
        time.sleep(1)
    assert leases == sorted(leases) and leases[-1] > leases[0], leases
    status, done = report(first.complete_url, {"outcome": "succeeded", "status": "0", "detail": "done"})
    assert status == 202 and done["state"] == "completing", done
    applied = wait_until(
        "the completion to be applied", lambda: run(completes_run)["state"] == "succeeded", 15
    )
    ended = run(completes_run)
    assert ended["attempt"] == 1 and ended["attempts"][-1]["status"] == "0", ended
    assert len(target.of(completes)) == 1  # one call: the 202, and the completion ended it
    assert report(first.complete_url, {"outcome": "failed"})[0] == 409  # that attempt is over
    assert report(first.heartbeat_url)[0] == 409
    assert run(completes_run) == ended

    # A forged token: the first attempt's claims with another attempt, its signature kept; or a token
    # signed with another key.
    payload, signature = first.complete_url.removeprefix(callbacks).removesuffix("/complete").split(".")
    claims = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode().split("|")
    claims[1] = "2"
    other = base64.urlsafe_b64encode("|".join(claims).encode()).rstrip(b"=").decode()
    for forged in (f"{other}.{signature}", f"{payload}.{'A' * len(signature)}"):
        assert report(f"{callbacks}{forged}/complete", {"outcome": "succeeded"})[0] == 403
        assert report(f"{callbacks}{forged}/heartbeat")[0] == 403
    assert run(completes_run) == ended

    # A target that goes silent: its attempt ends at its lease end (the 202's lease: the heartbeat plus the
    # margin) and the retry calls attempt 2.
    wait_until("the retry's call", lambda: len(target.of(silent)) >= 2, 40)
    second = target.of(silent)[1]
    assert second.attempt == 2 and second.complete_url != silent_first.complete_url
    lease_end = silent_first.at + HEARTBEAT_SECONDS + LEASE_MARGIN_SECONDS
    retried_after = second.at - lease_end
    assert -1 <= retried_after < 10, retried_after  # lease end (whole seconds) + the backoff (< 1 s)
    wait_until("attempt 2's 202 to be written", lambda: run(silent_run)["state"] == "running", 10)
    before = run(silent_run)
    assert before["attempt"] == 2 and before["attempts"][0]["status"] == "LeaseExpired", before

    # The first attempt's URLs are refused and change nothing.
    assert report(silent_first.complete_url, {"outcome": "succeeded", "status": "late"})[0] == 409
    assert report(silent_first.heartbeat_url)[0] == 409
    time.sleep(1.5)  # an applied completion would show within this
    assert run(silent_run) == before

    # Attempt 2 completes with its own URL.
    assert report(second.complete_url, {"outcome": "succeeded", "status": "0"})[0] == 202
    wait_until("attempt 2's completion", lambda: run(silent_run)["state"] == "succeeded", 15)
    final = run(silent_run)
    assert final["attempt"] == 2 and [a["status"] for a in final["attempts"]] == ["LeaseExpired", "0"]
    assert [c.attempt for c in target.of(silent)] == [1, 2]
    print(
        f"completion applied {applied:.1f} s after the completion was answered 202; silent attempt retried "
        f"{retried_after:+.1f} s after its lease end"
    )
