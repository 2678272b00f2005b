"""The runs-on-request endpoints over HTTP: run now, retry, backfill, failed runs across jobs. Status codes,
headers, problem+json bodies for bad input, and tenancy."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import BOB, Api, job_body
from tests.fakes import RecordingMetrics, ScriptedInvoker, failure
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.models import split_run_id
from tickwork.services.executing import Executor, ExecutorConfig


def _job(call: Api, **overrides: Any) -> str:
    created = call("POST", "/jobs", body=job_body(**overrides))
    assert created.status == 201, created.body
    return str(created.body["id"])


def _fail(call: Api, job_id: str, run_id: str) -> None:
    """Deliver the run's message to an executor whose target answers 400 (not retryable)."""
    store = call.parts.store
    _, scheduled_for = split_run_id(run_id)
    run = store.get_run(job_id, scheduled_for)
    invoker = ScriptedInvoker(results=[failure(retryable=False, status="400")])
    executor = Executor(
        store, invoker, call.parts.dispatcher, call.clock, RecordingMetrics(), ExecutorConfig(worker_id="w")
    )
    executor.execute(RunMessage.for_run(run))
    assert store.get_run(job_id, scheduled_for).state.value == "failed"


def _problem(reply: Any, status: int) -> dict[str, Any]:
    assert reply.status == status, reply.body
    assert reply.content_type.startswith("application/problem+json"), reply.headers
    assert reply.body["status"] == status
    return dict(reply.body)


def test_run_now_answers_201_with_the_run_and_a_replay_answers_200(call: Api) -> None:
    job_id = _job(call)
    created = call("POST", f"/jobs/{job_id}/runs", headers={"Idempotency-Key": "now-1"})
    assert created.status == 201, created.body
    assert created.body["trigger"] == "manual" and created.body["state"] == "planned"
    assert created.headers["Location"] == f"/jobs/{job_id}/runs/{created.body['id']}"
    assert "~" in created.body["id"], "a run now's id is off every schedule slot"
    fetched = call("GET", f"/jobs/{job_id}/runs/{created.body['id']}")
    assert fetched.status == 200 and fetched.body["id"] == created.body["id"]
    replay = call("POST", f"/jobs/{job_id}/runs", headers={"Idempotency-Key": "now-1"})
    assert replay.status == 200 and replay.body["id"] == created.body["id"]
    assert replay.headers["Idempotent-Replayed"] == "true"
    other = _job(call)
    reused = _problem(call("POST", f"/jobs/{other}/runs", headers={"Idempotency-Key": "now-1"}), 409)
    assert "different request" in reused["detail"]


def test_run_now_on_a_paused_job_is_409_unless_even_if_paused(call: Api) -> None:
    job_id = _job(call)
    assert call("POST", f"/jobs/{job_id}/pause", query="note=test").status == 200
    refused = _problem(call("POST", f"/jobs/{job_id}/runs"), 409)
    assert "paused" in refused["detail"] and "even_if_paused" in refused["detail"]
    forced = call("POST", f"/jobs/{job_id}/runs", query="even_if_paused=true")
    assert forced.status == 201, forced.body
    _problem(call("POST", f"/jobs/{job_id}/runs", query="even_if_paused=maybe"), 422)


def test_another_owner_cannot_run_retry_or_backfill_a_job_nor_see_its_failed_runs(call: Api) -> None:
    job_id = _job(call)
    run_id = call("POST", f"/jobs/{job_id}/runs").body["id"]
    _fail(call, job_id, run_id)
    _problem(call("POST", f"/jobs/{job_id}/runs", owner=BOB), 404)
    _problem(call("POST", f"/jobs/{job_id}/runs/{run_id}/retry", owner=BOB), 404)
    window = {"from": "2026-12-02T10:00:00Z", "to": "2026-12-02T11:00:00Z"}
    _problem(call("POST", f"/jobs/{job_id}/backfill", body=window, owner=BOB), 404)
    mine = call("GET", "/runs", query="state=failed")
    assert [r["id"] for r in mine.body["items"]] == [run_id]
    theirs = call("GET", "/runs", query="state=failed", owner=BOB)
    assert theirs.status == 200 and theirs.body["items"] == []


