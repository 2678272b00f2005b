"""Webhook signatures: HMAC-SHA256 over "<timestamp>.<body>".

Standard library only, so a receiver can copy or vendor this file without installing Tickwork or boto3.

Tickwork sends `X-Tickwork-Signature: t=<unix seconds>,v1=<hex digest>`. A receiver recomputes the digest over
the exact raw body bytes it received and rejects stale timestamps, so a captured request cannot be replayed
later.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Tickwork-Signature"
SCHEME = "v1"
DEFAULT_TOLERANCE_SECONDS = 300


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of f"{timestamp}.{body}"."""
    message = str(int(timestamp)).encode("ascii") + b"." + body
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """The value of the X-Tickwork-Signature header: "t=<timestamp>,v1=<hex>"."""
    if not secret:
        raise ValueError("an empty signing secret signs nothing")
    return f"t={int(timestamp)},{SCHEME}={signature(secret, timestamp, body)}"


def verify(
    secret: bytes, header: str, body: bytes, now: int, tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS
) -> bool:
    """True when `header` carries a v1 signature of `body` by `secret`, made within `tolerance_seconds` of
    `now`.

    Never raises on a malformed header (a receiver faces untrusted input): it returns False. Several v1
    entries are accepted, any one matching, so a sender can sign with an old and a new secret while rotating.
    """
    if not secret:
        return False
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            return False
        if key == "t":
            if timestamp is not None or not value.isascii() or not value.isdigit():
                return False
            timestamp = int(value)
        elif key == SCHEME:
            candidates.append(value)
        # Unknown schemes are ignored on purpose: a later sender may add v2 next to v1.
    if timestamp is None or not candidates:
        return False
    if abs(now - timestamp) > tolerance_seconds:
        return False
    expected = signature(secret, timestamp, body).encode("ascii")
    # Compare every candidate (no early exit) in constant time per candidate.
    matched = False
    for candidate in candidates:
        if hmac.compare_digest(expected, candidate.encode("utf-8", errors="replace")):
            matched = True
    return matched
