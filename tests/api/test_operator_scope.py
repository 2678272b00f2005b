"""The operator scope (issue 31): an operator lists, pauses and resumes another owner's job; every use is
recorded with who did it and why; anyone else gets a 403 and changes nothing."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from tests.api.conftest import ALICE, BOB, Api, job_body

OPERATOR = "arn:aws:iam::123456789012:role/oncall"


@pytest.fixture
def ops(call: Api) -> Api:
    call.parts.settings = replace(call.parts.settings, operators=frozenset({OPERATOR}))
    return call


def operator_records(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [
        {k: getattr(r, k, None) for k in ("operator", "action", "owner", "job_id", "note")}
        for r in caplog.records
        if r.getMessage() == "operator action"
    ]


def test_the_operator_pauses_and_resumes_another_owners_job_and_each_use_is_recorded(
    ops: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    job = ops("POST", "/jobs", body=job_body(), owner=ALICE).body

    listed = ops("GET", "/operator/jobs", query=f"owner={ALICE}", owner=OPERATOR)
    paused = ops(
        "POST", f"/operator/jobs/{job['id']}/pause", body={"note": "INC-42: floods the API"}, owner=OPERATOR
    )
    resumed = ops("POST", f"/operator/jobs/{job['id']}/resume", body={"note": "INC-42 fixed"}, owner=OPERATOR)

    assert [j["id"] for j in listed.body["items"]] == [job["id"]]
    assert paused.status == 200 and paused.body["state"] == "paused", paused
    assert resumed.status == 200 and resumed.body["state"] == "active", resumed
    assert ops("GET", f"/jobs/{job['id']}", owner=ALICE).body["state"] == "active"  # still Alice's
    assert operator_records(caplog) == [
        {"operator": OPERATOR, "action": "list", "owner": ALICE, "job_id": None, "note": None},
        {
            "operator": OPERATOR,
            "action": "pause",
            "owner": ALICE,
            "job_id": job["id"],
            "note": "INC-42: floods the API",
        },
        {
            "operator": OPERATOR,
            "action": "resume",
            "owner": ALICE,
            "job_id": job["id"],
            "note": "INC-42 fixed",
        },
    ]


def test_without_the_scope_it_is_a_403_and_nothing_changes(
    ops: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    job = ops("POST", "/jobs", body=job_body(), owner=ALICE).body

    refused = ops("POST", f"/operator/jobs/{job['id']}/pause", body={"note": "mine now"}, owner=BOB)
    listing = ops("GET", "/operator/jobs", query=f"owner={ALICE}", owner=BOB)

    assert refused.status == 403 and listing.status == 403, (refused, listing)
    assert refused.headers["Content-Type"] == "application/problem+json"
    assert ops("GET", f"/jobs/{job['id']}", owner=ALICE).body["state"] == "active"
    assert operator_records(caplog) == []


def test_an_operators_action_needs_a_note(ops: Api) -> None:
    job = ops("POST", "/jobs", body=job_body(), owner=ALICE).body
    assert ops("POST", f"/operator/jobs/{job['id']}/pause", body={}, owner=OPERATOR).status == 422
    assert ops("POST", f"/operator/jobs/{job['id']}/pause", body={"note": ""}, owner=OPERATOR).status == 422
    assert ops("POST", "/operator/jobs/job_nope/pause", body={"note": "x"}, owner=OPERATOR).status == 404
