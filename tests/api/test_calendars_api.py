"""Exclusion calendars through the API (issue 33, part 2): written whole under a version, read, listed and
deleted by their owner only; a job names them (422 naming the one its owner does not have); a preview marks
the fires they exclude, across a DST change."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import ALICE, BOB, Api, Reply, job_body, load

PROBLEM = "application/problem+json"
HOLIDAYS = {
    "timezone": "America/New_York",
    "description": "Exchange holidays",
    "dates": [
        {"date": "2027-03-14", "label": "spring holiday"},
        {"date": "2027-12-25", "label": "Christmas"},
    ],
    "windows": [{"start": "2027-11-07T01:00:00", "end": "2027-11-07T02:00:00", "label": "patching"}],
}


def refused_naming(reply: Reply, field: str) -> None:
    assert reply.status == 422 and reply.content_type == PROBLEM, (reply.status, reply.body)
    assert field in [error["field"] for error in reply.body["errors"]], reply.body


def put(call: Api, body: dict[str, Any], name: str = "us-holidays", **kwargs: Any) -> Reply:
    return call("PUT", f"/calendars/{name}", body=body, **kwargs)


def test_a_calendar_is_written_whole_under_its_version(call: Api) -> None:
    made = put(call, HOLIDAYS)
    assert made.status == 201 and made.headers["ETag"] == '"1"', made.body
    assert made.body["dates"][1] == {"date": "2027-12-25", "label": "Christmas"}
    assert made.body["windows"][0]["start"] == "2027-11-07T01:00:00"
    again = put(call, {**HOLIDAYS, "dates": []}, headers={"If-Match": '"1"'})
    assert again.status == 200 and again.body["version"] == 2 and again.body["dates"] == []
    stale = put(call, HOLIDAYS, headers={"If-Match": '"1"'})
    assert stale.status == 412 and stale.content_type == PROBLEM
    assert put(call, HOLIDAYS, name="other", headers={"If-Match": '"0"'}).status == 201  # only if new
    assert [c["name"] for c in call("GET", "/calendars").body["items"]] == ["other", "us-holidays"]
    assert call("GET", "/calendars/us-holidays").body["version"] == 2


def test_another_owner_sees_none_of_it(call: Api) -> None:
    put(call, HOLIDAYS)
    assert call("GET", "/calendars", owner=BOB).body["items"] == []
    assert call("GET", "/calendars/us-holidays", owner=BOB).status == 404
    assert call("DELETE", "/calendars/us-holidays", owner=BOB).status == 404
    refused_naming(call("POST", "/jobs", body=job_body(calendars=["us-holidays"]), owner=BOB), "calendars[0]")
    assert call("DELETE", "/calendars/us-holidays", owner=ALICE).status == 204
    assert call("GET", "/calendars/us-holidays").status == 404


def test_a_bad_calendar_is_a_422_naming_the_field(call: Api) -> None:
    refused_naming(put(call, {**HOLIDAYS, "timezone": "Mars/Olympus"}), "timezone")
    refused_naming(put(call, {"timezone": "UTC"}), "dates")
    with_offset = {"start": "2027-11-07T01:00:00+00:00", "end": "2027-11-07T02:00:00"}
    assert put(call, {**HOLIDAYS, "windows": [with_offset]}).status == 422
    backwards = {"start": "2027-11-07T02:00:00", "end": "2027-11-07T01:00:00"}
    refused_naming(put(call, {**HOLIDAYS, "windows": [backwards]}), "windows[0].end")
    twice = [{"date": "2027-12-25"}, {"date": "2027-12-25"}]
    refused_naming(put(call, {**HOLIDAYS, "dates": twice}), "dates[1].date")
    assert put(call, HOLIDAYS, name="Not A Name").status in (400, 422)


def test_a_job_names_its_calendars_and_its_preview_marks_what_they_exclude(call: Api) -> None:
    refused_naming(call("POST", "/jobs", body=job_body(calendars=["us-holidays"])), "calendars[0]")
    put(call, HOLIDAYS)
    body = job_body(
        schedule={"expression": "0 * * * *", "timezone": "America/New_York"}, calendars=["us-holidays"]
    )
    job = call("POST", "/jobs", body=body)
    assert job.status == 201 and job.body["calendars"] == ["us-holidays"], job.body

    # The holiday is the day New York springs forward: 23 hourly fires, each marked, none around it.
    preview = call(
        "GET", f"/jobs/{job.body['id']}/preview", query="count=30&after=2027-03-14T03:59:59Z"
    ).body["fires"]
    marked = [f for f in preview if f["excluded"]]
    assert len(marked) == 23 and {f["local"][:10] for f in marked} == {"2027-03-14"}
    assert marked[0]["at"] == "2027-03-14T05:00:00Z" and marked[-1]["at"] == "2027-03-15T03:00:00Z"
    assert "spring holiday, 2027-03-14 (America/New_York)" in marked[0]["excluded"]
    assert all(f["excluded"] is None for f in preview if f["local"][:10] != "2027-03-14")

    # The fall-back night's window covers both 01:00s.
    night = call("GET", f"/jobs/{job.body['id']}/preview", query="count=4&after=2027-11-07T03:59:59Z").body
    assert [bool(f["excluded"]) for f in night["fires"]] == [False, True, True, False]

    cleared = call("PATCH", f"/jobs/{job.body['id']}", body={"calendars": []})
    assert cleared.status == 200 and cleared.body["calendars"] == []
    refused_naming(call("PATCH", f"/jobs/{job.body['id']}", body={"calendars": ["nope"]}), "calendars[0]")


def test_an_unsaved_schedule_is_previewed_against_calendars(call: Api) -> None:
    put(call, HOLIDAYS)
    body = {"expression": "0 12 * * *", "timezone": "America/New_York", "count": 3}
    marked = call(
        "POST",
        "/schedules/preview",
        body={**body, "after": "2027-12-24T00:00:00Z", "calendars": ["us-holidays"]},
    )
    assert [bool(f["excluded"]) for f in marked.body["fires"]] == [False, True, False], marked.body
    refused_naming(call("POST", "/schedules/preview", body={**body, "calendars": ["nope"]}), "calendars[0]")


def test_the_sample_event_writes_a_calendar(call: Api) -> None:
    made = call.send(load("api_put_calendar.json"))
    assert made.status == 201, made.body
    assert made.body["name"] == "nyse-holidays" and len(made.body["dates"]) == 3
