"""Drive `tickwork local` as an operator does, from outside: start it, signal it, watch its processes.
Every process a test starts is killed by `Supervisor.cleanup` (the fixture's finalizer), whatever happened."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from urllib.parse import parse_qs, urlsplit
from urllib.request import Request, urlopen

TOKEN = "faults-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def become_subreaper() -> None:
    """Orphans of the processes this test process starts are re-parented to it, not to PID 1 (which may
    not reap them): `alive` reaps them, so a test leaves no zombie behind either."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone: it runs nothing; reaped if it is ours)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[1].split()[0] != "Z":
        return True
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    return False


def ours(pid: int) -> bool:
    """`pid` still runs one of our programs (guards the finalizer against a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"tickwork" in cmdline or b"ministack" in cmdline


def wait_until(what: str, condition: Callable[[], bool], timeout: float, step: float = 0.1) -> float:
    """Seconds it took for `condition` to hold; AssertionError after `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@dataclass
class Target:
    """A loopback HTTP target that records each call; /slow?sleep=N holds the call N seconds."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    _server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        calls = self.calls

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
                calls.append(
                    {"at": time.time(), "run_id": self.headers.get("Idempotency-Key"), "path": self.path}
                )
                time.sleep(float(parse_qs(urlsplit(self.path).query).get("sleep", ["0"])[0]))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> Target:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


class Supervisor:
    """One `tickwork local` in its own session, so a test can signal it alone, as systemd or docker do."""

    def __init__(self, state_dir: Path, *extra: str) -> None:
        self.state_dir = state_dir
        self.port = free_port()
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None
        self.seen: set[int] = set()  # every pid it reported, killed in cleanup if still ours

    def start(self, timeout: float = 90) -> None:
        become_subreaper()
        args = [
            sys.executable, "-m", "tickwork.cli", "local",
            "--port", str(self.port), "--state-dir", str(self.state_dir),
            "--tick-interval", "2", "--lookahead", "4", "--sweep-interval", "1",
            "--status-interval", "1", "--restart-delay", "0.5", "--lease-margin", "2",
            "--shards", "2", "--queues", "1", "--token", f"{TOKEN}=faults-user",
            *self.extra,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TICKWORK_"))}
        self.process = subprocess.Popen(
            args,
            env=env,
            stdout=(self.state_dir / "cli.out").open("ab"),
            stderr=(self.state_dir / "cli.err").open("ab"),
            start_new_session=True,
        )
        wait_until("tickwork local to answer /health", self._healthy, timeout, step=0.3)
        # Four roles, and the emulator when the engine is one.
        expected = 5 if "emulator" in self.extra else 4
        wait_until("every process to be listed", lambda: len(self.pids()) >= expected, 10)

    def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"tickwork local exited with {self.process.returncode}: {self.output()}")
        try:
            return self.call("GET", "/health")[0] == 200
        except OSError:
            return False

    def pids(self) -> dict[str, int]:
        try:
            pids = {
                k: int(v) for k, v in json.loads((self.state_dir / "run" / "pids.json").read_text()).items()
            }
        except (OSError, ValueError):
            return {}
        self.seen.update(pids.values())
        return pids

    def children_alive(self) -> list[int]:
        return [pid for pid in self.seen if alive(pid) and ours(pid)]

    def output(self) -> str:
        def read(name: str) -> str:
            path = self.state_dir / name
            return path.read_text(errors="replace") if path.exists() else ""

        return f"--- stdout ---\n{read('cli.out')[-3000:]}\n--- stderr ---\n{read('cli.err')[-3000:]}"

    def stderr(self) -> str:
        return (self.state_dir / "cli.err").read_text(errors="replace")

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def __enter__(self) -> Supervisor:
        """Started; whatever it started is killed on leaving, and also when the start itself fails."""
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        """Kill whatever is left: the supervisor's process group, then each pid it reported."""
        self.pids()
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
        for pid in self.seen:
            if alive(pid) and ours(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)  # the emulator leads its own group
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(AssertionError):
            wait_until("the killed processes to be reaped", lambda: not self.children_alive(), 5)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        return api_call(self.port, TOKEN, method, path, body)

    def create(self, name: str, url: str, expression: str = "*/10 * * * * *", **extra: Any) -> str:
        return create_http_job(self.call, name, url, expression, **extra)


def api_call(
    port: int, token: str, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, Any]:
    """One request to a local API on loopback as `token`'s owner: (status, parsed JSON body or None)."""
    request = Request(
        f"http://127.0.0.1:{port}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def create_http_job(
    call: Callable[[str, str, dict[str, Any] | None], tuple[int, Any]],
    name: str,
    url: str,
    expression: str = "*/10 * * * * *",
    **extra: Any,
) -> str:
    """Create a job that POSTs to `url` through `call`; its id."""
    body = {
        "name": name,
        "schedule": {"expression": expression},
        "target": {"kind": "http", "config": {"url": url, "method": "POST"}},
        **extra,
    }
    status, job = call("POST", "/jobs", body)
    assert status == 201, job
    return str(job["id"])
