"""The local watcher's loop (local/roles.run_watcher) with its quiet: a quiet look skips the round's reads, a
round that ends is told with the mark taken before it read, and one that fails is not."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import ANCHOR
from tickwork.domain.clock import FakeClock
from tickwork.domain.errors import TransientStoreError
from tickwork.local.roles import run_watcher
from tickwork.services.watching import WatchReport

ROUNDS = 5  # rounds (or quiet looks) each test waits for
GENEROUS_SECONDS = 30.0  # a bound only reached when the behaviour under test is missing


class _Feed:
    def __init__(self, fail_first: int = 0) -> None:
        self.reads = 0
        self.fail_first = fail_first

    def take_changes(self, limit: int) -> Sequence[tuple[int, Any]]:
        self.reads += 1
        if self.reads <= self.fail_first:
            raise TransientStoreError("busy")
        return []

    def forget_changes(self, through: int) -> None:
        raise AssertionError("no changes were taken")


class _Quiet:
    def __init__(self, quiet: bool, enough: threading.Event) -> None:
        self._quiet = quiet
        self._enough = enough
        self.looks = 0
        self.rests = 0
        self._woken = threading.Event()
        self.marks = 0
        self.ended: list[object] = []

    def round_begins(self) -> object:
        self.marks += 1
        return f"mark {self.marks}"

    def round_ended(self, mark: object) -> None:
        self.ended.append(mark)
        if len(self.ended) >= ROUNDS:
            self._enough.set()

    def quiet(self, now: datetime) -> bool:
        self.looks += 1
        if self.looks >= ROUNDS and self._quiet:
            self._enough.set()
        return self._quiet

    def rest(self, now: datetime, look_every: float) -> None:
        self.rests += 1
        self._woken.wait(look_every)

    def wake(self) -> None:
        self._woken.set()


def _watch(quiet: _Quiet | None, feed: _Feed, stop: threading.Event) -> threading.Thread:
    watcher = SimpleNamespace(observe=None, deliver=lambda: WatchReport())
    bulk = SimpleNamespace(work_due=lambda worker, budget: 0)
    parts = SimpleNamespace(
        watcher=lambda: watcher,
        bulk_service=lambda: bulk,
        run_change_feed=lambda: feed,
        watch_quiet=lambda: quiet,
        clock=FakeClock(ANCHOR),
    )
    thread = threading.Thread(target=run_watcher, args=(parts, stop), daemon=True)
    thread.start()
    return thread


@pytest.fixture(autouse=True)
def _fast_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKWORK_WATCH_INTERVAL", "0.001")


def _run_until(enough: threading.Event, quiet: _Quiet | None, feed: _Feed) -> None:
    stop = threading.Event()
    thread = _watch(quiet, feed, stop)
    try:
        assert enough.wait(GENEROUS_SECONDS)
    finally:
        stop.set()
        thread.join(GENEROUS_SECONDS)
    assert not thread.is_alive()


def test_a_quiet_watcher_looks_without_reading() -> None:
    enough = threading.Event()
    quiet, feed = _Quiet(True, enough), _Feed()
    _run_until(enough, quiet, feed)
    assert quiet.looks >= ROUNDS and quiet.rests >= ROUNDS - 1  # each quiet look is followed by a rest
    assert (feed.reads, quiet.marks, quiet.ended) == (0, 0, [])


def test_a_stop_ends_the_watchers_rest_at_once() -> None:
    """A rest may last long (until a commit): the stop wakes it, and the watcher ends."""
    enough, feed = threading.Event(), _Feed()
    stop = threading.Event()
    long_rest = threading.Event()

    class _LongRest(_Quiet):
        def rest(self, now: datetime, look_every: float) -> None:
            long_rest.set()
            super().rest(now, GENEROUS_SECONDS * 10)

    quiet = _LongRest(True, enough)
    thread = _watch(quiet, feed, stop)
    assert long_rest.wait(GENEROUS_SECONDS)
    stop.set()
    thread.join(GENEROUS_SECONDS)
    assert not thread.is_alive()


def test_each_round_ends_with_the_mark_taken_before_it_read() -> None:
    enough = threading.Event()
    quiet, feed = _Quiet(False, enough), _Feed()
    _run_until(enough, quiet, feed)
    assert feed.reads >= ROUNDS
    assert quiet.ended[:ROUNDS] == [f"mark {n}" for n in range(1, ROUNDS + 1)]


def test_a_round_that_fails_is_not_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tickwork.local.roles.WATCH_TRIES", 100)  # the failed rounds are not taken apart
    enough = threading.Event()
    quiet, feed = _Quiet(False, enough), _Feed(fail_first=2)
    _run_until(enough, quiet, feed)
    # Marks 1 and 2 began rounds that failed: never ended, so their writes still count as unseen.
    assert quiet.ended[:3] == ["mark 3", "mark 4", "mark 5"]


def test_without_a_quiet_every_round_reads() -> None:
    enough = threading.Event()

    class _Counting(_Feed):
        def take_changes(self, limit: int) -> Sequence[tuple[int, Any]]:
            if self.reads + 1 >= ROUNDS:
                enough.set()
            return super().take_changes(limit)

    counting = _Counting()
    _run_until(enough, None, counting)
    assert counting.reads >= ROUNDS
