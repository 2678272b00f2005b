"""Run context through the API (issue 33, part 4): a templated target is checked when the job is written (a
placeholder that is not one is a 422 naming the field, as problem+json), kept as written, and each run
shows the slots either side of its own."""

from __future__ import annotations

from tests.api.conftest import ALICE, Api, job_body

URL = "https://hooks.example.com/x"


def test_a_bad_placeholder_is_a_422_naming_its_field(call: Api) -> None:
    bad = call(
        "POST",
        "/jobs",
        body=job_body(target={"kind": "sqs", "config": {
            "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
            "message": "{{ scheduled_for }} {{ wall_clock }}", "templated": True}}),
        owner=ALICE,
    )  # fmt: skip
    assert bad.status == 422 and bad.headers["Content-Type"] == "application/problem+json"
    [error] = bad.body["errors"]
    assert (
        error["field"] == "target.config.message"
        and "unknown placeholder '{{ wall_clock }}'" in error["message"]
    )
    made = call("POST", "/jobs", body=job_body(name="report"), owner=ALICE).body
    edited = call(
        "PATCH",
        f"/jobs/{made['id']}",
        body={"target": {"kind": "http", "config": {
            "url": URL, "method": "POST", "body": "{{ attempt.date }}", "templated": True}}},
        owner=ALICE,
    )  # fmt: skip
    assert edited.status == 422 and edited.body["errors"][0]["field"] == "target.config.body"


def test_a_templated_job_keeps_its_template_and_its_runs_show_their_slots(call: Api) -> None:
    config = {"url": URL, "method": "POST", "body": '{"for": "{{ scheduled_for }}"}', "templated": True}
    target = {"kind": "http", "config": config}
    made = call("POST", "/jobs", body=job_body(target=target), owner=ALICE)
    assert made.status == 201, made.body
    assert made.body["target"]["config"]["templated"] is True
    assert made.body["target"]["config"]["body"] == '{"for": "{{ scheduled_for }}"}'

    run = call("POST", f"/jobs/{made.body['id']}/runs", owner=ALICE).body
    slot = run["timings"]["scheduled_for"]
    # A run on request stands between two slots of the */5 schedule.
    assert run["previous_slot"] < slot < run["next_slot"]
    assert run["previous_slot"].endswith(("0:00Z", "5:00Z")) and run["next_slot"].endswith(("0:00Z", "5:00Z"))
    assert (
        call("GET", f"/jobs/{made.body['id']}/runs/{run['id']}", owner=ALICE).body["next_slot"]
        == run["next_slot"]
    )
