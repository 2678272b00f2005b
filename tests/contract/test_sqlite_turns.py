"""The writers' turn on its own (adapters/sqlite/turns.py): two handles on one file stand for two
processes (flock locks belong to the open file, not the process). What a Database does with it is in
test_sqlite_db.py."""

from __future__ import annotations

import errno
import fcntl
import gc
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tickwork.adapters.sqlite import turns
from tickwork.adapters.sqlite.turns import WritersTurn
from tickwork.domain.errors import StoreError

GENEROUS_SECONDS = 30.0  # a bound only reached when the behaviour under test is missing


def test_a_waiting_writer_gets_the_turn_when_the_holder_gives_it_back(tmp_path: Path) -> None:
    path = str(tmp_path / "t.writers")
    holder, waiter = WritersTurn(path), WritersTurn(path)
    _waits_until_given_back(holder, waiter)
    holder.close()
    waiter.close()


def _waits_until_given_back(holder: WritersTurn, waiter: WritersTurn) -> None:
    """`holder` takes the turn; `waiter`, on a thread of the test's own, waits for it until `holder` gives
    it back, then takes it and gives it back."""
    assert holder.take()
    got = threading.Event()

    def wait_for_it() -> None:
        assert waiter.take()
        got.set()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    assert not got.wait(0.2)  # held by the other "process"
    holder.give_back()
    thread.join(GENEROUS_SECONDS)
    assert got.is_set()
    waiter.give_back()


def test_a_thread_holding_the_turn_is_refused_another_handle_on_it(tmp_path: Path) -> None:
    path = str(tmp_path / "t.writers")
    first, second = WritersTurn(path), WritersTurn(path)
    second.refuse_reentry()  # nothing held yet
    assert first.take()
    with pytest.raises(StoreError, match="wait for itself"):
        second.refuse_reentry()
    refused_elsewhere: list[bool] = []
    other = threading.Thread(target=lambda: refused_elsewhere.append(_refused(second)))
    other.start()
    other.join(GENEROUS_SECONDS)
    assert refused_elsewhere == [False]  # another thread may wait: the holder goes on without it
    first.give_back()
    second.refuse_reentry()


def _refused(turn: WritersTurn) -> bool:
    try:
        turn.refuse_reentry()
    except StoreError:
        return True
    return False


def test_without_locks_on_the_file_system_sqlites_lock_alone_orders_the_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "t.writers")
    holder, waiter = WritersTurn(path), WritersTurn(path)
    assert holder.take()
    real = fcntl.flock

    def no_blocking_locks(fd: int, operation: int) -> Any:
        if operation == fcntl.LOCK_EX:  # the blocking wait
            raise OSError(errno.ENOLCK, "no locks available")
        return real(fd, operation)

    monkeypatch.setattr(turns.fcntl, "flock", no_blocking_locks)
    assert waiter.take() is False
    holder.give_back()
    assert waiter.take() is False  # and from then on, without trying again (the turn is free now)


def test_a_turn_dropped_without_closing_closes_its_file(tmp_path: Path) -> None:
    turn = WritersTurn(str(tmp_path / "t.writers"))
    assert turn.take()
    turn.give_back()
    fd = turn._file
    assert fd is not None
    os.fstat(fd)
    del turn
    gc.collect()
    with pytest.raises(OSError) as raised:
        os.fstat(fd)
    assert raised.value.errno == errno.EBADF


class _NoThreads:
    """A threading module for turns.py that has no thread to spare."""

    get_ident = staticmethod(threading.get_ident)

    class Thread(threading.Thread):
        def start(self) -> None:
            raise RuntimeError("can't start new thread")


def test_a_contended_turn_without_a_thread_to_watch_it_still_waits_and_gets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "t.writers")
    holder, waiter = WritersTurn(path), WritersTurn(path)
    monkeypatch.setattr(turns, "threading", _NoThreads)
    _waits_until_given_back(holder, waiter)  # its thread is the test's own threading, untouched
    assert waiter._watch is None
