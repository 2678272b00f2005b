"""End to end over HTTP against `tickwork local` (API, ticker, executor, sweeper as processes), on the
default SQLite engine and on the emulator:
runs start on time, a SIGKILLed executor's run is retried and completed, and a ticker that was down catches
up every missed fire per each job's policy. Seconds schedules keep it to about two minutes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.local.harness import api_call, create_http_job
from tests.scans import everything_in

TOKEN = "e2e-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Target:
    """The loopback HTTP target the jobs call; /slow?sleep=N holds the call N seconds."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    def start(self) -> Callable[[], None]:
        calls = self.calls

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
                calls.append(
                    {
                        "at": time.time(),
                        "run_id": self.headers.get("Idempotency-Key"),
                        "attempt": self.headers.get("X-Tickwork-Attempt"),
                        "path": self.path,
                        "headers": dict(self.headers.items()),
                    }
                )
                time.sleep(float(parse_qs(urlsplit(self.path).query).get("sleep", ["0"])[0]))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()

        def stop() -> None:
            server.shutdown()
            server.server_close()

        return stop


class Local:
    def __init__(self, state_dir: Path, engine: str) -> None:
        self.engine = engine
        self.port = free_port()
        self.state_dir = state_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.ticker: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [
            sys.executable,
            "-m",
            "tickwork.cli",
            "local",
            "--port",
            str(self.port),
            "--state-dir",
            str(self.state_dir),
            "--roles",
            "api,executor,sweeper,watcher",  # the test runs the ticker itself, to stop it for a while
            "--tick-interval",
            "2",
            "--lookahead",
            "4",
            "--sweep-interval",
            "1",
            "--status-interval",
            "5",
            "--restart-delay",
            "1",
            "--lease-margin",
            "2",
            "--shards",
            "2",
            "--queues",
            "1",
            "--token",
            f"{TOKEN}=e2e-user",
            "--engine",
            self.engine,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.process = subprocess.Popen(
            args, env=env, stdout=(self.state_dir / "cli.out").open("wb"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.call("GET", "/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.3)
        else:
            raise AssertionError(
                "tickwork local did not come up: " + (self.state_dir / "cli.out").read_text()
            )
        self.start_ticker()

    def start_ticker(self) -> None:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
            **json.loads((self.state_dir / "run" / "env.json").read_text()),
        }
        log = (self.state_dir / "run" / "ticker.log").open("ab")
        self.ticker = subprocess.Popen(
            [sys.executable, "-m", "tickwork.local.roles", "ticker"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def kill_ticker(self) -> None:
        assert self.ticker is not None
        self.ticker.kill()
        self.ticker.wait()

    def pid(self, role: str) -> int:
        return int(json.loads((self.state_dir / "run" / "pids.json").read_text())[role])

    def executor_pids(self) -> list[int]:
        """The executor processes (`executor`, `executor-2`, ...: one per core by default)."""
        pids = json.loads((self.state_dir / "run" / "pids.json").read_text())
        return [int(pid) for name, pid in pids.items() if name.split("-")[0] == "executor"]

    def stop(self) -> None:
        if self.ticker is not None and self.ticker.poll() is None:
            self.ticker.send_signal(signal.SIGTERM)
            self.ticker.wait(timeout=15)
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=30)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        return api_call(self.port, TOKEN, method, path, body)

    def create(self, name: str, url: str, **extra: Any) -> str:
        return create_http_job(self.call, name, url, **extra)

    def runs(self, job_id: str) -> list[dict[str, Any]]:
        status, page = self.call("GET", f"/jobs/{job_id}/runs?limit=100")
        assert status == 200, page
        return list(page["items"])

    def wait_for(self, what: str, condition: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    t = Target()
    stop = t.start()
    yield t
    stop()


@pytest.fixture(scope="module", params=["sqlite", pytest.param("emulator", marks=pytest.mark.ministack)])
def local(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    if request.param == "emulator":
        request.getfixturevalue(
            "ministack"
        )  # makes sure the emulator is installed; tickwork local starts its own
    runtime = Local(tmp_path_factory.mktemp("tickwork-local"), request.param)
    runtime.start()
    yield runtime
    runtime.stop()


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_runs_start_on_time_and_show_in_the_history(local: Local, target: Target) -> None:
    job_id = local.create("on time", f"{target.url}/ok")

    local.wait_for(
        "3 succeeded runs", lambda: sum(r["state"] == "succeeded" for r in local.runs(job_id)) >= 3, 60
    )

    runs = [r for r in local.runs(job_id) if r["state"] == "succeeded"]
    for run in runs:
        scheduled = instant(run["timings"]["scheduled_for"])
        assert scheduled.second % 10 == 0 and run["attempt"] == 1 and run["trigger"] == "schedule"
        assert 0 <= run["timings"]["start_delay_ms"] < 1000, run
        [call] = [c for c in target.calls if c["run_id"] == run["id"]]
        assert 0 <= call["at"] - scheduled.timestamp() < 1.0
    status, _ = local.call("POST", f"/jobs/{job_id}/pause?note=test")
    assert status == 200


def test_a_run_whose_executor_is_killed_is_retried_and_completed(local: Local, target: Target) -> None:
    job_id = local.create(
        "survives a crash",
        f"{target.url}/slow?sleep=3",
        timeout_seconds=5,
        policies={"retry": {"max_attempts": 3, "backoff_base_seconds": 0.5, "backoff_max_seconds": 1}},
    )

    # The target serves both engines' instances: this job's calls are the ones whose run id names it.
    def slow_calls() -> list[dict[str, Any]]:
        return [c for c in target.calls if c["path"].startswith("/slow") and c["run_id"].startswith(job_id)]

    local.wait_for("a call in flight", lambda: bool(slow_calls()), 30)
    first = slow_calls()[0]
    # Mid-run, the target still holding the call: every executor process (one of them is making it).
    for executor in local.executor_pids():
        os.kill(executor, signal.SIGKILL)

    def finished() -> bool:
        return any(r["id"] == first["run_id"] and r["state"] == "succeeded" for r in local.runs(job_id))

    local.wait_for("the killed run to be retried and succeed", finished, 60)
    local.call("POST", f"/jobs/{job_id}/pause?note=test")
    [run] = [r for r in local.runs(job_id) if r["id"] == first["run_id"]]
    assert run["attempt"] == 2
    assert [a["status"] for a in run["attempts"]] == ["LeaseExpired", "204"]
    assert sorted(c["attempt"] for c in target.calls if c["run_id"] == run["id"]) == ["1", "2"]


def test_a_ticker_down_for_a_while_catches_up_every_missed_fire_per_policy(
    local: Local, target: Target
) -> None:
    jobs = {
        policy: local.create(f"outage {policy}", f"{target.url}/ok", policies={"missed_fire": policy})
        for policy in ("run_all", "coalesce", "skip")
    }
    local.kill_ticker()
    down_at = datetime.now(UTC)
    time.sleep(32)
    local.start_ticker()
    restarted_at = datetime.now(UTC)

    def caught_up() -> bool:
        return all(
            any(
                instant(r["timings"]["scheduled_for"]) > restarted_at and r["state"] == "succeeded"
                for r in local.runs(job_id)
            )
            for job_id in jobs.values()
        )

    local.wait_for("all jobs back on schedule", caught_up, 60)
    for job_id in jobs.values():
        local.call("POST", f"/jobs/{job_id}/pause?note=test")
    for policy, job_id in jobs.items():
        runs = sorted(local.runs(job_id), key=lambda r: r["timings"]["scheduled_for"])
        slots = [instant(r["timings"]["scheduled_for"]) for r in runs]
        assert all(b - a == timedelta(seconds=10) for a, b in pairwise(slots)), slots  # no gap
        missed_window = [
            r
            for r in runs
            if down_at + timedelta(seconds=5) < instant(r["timings"]["scheduled_for"]) < restarted_at
        ]
        assert len(missed_window) >= 2, (policy, runs)
        states = [r["state"] for r in missed_window]
        if policy == "run_all":
            assert states == ["succeeded"] * len(states)
            assert {r["trigger"] for r in missed_window} == {"catch-up"}
        elif policy == "coalesce":
            assert states == ["missed"] * (len(states) - 1) + ["succeeded"]
        else:
            assert states == ["missed"] * len(states)


BEARER = "Bearer tw-local-secret-5c0d2a"  # credential-like: secret without being marked
MARKED = "tw-local-marked-e91f47"
PLAIN = "tw-local-plain-30b6c8"  # an ordinary header: stored as given (the scan's control)


def everything_stored(local: Local) -> str:
    """Every table's (and index's) items in the engine, and every log the instance wrote, as one text."""
    env = json.loads((local.state_dir / "run" / "env.json").read_text())
    if local.engine == "sqlite":
        database = Path(env["TICKWORK_DATABASE"])
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
            dumped = "\n".join(db.iterdump())
        files = [p for p in database.parent.glob(database.name + "*") if p.is_file()]
        raw = b"".join(p.read_bytes() for p in files).decode("utf-8", errors="replace")
        stored = dumped + raw
    else:
        import boto3

        dynamodb = boto3.client(
            "dynamodb",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        stored = everything_in(dynamodb)
    logs = [p for p in (local.state_dir / "run").glob("*.log")] + [local.state_dir / "cli.out"]
    return stored + "".join(p.read_text(errors="replace") for p in logs)


def test_secret_header_values_reach_the_target_and_no_table_index_or_log_holds_them(
    local: Local, target: Target
) -> None:
    config = {
        "url": f"{target.url}/secret",
        "headers": {"Authorization": BEARER, "X-Plain": PLAIN},
        "secret_headers": {"X-Signing-Token": MARKED},
    }
    job_id = local.create("secret", "", target={"kind": "http", "config": config})
    local.wait_for("a succeeded run", lambda: any(r["state"] == "succeeded" for r in local.runs(job_id)), 60)
    local.call("POST", f"/jobs/{job_id}/pause?note=test")

    [call, *_] = [c for c in target.calls if c["path"] == "/secret"]
    assert call["headers"]["Authorization"] == BEARER and call["headers"]["X-Signing-Token"] == MARKED
    status, job = local.call("GET", f"/jobs/{job_id}")
    assert status == 200 and job["target"]["config"]["headers"]["Authorization"] == "<redacted>"
    stored = everything_stored(local)
    assert PLAIN in stored  # the scan reads what the engine holds
    for secret in (BEARER, BEARER.split()[1], MARKED):
        assert secret not in stored, f"{secret!r} is stored in plain text"


def test_a_failing_job_tells_its_webhook_once_lists_the_event_and_pauses_itself(
    local: Local, target: Target
) -> None:
    """Issue 32 through `tickwork local` (the watcher role over each engine's change feed): each failure is
    an event, the first goes to the webhook signed (the rest of the window fold into its digest), and the
    second failure in a row pauses the job with its reason."""
    closed = f"http://127.0.0.1:{free_port()}/down"  # nothing listens: every call fails
    alerts = {"auto_pause_after": 2, "channels": [{"kind": "webhook", "url": f"{target.url}/hook"}]}
    policies = {"retry": {"max_attempts": 1}}
    job_id = local.create("failing", closed, alerts=alerts, policies=policies)

    def paused() -> bool:
        return bool(local.call("GET", f"/jobs/{job_id}")[1]["state"] == "paused")

    def events() -> dict[str, Any]:
        status, page = local.call("GET", f"/events?job_id={job_id}&limit=100")
        assert status == 200, page
        return page

    local.wait_for("the job paused by its failures", paused, 90)
    status, job = local.call("GET", f"/jobs/{job_id}")
    assert status == 200 and "2 failures in a row" in job["paused_reason"]
    # The watcher pauses the job, then records the event of it: the page can be read between the two.
    local.wait_for("the pause's event", lambda: "auto_paused" in [e["kind"] for e in events()["items"]], 30)
    page = events()
    kinds = [e["kind"] for e in page["items"]]
    assert kinds.count("run_failed") >= 2 and "auto_paused" in kinds
    local.wait_for("the webhook's message", lambda: any(c["path"] == "/hook" for c in target.calls), 30)
    hooks = [c for c in target.calls if c["path"] == "/hook"]
    first = next(e for e in reversed(page["items"]) if e["kind"] == "run_failed")
    assert [c["run_id"] for c in hooks if c["run_id"] == first["id"]] == [first["id"]], "sent once, by key"
    assert "X-Tickwork-Signature" in hooks[0]["headers"]
    status, resumed = local.call("POST", f"/jobs/{job_id}/resume")
    assert status == 200 and resumed["cleared_auto_pause"] == job["paused_reason"]
    local.call("POST", f"/jobs/{job_id}/pause?note=test")
