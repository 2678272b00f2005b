"""Scheme v2 signatures (issue 31): the owner's own key, over the method, the URL, the run id, the attempt,
the timestamp, a nonce and the body's hash. A captured request verifies for nothing but itself, once."""

from __future__ import annotations

import hashlib
import hmac
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.signing import DEFAULT_TOLERANCE_SECONDS, key_id, owner_key, sign, verify

SECRET = b"deployment secret"
ALICE = owner_key(SECRET, "alice")
NOW = 1_800_000_000
REQUEST = {
    "method": "POST",
    "url": "https://alice.example/hooks/nightly",
    "run_id": "job_a:20261202T120500Z",
    "attempt": 1,
    "body": b'{"report": "nightly"}',
}


def signed(keys: list[bytes] | None = None, *, timestamp: int = NOW, nonce: str = "n0nce") -> str:
    return sign(keys or [ALICE], timestamp=timestamp, nonce=nonce, **REQUEST)  # type: ignore[arg-type]


def check(header: str, keys: dict[str, bytes] | None = None, *, now: int = NOW, **changes: object) -> bool:
    return verify(keys or {key_id(ALICE): ALICE}, header, now=now, **{**REQUEST, **changes})  # type: ignore[arg-type]


def test_the_request_as_signed_verifies() -> None:
    assert check(signed())


@pytest.mark.parametrize(
    "change",
    [
        {"url": "https://bob.example/hooks/nightly"},  # re-pointed at another endpoint
        {"url": "https://alice.example/hooks/nightly?x=1"},
        {"method": "PUT"},
        {"run_id": "job_a:20261202T121000Z"},  # another run's
        {"attempt": 2},  # another attempt's
        {"body": b'{"report": "weekly"}'},
    ],
)
def test_a_captured_request_does_not_verify_as_another(change: dict[str, object]) -> None:
    assert not check(signed(), **change)


def test_another_owners_key_does_not_verify_and_each_owner_has_its_own() -> None:
    bob = owner_key(SECRET, "bob")
    assert bob != ALICE and key_id(bob) != key_id(ALICE)
    # Bob's receiver knows only Bob's key: a call Tickwork made for Alice (signed with hers) fails there.
    assert not check(signed([ALICE]), {key_id(bob): bob})
    # Alice cannot produce Bob's key from hers: it derives from the deployment's secret, which she never sees.
    assert not check(signed([owner_key(b"guess", "bob")]), {key_id(bob): bob})


def test_outside_the_replay_window_it_does_not_verify() -> None:
    header = signed()
    assert check(header, now=NOW + DEFAULT_TOLERANCE_SECONDS)
    assert not check(header, now=NOW + DEFAULT_TOLERANCE_SECONDS + 1)
    assert not check(header, now=NOW - DEFAULT_TOLERANCE_SECONDS - 1)


def test_a_replay_inside_the_window_is_caught_by_the_nonce() -> None:
    seen: set[str] = set()

    def remembered(nonce: str) -> bool:
        known = nonce in seen
        seen.add(nonce)
        return known

    header = signed()
    assert verify({key_id(ALICE): ALICE}, header, now=NOW, seen=remembered, **REQUEST)  # type: ignore[arg-type]
    assert not verify({key_id(ALICE): ALICE}, header, now=NOW, seen=remembered, **REQUEST)  # type: ignore[arg-type]


def test_during_a_rotation_both_keys_sign_and_either_verifies() -> None:
    new = owner_key(b"new deployment secret", "alice")
    header = signed([new, ALICE])
    assert check(header, {key_id(new): new})  # a receiver that fetched the new key
    assert check(header)  # and one that still holds the old one


@given(st.text(max_size=80))
def test_verify_never_raises(header: str) -> None:
    assert check(header) in (True, False)


@pytest.mark.parametrize(
    "header",
    [
        "",
        "t=1",
        f"t={NOW},n=x",
        f"t={NOW},n=x,v2=00",
        f"t=x,n=y,kid={key_id(ALICE)},v2=00",
        "garbage",
        f"t={'9' * 5000},n=x,kid={key_id(ALICE)},v2=00",  # more digits than int() takes: False, not a crash
        f"t=\u00b2,n=x,kid={key_id(ALICE)},v2=00",  # a digit to str.isdigit, not to int()
    ],
)
def test_malformed_headers_are_rejected(header: str) -> None:
    assert not check(header)


