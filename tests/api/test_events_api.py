"""`GET /events` (issue 32): a job's events or an owner's across jobs, newest first, paged with a cursor
only that listing accepts; another owner's job is a 404 and their events never appear."""

from __future__ import annotations

from datetime import timedelta

from tests.api.conftest import ALICE, Api, job_body
from tickwork.domain.alert_rules import Channel, ChannelKind
from tickwork.domain.alerts import EventKind, JobEvent
from tickwork.domain.notify import ChannelHealth

BOB = "bob"


def record(call: Api, job_id: str, owner: str, minute: int, kind: EventKind = EventKind.RUN_FAILED) -> None:
    at = call.clock.now() + timedelta(minutes=minute)
    event = JobEvent(job_id, owner, kind, at, f"{job_id}:{minute}", f"failure {minute}")
    assert call.parts.event_log.record_event(event, at + timedelta(days=30), (), ())


def test_a_jobs_events_newest_first_paged_and_only_its_owners(call: Api) -> None:
    alices = call("POST", "/jobs", body=job_body(), owner=ALICE).body["id"]
    bobs = call("POST", "/jobs", body=job_body(), owner=BOB).body["id"]
    for minute in range(5):
        record(call, alices, ALICE, minute)
    record(call, bobs, BOB, 9)

    first = call("GET", "/events", query=f"job_id={alices}&limit=2", owner=ALICE)
    assert first.status == 200, first.body
    assert [e["detail"] for e in first.body["items"]] == ["failure 4", "failure 3"]
    after = first.body["next_cursor"]
    rest = call("GET", "/events", query=f"job_id={alices}&limit=10&cursor={after}", owner=ALICE)
    assert [e["detail"] for e in rest.body["items"]] == ["failure 2", "failure 1", "failure 0"]
    assert rest.body["next_cursor"] is None
    assert first.body["items"][0]["id"] == f"{alices}|run_failed|{alices}:4|2026-12-02T12:04:30.000Z"

    assert call("GET", "/events", query=f"job_id={alices}", owner=BOB).status == 404
    across = call("GET", "/events", owner=BOB).body["items"]
    assert [e["job_id"] for e in across] == [bobs]
    # A cursor of one listing is refused by another.
    borrowed = call("GET", "/events", query=f"cursor={first.body['next_cursor']}", owner=ALICE)
    assert borrowed.status == 400


def test_an_owners_events_across_jobs(call: Api) -> None:
    one = call("POST", "/jobs", body=job_body(), owner=ALICE).body["id"]
    two = call("POST", "/jobs", body=job_body(name="other"), owner=ALICE).body["id"]
    record(call, one, ALICE, 1)
    record(call, two, ALICE, 2, EventKind.DEADLINE_MISSED)
    items = call("GET", "/events", owner=ALICE).body["items"]
    assert [(e["job_id"], e["kind"]) for e in items] == [(two, "deadline_missed"), (one, "run_failed")]


def test_a_jobs_unhealthy_channel_is_answered_with_its_events(call: Api) -> None:
    hook = "https://hooks.example.com/alerts"
    alerts = {"channels": [{"kind": "webhook", "url": hook}]}
    job_id = call("POST", "/jobs", body=job_body(alerts=alerts), owner=ALICE).body["id"]
    channel = Channel(ChannelKind.WEBHOOK, hook)
    call.parts.event_log.set_health(ChannelHealth(ALICE, channel, False, call.clock.now(), "503: down"))
    answer = call("GET", "/events", query=f"job_id={job_id}", owner=ALICE).body
    assert answer["channel_health"] == [
        {
            "channel": f"webhook:{hook}",
            "healthy": False,
            "since": "2026-12-02T12:00:30Z",
            "detail": "503: down",
        }
    ]
    # Another owner's channel of the same address is theirs: nothing of Alice's shows in it.
    bobs = call("POST", "/jobs", body=job_body(alerts=alerts), owner=BOB).body["id"]
    assert call("GET", "/events", query=f"job_id={bobs}", owner=BOB).body["channel_health"] == []
