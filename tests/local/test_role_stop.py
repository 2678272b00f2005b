"""A role's stop signals. When `tickwork local`'s process group is signalled (Ctrl-C in a terminal, systemd's
stop), each role gets SIGTERM twice, from the group and again from the supervisor, and the second can land
while the first is being handled. A Python signal handler runs in the main thread between two bytecodes of
whatever it interrupted: one that called `Event.set()` deadlocked the role, waiting for the Event's lock that
the interrupted code held, until the supervisor's SIGKILL 15 s later.

The first tests run the role's own `_Lifetime` in a child process (`python -m tests.local.test_role_stop
SCENARIO`) and deliver the signal deterministically inside the locked part of `stop.set()` or `stop.wait()`
(a profile hook sends it at that call). A child ends on its own after CHILD_DEADLINE_SECONDS whatever
happens (a timer thread runs while a deadlocked main thread waits), and each test kills it on the way out.
The last test signals the process group of a real `tickwork local`, killed on the way out too (a SIGTERM or
SIGHUP to the test process unwinds like Ctrl-C while it runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tests.local.harness import Supervisor, Target, alive
from tickwork.local.roles import _Lifetime

REPO = Path(__file__).resolve().parents[2]
CHILD_DEADLINE_SECONDS = 6.0  # a child still running then exits with DEADLOCKED_EXIT
DEADLOCKED_EXIT = 70
STOP_LIMIT_SECONDS = 3.0


# --- the child's side ------------------------------------------------------------------------------------


def _signal_once_at(when: Callable[[FrameType, str], bool]) -> None:
    """Send this process SIGTERM the first time `when(frame, event)` holds for a call or return in any
    thread (this one and those started from now on), from inside that call."""
    sent = threading.Lock()

    def hook(frame: FrameType, event: str, _arg: Any) -> None:
        if when(frame, event) and sent.acquire(blocking=False):
            os.kill(os.getpid(), signal.SIGTERM)  # a handler due in this thread runs before kill() returns

    threading.setprofile(hook)
    sys.setprofile(hook)


def _inside(frame: FrameType | None, method: str, owner: object) -> bool:
    """`frame` runs inside `owner.method()` (a caller up the stack)."""
    while frame is not None:
        if frame.f_code.co_name == method and frame.f_locals.get("self") is owner:
            return True
        frame = frame.f_back
    return False


def _second_signal_inside_set(stop: threading.Event, lifetime: _Lifetime) -> None:
    # The supervisor's SIGTERM lands while the group's is being handled: inside stop.set(), which holds the
    # Event's lock while it calls notify_all().
    _signal_once_at(
        lambda frame, event: (
            event == "call" and frame.f_code.co_name == "notify_all" and _inside(frame.f_back, "set", stop)
        )
    )
    lifetime.tie_to_parent()
    print("ready", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # the group's SIGTERM


def _signal_inside_wait(stop: threading.Event, lifetime: _Lifetime) -> None:
    # One SIGTERM lands while the role's main loop is in stop.wait() holding the Event's lock (it takes it
    # back when its wait times out, before it returns).
    lifetime.tie_to_parent()
    _signal_once_at(
        lambda frame, event: (
            event == "return"
            and frame.f_code.co_name == "_acquire_restore"
            and _inside(frame.f_back, "wait", stop)
        )
    )
    print("ready", flush=True)
    while not stop.wait(0.01):
        pass


def _until_stopped(stop: threading.Event, lifetime: _Lifetime) -> None:
    # A role's main loop; the test sends the signals.
    lifetime.tie_to_parent()
    print("ready", flush=True)
    while not stop.wait(0.01):
        pass


SCENARIOS: dict[str, Callable[[threading.Event, _Lifetime], None]] = {
    "second-signal-inside-set": _second_signal_inside_set,
    "signal-inside-wait": _signal_inside_wait,
    "until-stopped": _until_stopped,
}


def _child(scenario: str) -> None:
    guard = threading.Timer(CHILD_DEADLINE_SECONDS, os._exit, args=(DEADLOCKED_EXIT,))
    guard.daemon = True
    guard.start()
    stop = threading.Event()
    SCENARIOS[scenario](stop, _Lifetime(stop))
    stopped = stop.wait(STOP_LIMIT_SECONDS)
    sys.setprofile(None)
    print("stopped" if stopped else "not stopped", flush=True)
    sys.stdin.read()  # the test closes stdin when its signals are over: none lands in the interpreter's exit


# --- the test's side -------------------------------------------------------------------------------------


class Child:
    """A child process running SCENARIO; killed on leaving, whatever happened."""

    def __init__(self, scenario: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.local.test_role_stop", scenario],
            cwd=REPO,
            env={**os.environ, **(env or {})},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.started = time.monotonic()

    def line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def finish(self) -> tuple[int, str, str]:
        """(exit code, the rest of stdout, stderr) once the child exited; at most CHILD_DEADLINE_SECONDS."""
        out, err = self.process.communicate(input="", timeout=CHILD_DEADLINE_SECONDS + 5)
        return self.process.returncode, out, err

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *_: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


@pytest.mark.parametrize("scenario", ["second-signal-inside-set", "signal-inside-wait"])
def test_a_stop_signal_that_lands_while_the_stop_event_s_lock_is_held_stops_the_role(scenario: str) -> None:
    with Child(scenario) as child:
        assert child.line() == "ready"
        code, out, err = child.finish()
        took = time.monotonic() - child.started
        assert code != DEADLOCKED_EXIT, f"the role deadlocked: still running {CHILD_DEADLINE_SECONDS} s on"
        assert (code, out.strip()) == (0, "stopped"), (code, out, err)
        assert "Traceback" not in err, err
        assert took < STOP_LIMIT_SECONDS + 2, took


def test_a_flood_of_stop_signals_stops_the_role_once_and_cleanly() -> None:
    # SIGTERM, SIGINT and SIGHUP as fast as they can be sent for 0.3 s: each handler invocation lands
    # wherever the role (or the previous handler) is.
    with Child("until-stopped") as child:
        assert child.line() == "ready"
        end = time.monotonic() + 0.3
        sent = 0
        while time.monotonic() < end:
            child.process.send_signal((signal.SIGTERM, signal.SIGINT, signal.SIGHUP)[sent % 3])
            sent += 1
        code, out, err = child.finish()
        assert code != DEADLOCKED_EXIT, "the role deadlocked"
        assert (code, out.strip()) == (0, "stopped"), (code, out, err)
        assert "Traceback" not in err, err
        print(f"{sent} signals in 0.3 s")


def test_an_orphan_warns_once_and_exits_when_request_stop_is_called_from_many_threads() -> None:
    # The parent watch, the signal thread and the start-up check may all call request_stop at once.
    script = (
        "import threading, time\n"
        "from tickwork.local.roles import _Lifetime\n"
        "stop = threading.Event()\n"
        "lifetime = _Lifetime(stop)\n"
        "callers = [threading.Thread(target=lifetime.request_stop) for _ in range(16)]\n"
        "for caller in callers: caller.start()\n"
        "for caller in callers: caller.join()\n"
        "time.sleep(10)\n"
    )
    # A parent pid that is not this child's parent: it counts as orphaned.
    env = {**os.environ, "TICKWORK_PARENT_PID": str(os.getppid())}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=15)
    took = time.monotonic() - started
    assert done.returncode == 1, done
    assert done.stderr.count("is gone: stopping") == 1, done.stderr
    assert took < 10, took


# --- a real `tickwork local` -----------------------------------------------------------------------------


@pytest.fixture
def target() -> Iterator[Target]:
    with Target() as t:
        yield t


@pytest.fixture
def signals_unwind() -> Iterator[None]:
    """SIGTERM or SIGHUP to the test process unwinds like Ctrl-C: what it started is killed on the way out."""
    previous = {
        signum: signal.signal(signum, signal.default_int_handler)
        for signum in (signal.SIGTERM, signal.SIGHUP)
    }
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@pytest.mark.usefixtures("signals_unwind")
def test_sigterm_to_the_process_group_stops_every_process_within_seconds(
    tmp_path: Path, target: Target
) -> None:
    with Supervisor(tmp_path, "--engine", "sqlite") as local:
        for number in range(3):
            local.create(f"busy {number}", f"{target.url}/ok")
        children = local.pids()
        assert local.process is not None
        group = local.process.pid
        sent = time.monotonic()
        os.killpg(group, signal.SIGTERM)
        # Then again, as a second Ctrl-C or systemd and a terminal both signalling would.
        for _ in range(20):
            time.sleep(0.002)
            os.killpg(group, signal.SIGTERM)
        assert local.wait(timeout=20) == 0, local.output()
        took = time.monotonic() - sent  # the supervisor exits once every role did (or was killed at 15 s)
        assert not [pid for pid in children.values() if alive(pid)], (children, local.output())
        logs = {log.name: log.read_text(errors="replace") for log in (tmp_path / "run").glob("*.log")}
        assert not [name for name, text in logs.items() if "Traceback" in text], logs
        assert took < STOP_LIMIT_SECONDS, (took, local.output())
        print(f"every process gone {took:.2f} s after the group's SIGTERM")
    assert not local.children_alive(), "processes left behind"


if __name__ == "__main__":
    _child(sys.argv[1])
