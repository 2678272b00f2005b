"""The API handler driven by the sample API Gateway HTTP API v2 events in events/, on moto."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.api.conftest import ALICE, EXAMPLE_JOB, Api, load
from tickwork.services.jobs import idempotent_job_id


def test_the_example_idempotency_key_names_the_job_the_sample_events_use() -> None:
    assert idempotent_job_id(ALICE, "create-nightly-report-1") == EXAMPLE_JOB


def test_a_job_through_its_life_with_the_sample_events(call: Api) -> None:
    created = call.send(load("api_create_job.json"))
    assert created.status == 201, created.body
    assert created.body["id"] == EXAMPLE_JOB and created.headers["ETag"] == '"1"'
    assert created.body["target"]["config"]["headers"] == {"Authorization": "<redacted>"}
    assert created.body["next_fire_at"] == "2026-12-02T12:05:00Z"

    replayed = call.send(load("api_create_job.json"))
    assert replayed.status == 200 and replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.body == created.body

    listed = call.send(load("api_list_jobs.json"))
    assert listed.status == 200 and [j["id"] for j in listed.body["items"]] == [EXAMPLE_JOB]
    assert listed.body["next_cursor"] is None

    got = call.send(load("api_get_job.json"))
    assert got.status == 200 and got.body == created.body

    preview = call.send(load("api_preview_job.json"))
    assert preview.status == 200
    assert [f["at"] for f in preview.body["fires"]][:2] == ["2026-12-02T12:05:00Z", "2026-12-02T12:10:00Z"]
    assert preview.body["fires"][0]["local"] == "2026-12-02T13:05:00+01:00"
    assert preview.body["description"] == "every 5 minutes, Europe/Berlin"

    unsaved = call.send(load("api_preview_schedule.json"))
    assert unsaved.status == 200
    assert [f["at"] for f in unsaved.body["fires"]] == [
        "2027-03-12T07:30:00Z",
        "2027-03-13T07:30:00Z",
        "2027-03-15T06:30:00Z",  # 14 March: 02:30 does not exist in New York (dst_gap=skip)
    ]
    assert unsaved.body["skipped"] == [
        {"would_fire_at": "2027-03-14T07:00:00Z", "local": "2027-03-14T03:00:00-04:00"}
    ]

    # The ticker plans 12:05; the run history shows it.
    call.clock.set(datetime(2026, 12, 2, 12, 3, 10, tzinfo=UTC))
    shard = call.parts.store.get_job(EXAMPLE_JOB).shard  # type: ignore[union-attr]
    assert call.parts.planner().plan(shard).runs_planned == 1
    runs = call.send(load("api_list_runs.json"))
    assert runs.status == 200 and [r["id"] for r in runs.body["items"]] == [f"{EXAMPLE_JOB}:20261202T120500Z"]
    run = call.send(load("api_get_run.json"))
    assert run.status == 200
    assert run.body["state"] == "planned" and run.body["trigger"] == "schedule"
    assert run.body["timings"]["scheduled_for"] == "2026-12-02T12:05:00Z"
    assert run.body["timings"]["planned_at"] == "2026-12-02T12:03:10Z"
    assert run.body["attempts"] == [] and run.body["outcome"] is None

    patched = call.send(load("api_patch_job.json"))  # If-Match: "1"
    assert patched.status == 200, patched.body
    assert patched.headers["ETag"] == '"2"' and patched.body["name"] == "nightly-report-v2"
    assert patched.body["schedule"]["expression"] == "0 */2 * * *"
    assert patched.body["schedule"]["timezone"] == "Europe/Berlin"  # kept: partial update
    assert patched.body["policies"] == {**created.body["policies"], "missed_fire": "run_all"}
    assert patched.body["next_fire_at"] == "2026-12-02T13:00:00Z"  # 14:00 Berlin
    stale = call.send(load("api_patch_job.json"))
    assert stale.status == 412 and stale.content_type == "application/problem+json"

    paused = call.send(load("api_pause_job.json"))
    assert paused.status == 200 and paused.body["state"] == "paused" and paused.headers["ETag"] == '"3"'
    resumed = call.send(load("api_resume_job.json"))
    assert resumed.status == 200 and resumed.body["state"] == "active" and resumed.headers["ETag"] == '"4"'
    assert resumed.body["paused_fires"]["count"] == 0

    deleted = call.send(load("api_delete_job.json"))
    assert deleted.status == 204 and deleted.body == ""
    gone = call.send(load("api_get_job.json"))
    assert gone.status == 404 and gone.content_type == "application/problem+json"
    assert gone.body["title"] == "Not Found" and gone.body["instance"] == f"/jobs/{EXAMPLE_JOB}"
