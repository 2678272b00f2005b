"""How a run ends, through the API: `completion` and `heartbeat_seconds` on create, edit and every job answer
(defaulted per target kind), the 422s that name the field, and on every run its completion, its `result`
(`delivered` for a delivery run that succeeded), its last heartbeat and its lease."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from tests.api.conftest import Api, job_body
from tests.domain.test_repair_timing import DUE, a_run
from tickwork.api.models import JobCreate, RunOut
from tickwork.domain.models import Completion, JobView, OverlapPolicy, RetryPolicy, RunState, Standing, Target

PROBLEM = "application/problem+json"
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
SQS = {"kind": "sqs", "config": {"queue_url": QUEUE, "message": "go"}}
LAMBDA_EVENT = {"kind": "lambda", "config": {"function_name": "f", "invocation_type": "Event"}}
LAMBDA_SYNC = {"kind": "lambda", "config": {"function_name": "f"}}
EVERY_MINUTE = {"expression": "* * * * *"}  # its next fire is within the lookahead: created with its run
STEPFUNCTIONS = {
    "kind": "stepfunctions",
    "config": {"state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:m"},
}
ECS = {
    "kind": "ecs",
    "config": {
        "cluster": "batch",
        "task_definition": "nightly",
        "container": "main",
        "subnets": ["subnet-0a1b2c3d"],
    },
}


def create(call: Api, **overrides: Any) -> dict[str, Any]:
    reply = call("POST", "/jobs", body=job_body(**overrides))
    assert reply.status == 201, reply.body
    return dict(reply.body)


def refused(call: Api, method: str, path: str, body: dict[str, Any]) -> tuple[str, str]:
    reply = call(method, path, body=body)
    assert reply.status == 422 and reply.content_type == PROBLEM, (reply.status, reply.body)
    [error] = reply.body["errors"]
    return error["field"], error["message"]


# --- jobs --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "completion"),
    [
        pytest.param(None, "response", id="http"),
        pytest.param(LAMBDA_SYNC, "response", id="lambda_request_response"),
        pytest.param(LAMBDA_EVENT, "delivery", id="lambda_event"),
        pytest.param(SQS, "delivery", id="sqs"),
        pytest.param(STEPFUNCTIONS, "tracked", id="stepfunctions"),
        pytest.param(ECS, "tracked", id="ecs"),
    ],
)
def test_a_job_created_without_a_completion_gets_its_targets_default(
    call: Api, target: dict[str, Any] | None, completion: str
) -> None:
    job = create(call, **({} if target is None else {"target": target}))
    assert (job["completion"], job["heartbeat_seconds"]) == (completion, None)
    assert call("GET", f"/jobs/{job['id']}").body == job
    [listed] = call("GET", "/jobs").body["items"]
    assert listed["completion"] == completion


def test_a_callback_job_takes_a_heartbeat_and_a_day_long_timeout(call: Api) -> None:
    job = create(
        call, schedule=EVERY_MINUTE, completion="callback", heartbeat_seconds=60, timeout_seconds=86_400
    )
    assert (job["completion"], job["heartbeat_seconds"], job["timeout_seconds"]) == ("callback", 60, 86_400)
    stored = call.parts.store.get_job(job["id"])
    assert stored is not None and (stored.completion, stored.heartbeat_seconds) == (Completion.CALLBACK, 60)
    # The runs it planned carry it in their view: the executor needs no read of the job.
    runs = call("GET", f"/jobs/{job['id']}/runs").body["items"]
    assert runs and all(r["state"] == "planned" for r in runs)
    shown = {(r["completion"], r["result"], r["heartbeat_at"], r["lease"]) for r in runs}
    assert shown == {("callback", None, None, None)}


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        pytest.param(
            {"target": SQS, "completion": "callback"}, "completion", "http targets only", id="callback_on_sqs"
        ),
        pytest.param(
            {"completion": "delivery"}, "completion", "allows response or callback", id="delivery_on_http"
        ),
        pytest.param(
            {"target": LAMBDA_EVENT, "completion": "response"},
            "completion",
            "invocation_type Event allows delivery",
            id="response_on_lambda_event",
        ),
        pytest.param(
            {"heartbeat_seconds": 60},
            "heartbeat_seconds",
            "completion callback only",
            id="heartbeat_on_response",
        ),
        pytest.param(
            {"completion": "callback", "heartbeat_seconds": 120},
            "heartbeat_seconds",
            "longer than timeout_seconds 60 s",
            id="heartbeat_longer_than_the_timeout",
        ),
        pytest.param(
            {"timeout_seconds": 841},
            "timeout_seconds",
            "1-840 seconds for completion response; only completion callback",
            id="response_over_840_s",
        ),
        pytest.param(
            {"target": SQS, "timeout_seconds": 3600},
            "timeout_seconds",
            "for completion delivery",
            id="delivery_over_840_s",
        ),
        pytest.param(
            {"completion": "callback", "timeout_seconds": 86_401}, "timeout_seconds", "", id="over_a_day"
        ),
        pytest.param(
            {"completion": "callback", "heartbeat_seconds": 9}, "heartbeat_seconds", "", id="heartbeat_9_s"
        ),
        pytest.param({"completion": "eventually"}, "completion", "", id="unknown_completion"),
    ],
)
def test_a_create_is_refused_naming_the_field(
    call: Api, overrides: dict[str, Any], field: str, words: str
) -> None:
    named, message = refused(call, "POST", "/jobs", job_body(**overrides))
    assert named == field and words in message
    assert call("GET", "/jobs").body["items"] == []


def test_an_edit_switches_to_callback_and_back(call: Api) -> None:
    job = create(call, schedule=EVERY_MINUTE)
    path = f"/jobs/{job['id']}"

    on = call(
        "PATCH", path, body={"completion": "callback", "heartbeat_seconds": 30, "timeout_seconds": 7200}
    )
    assert on.status == 200, on.body
    assert (on.body["completion"], on.body["heartbeat_seconds"], on.body["timeout_seconds"]) == (
        "callback",
        30,
        7200,
    )
    # Another edit leaves them alone; null removes the heartbeat.
    assert call("PATCH", path, body={"name": "renamed"}).body["heartbeat_seconds"] == 30
    quiet = call("PATCH", path, body={"heartbeat_seconds": None})
    assert (quiet.body["completion"], quiet.body["heartbeat_seconds"]) == ("callback", None)
    # Back to response: the 2 h timeout must come down in the same request.
    field, message = refused(call, "PATCH", path, {"completion": "response"})
    assert field == "timeout_seconds" and "1-840 seconds for completion response" in message
    off = call("PATCH", path, body={"completion": "response", "timeout_seconds": 600})
    assert (off.body["completion"], off.body["heartbeat_seconds"], off.body["timeout_seconds"]) == (
        "response",
        None,
        600,
    )
    # The unclaimed runs' views follow the job.
    runs = call("GET", f"{path}/runs").body["items"]
    assert runs and {r["completion"] for r in runs} == {"response"}


def test_a_new_target_kind_re_defaults_a_completion_it_does_not_allow(call: Api) -> None:
    job = create(call)
    path = f"/jobs/{job['id']}"
    moved = call("PATCH", path, body={"target": SQS})
    assert moved.status == 200 and moved.body["completion"] == "delivery"
    back = call("PATCH", path, body={"target": job_body()["target"]})
    assert back.body["completion"] == "response"
    # A callback job with a timeout only callback allows cannot silently become a delivery job.
    call("PATCH", path, body={"completion": "callback", "heartbeat_seconds": 60, "timeout_seconds": 3600})
    field, message = refused(call, "PATCH", path, {"target": SQS})
    assert field == "timeout_seconds" and "for completion delivery" in message
    assert call("GET", path).body["completion"] == "callback"
    # Given with the target, the completion is checked against it.
    field, message = refused(call, "PATCH", path, {"target": SQS, "completion": "callback"})
    assert field == "completion" and "http targets only" in message


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"heartbeat_seconds": 30}, "heartbeat_seconds", id="heartbeat_on_response"),
        pytest.param({"completion": "delivery"}, "completion", id="delivery_on_http"),
        pytest.param({"timeout_seconds": 900}, "timeout_seconds", id="response_over_840_s"),
        pytest.param({"heartbeat_seconds": 86_401}, "heartbeat_seconds", id="heartbeat_over_a_day"),
    ],
)
def test_an_edit_is_refused_naming_the_field(call: Api, body: dict[str, Any], field: str) -> None:
    job = create(call)
    assert refused(call, "PATCH", f"/jobs/{job['id']}", body)[0] == field
    assert call("GET", f"/jobs/{job['id']}").body == job


def test_a_replayed_create_may_name_the_default_completion_but_not_another(call: Api) -> None:
    headers = {"Idempotency-Key": "completion-1"}
    first = call("POST", "/jobs", body=job_body(), headers=headers)
    same = call("POST", "/jobs", body=job_body(completion="response"), headers=headers)
    assert (first.status, same.status) == (201, 200) and same.body == first.body
    other = call("POST", "/jobs", body=job_body(completion="callback"), headers=headers)
    assert other.status == 409 and other.content_type == PROBLEM


def test_a_request_that_names_neither_keeps_the_fingerprint_it_had_before_they_existed() -> None:
    body = job_body()
    request = JobCreate.model_validate(body)
    before = request.model_dump(mode="json")
    del before["completion"], before["heartbeat_seconds"], before["policies"]["concurrency"], before["alerts"]
    del before["calendars"], before["group"]
    canonical = json.dumps(before, sort_keys=True, separators=(",", ":"))
    assert request.fingerprint() == hashlib.sha256(canonical.encode()).hexdigest()
    assert JobCreate.model_validate({**body, "completion": "callback"}).fingerprint() != request.fingerprint()


DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({}, id="http_default"),
        pytest.param({"completion": "callback", "heartbeat_seconds": 60}, id="http_callback"),
        pytest.param({"completion": "callback", "timeout_seconds": 86_400}, id="a_day_long_callback"),
        pytest.param({"completion": "response", "timeout_seconds": 840}, id="http_response_840_s"),
        pytest.param({"target": SQS, "completion": "delivery"}, id="sqs_delivery"),
        pytest.param({"target": LAMBDA_EVENT, "completion": "delivery"}, id="lambda_event_delivery"),
        pytest.param({"target": LAMBDA_SYNC, "completion": "response"}, id="lambda_sync_response"),
        pytest.param({"target": SQS, "completion": "callback"}, id="sqs_callback"),
        pytest.param({"target": SQS, "completion": "response"}, id="sqs_response"),
        pytest.param({"target": LAMBDA_SYNC, "completion": "delivery"}, id="lambda_sync_delivery"),
        pytest.param({"target": LAMBDA_EVENT, "completion": "response"}, id="lambda_event_response"),
        pytest.param({"completion": "delivery"}, id="http_delivery"),
        pytest.param({"heartbeat_seconds": 60}, id="heartbeat_without_callback"),
        pytest.param({"target": STEPFUNCTIONS, "heartbeat_seconds": 60}, id="heartbeat_on_stepfunctions"),
        pytest.param({"timeout_seconds": 841}, id="response_841_s"),
        pytest.param({"target": SQS, "timeout_seconds": 3600}, id="delivery_an_hour"),
        pytest.param({"target": STEPFUNCTIONS}, id="stepfunctions_default"),
        pytest.param({"target": STEPFUNCTIONS, "completion": "tracked"}, id="stepfunctions_tracked"),
        pytest.param({"target": STEPFUNCTIONS, "completion": "delivery"}, id="stepfunctions_delivery"),
        pytest.param({"target": ECS, "completion": "tracked"}, id="ecs_tracked"),
        pytest.param({"target": ECS, "completion": "delivery"}, id="ecs_delivery"),
        pytest.param({"target": ECS, "completion": "response"}, id="ecs_response"),
        pytest.param({"target": SQS, "completion": "tracked"}, id="sqs_tracked"),
        pytest.param({"completion": "tracked"}, id="http_tracked"),
        pytest.param({"target": STEPFUNCTIONS, "timeout_seconds": 86_400}, id="a_day_long_default_tracked"),
        pytest.param(
            {"target": ECS, "completion": "tracked", "timeout_seconds": 86_400}, id="a_day_long_tracked"
        ),
        pytest.param(
            {"target": ECS, "completion": None, "timeout_seconds": 3600}, id="a_null_completion_an_hour"
        ),
        pytest.param(
            {"target": STEPFUNCTIONS, "completion": "delivery", "timeout_seconds": 3600},
            id="stepfunctions_delivery_an_hour",
        ),
        pytest.param(
            {"target": ECS, "completion": "tracked", "timeout_seconds": 86_401}, id="tracked_over_a_day"
        ),
        pytest.param(
            {"target": ECS, "completion": "tracked", "heartbeat_seconds": 60}, id="heartbeat_on_tracked"
        ),
    ],
)
def test_the_document_states_the_completion_rules_a_create_is_checked_by(
    call: Api, overrides: dict[str, Any]
) -> None:
    """A create body the committed document's JobCreate schema accepts is created, and one it refuses is a
    422 (the one rule it states in words, a heartbeat no longer than the timeout, is not among these)."""
    document = json.loads(DOCUMENT.read_text())
    schema = jsonschema_rs.validator_for(
        {"$ref": "#/components/schemas/JobCreate", "components": document["components"]}
    )
    body = job_body(**overrides)
    reply = call("POST", "/jobs", body=body)
    assert reply.status in (201, 422), reply.body
    assert schema.is_valid(body) is (reply.status == 201), reply.body


# --- runs --------------------------------------------------------------------------------------------------


def view(completion: Completion, target: Target | None = None) -> JobView:
    return JobView(1, Standing.ACTIVE, target, 60, RetryPolicy(), OverlapPolicy.ALLOW, completion)


@pytest.mark.parametrize(
    ("completion", "state", "result"),
    [
        pytest.param(Completion.DELIVERY, RunState.SUCCEEDED, "delivered", id="a_delivered_run"),
        pytest.param(Completion.RESPONSE, RunState.SUCCEEDED, "completed", id="an_answered_run"),
        pytest.param(Completion.CALLBACK, RunState.SUCCEEDED, "completed", id="a_reported_run"),
        pytest.param(Completion.DELIVERY, RunState.FAILED, None, id="a_failed_delivery"),
        pytest.param(Completion.DELIVERY, RunState.PLANNED, None, id="a_planned_delivery"),
    ],
)
def test_a_run_says_delivered_only_for_a_delivery_that_succeeded(
    completion: Completion, state: RunState, result: str | None
) -> None:
    out = RunOut.of(a_run(state=state, job_view=view(completion))).model_dump(mode="json")
    assert (out["completion"], out["result"]) == (str(completion), result)


def test_a_run_without_a_view_reads_as_response() -> None:
    out = RunOut.of(a_run(state=RunState.SUCCEEDED)).model_dump(mode="json")
    assert (out["completion"], out["result"], out["heartbeat_at"]) == ("response", "completed", None)


def test_a_running_callback_run_shows_its_last_heartbeat_and_its_lease() -> None:
    running = a_run(
        state=RunState.RUNNING,
        attempt=1,
        job_view=view(Completion.CALLBACK),
        lease_owner="w-1#abc",
        lease_expires_at=DUE + timedelta(minutes=2),
        heartbeat_at=DUE + timedelta(seconds=30),
    )
    out = RunOut.of(running).model_dump(mode="json")
    assert out["completion"] == "callback" and out["result"] is None
    assert out["heartbeat_at"] == "2026-12-02T12:05:30Z"
    assert out["lease"] == {"owner": "w-1#abc", "expires_at": "2026-12-02T12:07:00Z"}


def test_the_api_answers_a_delivered_run_as_delivered(call: Api) -> None:
    job = create(call, target=SQS, schedule=EVERY_MINUTE)
    listed = call("GET", f"/jobs/{job['id']}/runs").body["items"]
    assert listed and {(r["completion"], r["result"]) for r in listed} == {("delivery", None)}
    store = call.parts.store
    run = store.list_runs(job["id"])[-1]
    done = replace(run, state=RunState.SUCCEEDED, attempt=1, finished_at=run.due_at, outcome="MessageId")
    store.transition_run(run, done)

    one = call("GET", f"/jobs/{job['id']}/runs/{run.run_id}").body
    assert (one["state"], one["completion"], one["result"]) == ("succeeded", "delivery", "delivered")
