"""Tenancy, idempotent create, If-Match, pagination and the problem+json answers to bad input."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.api.conftest import ALICE, BOB, Api, job_body, request

PROBLEM = "application/problem+json"


def create(call: Api, owner: str = ALICE, **overrides: Any) -> dict[str, Any]:
    reply = call("POST", "/jobs", body=job_body(**overrides), owner=owner)
    assert reply.status == 201, reply.body
    return dict(reply.body)


# --- tenancy ------------------------------------------------------------------------------------------------


def test_another_owner_gets_404_on_every_route_and_cannot_list_the_job(call: Api) -> None:
    job = create(call)
    missing = call("GET", "/jobs/job_00000000000000000000", owner=BOB)
    for method, path, body in [
        ("GET", f"/jobs/{job['id']}", None),
        ("PATCH", f"/jobs/{job['id']}", {"name": "mine now"}),
        ("POST", f"/jobs/{job['id']}/pause", None),
        ("POST", f"/jobs/{job['id']}/resume", None),
        ("DELETE", f"/jobs/{job['id']}", None),
        ("GET", f"/jobs/{job['id']}/runs", None),
        ("GET", f"/jobs/{job['id']}/runs/{job['id']}:20261202T120500Z", None),
        ("GET", f"/jobs/{job['id']}/preview", None),
    ]:
        reply = call(method, path, body=body, owner=BOB, query="note=test")
        assert reply.status == 404, (method, path, reply.body)
        assert reply.content_type == PROBLEM and reply.body["title"] == missing.body["title"]
    assert call("GET", "/jobs", owner=BOB).body == {"items": [], "next_cursor": None}
    still = call("GET", f"/jobs/{job['id']}")
    assert still.status == 200 and still.body == job


def test_no_identity_is_401_and_a_jwt_sub_is_an_owner(call: Api) -> None:
    reply = call("GET", "/jobs", owner=None)
    assert reply.status == 401 and reply.content_type == PROBLEM
    assert call("GET", "/health", owner=None).status == 200

    event = request("POST", "/jobs", body=job_body(), owner=None)
    event["requestContext"]["authorizer"] = {"jwt": {"claims": {"sub": "user-123"}, "scopes": []}}
    created = call.send(event)
    assert created.status == 201
    assert call.parts.store.get_job(created.body["id"]).owner == "user-123"  # type: ignore[union-attr]


# --- idempotent create -------------------------------------------------------------------------------------


def test_the_same_idempotency_key_twice_makes_one_job(call: Api) -> None:
    headers = {"Idempotency-Key": "k-1"}
    first = call("POST", "/jobs", body=job_body(), headers=headers)
    # Same request, different formatting and explicit defaults: still the same request.
    same = json.dumps({**job_body(), "timeout_seconds": 60}, indent=4)
    second = call("POST", "/jobs", body=same, headers=headers)
    assert (first.status, second.status) == (201, 200)
    assert second.headers.get("Idempotent-Replayed") == "true" and second.body == first.body
    assert [j["id"] for j in call("GET", "/jobs").body["items"]] == [first.body["id"]]
    # Another owner's identical key is another job.
    assert call("POST", "/jobs", body=job_body(), headers=headers, owner=BOB).status == 201


def test_the_same_key_with_a_different_body_is_409(call: Api) -> None:
    headers = {"Idempotency-Key": "k-2"}
    assert call("POST", "/jobs", body=job_body(), headers=headers).status == 201
    reply = call("POST", "/jobs", body=job_body(name="other"), headers=headers)
    assert reply.status == 409 and reply.content_type == PROBLEM
    assert "different request" in reply.body["detail"]


def test_without_a_key_each_create_is_a_new_job(call: Api) -> None:
    ids = {create(call)["id"] for _ in range(2)}
    assert len(ids) == 2


# --- If-Match -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("if_match", "status"),
    [
        pytest.param('"1"', 200, id="current_etag"),
        pytest.param('W/"1"', 200, id="weak_etag"),
        pytest.param("*", 200, id="any"),
        pytest.param('"7"', 412, id="stale_version"),
        pytest.param("garbage", 412, id="not_an_etag"),
    ],
)
def test_if_match_on_patch(call: Api, if_match: str, status: int) -> None:
    job = create(call)
    reply = call("PATCH", f"/jobs/{job['id']}", body={"description": "x"}, headers={"If-Match": if_match})
    assert reply.status == status, reply.body
    if status == 412:
        assert reply.content_type == PROBLEM and call("GET", f"/jobs/{job['id']}").body["version"] == 1


def test_a_stale_if_match_fails_every_write_and_changes_nothing(call: Api) -> None:
    job = create(call)
    assert call("PATCH", f"/jobs/{job['id']}", body={"name": "v2"}).headers["ETag"] == '"2"'
    for method, path, body in [
        ("PATCH", f"/jobs/{job['id']}", {"name": "lost update"}),
        ("POST", f"/jobs/{job['id']}/pause", None),
        ("DELETE", f"/jobs/{job['id']}", None),
    ]:
        assert call(method, path, body=body, headers={"If-Match": '"1"'}, query="note=test").status == 412
    assert call("GET", f"/jobs/{job['id']}").body["name"] == "v2"


def test_patch_retries_when_the_ticker_advanced_the_job_meanwhile(call: Api) -> None:
    job = create(call, schedule={"expression": "*/30 * * * * *"})
    store = call.parts.store
    stored = store.get_job(job["id"])
    assert stored is not None and stored.next_fire_at is not None

    real_get = store.get_job
    moved = {"done": False}

    def get_then_tick(job_id: str) -> Any:
        current = real_get(job_id)
        if not moved["done"] and current is not None and current.next_fire_at is not None:
            moved["done"] = True  # the ticker commits between the API's read and its write
            store.commit_plan(current, (), current.next_fire_at.replace(year=2027))
        return current

    store.get_job = get_then_tick  # type: ignore[method-assign]
    reply = call("PATCH", f"/jobs/{job['id']}", body={"name": "renamed"}, headers={"If-Match": '"1"'})
    assert reply.status == 200 and reply.body["version"] == 2 and moved["done"]
    assert reply.body["next_fire_at"].startswith("2027-")


# --- listing ------------------------------------------------------------------------------------------------


def test_jobs_are_listed_a_page_at_a_time_with_state_and_tag_filters(call: Api) -> None:
    jobs = [create(call, tags={"team": "a" if i % 2 else "b"}) for i in range(5)]
    call("POST", f"/jobs/{jobs[0]['id']}/pause", query="note=test")
    seen: list[str] = []
    cursor = None
    while True:
        query = "limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = call("GET", "/jobs", query=query).body
        assert len(page["items"]) <= 2
        seen += [j["id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(j["id"] for j in jobs) and len(seen) == 5

    team_a = call("GET", "/jobs", query="tag=team%3Da").body["items"]
    assert sorted(j["id"] for j in team_a) == sorted(j["id"] for i, j in enumerate(jobs) if i % 2)
    paused = call("GET", "/jobs", query="state=paused").body["items"]
    assert [j["id"] for j in paused] == [jobs[0]["id"]]


def test_jobs_are_searched_by_name_ignoring_case_a_page_at_a_time(call: Api) -> None:
    names = ["Nightly Report", "nightly-backup", "hourly sync", "NIGHTLY cleanup", "weekly"]
    jobs = {name: create(call, name=name) for name in names}
    create(call, owner=BOB, name="nightly of another owner")
    seen: list[str] = []
    cursor = None
    while True:
        query = "name=NightLy&limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = call("GET", "/jobs", query=query).body
        seen += [j["name"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(n for n in names if "nightly" in n.lower())
    call("POST", f"/jobs/{jobs['nightly-backup']['id']}/pause", query="note=test")
    both = call("GET", "/jobs", query="name=nightly&state=paused").body["items"]
    assert [j["name"] for j in both] == ["nightly-backup"]
    empty = call("GET", "/jobs", query="name=")
    assert empty.status == 422 and empty.content_type == PROBLEM, empty.body
    assert [e["field"] for e in empty.body["errors"]] == ["name"]


def test_a_cursor_this_api_did_not_issue_is_400(call: Api) -> None:
    job = create(call)
    forged = base64.urlsafe_b64encode(b'{"owner":"bob"}').decode().rstrip("=")
    for path in ("/jobs", f"/jobs/{job['id']}/runs"):
        for cursor in (forged, "e30", "bm90LWEtY3Vyc29y"):
            reply = call("GET", path, query=f"cursor={cursor}")
            assert reply.status == 400 and reply.content_type == PROBLEM, (path, cursor, reply.body)
            assert reply.body["errors"] == [
                {"field": "cursor", "message": reply.body["errors"][0]["message"]}
            ]
        # Not even base64url: the document's pattern refuses it, like any other schema violation.
        reply = call("GET", path, query="cursor=not-a-cursor!")
        assert reply.status == 422 and reply.content_type == PROBLEM, (path, reply.body)
        assert "cursor" in reply.body["detail"]


# --- bad input ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        pytest.param({"schedule": {"expression": "61 * * * *"}}, "schedule.expression", id="invalid_cron"),
        pytest.param(
            {"schedule": {"expression": "* * * * *", "timezone": "Mars/Olympus"}},
            "schedule.timezone",
            id="unknown_zone",
        ),
        pytest.param(
            {"schedule": {"expression": "*/5 * * * * *"}}, "schedule.expression", id="interval_below_floor"
        ),
        pytest.param(
            {
                "schedule": {
                    "expression": "* * * * *",
                    "start_at": "2027-01-02T00:00:00Z",
                    "end_at": "2027-01-01T00:00:00Z",
                }
            },
            "schedule.end_at",
            id="end_before_start",
        ),
        pytest.param({"target": {"kind": "smtp", "config": {}}}, "target.kind", id="unsupported_target"),
        pytest.param(
            {"target": {"kind": "http", "config": {"url": "ftp://example.com/x"}}},
            "target.config.url",
            id="not_http_url",
        ),
        pytest.param(
            {"target": {"kind": "http", "config": {"url": "http://user:pw@example.com/"}}},
            "target.config.url",
            id="credentials_in_url",
        ),
        pytest.param({"colour": "blue"}, "colour", id="unknown_field"),
        pytest.param(
            {"schedule": {"expression": "* * * * *", "every": 5}}, "schedule.every", id="unknown_nested"
        ),
        pytest.param({"timeout_seconds": 0}, "timeout_seconds", id="timeout_out_of_range"),
        # Issue 12: a bool is not a number, nor is a numeric string.
        pytest.param({"timeout_seconds": True}, "timeout_seconds", id="bool_is_not_a_number"),
        pytest.param({"timeout_seconds": "60"}, "timeout_seconds", id="string_is_not_a_number"),
        pytest.param(
            {"policies": {"retry": {"max_attempts": 3, "backoff_base_seconds": False}}},
            "policies.retry.backoff_base_seconds",
            id="bool_is_not_a_float",
        ),
        # Control characters in text shown in terminals and consoles.
        pytest.param({"name": "bad\x00name"}, "name", id="nul_in_name"),
        pytest.param({"name": "ding\x07"}, "name", id="bel_in_name"),
        pytest.param({"name": "\x1b[31mred"}, "name", id="ansi_escape_in_name"),
        pytest.param({"name": "abc\u202edcb"}, "name", id="bidi_override_in_name"),
        pytest.param({"description": "x\u2066y"}, "description", id="bidi_isolate_in_description"),
        pytest.param({"tags": {"team": "a\x1bb"}}, "tags.team", id="escape_in_tag_value"),
        # The server's own zone is not a zone: a schedule must mean the same on every machine.
        pytest.param(
            {"schedule": {"expression": "* * * * *", "timezone": "localtime"}},
            "schedule.timezone",
            id="localtime_is_not_iana",
        ),
        pytest.param(
            {"schedule": {"expression": "* * * * *", "timezone": "posix/Europe/Berlin"}},
            "schedule.timezone",
            id="posix_copy_is_not_iana",
        ),
        pytest.param(
            {"target": {"kind": "lambda", "config": {"function_name": "f", "payload": {"n": 1e300}}}},
            "target.config.payload.n",
            id="number_the_store_cannot_hold",
        ),
        pytest.param(
            {"schedule": {"expression": "* * * * *", "start_at": "2027-01-01T00:00:00"}},
            "schedule.start_at",
            id="naive_datetime",
        ),
    ],
)
def test_bad_input_is_422_naming_the_field(call: Api, overrides: dict[str, Any], field: str) -> None:
    reply = call("POST", "/jobs", body=job_body(**overrides))
    assert reply.status == 422, reply.body
    assert reply.content_type == PROBLEM
    assert field in [e["field"] for e in reply.body["errors"]], reply.body
    assert reply.body["status"] == 422 and reply.body["instance"] == "/jobs"


def test_a_patch_is_validated_as_the_merged_schedule(call: Api) -> None:
    job = create(call, schedule={"expression": "0 * * * *", "start_at": "2027-01-02T00:00:00Z"})
    reply = call("PATCH", f"/jobs/{job['id']}", body={"schedule": {"end_at": "2027-01-01T00:00:00Z"}})
    assert reply.status == 422 and reply.body["errors"][0]["field"] == "schedule.end_at"
    cleared = call("PATCH", f"/jobs/{job['id']}", body={"schedule": {"start_at": None}})
    assert cleared.status == 200 and cleared.body["schedule"]["start_at"] is None


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        pytest.param("{not json", "application/json", 400, id="malformed_json"),
        pytest.param("[" * 5000 + "]" * 5000, "application/json", 400, id="nested_too_deep"),
        pytest.param(
            json.dumps({**job_body(), "description": "x" * 70_000}), "application/json", 413, id="oversize"
        ),
        pytest.param("name=x", "application/x-www-form-urlencoded", 415, id="form_body"),
        pytest.param("--x--", "multipart/form-data", 415, id="multipart_without_boundary"),
        pytest.param("hello", "text/plain", 415, id="other_content_type"),
    ],
)
def test_bodies_the_api_refuses(call: Api, body: str, content_type: str, status: int) -> None:
    reply = call("POST", "/jobs", body=body, headers={"content-type": content_type})
    assert reply.status == status, reply.body
    assert reply.content_type == PROBLEM


def test_unknown_ids_and_routes_are_404(call: Api) -> None:
    job = create(call)
    for path in ("/jobs/nope", f"/jobs/{job['id']}/runs/garbage", "/jobs/" + "x" * 3000, "/nowhere"):
        reply = call("GET", path)
        assert reply.status == 404 and reply.content_type == PROBLEM, path


def test_line_breaks_and_emoji_joiners_are_fine_where_they_belong(call: Api) -> None:
    reply = call(
        "POST", "/jobs", body=job_body(name="nightly 👩\u200d💻 build", description="line one\n\tline two")
    )
    assert reply.status == 201, reply.body
    assert call("POST", "/jobs", body=job_body(name="two\nlines")).status == 422


@pytest.mark.parametrize("method", ["PATCH", "DELETE", "POST pause", "POST resume"])
def test_if_match_garbage_on_a_missing_job_is_404_not_412(call: Api, method: str) -> None:
    verb, _, action = method.partition(" ")
    path = "/jobs/job_00000000000000000000" + (f"/{action}" if action else "")
    body = {"description": "x"} if verb == "PATCH" else None
    reply = call(verb, path, body=body, headers={"If-Match": "garbage"}, query="note=test")
    assert reply.status == 404 and reply.content_type == PROBLEM, reply.body
