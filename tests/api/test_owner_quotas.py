"""Per-owner quotas (issue 31): a request past one is a 403 problem naming the quota; nothing is stored."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.api.conftest import ALICE, BOB, Api, job_body
from tickwork.domain.quotas import OwnerQuotas


@pytest.fixture
def limited(call: Api) -> Api:
    quotas = OwnerQuotas(max_jobs=2, min_interval_seconds=300, max_backfill_rate=2.0)
    call.parts.settings = replace(call.parts.settings, owner_quotas=quotas)
    return call


def refused(reply: object, quota: str) -> None:
    status, headers, body = reply.status, reply.headers, reply.body  # type: ignore[attr-defined]
    assert status == 403, reply
    assert headers["Content-Type"] == "application/problem+json"
    assert body["detail"].startswith(f"quota {quota}:"), body


def test_an_owner_past_its_job_quota_is_refused_and_nothing_is_stored(limited: Api) -> None:
    for _ in range(2):
        assert limited("POST", "/jobs", body=job_body(), owner=ALICE).status == 201

    refused(limited("POST", "/jobs", body=job_body(), owner=ALICE), "max_jobs")

    assert len(limited("GET", "/jobs", owner=ALICE).body["items"]) == 2
    assert limited("POST", "/jobs", body=job_body(), owner=BOB).status == 201  # per owner


def test_a_schedule_more_often_than_the_quota_is_refused_on_create_and_on_edit(limited: Api) -> None:
    refused(
        limited("POST", "/jobs", body=job_body(schedule={"expression": "* * * * *"}), owner=ALICE),
        "min_interval_seconds",
    )
    assert limited("GET", "/jobs", owner=ALICE).body["items"] == []
    made = limited("POST", "/jobs", body=job_body(), owner=ALICE)  # */5: every 300 s
    assert made.status == 201, made

    edit = limited(
        "PATCH", f"/jobs/{made.body['id']}", body={"schedule": {"expression": "*/2 * * * *"}}, owner=ALICE
    )

    refused(edit, "min_interval_seconds")
    assert (
        limited("GET", f"/jobs/{made.body['id']}", owner=ALICE).body["schedule"]["expression"]
        == "*/5 * * * *"
    )


def test_a_backfill_faster_than_the_quota_is_refused_and_starts_nothing(limited: Api) -> None:
    made = limited("POST", "/jobs", body=job_body(), owner=ALICE)
    window = {"from": "2026-12-01T00:00:00Z", "to": "2026-12-01T01:00:00Z", "rate_per_second": 5}

    refused(
        limited("POST", f"/jobs/{made.body['id']}/backfill", body=window, owner=ALICE), "max_backfill_rate"
    )

    runs = limited("GET", f"/jobs/{made.body['id']}/runs", owner=ALICE).body["items"]
    assert [r for r in runs if r["trigger"] == "backfill"] == []
    slower = {**window, "rate_per_second": 2}
    assert limited("POST", f"/jobs/{made.body['id']}/backfill", body=slower, owner=ALICE).status == 202
