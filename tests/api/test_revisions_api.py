"""Revisions and the audit log through the API (issue 33, part 3): every job write is a revision (who,
when, what changed, the note), readable, diffable and rolled back to; every owner has an audit log of
their jobs' writes; another owner sees none of it."""

from __future__ import annotations

from tests.api.conftest import ALICE, BOB, Api, job_body

FIRST_TARGET = {"kind": "http", "config": {"url": "https://hooks.example.com/first", "method": "POST"}}
SECOND_TARGET = {"kind": "http", "config": {"url": "https://hooks.example.com/second", "method": "PUT"}}


def _history(call: Api, job_id: str, owner: str = ALICE) -> list[dict]:  # type: ignore[type-arg]
    answer = call("GET", f"/jobs/{job_id}/revisions", owner=owner)
    assert answer.status == 200, answer.body
    return list(answer.body["items"])


def test_every_write_is_a_revision_with_who_what_and_why(call: Api) -> None:
    made = call("POST", "/jobs", body=job_body(target=FIRST_TARGET), owner=ALICE).body
    job_id = made["id"]
    edited = call(
        "PATCH",
        f"/jobs/{job_id}",
        query="note=move+to+the+new+host",
        body={"schedule": {"expression": "0 4 * * *"}, "target": SECOND_TARGET},
        owner=ALICE,
    )
    assert edited.status == 200, edited.body
    assert call("POST", f"/jobs/{job_id}/pause", query="note=maintenance", owner=ALICE).status == 200
    assert call("POST", f"/jobs/{job_id}/resume", owner=ALICE).status == 200

    history = _history(call, job_id)
    assert [(r["revision"], r["action"]) for r in history] == [
        (4, "resume"),
        (3, "pause"),
        (2, "update"),
        (1, "create"),
    ]
    update = history[2]
    assert update["note"] == "move to the new host" and update["actor"]
    assert {"schedule.expression", "target.config"} <= set(update["changed"])
    assert update["definition"]["schedule"]["expression"] == "0 4 * * *"
    assert history[1]["note"] == "maintenance" and history[1]["changed"] == ["state"]
    # The run a write plans names the revision that planned it.
    run = call("POST", f"/jobs/{job_id}/runs", owner=ALICE).body
    assert run["job_version"] == 4

    diff = call("GET", f"/jobs/{job_id}/diff", query="from=1&to=2", owner=ALICE)
    assert diff.status == 200, diff.body
    changes = {c["field"]: (c["before"], c["after"]) for c in diff.body["changes"]}
    assert changes["schedule.expression"] == ("*/5 * * * *", "0 4 * * *")
    assert changes["target.config"][1]["url"] == "https://hooks.example.com/second"
    one = call("GET", f"/jobs/{job_id}/revisions/1", owner=ALICE).body
    assert one["action"] == "create" and one["definition"]["target"]["config"]["url"].endswith("/first")


def test_a_rollback_restores_an_earlier_schedule_and_target_as_a_new_revision(call: Api) -> None:
    job_id = call("POST", "/jobs", body=job_body(target=FIRST_TARGET), owner=ALICE).body["id"]
    call("PATCH", f"/jobs/{job_id}", body={"schedule": {"expression": "0 4 * * *"}, "target": SECOND_TARGET},
         owner=ALICE)  # fmt: skip
    assert call("POST", f"/jobs/{job_id}/pause", query="note=hold", owner=ALICE).status == 200

    without_note = call("POST", f"/jobs/{job_id}/rollback", body={"revision": 1}, owner=ALICE)
    assert without_note.status == 422 and without_note.body["errors"][0]["field"] == "note"
    missing = call("POST", f"/jobs/{job_id}/rollback", body={"revision": 9, "note": "x"}, owner=ALICE)
    assert missing.status == 404
    rolled = call(
        "POST", f"/jobs/{job_id}/rollback", body={"revision": 1, "note": "the new host is down"}, owner=ALICE
    )
    assert rolled.status == 200, rolled.body
    assert rolled.body["schedule"]["expression"] == "*/5 * * * *"
    assert rolled.body["target"]["config"]["url"] == "https://hooks.example.com/first"
    assert rolled.body["state"] == "paused"  # a rollback restores what the job does, not whether it runs
    latest = _history(call, job_id)[0]
    assert (latest["revision"], latest["action"], latest["note"]) == (4, "rollback", "the new host is down")
    assert {"schedule.expression", "target.config"} <= set(latest["changed"])


