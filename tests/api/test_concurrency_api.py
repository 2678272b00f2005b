"""A job's concurrency key through the API (on moto) and the command line: `policies.concurrency` on create,
edit (replaced whole, null removes it) and every job answer; bad keys and limits are 422 problems naming the
field; a create that names no key keeps the fingerprint it had before the field existed; the run a create
plans carries the key on its view; `jobs create/update --concurrency-key/--concurrency-limit` and apply
files set it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Api, job_body
from tests.api.test_completion_cli import cli, ok  # noqa: F401 - the command line on this API
from tickwork.api.models import JobCreate
from tickwork.client.apply import Action, load_file, plan
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.models import Concurrency

PROBLEM = "application/problem+json"
HOST = {"key": "api.example.com", "limit": 2}


def create(call: Api, **overrides: Any) -> dict[str, Any]:
    reply = call("POST", "/jobs", body=job_body(**overrides))
    assert reply.status == 201, reply.body
    return dict(reply.body)


def test_a_key_is_created_answered_and_carried_by_the_planned_runs_view_and_message(call: Api) -> None:
    job = create(call, schedule={"expression": "* * * * *"}, policies={"concurrency": HOST})

    assert job["policies"]["concurrency"] == HOST
    assert call("GET", f"/jobs/{job['id']}").body["policies"]["concurrency"] == HOST
    run = next(iter(call.parts.store.claimable_runs(job["id"], call.clock.now())))
    assert run.job_view is not None and run.job_view.concurrency == Concurrency("api.example.com", 2)
    assert RunMessage.for_run(run).concurrency == Concurrency("api.example.com", 2)


def test_a_job_without_a_key_answers_null(call: Api) -> None:
    assert create(call)["policies"]["concurrency"] is None


def test_an_edit_replaces_the_key_keeps_it_when_omitted_and_null_removes_it(call: Api) -> None:
    job = create(call, policies={"concurrency": HOST})
    path = f"/jobs/{job['id']}"

    other = call("PATCH", path, body={"policies": {"concurrency": {"key": "db/orders", "limit": 1}}}).body
    assert other["policies"]["concurrency"] == {"key": "db/orders", "limit": 1}
    kept = call("PATCH", path, body={"policies": {"overlap": "skip"}}).body
    assert kept["policies"]["concurrency"] == {"key": "db/orders", "limit": 1}
    removed = call("PATCH", path, body={"policies": {"concurrency": None}}).body
    assert removed["policies"]["concurrency"] is None and removed["policies"]["overlap"] == "skip"


@pytest.mark.parametrize(
    ("concurrency", "field"),
    [
        pytest.param({"key": "", "limit": 1}, "policies.concurrency.key", id="empty_key"),
        pytest.param({"key": "k" * 129, "limit": 1}, "policies.concurrency.key", id="key_of_129"),
        pytest.param({"key": "api example", "limit": 1}, "policies.concurrency.key", id="space"),
        pytest.param({"key": "ключ", "limit": 1}, "policies.concurrency.key", id="non_ascii"),
        pytest.param({"key": "db", "limit": 0}, "policies.concurrency.limit", id="limit_0"),
        pytest.param({"key": "db", "limit": 10_001}, "policies.concurrency.limit", id="limit_over_10000"),
        pytest.param({"key": "db", "limit": "2"}, "policies.concurrency.limit", id="limit_as_text"),
        pytest.param({"key": "db"}, "policies.concurrency.limit", id="key_without_limit"),
        pytest.param({"limit": 2}, "policies.concurrency.key", id="limit_without_key"),
        pytest.param({"key": "db", "limit": 1, "host": "x"}, "policies.concurrency.host", id="unknown_field"),
    ],
)
def test_a_bad_key_or_limit_is_a_problem_naming_the_field(
    call: Api, concurrency: dict[str, Any], field: str
) -> None:
    reply = call("POST", "/jobs", body=job_body(policies={"concurrency": concurrency}))
    assert reply.status == 422 and reply.content_type == PROBLEM, (reply.status, reply.body)
    assert [error["field"] for error in reply.body["errors"]] == [field]
    assert call("GET", "/jobs").body["items"] == []

    job = create(call, name=f"edited {field}")
    edit = call("PATCH", f"/jobs/{job['id']}", body={"policies": {"concurrency": concurrency}})
    assert edit.status == 422 and [error["field"] for error in edit.body["errors"]] == [field]
    assert call("GET", f"/jobs/{job['id']}").body == job


def test_a_create_that_names_no_key_keeps_its_fingerprint_and_one_that_does_differs() -> None:
    plain = JobCreate.model_validate(job_body())
    before = plain.model_dump(mode="json")
    del before["completion"], before["heartbeat_seconds"], before["policies"]["concurrency"], before["alerts"]
    del before["calendars"], before["group"]
    canonical = json.dumps(before, sort_keys=True, separators=(",", ":"))
    assert plain.fingerprint() == hashlib.sha256(canonical.encode()).hexdigest()
    named_null = JobCreate.model_validate(job_body(policies={"concurrency": None}))
    keyed = JobCreate.model_validate(job_body(policies={"concurrency": HOST}))
    assert named_null.fingerprint() == plain.fingerprint() != keyed.fingerprint()


# --- the command line ------------------------------------------------------------------------------------


def test_jobs_create_and_update_set_show_and_remove_the_key(cli: Any) -> None:  # noqa: F811
    created = ok(
        cli(
            "jobs",
            "create",
            "--name",
            "sync",
            "--schedule",
            "*/5 * * * *",
            "--http",
            "https://api.example.com/sync",
            "--concurrency-key",
            "api.example.com",
            "--concurrency-limit",
            "2",
        )
    )
    assert created["policies"]["concurrency"] == HOST
    table = cli("jobs", "get", created["id"], output="table")
    assert table.exit_code == 0 and "at most 2 at once of key api.example.com" in table.stdout

    moved = ok(
        cli("jobs", "update", created["id"], "--concurrency-key", "db/orders", "--concurrency-limit", "1")
    )
    assert moved["policies"]["concurrency"] == {"key": "db/orders", "limit": 1}
    assert moved["policies"]["overlap"] == "allow"
    removed = ok(cli("jobs", "update", created["id"], "--no-concurrency-key"))
    assert removed["policies"]["concurrency"] is None

    assert cli("jobs", "update", created["id"], "--concurrency-key", "db").exit_code == 2
    both = cli("jobs", "update", created["id"], "--no-concurrency-key", "--concurrency-limit", "1")
    assert both.exit_code == 2
    refused = cli("jobs", "update", created["id"], "--concurrency-key", "a b", "--concurrency-limit", "1")
    assert refused.exit_code == 1 and "policies.concurrency.key" in refused.stderr


def _file(tmp_path: Path, **policies: Any) -> Path:
    path = tmp_path / "jobs.json"
    job = {**job_body(name="sync"), "policies": policies} if policies else job_body(name="sync")
    path.write_text(json.dumps([job]))
    return path


def test_apply_sets_compares_and_removes_the_key(cli: Any, tmp_path: Path) -> None:  # noqa: F811
    keyed = _file(tmp_path, concurrency=HOST)
    assert ok(cli("jobs", "apply", "-f", str(keyed), "--yes"))["counts"]["create"] == 1
    [job] = ok(cli("jobs", "list"))["items"]
    assert job["policies"]["concurrency"] == HOST
    # The same file again: nothing to change.
    assert ok(cli("jobs", "apply", "-f", str(keyed), "--yes"))["counts"]["unchanged"] == 1

    # A file that names no key means none: the key is removed.
    [change] = plan(load_file(_file(tmp_path)), [job], prune=False)
    assert change.action is Action.UPDATE
    assert set(change.diff) == {
        ("policies.concurrency.key", "api.example.com", None),
        ("policies.concurrency.limit", 2, None),
    }
    assert ok(cli("jobs", "apply", "-f", str(_file(tmp_path)), "--yes"))["counts"]["update"] == 1
    [back] = ok(cli("jobs", "list"))["items"]
    assert back["policies"]["concurrency"] is None
