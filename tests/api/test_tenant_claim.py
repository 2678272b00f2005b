"""An explicit tenant claim (issue 31): with JWT auth the claim that names the caller's tenant is
configurable (`TICKWORK_TENANT_CLAIM`, context `jwt_tenant_claim`); every user carrying one organisation's
claim sees that organisation's jobs, and a token without the claim is refused, never mapped to another."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.api.conftest import Api, Reply, job_body, request
from tickwork.handlers.api import owner_of


def as_user(method: str, path: str, claims: dict[str, str], **kwargs: Any) -> dict[str, Any]:
    event = request(method, path, **kwargs)
    event["requestContext"]["authorizer"] = {"jwt": {"claims": claims, "scopes": None}}
    return event


@pytest.fixture
def by_org(call: Api) -> Api:
    call.parts.settings = replace(call.parts.settings, tenant_claim="org")
    return call


def test_every_user_of_one_organisation_is_one_tenant(by_org: Api) -> None:
    made: Reply = by_org.send(as_user("POST", "/jobs", {"sub": "ann", "org": "acme"}, body=job_body()))
    assert made.status == 201, made

    seen_by_ben = by_org.send(as_user("GET", "/jobs", {"sub": "ben", "org": "acme"})).body["items"]
    seen_by_other_org = by_org.send(as_user("GET", "/jobs", {"sub": "cat", "org": "globex"})).body["items"]

    assert [job["id"] for job in seen_by_ben] == [made.body["id"]]
    assert seen_by_other_org == []


def test_a_token_without_the_tenant_claim_is_refused(by_org: Api) -> None:
    reply = by_org.send(as_user("GET", "/jobs", {"sub": "ann"}))
    assert reply.status == 401, reply


def test_by_default_each_user_is_a_tenant() -> None:
    event = as_user("GET", "/jobs", {"sub": "ann", "org": "acme"})
    assert owner_of(event) == "ann" and owner_of(event, "org") == "acme"
