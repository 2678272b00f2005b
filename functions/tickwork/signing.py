"""Webhook signatures (scheme v2): HMAC-SHA256 with the owner's own key over the whole request.

Standard library only, so a receiver can copy or vendor this file without installing Tickwork or boto3.

Tickwork sends `X-Tickwork-Signature: t=<unix seconds>,n=<nonce>,kid=<key id>,v2=<hex>` (while a key is
being rotated, a second `kid=...,v2=...` pair follows). The HMAC covers, one per line:

    tickwork-v2
    <t>
    <n>
    <METHOD>
    <the URL as configured on the job>
    <run id: the Idempotency-Key header>
    <attempt: the X-Tickwork-Attempt header>
    <hex SHA-256 of the raw body>

The key is the job owner's own (`owner_key`: derived from the deployment's signing secret and the owner,
so one tenant's key never verifies another tenant's calls); a receiver gets it from `GET /signing-keys`,
with its key id. A receiver rejects a timestamp outside its window and a nonce it has already seen in that
window, so a captured request cannot be replayed, nor re-pointed at another URL, run or attempt.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Mapping, Sequence

SIGNATURE_HEADER = "X-Tickwork-Signature"
SCHEME = "v2"
DEFAULT_TOLERANCE_SECONDS = 300
# After the deployment's secret is rotated, calls are signed with the previous secret's key too for this
# long, so receivers have a day to fetch their new key (GET /signing-keys) without rejecting a call.
ROTATION_OVERLAP_SECONDS = 24 * 3600
_TIMESTAMP = re.compile(r"[0-9]{1,12}")  # unix seconds; never thousands of digits from a hostile header


def owner_key(secret: bytes, owner: str) -> bytes:
    """The owner's signing key: derived from the deployment's secret, so there is nothing per owner to store,
    and a new secret (rotation) gives every owner a new key."""
    if not secret:
        raise ValueError("an empty signing secret signs nothing")
    return hmac.new(secret, b"tickwork owner key\x00" + owner.encode("utf-8"), hashlib.sha256).digest()


def key_id(key: bytes) -> str:
    """A key's public name: which key signed, without revealing it."""
    return hashlib.sha256(b"tickwork key id\x00" + key).hexdigest()[:16]


def signed_string(
    timestamp: int, nonce: str, method: str, url: str, run_id: str, attempt: int | str, body: bytes
) -> bytes:
    return "\n".join(
        (
            "tickwork-v2",
            str(int(timestamp)),
            nonce,
            method.upper(),
            url,
            run_id,
            str(attempt),
            hashlib.sha256(body).hexdigest(),
        )
    ).encode("utf-8")


def signature(key: bytes, message: bytes) -> str:
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def sign(
    keys: Sequence[bytes],
    *,
    timestamp: int,
    nonce: str,
    method: str,
    url: str,
    run_id: str,
    attempt: int,
    body: bytes,
) -> str:
    """The value of the X-Tickwork-Signature header: one `kid=...,v2=...` pair per key (the current key
    first; the previous one too while a rotation's overlap lasts)."""
    if not keys or not all(keys):
        raise ValueError("signing needs at least one non-empty key")
    if not nonce or "," in nonce or "=" in nonce:
        raise ValueError("the nonce must be a non-empty token without ',' or '='")
    message = signed_string(timestamp, nonce, method, url, run_id, attempt, body)
    pairs = [f"kid={key_id(key)},{SCHEME}={signature(key, message)}" for key in keys]
    return ",".join([f"t={int(timestamp)}", f"n={nonce}", *pairs])


def verify(
    keys: Mapping[str, bytes],
    header: str,
    *,
    method: str,
    url: str,
    run_id: str,
    attempt: int | str,
    body: bytes,
    now: int,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
    seen: Callable[[str], bool] | None = None,
) -> bool:
    """True when `header` carries a v2 signature, by one of `keys` (by key id), of exactly this request,
    made within `tolerance_seconds` of `now`, with a nonce `seen` has not seen (`seen(nonce)` answers whether
    it has, and remembers it: keep nonces for the tolerance window).

    Never raises on a malformed header (a receiver faces untrusted input): it returns False.
    """
    timestamp: int | None = None
    nonce: str | None = None
    pairs: list[tuple[str, str]] = []
    kid: str | None = None
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            return False
        if name == "t":
            if timestamp is not None or not _TIMESTAMP.fullmatch(value):
                return False
            timestamp = int(value)
        elif name == "n":
            if nonce is not None or not value:
                return False
            nonce = value
        elif name == "kid":
            kid = value
        elif name == SCHEME:
            if kid is None:
                return False
            pairs.append((kid, value))
            kid = None
        # Unknown names are ignored on purpose: a later sender may add v3 next to v2.
    if timestamp is None or nonce is None or not pairs or abs(now - timestamp) > tolerance_seconds:
        return False
    message = signed_string(timestamp, nonce, method, url, run_id, attempt, body)
    matched = False
    for pair_kid, candidate in pairs:
        key = keys.get(pair_kid)
        if key and hmac.compare_digest(
            signature(key, message).encode("ascii"), candidate.encode("utf-8", "replace")
        ):
            matched = True
    if not matched:
        return False
    return seen is None or not seen(nonce)