def test_the_signed_string_is_as_documented() -> None:
    header = signed(nonce="abc")
    body_hash = hashlib.sha256(b'{"report": "nightly"}').hexdigest()
    lines = [
        "tickwork-v2",
        str(NOW),
        "abc",
        "POST",
        str(REQUEST["url"]),
        str(REQUEST["run_id"]),
        "1",
        body_hash,
    ]
    message = "\n".join(lines).encode()

    expected = hmac.new(ALICE, message, hashlib.sha256).hexdigest()
    assert header == f"t={NOW},n=abc,kid={key_id(ALICE)},v2={expected}"


def test_empty_keys_and_bad_nonces_are_refused() -> None:
    with pytest.raises(ValueError):
        owner_key(b"", "alice")
    with pytest.raises(ValueError):
        signed([b""])
    with pytest.raises(ValueError):
        signed(nonce="a,b")


def _documented(language: str, marker: str) -> str:
    import re

    doc = (Path(__file__).parents[2] / "docs" / "targets.md").read_text()
    return next(block for block in re.findall(rf"```{language}\n(.*?)```", doc, re.S) if marker in block)


def test_the_documented_python_receiver_agrees_with_sign() -> None:
    """docs/targets.md shows receivers a copy-paste verifier; it must accept what Tickwork sends, once."""
    import time

    namespace: dict[str, object] = {}
    exec(compile(_documented("python", "def verify_tickwork"), "docs/targets.md", "exec"), namespace)
    verify_tickwork = namespace["verify_tickwork"]
    assert callable(verify_tickwork)
    now = int(time.time())
    keys = {key_id(ALICE): ALICE}
    header = signed(timestamp=now, nonce="doc1")
    args = (REQUEST["method"], REQUEST["url"], REQUEST["run_id"], str(REQUEST["attempt"]))

    assert verify_tickwork(keys, header, *args, REQUEST["body"])
    assert not verify_tickwork(keys, header, *args, REQUEST["body"])  # the same nonce again: a replay
    other = signed(timestamp=now, nonce="doc2")
    assert not verify_tickwork(keys, other, "POST", "https://elsewhere.example/", *args[2:], REQUEST["body"])
    assert not verify_tickwork(
        {key_id(ALICE): b"other"}, signed(timestamp=now, nonce="doc3"), *args, REQUEST["body"]
    )
    assert not verify_tickwork(keys, signed(timestamp=now - 301, nonce="doc4"), *args, REQUEST["body"])


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js (the CDK's runtime) on PATH")
def test_the_documented_node_receiver_agrees_with_sign(tmp_path: Path) -> None:
    import json
    import subprocess
    import time

    now = int(time.time())
    cases = {
        "as sent": (signed(timestamp=now, nonce="node1"), REQUEST["url"], "1"),
        "replayed": (signed(timestamp=now, nonce="node1"), REQUEST["url"], "1"),
        "another url": (signed(timestamp=now, nonce="node2"), "https://elsewhere.example/", "1"),
        "another attempt": (signed(timestamp=now, nonce="node3"), REQUEST["url"], "2"),
        "stale": (signed(timestamp=now - 301, nonce="node4"), REQUEST["url"], "1"),
        "proto key id": (f"t={now},n=node5,kid=__proto__,v2=00", REQUEST["url"], "1"),
        "constructor key id": (f"t={now},n=node6,kid=constructor,v2=00", REQUEST["url"], "1"),
    }
    script = tmp_path / "check.js"
    script.write_text(
        _documented("javascript", "function verifyTickwork")
        + f"\nconst keys = {{ {json.dumps(key_id(ALICE))}: "
        + f"Buffer.from({json.dumps(ALICE.hex())}, 'hex') }};\n"
        + f"const body = Buffer.from({json.dumps(REQUEST['body'].decode())});\n"  # type: ignore[union-attr]
        + f"const cases = {json.dumps(cases)};\n"
        + "const out = {};\n"
        + "for (const [name, [header, url, attempt]] of Object.entries(cases))\n"
        + "  out[name] = verifyTickwork(keys, header, 'POST', url, "
        + f"{json.dumps(REQUEST['run_id'])}, attempt, body);\n"
        + "console.log(JSON.stringify(out));\n"
    )

    answer = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=30, check=True)

    assert json.loads(answer.stdout) == {
        "as sent": True,
        "replayed": False,
        "another url": False,
        "another attempt": False,
        "stale": False,
        "proto key id": False,
        "constructor key id": False,
    }
