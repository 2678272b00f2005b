"""Webhook signatures: round trip, tampering, staleness, malformed headers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.signing import sign, signature, verify

secrets = st.binary(min_size=1, max_size=64)
timestamps = st.integers(min_value=0, max_value=2**40)
bodies = st.binary(max_size=2048)


@given(secrets, timestamps, bodies, st.integers(min_value=-300, max_value=300))
def test_round_trip(secret: bytes, ts: int, body: bytes, skew: int) -> None:
    header = sign(secret, ts, body)

    assert header == f"t={ts},v1={signature(secret, ts, body)}"
    assert verify(secret, header, body, now=ts + skew)


@given(secrets, timestamps, bodies, st.data())
def test_tampered_body_is_rejected(secret: bytes, ts: int, body: bytes, data: st.DataObject) -> None:
    header = sign(secret, ts, body)
    if body:
        index = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
        tampered = body[:index] + bytes([body[index] ^ 0x01]) + body[index + 1 :]
    else:
        tampered = b"x"

    assert not verify(secret, header, tampered, now=ts)


@given(secrets, secrets, timestamps, bodies)
def test_other_secret_is_rejected(secret: bytes, other: bytes, ts: int, body: bytes) -> None:
    if other != secret:
        assert not verify(other, sign(secret, ts, body), body, now=ts)


@given(secrets, timestamps, bodies)
def test_tampered_timestamp_is_rejected(secret: bytes, ts: int, body: bytes) -> None:
    digest = signature(secret, ts, body)

    assert not verify(secret, f"t={ts + 1},v1={digest}", body, now=ts)


@pytest.mark.parametrize("skew", [301, -301, 10_000])
def test_stale_or_future_timestamps_are_rejected(skew: int) -> None:
    header = sign(b"k", 1_000_000, b"body")

    assert not verify(b"k", header, b"body", now=1_000_000 + skew)
    assert verify(b"k", header, b"body", now=1_000_000 + skew, tolerance_seconds=abs(skew))


def test_any_of_several_v1_signatures_may_match() -> None:
    """A sender rotating secrets signs with both; a receiver with either secret accepts."""
    body = b"{}"
    header = f"t=100,v1={signature(b'old', 100, body)},v1={signature(b'new', 100, body)},v2=future"

    assert verify(b"old", header, body, now=100)
    assert verify(b"new", header, body, now=100)
    assert not verify(b"other", header, body, now=100)


@pytest.mark.parametrize(
    "header",
    ["", "t=100", "v1=abc", "t=abc,v1=abc", "t=100,t=100,v1=abc", "garbage", "t=-5,v1=abc", "t=١٠٠,v1=abc"],
)
def test_malformed_headers_are_rejected(header: str) -> None:
    assert not verify(b"k", header, b"", now=100)


@given(st.text(max_size=200))
def test_verify_never_raises(header: str) -> None:
    assert verify(b"k", header, b"body", now=100) in (True, False)


def test_empty_secret() -> None:
    with pytest.raises(ValueError):
        sign(b"", 1, b"")
    assert not verify(b"", "t=1,v1=" + signature(b"", 1, b""), b"", now=1)


def test_the_documented_receiver_check_agrees_with_sign() -> None:
    """docs/targets.md shows receivers a copy-paste verifier; it must accept what Tickwork sends."""
    import re
    import time
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "targets.md").read_text()
    source = next(
        block for block in re.findall(r"```python\n(.*?)```", doc, re.S) if "def verify_tickwork" in block
    )
    namespace: dict[str, object] = {}
    exec(compile(source, "docs/targets.md", "exec"), namespace)  # the doc's own code, no I/O
    verify_tickwork = namespace["verify_tickwork"]
    assert callable(verify_tickwork)
    now = int(time.time())
    header = sign(b"secret", now, b'{"a":1}')

    assert verify_tickwork(b"secret", header, b'{"a":1}')
    assert not verify_tickwork(b"secret", header, b'{"a":2}')
    assert not verify_tickwork(b"other", header, b'{"a":1}')
    assert not verify_tickwork(b"secret", sign(b"secret", now - 301, b""), b"")
