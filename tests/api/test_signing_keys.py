"""`GET /signing-keys` (issue 31): each owner gets its own keys, and only its own. A call Tickwork makes for
one owner verifies with that owner's key and with no other's."""

from __future__ import annotations

from dataclasses import replace

from tests.api.conftest import ALICE, BOB, Api
from tickwork.signing import key_id, owner_key, sign, verify


def keys_of(call: Api, owner: str) -> dict[str, bytes]:
    reply = call("GET", "/signing-keys", owner=owner)
    assert reply.status == 200, reply
    items = reply.body["items"]
    assert [item["current"] for item in items] == [True]  # no rotation under way
    return {item["key_id"]: bytes.fromhex(item["key"]) for item in items}


def test_each_owner_gets_its_own_key_and_only_its_own(call: Api) -> None:
    alice, bob = keys_of(call, ALICE), keys_of(call, BOB)

    assert set(alice).isdisjoint(bob) and set(alice.values()).isdisjoint(bob.values())
    assert all(key_id(key) == kid for kid, key in (alice | bob).items())
    assert keys_of(call, ALICE) == alice  # stable: derived, not stored


def test_a_call_made_for_alice_verifies_with_her_key_and_not_with_bobs(call: Api) -> None:
    alice, bob = keys_of(call, ALICE), keys_of(call, BOB)
    request = {"method": "POST", "url": "https://bob.example/hook", "run_id": "job_a:20261202T120500Z"}
    # Exactly what the executor's HTTP invoker signs for one of Alice's runs (her jobs' owner).
    header = sign(
        [owner_key(call.parts.signing_secret, ALICE)],
        timestamp=1_800_000_000,
        nonce="n1",
        attempt=1,
        body=b"{}",
        **request,
    )

    assert verify(alice, header, attempt=1, body=b"{}", now=1_800_000_000, **request)
    assert not verify(bob, header, attempt=1, body=b"{}", now=1_800_000_000, **request)


def test_during_a_rotation_the_previous_key_is_listed_too(call: Api) -> None:
    call.parts.settings = replace(call.parts.settings, signing_secret="new", signing_secret_previous="old")

    reply = call("GET", "/signing-keys", owner=ALICE)

    assert reply.status == 200, reply
    assert [(i["key_id"], i["current"]) for i in reply.body["items"]] == [
        (key_id(owner_key(b"new", ALICE)), True),
        (key_id(owner_key(b"old", ALICE)), False),
    ]
