"""Hostile input gets a clear 4xx in problem+json, never a 500 (issue 12)."""

from __future__ import annotations

import json

import pytest

from tests.api.conftest import Api, job_body

PROBLEM = "application/problem+json"
HUGE = "9" * 5000  # past Python's 4,300-digit limit for reading an int


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/jobs"),
        ("PATCH", "/jobs/{id}"),
        ("POST", "/schedules/preview"),
    ],
)
def test_an_integer_too_long_to_read_is_400_not_500(call: Api, method: str, path: str) -> None:
    job = call("POST", "/jobs", body=job_body()).body
    raw = '{"name": "x", "timeout_seconds": ' + HUGE + "}"
    reply = call(method, path.format(id=job["id"]), body=raw)
    assert reply.status == 400 and reply.content_type == PROBLEM, reply.body
    assert "number" in reply.body["detail"]


def test_a_huge_integer_nested_anywhere_is_400(call: Api) -> None:
    raw = '{"name": "x", "tags": {"a": [1, {"b": ' + HUGE + "}]}}"
    reply = call("POST", "/jobs", body=raw)
    assert reply.status == 400 and reply.content_type == PROBLEM


def test_text_that_is_not_json_is_still_the_resolvers_400(call: Api) -> None:
    reply = call("POST", "/jobs", body="{not json")
    assert 400 <= reply.status < 500 and reply.status != 500


@pytest.mark.parametrize("method", ["TRACE", "CONNECT", "BREW"])
def test_an_unknown_method_is_405_with_allow(call: Api, method: str) -> None:
    reply = call(method, "/jobs")
    assert reply.status == 405 and reply.content_type == PROBLEM
    assert "GET" in reply.headers["Allow"] and "TRACE" not in reply.headers["Allow"]


def test_head_health_is_200_without_a_body(call: Api) -> None:
    reply = call("HEAD", "/health")
    assert reply.status == 200 and reply.body == ""
    assert call("HEAD", "/jobs/job_00000000000000000000").status == 404


@pytest.mark.parametrize(
    "query",
    [
        "from=0999-01-01T00:00:00Z",
        "to=0999-01-01T00:00:00Z",
        "from=0001-01-01T00:00:00Z&to=0999-01-01T00:00:00Z",
        "from=9999-01-01T00:00:00Z",
    ],
)
def test_run_history_bounds_outside_the_body_range_are_422(call: Api, query: str) -> None:
    job = call("POST", "/jobs", body=job_body()).body
    reply = call("GET", f"/jobs/{job['id']}/runs", query=query)
    assert reply.status == 422 and reply.content_type == PROBLEM, reply.body
    assert reply.body["errors"][0]["field"] in ("from", "to")


def test_the_openapi_document_declares_how_to_authenticate(call: Api) -> None:
    """Swagger UI's Authorize button comes from these: bearer locally (or JWT), SigV4 with IAM in AWS."""
    body = call("GET", "/openapi.json", owner=None).body
    document = json.loads(body) if isinstance(body, str) else body
    schemes = document["components"]["securitySchemes"]
    assert (
        schemes["bearer"]["scheme"] == "bearer"
        and schemes["sigv4"]["x-amazon-apigateway-authtype"] == "awsSigv4"
    )
    assert {"bearer": []} in document["security"]


def _forge(position: dict[str, str]) -> str:
    import base64

    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode().rstrip("=")


@pytest.mark.parametrize("path", ["/jobs", "/jobs/{id}/runs"])
def test_a_forged_or_borrowed_cursor_is_400(call: Api, path: str) -> None:
    from tests.api.conftest import BOB

    jobs = [
        call("POST", "/jobs", body=job_body(name=f"j{n}", schedule={"expression": "*/10 * * * * *"})).body
        for n in range(3)
    ]
    url = path.format(id=jobs[0]["id"])
    page = call("GET", url, query="limit=1").body
    assert page["next_cursor"]  # a real cursor works
    assert call("GET", url, query=f"limit=1&cursor={page['next_cursor']}").status == 200
    key = "job_id" if path == "/jobs" else "scheduled_for"
    forged = _forge({key: "job_zzzzzzzzzzzzzzzzzzzz" if key == "job_id" else "20991231T000000Z"})
    reply = call("GET", url, query=f"cursor={forged}")
    assert reply.status == 400 and reply.content_type == PROBLEM, reply.body
    if path == "/jobs":  # another owner's listing does not take it
        assert call("GET", url, query=f"cursor={page['next_cursor']}", owner=BOB).status == 400
