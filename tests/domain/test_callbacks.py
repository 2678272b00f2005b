"""Callback tokens and leases (domain/callbacks.py): a token names one attempt of one run and only this
deployment's secret makes one; an accepted attempt's lease follows its heartbeats and never passes its
deadline; a call holds an executor at most MAX_CALL_SECONDS whatever the run's timeout."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tickwork.domain.callbacks import CallbackLinks, CallbackToken, awaiting_lease
from tickwork.domain.errors import ValidationError
from tickwork.domain.execution import LEASE_MARGIN, MAX_CALL_SECONDS, call_seconds

NOW = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)
TOKEN = CallbackToken("job_a:20261202T120500Z", 2, NOW + timedelta(hours=24))


def test_a_token_reads_back_as_signed() -> None:
    assert CallbackToken.read(b"k", TOKEN.sign(b"k")) == TOKEN


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda t: TOKEN.sign(b"other"), id="another_secret"),
        pytest.param(lambda t: CallbackToken(TOKEN.run_id, 3, TOKEN.deadline).sign(b"other"), id="attempt"),
        pytest.param(lambda t: t.split(".")[0] + "." + t.split(".")[0], id="payload_as_signature"),
        pytest.param(lambda t: t.replace(".", ""), id="no_signature"),
        pytest.param(lambda t: "!!." + t.split(".")[1], id="not_base64"),
        pytest.param(lambda t: t + "A" * 3000, id="too_long"),
    ],
)
def test_a_token_this_secret_did_not_sign_is_refused(mangle: object) -> None:
    token = mangle(TOKEN.sign(b"k"))  # type: ignore[operator]
    with pytest.raises(ValidationError, match="not a callback token"):
        CallbackToken.read(b"k", token)


def test_another_attempt_needs_its_own_token() -> None:
    signed = TOKEN.sign(b"k")
    payload, signature = signed.split(".")
    other = CallbackToken(TOKEN.run_id, 3, TOKEN.deadline).sign(b"k").split(".")[0]
    with pytest.raises(ValidationError):
        CallbackToken.read(b"k", f"{other}.{signature}")
    assert CallbackToken.read(b"k", f"{payload}.{signature}").attempt == 2


def test_links_put_the_token_in_both_urls() -> None:
    urls = CallbackLinks("https://api.example/", b"k").urls(TOKEN)
    signed = TOKEN.sign(b"k")
    assert urls.complete == f"https://api.example/callbacks/{signed}/complete"
    assert urls.heartbeat == f"https://api.example/callbacks/{signed}/heartbeat"


@pytest.mark.parametrize(
    ("interval", "deadline", "expected"),
    [
        pytest.param(60, NOW + timedelta(hours=1), NOW + timedelta(seconds=60), id="next_heartbeat_due"),
        pytest.param(60, NOW + timedelta(seconds=20), NOW + timedelta(seconds=20), id="never_past_deadline"),
        pytest.param(None, NOW + timedelta(hours=1), NOW + timedelta(hours=1), id="no_interval_deadline"),
        pytest.param(60, NOW - timedelta(seconds=5), NOW, id="deadline_passed_ends_at_once"),
    ],
)
def test_an_accepted_attempts_lease(interval: int | None, deadline: datetime, expected: datetime) -> None:
    assert awaiting_lease(interval, deadline, NOW) == expected + LEASE_MARGIN


def test_a_call_holds_an_executor_at_most_its_share() -> None:
    assert call_seconds(60) == 60
    assert call_seconds(86_400) == MAX_CALL_SECONDS == 840
