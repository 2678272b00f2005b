"""The SQLite engine's doorbell: a send another process must see soon wakes that process's waiting receivers
at once, so they can sleep between looks; everything else still works when nothing rings."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.doorbell import Doorbell
from tickwork.adapters.sqlite.queue import LISTENING_POLL_SECONDS, SqliteQueues, queue_configs
from tickwork.resources import ResourceNames

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")

# A deadline for what takes milliseconds: reached only when the ring is not heard.
HEARD_WITHIN = 3.0


def test_a_ring_from_another_process_wakes_a_waiter_at_once(tmp_path: Path) -> None:
    bell = Doorbell(tmp_path / "db-doorbell")
    assert bell.listening()
    generation = bell.generation
    ring = "from pathlib import Path; Path(__import__('sys').argv[1]).touch()"
    threading.Timer(
        0.3, subprocess.run, args=([sys.executable, "-c", ring, str(tmp_path / "db-doorbell")],)
    ).start()
    started = time.monotonic()
    bell.wait_past(generation, 30)
    assert bell.generation > generation
    assert time.monotonic() - started < HEARD_WITHIN + 0.3
    bell.close()


def test_a_waiter_whose_generation_moved_does_not_sleep(tmp_path: Path) -> None:
    bell = Doorbell(tmp_path / "db-doorbell")
    generation = bell.generation
    bell.knock()  # came between the look and the sleep
    started = time.monotonic()
    bell.wait_past(generation, 30)
    assert time.monotonic() - started < 1


def test_the_listener_thread_ends_on_close_and_when_its_doorbell_is_collected(tmp_path: Path) -> None:
    closed, dropped = Doorbell(tmp_path / "a-doorbell"), Doorbell(tmp_path / "b-doorbell")
    assert closed.listening() and dropped.listening()
    listeners = [closed._listener, dropped._listener]
    assert all(listener is not None and listener.alive for listener in listeners)
    closed.close()
    del dropped
    gc.collect()
    deadline = time.monotonic() + HEARD_WITHIN
    while (
        any(listener is not None and listener.alive for listener in listeners) and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    assert not any(listener is not None and listener.alive for listener in listeners)


@pytest.fixture
def two_processes(tmp_path: Path) -> Iterator[tuple[SqliteQueues, SqliteQueues, str]]:
    """Two SqliteQueues on one file, each with its own doorbell, as two processes have."""
    urls, _, configs = queue_configs(ResourceNames(prefix="t"), dispatch_queues=1)
    databases = [Database(tmp_path / "tickwork.db").open() for _ in range(2)]
    now_ms = lambda: int(time.time() * 1000)  # noqa: E731
    receiver, sender = (SqliteQueues(db, configs, now_ms) for db in databases)
    yield receiver, sender, urls[0]
    receiver.close()
    for db in databases:
        db.close()


def _receive_in_background(queues: SqliteQueues, url: str) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def receive() -> None:
        started = time.monotonic()
        result["messages"] = queues.receive_message(QueueUrl=url, WaitTimeSeconds=20)["Messages"]
        result["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    return thread, result


def test_a_send_due_now_from_another_process_wakes_the_waiting_receive(
    two_processes: tuple[SqliteQueues, SqliteQueues, str],
) -> None:
    receiver, sender, url = two_processes
    thread, result = _receive_in_background(receiver, url)
    time.sleep(0.5)  # the receive is asleep: a look every LISTENING_POLL_SECONDS at most
    assert receiver._doorbell.listening()  # heard, not the 1 s looks of a deaf receiver
    sender.send_message(QueueUrl=url, MessageBody="now")
    thread.join(LISTENING_POLL_SECONDS + 5)
    assert [m["Body"] for m in result["messages"]] == ["now"]
    assert result["seconds"] < 0.5 + HEARD_WITHIN  # heard, not found at the next look 10 s later


def test_a_send_due_later_than_the_next_look_does_not_ring_and_is_still_taken_when_due(
    two_processes: tuple[SqliteQueues, SqliteQueues, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver, sender, url = two_processes
    rings: list[int] = []
    real_ring = Doorbell.ring

    def counted_ring(self: Doorbell) -> None:
        rings.append(1)
        real_ring(self)

    monkeypatch.setattr(Doorbell, "ring", counted_ring)
    monkeypatch.setattr("tickwork.adapters.sqlite.queue.LISTENING_POLL_SECONDS", 1.0)
    thread, result = _receive_in_background(receiver, url)
    time.sleep(0.3)
    sender.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=2)  # past the 1 s poll: no ring
    thread.join(20)
    assert rings == []
    assert [m["Body"] for m in result["messages"]] == ["later"]
    assert 2.0 <= result["seconds"] < 2.3 + HEARD_WITHIN


def test_stop_waiting_ends_a_waiting_receive_at_once_and_later_ones_do_not_wait(
    two_processes: tuple[SqliteQueues, SqliteQueues, str],
) -> None:
    receiver, sender, url = two_processes
    thread, result = _receive_in_background(receiver, url)
    time.sleep(0.3)
    receiver.stop_waiting()
    thread.join(HEARD_WITHIN)
    assert not thread.is_alive()
    assert result["messages"] == [] and result["seconds"] < 0.3 + HEARD_WITHIN
    started = time.monotonic()
    assert receiver.receive_message(QueueUrl=url, WaitTimeSeconds=20)["Messages"] == []
    assert time.monotonic() - started < 1  # started after the stop: no wait at all
    sender.send_message(QueueUrl=url, MessageBody="still taken")
    assert [m["Body"] for m in receiver.receive_message(QueueUrl=url, WaitTimeSeconds=20)["Messages"]] == [
        "still taken"
    ]


def test_a_doorbell_whose_file_is_removed_stops_listening_so_receivers_look_every_second(
    tmp_path: Path,
) -> None:
    bell = Doorbell(tmp_path / "db-doorbell")
    assert bell.listening()
    (tmp_path / "db-doorbell").unlink()
    deadline = time.monotonic() + HEARD_WITHIN
    while bell.listening() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not bell.listening()
    bell.close()  # after its listener ended on its own: no error
