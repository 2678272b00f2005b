"""The `tickwork` command line on how runs end, against the API handler in this process (on moto): jobs
create / update / get with --completion, --heartbeat, --timeout; runs list / get showing each run's
completion, lease and last heartbeat, and a delivered run as `delivered`; apply files naming a completion."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from tests.api.conftest import Api
from tickwork.client import commands
from tickwork.client.apply import Action, load_file, plan
from tickwork.client.commands import tickwork
from tickwork.client.connection import Answer, ApiError, Endpoint
from tickwork.domain.models import RunState

QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"


class InProcessClient:
    """The CLI's ApiClient, answered by the API handler in this process instead of over HTTP."""

    def __init__(self, call: Api) -> None:
        self.call = call

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        wanted = {k: v for k, v in (query or {}).items() if v is not None}
        reply = self.call(
            method, path, body=body, query=urllib.parse.urlencode(wanted), headers=dict(headers or {})
        )
        if not 200 <= reply.status < 300:
            raise ApiError(reply.status, reply.body if isinstance(reply.body, dict) else {})
        return Answer(reply.status, reply.headers, reply.body)

    def pages(self, path: str, query: dict[str, Any] | None = None, *, limit: int = 100) -> Iterator[Any]:
        cursor = None
        while True:
            page = self.request("GET", path, query={**(query or {}), "limit": limit, "cursor": cursor}).body
            yield from page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return


@pytest.fixture
def cli(call: Api, monkeypatch: pytest.MonkeyPatch) -> Any:
    client = InProcessClient(call)
    monkeypatch.setattr(commands, "resolve_endpoint", lambda **_: Endpoint("http://in-process"))
    monkeypatch.setattr(commands, "ApiClient", lambda endpoint: client)
    monkeypatch.setattr(commands, "out", Console(width=300, soft_wrap=True))  # a table row on one line

    def run(*args: str, output: str = "json") -> Result:
        return CliRunner().invoke(tickwork, ["-o", output, *args])

    return run


def ok(result: Result) -> Any:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return json.loads(result.stdout)


def test_jobs_create_update_and_get_say_how_runs_end(cli: Any) -> None:
    created = ok(
        cli(
            "jobs",
            "create",
            "--name",
            "rebuild",
            "--schedule",
            "* * * * *",
            "--http",
            "https://hooks.example.com/rebuild",
            "--completion",
            "callback",
            "--heartbeat",
            "60",
            "--timeout",
            "3600",
        )
    )
    assert (created["completion"], created["heartbeat_seconds"], created["timeout_seconds"]) == (
        "callback",
        60,
        3600,
    )
    table = cli("jobs", "get", created["id"], output="table")
    assert table.exit_code == 0 and "callback, heartbeat every 60 s" in table.stdout

    quiet = ok(cli("jobs", "update", created["id"], "--no-heartbeat"))
    assert (quiet["completion"], quiet["heartbeat_seconds"]) == ("callback", None)
    assert "callback, no heartbeat" in cli("jobs", "get", created["id"], output="table").stdout

    refused = cli("jobs", "update", created["id"], "--completion", "response")
    assert refused.exit_code == 1
    assert "timeout_seconds" in refused.stderr and "only completion callback" in refused.stderr
    back = ok(cli("jobs", "update", created["id"], "--completion", "response", "--timeout", "600"))
    assert (back["completion"], back["timeout_seconds"]) == ("response", 600)
    assert cli("jobs", "update", created["id"], "--heartbeat", "30", "--no-heartbeat").exit_code == 2


def test_runs_list_and_get_show_completion_lease_heartbeat_and_delivered(
    cli: Any, call: Api, tmp_path: Path
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "orders",
                "schedule": {"expression": "* * * * *"},
                "target": {"kind": "sqs", "config": {"queue_url": QUEUE, "message": "go"}},
            }
        )
    )
    job = ok(cli("jobs", "create", "-f", str(spec)))
    assert job["completion"] == "delivery"
    store = call.parts.store
    delivered, held = store.list_runs(job["id"], newest_first=False)[:2]
    store.transition_run(
        delivered, replace(delivered, state=RunState.SUCCEEDED, attempt=1, finished_at=delivered.due_at)
    )
    lease = held.due_at + timedelta(minutes=2)
    store.transition_run(
        held,
        replace(
            held,
            state=RunState.RUNNING,
            attempt=1,
            lease_owner="w-1#abc",
            lease_expires_at=lease,
            heartbeat_at=held.due_at + timedelta(seconds=20),
        ),
    )

    listed = cli("runs", "list", job["id"], output="table")
    assert listed.exit_code == 0, listed.output
    rows = {line.split("│")[1].strip(): line for line in listed.stdout.splitlines() if job["id"] in line}
    assert "delivered" in rows[delivered.run_id] and "succeeded" not in rows[delivered.run_id]
    assert "running" in rows[held.run_id] and "delivery" in rows[held.run_id]
    one = cli("runs", "get", held.run_id, output="table")
    assert one.exit_code == 0, one.output
    beat = held.due_at + timedelta(seconds=20)
    assert f"held by w-1#abc until {lease:%Y-%m-%dT%H:%M:%SZ}" in one.stdout
    assert f"last heartbeat  {beat:%Y-%m-%dT%H:%M:%SZ}" in one.stdout
    shown = cli("runs", "get", delivered.run_id, output="table").stdout
    assert "delivery: delivered (the message was accepted" in shown
    as_json = ok(cli("runs", "get", delivered.run_id))
    assert (as_json["state"], as_json["completion"], as_json["result"]) == (
        "succeeded",
        "delivery",
        "delivered",
    )


def _file(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "jobs.yaml"
    job = {
        "name": "rebuild",
        "schedule": {"expression": "0 3 * * *"},
        "target": {"kind": "http", "config": {"url": "https://hooks.example.com/rebuild"}},
        **extra,
    }
    path.write_text(json.dumps([job]))
    return path


def test_apply_compares_and_sets_the_completion(cli: Any, tmp_path: Path) -> None:
    callback = _file(tmp_path, completion="callback", heartbeat_seconds=300, timeout_seconds=14_400)
    assert ok(cli("jobs", "apply", "-f", str(callback), "--yes"))["counts"]["create"] == 1
    [job] = ok(cli("jobs", "list"))["items"]
    assert (job["completion"], job["heartbeat_seconds"], job["timeout_seconds"]) == ("callback", 300, 14_400)
    # The same file again: nothing to change, the completion compares equal.
    assert ok(cli("jobs", "apply", "-f", str(callback), "--yes"))["counts"]["unchanged"] == 1

    # A file that does not name it means the target's default, and no heartbeat.
    plain = load_file(_file(tmp_path))
    [change] = plan(plain, [job], prune=False)
    assert change.action is Action.UPDATE
    assert ("completion", "callback", "response") in change.diff
    assert ("heartbeat_seconds", 300, None) in change.diff
    assert ok(cli("jobs", "apply", "-f", str(_file(tmp_path)), "--yes"))["counts"]["update"] == 1
    [back] = ok(cli("jobs", "list"))["items"]
    assert (back["completion"], back["heartbeat_seconds"], back["timeout_seconds"]) == ("response", None, 60)