def test_retry_answers_202_for_a_failed_run_and_409_for_one_still_planned(call: Api) -> None:
    job_id = _job(call)
    run_id = call("POST", f"/jobs/{job_id}/runs").body["id"]
    not_yet = _problem(call("POST", f"/jobs/{job_id}/runs/{run_id}/retry"), 409)
    assert "planned" in not_yet["detail"]
    _fail(call, job_id, run_id)
    retried = call("POST", f"/jobs/{job_id}/runs/{run_id}/retry")
    assert retried.status == 202, retried.body
    assert (retried.body["state"], retried.body["attempt"]) == ("retry_wait", 1)
    assert len(retried.body["attempts"]) == 1
    _problem(call("POST", f"/jobs/{job_id}/runs/{job_id}:nonsense/retry"), 404)
    _problem(call("POST", f"/jobs/{job_id}/runs/other:20261202T120000Z/retry"), 404)


def test_backfill_answers_what_it_created_and_skipped(call: Api) -> None:
    job_id = _job(call, schedule={"expression": "0 * * * *"})
    window = {"from": "2026-12-02T08:00:00Z", "to": "2026-12-02T11:00:00Z", "rate_per_second": 4}
    first = call("POST", f"/jobs/{job_id}/backfill", body=window)
    assert first.status == 202, first.body
    assert (first.body["created"], first.body["skipped"]) == (4, 0)
    assert first.body["first_due_at"] == "2026-12-02T12:00:30Z"
    assert first.body["last_due_at"] == "2026-12-02T12:00:30.750000Z"
    again = call("POST", f"/jobs/{job_id}/backfill", body=window)
    assert (again.status, again.body["created"], again.body["skipped"]) == (202, 0, 4)
    listed = call("GET", f"/jobs/{job_id}/runs", query="from=2026-12-02T08:00:00Z&to=2026-12-02T11:00:00Z")
    assert [r["trigger"] for r in listed.body["items"]] == ["backfill"] * 4


def test_backfill_refuses_bad_windows_with_the_field_named(call: Api) -> None:
    job_id = _job(call, schedule={"expression": "* * * * *"})
    path = f"/jobs/{job_id}/backfill"
    too_many = _problem(
        call("POST", path, body={"from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z"}), 422
    )
    assert too_many["errors"][0]["field"] == "to" and "more than 1000" in too_many["errors"][0]["message"]
    future = _problem(
        call("POST", path, body={"from": "2026-12-02T11:00:00Z", "to": "2026-12-03T00:00:00Z"}), 422
    )
    assert "future" in future["errors"][0]["message"]
    backwards = _problem(
        call("POST", path, body={"from": "2026-12-02T11:00:00Z", "to": "2026-12-02T10:00:00Z"}), 422
    )
    assert backwards["errors"][0]["message"] == "is before from"
    _problem(call("POST", path, body={"from": "2026-12-02T11:00:00Z"}), 422)
    _problem(call("POST", path, body={"from": "yesterday", "to": "2026-12-02T10:00:00Z"}), 422)
    window = {"from": "2026-12-02T10:00:00Z", "to": "2026-12-02T11:00:00Z"}
    _problem(call("POST", path, body={**window, "rate_per_second": 0}), 422)
    _problem(call("POST", path, body={**window, "extra": 1}), 422)
    _problem(call("POST", path, body="not json"), 400)


def test_failed_runs_need_state_failed_and_page_with_a_cursor(call: Api) -> None:
    _problem(call("GET", "/runs"), 422)
    _problem(call("GET", "/runs", query="state=succeeded"), 422)
    _problem(call("GET", "/runs", query="state=failed&cursor=bogus"), 400)
    job_id = _job(call)
    failed = []
    for _ in range(3):
        call.clock.advance(1)
        run_id = call("POST", f"/jobs/{job_id}/runs").body["id"]
        _fail(call, job_id, run_id)
        failed.append(run_id)
    page = call("GET", "/runs", query="state=failed&limit=2")
    assert [r["id"] for r in page.body["items"]] == failed[::-1][:2]
    rest = call("GET", "/runs", query=f"state=failed&limit=2&cursor={page.body['next_cursor']}")
    assert [r["id"] for r in rest.body["items"]] == failed[:1] and rest.body["next_cursor"] is None
