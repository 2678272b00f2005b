"""Groups and bulk actions through the API (issue 33, part 1): one request pauses a group (202 with its
progress, done when small), the same Idempotency-Key answers the same action, another request under it is
a 409; the groups are counted by state; another owner sees none of it."""

from __future__ import annotations

from tests.api.conftest import ALICE, BOB, Api, job_body

PROBLEM = "application/problem+json"


def test_a_group_is_paused_and_resumed_in_one_request_each(call: Api) -> None:
    for i in range(3):
        assert (
            call("POST", "/jobs", body=job_body(name=f"n{i}", group="nightly", tags={"team": "a"})).status
            == 201
        )
    assert call("POST", "/jobs", body=job_body(name="other")).status == 201
    groups = call("GET", "/groups").body
    assert groups["complete"] and {g["name"]: (g["active"], g["paused"]) for g in groups["items"]} == {
        "default": (1, 0),
        "nightly": (3, 0),
    }
    key = {"Idempotency-Key": "pause-nightly-1"}
    body = {"action": "pause", "group": "nightly", "note": "db migration"}
    started = call("POST", "/bulk-actions", body=body, headers=key)
    assert started.status == 202 and started.headers["Location"] == f"/bulk-actions/{started.body['id']}"
    assert started.body["state"] == "done" and started.body["progress"]["changed"] == 3, started.body
    again = call("POST", "/bulk-actions", body=body, headers=key)
    assert again.status == 200 and again.body["id"] == started.body["id"]
    other = call("POST", "/bulk-actions", body={**body, "note": "another"}, headers=key)
    assert other.status == 409 and other.content_type == PROBLEM
    listed = call("GET", "/jobs", query="group=nightly").body["items"]
    assert [j["state"] for j in listed] == ["paused"] * 3 and {j["group"] for j in listed} == {"nightly"}
    assert call("GET", "/groups").body["items"][1] == {"name": "nightly", "jobs": 3, "active": 0, "paused": 3}

    resumed = call("POST", "/bulk-actions", body={"action": "resume", "tags": {"team": "a"}, "note": "back"})
    assert resumed.status == 202 and resumed.body["progress"]["changed"] == 3
    assert call("GET", f"/bulk-actions/{started.body['id']}").body["progress"]["matched"] == 3
    assert len(call("GET", "/bulk-actions").body["items"]) == 2
    assert call("GET", f"/bulk-actions/{started.body['id']}", owner=BOB).status == 404
    assert call("GET", "/bulk-actions", owner=BOB).body["items"] == []
    assert call("GET", "/groups", owner=BOB).body["items"] == []
    assert call("GET", "/groups", owner=ALICE).body["items"][1]["active"] == 3


def test_a_maintenance_window_and_the_refusals(call: Api) -> None:
    call("POST", "/jobs", body=job_body(group="nightly"))
    window = call(
        "POST",
        "/bulk-actions",
        body={"action": "pause", "group": "nightly", "note": "move", "resume_at": "2026-12-02T14:00:00Z"},
    )
    assert window.status == 202 and window.body["resume_action"], window.body
    resume = call("GET", f"/bulk-actions/{window.body['resume_action']}").body
    assert resume["state"] == "scheduled" and resume["maintenance_of"] == window.body["id"]
    for body, field in [
        ({"action": "pause", "note": "all"}, "group"),  # no selector: never every job
        ({"action": "pause", "group": "nightly", "note": " "}, "note"),
        (
            {"action": "resume", "group": "nightly", "note": "x", "resume_at": "2026-12-02T14:00:00Z"},
            "resume_at",
        ),
        ({"action": "retry_failed", "group": "nightly", "note": "x"}, "from"),
    ]:
        refused = call("POST", "/bulk-actions", body=body)
        assert refused.status == 422 and field in [e["field"] for e in refused.body["errors"]], refused.body
    assert (
        call("POST", "/bulk-actions", body={"action": "pause", "group": "Not A Group", "note": "x"}).status
        == 422
    )
    retry = call(
        "POST",
        "/bulk-actions",
        body={"action": "retry_failed", "group": "nightly", "note": "x", "from": "2026-12-02T10:00:00Z",
              "to": "2026-12-02T12:00:00Z"},
    )  # fmt: skip
    assert retry.status == 202 and retry.body["from"] == "2026-12-02T10:00:00Z", retry.body
