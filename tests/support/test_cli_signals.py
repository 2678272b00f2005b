"""`tickwork local`'s stop signals: the first one stops it, the ones after it cannot break off the stop."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tickwork import cli


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    cli._STOPPING.clear()
    yield
    cli._STOPPING.clear()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_the_first_stop_signal_raises_and_the_ones_after_it_do_not(signum: int) -> None:
    with pytest.raises(cli.StopRequestedError, match=signal.Signals(signum).name):
        cli._stop_requested(signum, None)
    # While the shutdown runs: a second signal of any kind returns instead of raising into it.
    for again in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        assert cli._stop_requested(again, None) is None


def test_ctrl_c_first_is_a_keyboard_interrupt_and_then_ignored() -> None:
    with pytest.raises(KeyboardInterrupt):
        cli._stop_requested(signal.SIGINT, None)
    assert cli._stop_requested(signal.SIGINT, None) is None
