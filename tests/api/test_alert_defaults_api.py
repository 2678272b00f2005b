"""Each owner's default alert rules (issue 32, "defaults per owner"): `PUT /alert-defaults` sets what a job
created without `alerts` gets, checked as a job's rules are; a job naming its own keeps them; an owner's
defaults are theirs alone; `DELETE` forgets them. A resume that clears Tickwork's own pause is an event."""

from __future__ import annotations

from dataclasses import replace

from tests.api.conftest import ALICE, BOB, Api, job_body
from tickwork.domain.grants import TargetGrants

HOOK = "https://hooks.example.com/alice"
DEFAULTS = {"deadline_seconds": 900, "failures_in_a_row": 3, "channels": [{"kind": "webhook", "url": HOOK}]}


def test_a_job_created_without_alerts_gets_its_owners_defaults(call: Api) -> None:
    assert call("GET", "/alert-defaults", owner=ALICE).body["channels"] == []
    stored = call("PUT", "/alert-defaults", body=DEFAULTS, owner=ALICE)
    assert stored.status == 200 and stored.body["deadline_seconds"] == 900
    assert call("GET", "/alert-defaults", owner=ALICE).body == stored.body

    made = call("POST", "/jobs", body=job_body(), owner=ALICE).body
    assert made["alerts"] == stored.body
    own = call("POST", "/jobs", body=job_body(name="own", alerts={"on_skip": True}), owner=ALICE).body
    assert own["alerts"]["on_skip"] is True and own["alerts"]["channels"] == []
    # Bob's jobs know nothing of Alice's defaults.
    assert call("POST", "/jobs", body=job_body(), owner=BOB).body["alerts"]["channels"] == []

    assert call("DELETE", "/alert-defaults", owner=ALICE).status == 204
    after = call("POST", "/jobs", body=job_body(name="after"), owner=ALICE).body
    assert after["alerts"]["deadline_seconds"] is None
    # Jobs made before keep what they were given.
    assert call("GET", f"/jobs/{made['id']}", owner=ALICE).body["alerts"] == stored.body


def test_defaults_are_checked_as_a_jobs_rules(call: Api) -> None:
    bad = call(
        "PUT", "/alert-defaults", body={"channels": [{"kind": "webhook", "url": "ftp://x"}]}, owner=ALICE
    )
    assert bad.status == 422 and bad.body["errors"][0]["field"].startswith("alerts.channels[0]")
    call.parts.settings = replace(
        call.parts.settings, target_grants=TargetGrants({ALICE: ["sns:tickwork-target-alice-*"]})
    )
    topic = "arn:aws:sns:us-east-1:123456789012:tickwork-target-bob-alerts"
    refused = call(
        "PUT", "/alert-defaults", body={"channels": [{"kind": "sns", "topic_arn": topic}]}, owner=ALICE
    )
    assert refused.status == 403
    assert call("GET", "/alert-defaults", owner=ALICE).body["channels"] == []


def test_a_resume_that_clears_an_auto_pause_is_an_event(call: Api) -> None:
    job_id = call("POST", "/jobs", body=job_body(alerts={"auto_pause_after": 2}), owner=ALICE).body["id"]
    call.parts.job_service().pause(ALICE, job_id, reason="paused after 2 failures in a row", cause_at=None)
    resumed = call("POST", f"/jobs/{job_id}/resume", owner=ALICE)
    assert resumed.status == 200 and resumed.body["cleared_auto_pause"] == "paused after 2 failures in a row"
    events = call("GET", "/events", query=f"job_id={job_id}", owner=ALICE).body["items"]
    assert [e["kind"] for e in events] == ["resumed"]
    assert "paused after 2 failures in a row" in events[0]["detail"]
    # An owner's own pause and resume is no event.
    call("POST", f"/jobs/{job_id}/pause", query="note=test", owner=ALICE)
    assert call("POST", f"/jobs/{job_id}/resume", owner=ALICE).body["cleared_auto_pause"] is None
    assert len(call("GET", "/events", query=f"job_id={job_id}", owner=ALICE).body["items"]) == 1
