"""Secret headers through the API and the CLI (on moto, Secrets Manager as deployed): an answer's
"<redacted>" sent back keeps the stored value, so a job's answered target can be edited and sent back whole;
`tickwork jobs update --http` moves the URL and keeps the headers; a job written before secret values were
references is sealed by such an edit."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from tests.api.conftest import Api, job_body
from tests.api.test_completion_cli import InProcessClient, ok
from tickwork.client import commands
from tickwork.client.commands import tickwork
from tickwork.client.connection import Endpoint
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Target
from tickwork.domain.schedule import parse_schedule
from tickwork.handlers import runtime

URL = "https://hooks.example.com/a"
CONFIG = {
    "url": URL,
    "method": "PUT",
    "headers": {"Authorization": "Bearer one-1f2e", "X-Team": "payments"},
    "secret_headers": {"X-Sig-Seed": "seed-77ab"},
    "body": "{}",
}


def stored_target(job_id: str) -> Target:
    job = runtime.components().store.get_job(job_id)
    assert job is not None
    return job.target


def created(call: Api) -> dict[str, Any]:
    reply = call("POST", "/jobs", body=job_body(target={"kind": "http", "config": CONFIG}))
    assert reply.status == 201, reply.body
    return dict(reply.body)


def test_an_answered_target_sent_back_keeps_its_secret_values(call: Api) -> None:
    job = created(call)
    before = stored_target(job["id"])
    answered = job["target"]["config"]
    assert answered["headers"] == {
        "Authorization": "<redacted>",
        "X-Team": "payments",
        "X-Sig-Seed": "<redacted>",
    }
    moved = {"kind": "http", "config": {**answered, "url": "https://hooks.example.com/b"}}
    patched = call("PATCH", f"/jobs/{job['id']}", body={"target": moved})
    assert patched.status == 200, patched.body
    after = stored_target(job["id"])
    assert after.config["url"] == "https://hooks.example.com/b"
    assert after.config["secret_refs"] == before.config["secret_refs"]  # the same stored values
    assert after.config["headers"] == {"X-Team": "payments"}


def test_redacted_names_no_value_on_a_create_or_for_a_header_the_job_does_not_keep(call: Api) -> None:
    config = {**CONFIG, "headers": {"Authorization": "<redacted>"}}
    refused = call("POST", "/jobs", body=job_body(target={"kind": "http", "config": config}))
    assert refused.status == 422
    assert refused.body["errors"][0]["field"] == "target.config.headers.Authorization"
    job = created(call)
    other = {**CONFIG, "headers": {"X-Other-Token": "<redacted>"}}
    refused = call("PATCH", f"/jobs/{job['id']}", body={"target": {"kind": "http", "config": other}})
    assert refused.status == 422 and "keeps none" in refused.body["detail"]


def test_a_job_with_a_plain_credential_from_before_is_sealed_by_an_edit_that_keeps_it(call: Api) -> None:
    parts = runtime.components()
    legacy = Target(
        "http", {"url": URL, "method": "POST", "headers": {"Authorization": "Bearer old-9c"}, "body": ""}
    )
    job = parts.job_service().create(
        "arn:aws:iam::123456789012:user/alice",
        JobSpec(name="legacy", schedule=parse_schedule("0 3 * * *"), target=legacy),
    )
    answered = call("GET", f"/jobs/{job.job_id}")
    assert answered.status == 200, answered.body
    assert answered.body["target"]["config"]["headers"] == {"Authorization": "<redacted>"}
    target = {"kind": "http", "config": {**answered.body["target"]["config"], "url": f"{URL}/v2"}}
    assert call("PATCH", f"/jobs/{job.job_id}", body={"target": target}).status == 200
    sealed = stored_target(job.job_id)
    assert "Authorization" not in sealed.config["headers"] and "Authorization" in sealed.config["secret_refs"]
    reference = sealed.config["secret_refs"]["Authorization"]
    assert parts.header_secrets.get(job.owner, reference) == "Bearer old-9c"


@pytest.fixture
def cli(call: Api, monkeypatch: pytest.MonkeyPatch) -> Any:
    client = InProcessClient(call)
    monkeypatch.setattr(commands, "resolve_endpoint", lambda **_: Endpoint("http://in-process"))
    monkeypatch.setattr(commands, "ApiClient", lambda endpoint: client)
    monkeypatch.setattr(commands, "out", Console(width=300, soft_wrap=True))

    def run(*args: str) -> Result:
        return CliRunner().invoke(tickwork, ["-o", "json", *args])

    return run


def test_jobs_update_http_moves_the_url_and_keeps_method_body_and_headers(cli: Any, call: Api) -> None:
    job = created(call)
    before = stored_target(job["id"])
    moved = ok(cli("jobs", "update", job["id"], "--http", "https://hooks.example.com/c"))
    assert moved["target"]["config"]["url"] == "https://hooks.example.com/c"
    after = stored_target(job["id"])
    assert (after.config["method"], after.config["body"]) == ("PUT", "{}")
    assert after.config["headers"] == {"X-Team": "payments"}
    assert after.config["secret_refs"] == before.config["secret_refs"]


def test_kept_secret_values_stay_with_their_origin(call: Api, cli: Any) -> None:
    job = created(call)
    answered = job["target"]["config"]
    elsewhere = {"kind": "http", "config": {**answered, "url": "https://collector.example.net/a"}}
    refused = call("PATCH", f"/jobs/{job['id']}", body={"target": elsewhere})
    assert refused.status == 422 and refused.body["errors"][0]["field"] == "target.config.url"
    assert "another origin" in refused.body["detail"]
    assert cli("jobs", "update", job["id"], "--http", "http://hooks.example.com/a").exit_code == 1  # scheme
    with_values = {"kind": "http", "config": {**CONFIG, "url": "https://collector.example.net/a"}}
    assert call("PATCH", f"/jobs/{job['id']}", body={"target": with_values}).status == 200  # values given


def test_jobs_update_http_writes_only_the_job_it_read(
    cli: Any, call: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = created(call)
    read = commands._moved_http_target

    def read_then_someone_edits(ctx: Any, job_id: str, url: str) -> Any:
        answer = read(ctx, job_id, url)
        assert call("PATCH", f"/jobs/{job_id}", body={"name": "renamed meanwhile"}).status == 200
        return answer

    monkeypatch.setattr(commands, "_moved_http_target", read_then_someone_edits)
    stale = cli("jobs", "update", job["id"], "--http", "https://hooks.example.com/d")
    assert stale.exit_code == 1 and "412" in stale.stderr + stale.stdout
    assert stored_target(job["id"]).config["url"] == URL
