"""Run MiniStack, the embedded AWS emulator, as a child process for local runs and tests.

MiniStack (PyPI ``ministack``) emulates DynamoDB, SQS and friends in one process on one port. It pins an
older botocore, so it lives in its own virtual environment (``.venv-ministack``, created by ``make install``)
and is only ever started as a separate process.

The emulator binds 127.0.0.1 only, runs in its own session (a Ctrl-C sent to the terminal's process group
does not reach it; its owner stops it) and, with a ``state_dir``, persists its state on a graceful
:meth:`Emulator.stop` (SIGTERM). A SIGKILL (:meth:`Emulator.kill`) loses everything since its start. It
never outlives its owner: on Linux the kernel sends it SIGTERM when the owner dies, however the owner died
(see ``lifeline.py``), so it then writes its state too.

Importing this module has no side effects.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Self

__all__ = [
    "DEFAULT_ACCESS_KEY",
    "DEFAULT_REGION",
    "DEFAULT_SECRET_KEY",
    "Emulator",
    "EmulatorConfig",
    "EmulatorError",
    "EmulatorNotInstalledError",
    "EmulatorStartError",
    "client_env",
    "find_executable",
]

LOOPBACK = "127.0.0.1"
DEFAULT_REGION = "us-east-1"
DEFAULT_ACCESS_KEY = "test"
DEFAULT_SECRET_KEY = "test"
EXECUTABLE_ENV_VAR = "TICKWORK_MINISTACK_BIN"
HEALTH_PATH = "/_ministack/health"

_REPO_ROOT = Path(__file__).resolve().parents[3]
_REPO_EXECUTABLE = _REPO_ROOT / ".venv-ministack" / "bin" / "ministack"
_LIFELINE = Path(__file__).with_name("lifeline.py")
_LOG_TAIL_LINES = 40

_PORT_ATTEMPTS = 3  # an auto-picked port can be taken between picking and binding; retry with another


class EmulatorError(RuntimeError):
    """Base class for emulator failures."""


class EmulatorNotInstalledError(EmulatorError):
    """The MiniStack executable could not be found."""


class EmulatorStartError(EmulatorError):
    """The emulator exited or did not answer in time while starting."""


@dataclass(frozen=True)
class EmulatorConfig:
    """How to run the emulator.

    port: loopback TCP port; None picks a free one.
    state_dir: where MiniStack persists its state on a graceful stop; None disables persistence.
    executable: the ``ministack`` binary; None finds it (see :func:`find_executable`).
    log_file: where the emulator's stdout/stderr go; None uses a private temporary file that is deleted when
        the emulator stops.
    """

    port: int | None = None
    state_dir: Path | None = None
    executable: Path | None = None
    log_file: Path | None = None


def find_executable(explicit: Path | None = None) -> Path:
    """Locate the ``ministack`` executable.

    Order: ``explicit``, then env ``TICKWORK_MINISTACK_BIN``, then ``<repo>/.venv-ministack/bin/ministack``,
    then ``ministack`` on PATH. Raises :class:`EmulatorNotInstalledError` when none is usable.
    """
    hint = "Run `make install` to create .venv-ministack with MiniStack"
    if explicit is not None:
        if _is_executable(explicit):
            return explicit
        raise EmulatorNotInstalledError(
            f"MiniStack executable {explicit} does not exist or is not executable. {hint}."
        )
    from_env = os.environ.get(EXECUTABLE_ENV_VAR)
    if from_env:
        path = Path(from_env)
        if _is_executable(path):
            return path
        raise EmulatorNotInstalledError(
            f"{EXECUTABLE_ENV_VAR}={from_env} does not exist or is not executable. {hint}, "
            f"or point {EXECUTABLE_ENV_VAR} at a ministack binary."
        )
    if _is_executable(_REPO_EXECUTABLE):
        return _REPO_EXECUTABLE
    on_path = shutil.which("ministack")
    if on_path is not None:
        return Path(on_path)
    raise EmulatorNotInstalledError(
        f"MiniStack is not installed: looked for ${EXECUTABLE_ENV_VAR}, {_REPO_EXECUTABLE} and "
        f"`ministack` on PATH. {hint} (it pins an older botocore, so it has its own venv)."
    )


def client_env(endpoint_url: str) -> dict[str, str]:
    """Environment variables that point boto3 (and the AWS CLI) at the emulator with dummy credentials."""
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": DEFAULT_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": DEFAULT_SECRET_KEY,
        "AWS_DEFAULT_REGION": DEFAULT_REGION,
        "AWS_REGION": DEFAULT_REGION,
    }


class Emulator:
    """One MiniStack process. Use as a context manager, or call :meth:`start` and :meth:`stop`."""

    def __init__(self, config: EmulatorConfig) -> None:
        self._config = config
        self._port: int | None = config.port
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._log_path: Path | None = None
        self._log_handle: IO[bytes] | None = None

    # ------------------------------------------------------------------ properties

    @property
    def config(self) -> EmulatorConfig:
        return self._config

    @property
    def port(self) -> int:
        if self._port is None:
            raise EmulatorError("the emulator has no port yet: call start() first")
        return self._port

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The emulator's process id while it runs (None before start and after it exited)."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self.pid is not None

    @property
    def returncode(self) -> int | None:
        """Once the started emulator exited (on its own or killed): its exit code, negative for the signal
        that killed it. None while it runs, and before start and after stop."""
        return None if self._proc is None else self._proc.poll()

    @property
    def last_pid(self) -> int | None:
        """The process id of the emulator started last, even after it exited (None after stop)."""
        return None if self._proc is None else self._proc.pid

    def healthy(self, timeout: float = 2.0) -> bool:
        """True if the emulator's health endpoint answers 200 within ``timeout`` seconds."""
        try:
            with _opener().open(self._health_url(), timeout=timeout) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _health_url(self) -> str:
        return f"http://{LOOPBACK}:{self._port}{HEALTH_PATH}"

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    def client_env(self) -> dict[str, str]:
        return client_env(self.endpoint_url)

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0) -> None:
        """Spawn the emulator and wait until its health endpoint answers.

        Raises :class:`EmulatorNotInstalledError` if the binary is missing and :class:`EmulatorStartError`
        (with the tail of its log) if it exits or does not answer within ``timeout`` seconds.
        """
        if self.running:
            raise EmulatorError(f"the emulator is already running (pid {self.pid})")
        executable = find_executable(self._config.executable)
        deadline = time.monotonic() + timeout
        attempts = _PORT_ATTEMPTS if self._config.port is None else 1
        for attempt in range(1, attempts + 1):
            port = self._config.port if self._config.port is not None else _free_loopback_port()
            self._spawn(executable, port)
            try:
                self._wait_ready(deadline)
            except EmulatorStartError:
                lost_port_race = "already in use" in self.log_tail().lower()
                self._terminate_group()
                self._cleanup()
                if not lost_port_race or attempt == attempts:
                    raise
                # another process took the auto-picked port between picking and binding: pick again
            except BaseException:  # e.g. KeyboardInterrupt while waiting: leave no orphan behind
                self._terminate_group()
                self._cleanup()
                raise
            else:
                # If the owner exits without stopping it (an uncaught exception, Ctrl-C), stop it then.
                atexit.register(self.stop)
                return

    def stop(self, timeout: float = 15.0) -> None:
        """Stop gracefully: SIGTERM (MiniStack writes its state then), wait, SIGKILL as a fallback."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._terminate_group()
        self._reap_group()
        self._cleanup()

    def kill(self) -> None:
        """SIGKILL the emulator and everything in its process group (unsaved state is lost)."""
        self._terminate_group()
        self._cleanup()

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the emulator's output (empty when there is no log)."""
        if self._log_path is None:
            return ""
        try:
            text = self._log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Emulator(port={self._port}, pid={self.pid}, state_dir={self._config.state_dir})"

    # ------------------------------------------------------------------ internals

    def _spawn(self, executable: Path, port: int) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="tickwork-ministack-"))
        tmp = self._workdir / "tmp"
        tmp.mkdir()
        if self._config.log_file is not None:
            self._log_path = self._config.log_file
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
        else:
            self._log_path = self._workdir / "ministack.log"
        self._log_handle = self._log_path.open("ab")

        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # never hand it real creds
        env.update(
            GATEWAY_PORT=str(port),
            BIND_HOST=LOOPBACK,
            MINISTACK_HOST=LOOPBACK,
            MINISTACK_REGION=DEFAULT_REGION,
            IOT_MTLS_ENABLED="0",
            SFTP_ENABLED="0",
            LOG_LEVEL=env.get("TICKWORK_MINISTACK_LOG_LEVEL", "WARNING"),
            TMPDIR=str(tmp),  # its pid file and scratch files stay private and are removed with the workdir
            PYTHONUNBUFFERED="1",
        )
        for key in ("PERSIST_STATE", "STATE_DIR", "LOCALSTACK_PERSISTENCE", "S3_PERSIST", "SERVICES"):
            env.pop(key, None)
        if self._config.state_dir is not None:
            state_dir = self._config.state_dir.resolve()
            state_dir.mkdir(parents=True, exist_ok=True)
            env.update(PERSIST_STATE="1", STATE_DIR=str(state_dir))

        self._port = port
        # Through the lifeline launcher, which execs MiniStack with a parent-death signal (SIGTERM) armed:
        # if its owner dies, even by SIGKILL, the emulator stops gracefully and writes its state.
        launcher = [sys.executable, str(_LIFELINE), str(os.getpid()), "--"]
        self._proc = subprocess.Popen(  # fixed argv, no shell
            [*launcher, str(executable)],
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(self._workdir),
            start_new_session=True,  # own session and process group: the owner decides when it stops
        )

    def _wait_ready(self, deadline: float) -> None:
        assert self._proc is not None
        url = self._health_url()
        while True:
            code = self._proc.poll()
            if code is not None:
                raise EmulatorStartError(
                    f"MiniStack exited with code {code} while starting on port {self._port}.\n"
                    f"--- log tail ({self._log_path}) ---\n{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EmulatorStartError(
                    f"MiniStack did not answer {url} in time (pid {self._proc.pid}).\n"
                    f"--- log tail ({self._log_path}) ---\n{self.log_tail()}"
                )
            try:
                with _opener().open(url, timeout=min(2.0, max(remaining, 0.1))) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)

    def _terminate_group(self) -> None:
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)

    def _reap_group(self) -> None:
        """After the leader exited, SIGKILL anything it left behind in its process group."""
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    def _cleanup(self) -> None:
        atexit.unregister(self.stop)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
            if self._config.log_file is None:
                self._log_path = None
        self._proc = None
        if self._config.port is None:
            self._port = None


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))  # ignores HTTP(S)_PROXY