def test_the_audit_log_is_the_owners_alone_and_outlives_a_delete(call: Api) -> None:
    first = call("POST", "/jobs", body=job_body(name="first"), owner=ALICE).body["id"]
    call.clock.advance(1)
    second = call("POST", "/jobs", body=job_body(name="second"), owner=ALICE).body["id"]
    bobs = call("POST", "/jobs", body=job_body(name="bob's"), owner=BOB).body["id"]
    call.clock.advance(1)
    assert call("DELETE", f"/jobs/{first}", query="note=not+needed", owner=ALICE).status == 204

    audit = call("GET", "/audit", owner=ALICE)
    assert audit.status == 200
    entries = [(e["job_id"], e["action"]) for e in audit.body["items"]]
    assert entries == [(first, "delete"), (second, "create"), (first, "create")]
    assert all(e["definition"] is None for e in audit.body["items"])
    assert [(e["job_id"], e["action"]) for e in call("GET", "/audit", owner=BOB).body["items"]] == [
        (bobs, "create")
    ]
    # A deleted job's history stays its owner's; another owner's answers as a missing job.
    assert [r["action"] for r in _history(call, first)] == ["delete", "create"]
    assert call("GET", f"/jobs/{first}/revisions", owner=BOB).status == 404
    assert call("GET", f"/jobs/{second}/revisions/1", owner=BOB).status == 404
    assert call("GET", f"/jobs/{second}/diff", query="from=1&to=1", owner=BOB).status == 404
    rollback = call("POST", f"/jobs/{second}/rollback", body={"revision": 1, "note": "x"}, owner=BOB)
    assert rollback.status == 404
    page = call("GET", "/audit", query="limit=2", owner=ALICE).body
    rest = call("GET", "/audit", query=f"limit=2&cursor={page['next_cursor']}", owner=ALICE).body
    assert len(page["items"]) == 2 and [e["action"] for e in rest["items"]] == ["create"]
    assert rest["next_cursor"] is None


def test_no_revision_shows_a_secret_value_and_a_job_id_named_again_keeps_its_old_history(call: Api) -> None:
    secret = {
        "kind": "http",
        "config": {"url": "https://hooks.example.com/s", "headers": {"Authorization": "Bearer t0p"}},
    }
    made = call(
        "POST", "/jobs", body=job_body(target=secret), headers={"Idempotency-Key": "once"}, owner=ALICE
    )
    assert made.status == 201, made.body
    job_id = made.body["id"]
    call("PATCH", f"/jobs/{job_id}", body={"target": {**secret, "config": {**secret["config"], "url": "https://hooks.example.com/t"}}},
         owner=ALICE)  # fmt: skip
    history = call("GET", f"/jobs/{job_id}/revisions", owner=ALICE).body["items"]
    diff = call("GET", f"/jobs/{job_id}/diff", query="from=1&to=2", owner=ALICE).body
    for shown in (str(history), str(diff)):
        assert "t0p" not in shown and "secret_refs" not in shown and "<redacted>" in shown

    assert call("DELETE", f"/jobs/{job_id}", query="note=gone", owner=ALICE).status == 204
    again = call(
        "POST", "/jobs", body=job_body(name="again"), headers={"Idempotency-Key": "once"}, owner=ALICE
    )
    assert again.status == 409, again.body  # the key's job id holds an earlier job's history
    assert [r["action"] for r in call("GET", f"/jobs/{job_id}/revisions", owner=ALICE).body["items"]] == [
        "delete",
        "update",
        "create",
    ]
