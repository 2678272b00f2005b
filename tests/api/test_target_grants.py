"""Who may call what, at the API (issue 31): with a registry, a job whose AWS target is not granted to its
owner is refused with a 403 naming the resource, and nothing is stored; an edit to such a target too."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.api.conftest import ALICE, BOB, Api, job_body
from tickwork.domain.grants import TargetGrants

GRANTS = TargetGrants({ALICE: ["*:tickwork-target-alice-*"], BOB: ["*:tickwork-target-bob-*"]})


def lambda_target(name: str) -> dict[str, object]:
    return {"kind": "lambda", "config": {"function_name": name}}


@pytest.fixture
def granted(call: Api) -> Api:
    call.parts.settings = replace(call.parts.settings, target_grants=GRANTS)
    return call


def test_a_job_at_another_tenants_function_is_refused_and_nothing_is_stored(granted: Api) -> None:
    reply = granted(
        "POST", "/jobs", body=job_body(target=lambda_target("tickwork-target-bob-sync")), owner=ALICE
    )

    assert reply.status == 403, reply
    assert reply.headers["Content-Type"] == "application/problem+json"
    assert "lambda:tickwork-target-bob-sync is not granted to" in reply.body["detail"]
    assert granted("GET", "/jobs", owner=ALICE).body["items"] == []


def test_a_job_at_its_own_function_is_made_and_cannot_be_pointed_at_anothers(granted: Api) -> None:
    made = granted(
        "POST", "/jobs", body=job_body(target=lambda_target("tickwork-target-alice-sync")), owner=ALICE
    )
    assert made.status == 201, made

    moved = granted(
        "PATCH",
        f"/jobs/{made.body['id']}",
        body={"target": lambda_target("tickwork-target-bob-sync")},
        owner=ALICE,
    )

    assert moved.status == 403, moved
    kept = granted("GET", f"/jobs/{made.body['id']}", owner=ALICE).body
    assert kept["target"]["config"]["function_name"] == "tickwork-target-alice-sync"
    # Bob, in his own namespace, is fine.
    assert (
        granted(
            "POST", "/jobs", body=job_body(target=lambda_target("tickwork-target-bob-sync")), owner=BOB
        ).status
        == 201
    )


def test_without_a_registry_any_target_the_role_may_call_is_accepted(call: Api) -> None:
    assert (
        call(
            "POST", "/jobs", body=job_body(target=lambda_target("tickwork-target-bob-sync")), owner=ALICE
        ).status
        == 201
    )
