"""Callback runs: the target answers 202 and reports later. Pure rules: the signed token each call carries
(this run, this attempt, its deadline), the URLs built from it, how long one call may hold an executor, and
the lease an accepted or heartbeating attempt holds (docs/design.md, "How a run ends")."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tickwork.domain.errors import ValidationError
from tickwork.domain.execution import LEASE_MARGIN
from tickwork.domain.models import Completion, JobView, Run, RunState
from tickwork.domain.targets import CallbackUrls
from tickwork.domain.timekeys import truncate_ms

_TOKEN_PURPOSE = b"tickwork-callback-v1"


@dataclass(frozen=True, slots=True)
class CallbackToken:
    """What a completion or heartbeat URL names: one attempt of one run, and when that attempt's time is up
    (its claim plus the job's timeout). Signed, so a caller can name no other run or attempt."""

    run_id: str
    attempt: int
    deadline: datetime

    def sign(self, secret: bytes) -> str:
        payload = f"{self.run_id}|{self.attempt}|{int(self.deadline.timestamp())}".encode()
        return f"{_b64(payload)}.{_b64(_mac(secret, payload))}"

    @classmethod
    def read(cls, secret: bytes, token: str) -> CallbackToken:
        """The token's claims, if this deployment signed it; ValidationError otherwise (never which part
        was wrong)."""
        refused = ValidationError("token", "not a callback token of this deployment")
        encoded, dot, signature = token.partition(".")
        if not dot or len(token) > 2048:
            raise refused
        try:
            payload = _unb64(encoded)
            given = _unb64(signature)
        except (ValueError, binascii.Error):
            raise refused from None
        if not hmac.compare_digest(given, _mac(secret, payload)):
            raise refused
        try:
            run_id, attempt, deadline = payload.decode().rsplit("|", 2)
            return cls(run_id, int(attempt), datetime.fromtimestamp(int(deadline), tz=UTC))
        except (UnicodeDecodeError, ValueError):
            raise refused from None


@dataclass(frozen=True, slots=True)
class CallbackLinks:
    """Where a deployment's callback routes are: `base_url` is the API's URL (no trailing slash)."""

    base_url: str
    secret: bytes

    def urls(self, token: CallbackToken) -> CallbackUrls:
        signed = token.sign(self.secret)
        base = self.base_url.rstrip("/")
        return CallbackUrls(f"{base}/callbacks/{signed}/complete", f"{base}/callbacks/{signed}/heartbeat")


def attempt_deadline(view: JobView, claimed_at: datetime) -> datetime:
    """When an attempt of a callback run must be over: its claim plus the job's whole timeout."""
    return truncate_ms(claimed_at + timedelta(seconds=view.timeout_seconds))


def awaiting_lease(
    heartbeat_seconds: int | None, deadline: datetime, now: datetime, margin: timedelta = LEASE_MARGIN
) -> datetime:
    """The lease of an accepted attempt, and of each heartbeat: the next heartbeat is due within the
    job's heartbeat interval, and never past the attempt's deadline (no heartbeat interval: the deadline)."""
    due = deadline if heartbeat_seconds is None else min(deadline, now + timedelta(seconds=heartbeat_seconds))
    return truncate_ms(max(due, now) + margin)


def is_callback(view: JobView) -> bool:
    return view.completion is Completion.CALLBACK


def awaits(run: Run, attempt: int) -> bool:
    """The run is still running the attempt a callback names: a completion or heartbeat may act on it."""
    return run.state is RunState.RUNNING and run.attempt == attempt


def derived_callback_key(signing_secret: bytes) -> bytes:
    """A callback key for a deployment that has none of its own (local runs, tests): one-way from the
    signing secret, so a token never reveals it."""
    return hmac.new(signing_secret, _TOKEN_PURPOSE, hashlib.sha256).digest()


def _mac(secret: bytes, payload: bytes) -> bytes:
    # Keyed apart from the HTTP call signatures made with the same secret (signing.py): a token is never a
    # valid call signature, nor the reverse.
    return hmac.new(secret, _TOKEN_PURPOSE + b"\0" + payload, hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
