"""The CLI's pure parts: reading a jobs file, planning an apply, and finding and signing for an API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tickwork.client.apply import Action, ApplyFileError, load_file, plan
from tickwork.client.connection import ConnectionSetupError, Endpoint, _sigv4_headers, resolve_endpoint


def _job(name: str, expression: str = "0 3 * * *", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "schedule": {"expression": expression},
        "target": {"kind": "http", "config": {"url": "https://hooks.example.com/x", **extra}},
    }


def _as_answered(body: dict[str, Any], job_id: str, version: int = 1) -> dict[str, Any]:
    """A job as GET /jobs answers it, from a normalized file entry."""
    return {
        **body,
        "id": job_id,
        "version": version,
        "state": "active",
        "schedule": {**body["schedule"], "description": "words"},
    }


def _write(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(json.dumps(document))  # JSON is YAML
    return path


def test_the_plan_creates_updates_leaves_and_prunes_by_name(tmp_path: Path) -> None:
    desired = load_file(_write(tmp_path, {"jobs": [_job("a"), _job("b", "0 4 * * *"), _job("c")]}))
    current_b = _as_answered(load_file(_write(tmp_path, [_job("b")]))[0], "job_b", 3)
    current_c = _as_answered(desired[2], "job_c")
    gone = _as_answered(load_file(_write(tmp_path, [_job("gone")]))[0], "job_gone", 2)
    changes = plan(desired, [current_b, current_c, gone], prune=True)
    by_name = {c.name: c for c in changes}
    assert {n: c.action for n, c in by_name.items()} == {
        "a": Action.CREATE,
        "b": Action.UPDATE,
        "c": Action.UNCHANGED,
        "gone": Action.DELETE,
    }
    assert by_name["b"].diff == (("schedule.expression", "0 3 * * *", "0 4 * * *"),)
    assert (by_name["b"].job_id, by_name["b"].version) == ("job_b", 3)
    assert (by_name["gone"].job_id, by_name["gone"].version) == ("job_gone", 2)
    assert "gone" not in {c.name for c in plan(desired, [gone], prune=False)}


def test_a_redacted_header_is_not_a_change_but_any_other_field_is(tmp_path: Path) -> None:
    desired = load_file(
        _write(tmp_path, [_job("a", headers={"Authorization": "Bearer s3cret", "X-Team": "p"})])
    )
    answered = _as_answered(desired[0], "job_a")
    answered["target"] = {
        "kind": "http",
        "config": {  # as the API answers it: secret headers among the headers, redacted
            **{k: v for k, v in desired[0]["target"]["config"].items() if k != "secret_headers"},
            "headers": {"Authorization": "<redacted>", "X-Team": "p"},
        },
    }
    assert plan(desired, [answered], prune=False)[0].action is Action.UNCHANGED
    answered["target"]["config"]["headers"]["X-Team"] = "q"
    changed = plan(desired, [answered], prune=False)[0]
    assert changed.action is Action.UPDATE and changed.diff == (("target.config.headers.X-Team", "q", "p"),)


def test_a_secret_header_added_by_the_file_is_a_change_whose_value_is_not_printed(tmp_path: Path) -> None:
    [before] = load_file(_write(tmp_path, [_job("a", headers={"X-Team": "p"})]))
    answered = _as_answered(before, "job_a")
    desired = load_file(
        _write(
            tmp_path, [_job("a", headers={"X-Team": "p", "X-Api-Key": "k1"}, secret_headers={"X-Sig": "s1"})]
        )
    )
    [change] = plan(desired, [answered], prune=False)
    assert change.action is Action.UPDATE
    assert set(change.diff) == {
        ("target.config.headers.X-Api-Key", None, "<redacted>"),
        ("target.config.headers.X-Sig", None, "<redacted>"),
    }


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("{not: [yaml", "not valid YAML"),
        ({"tasks": []}, "expected a list of jobs"),
        ([_job("a"), _job("a")], "listed twice"),
        (
            [{"name": "x", "schedule": {"expression": "61 * * * *"}, "target": _job("x")["target"]}],
            "jobs[0] ('x')",
        ),
        (
            [
                {
                    "name": "x",
                    "schedule": {"expression": "0 3 * * *", "timezone": "Mars/Base"},
                    "target": _job("x")["target"],
                }
            ],
            "unknown time zone",
        ),
        ([{"name": "x"}], "jobs[0] ('x'): schedule"),
    ],
)
def test_a_file_that_cannot_be_applied_is_refused_naming_the_job(
    tmp_path: Path, document: Any, message: str
) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    with pytest.raises(
        ApplyFileError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")
    ):
        load_file(path)


def test_two_current_jobs_with_one_name_stop_the_plan(tmp_path: Path) -> None:
    desired = load_file(_write(tmp_path, [_job("a")]))
    twins = [_as_answered(desired[0], "job_1"), _as_answered(desired[0], "job_2")]
    with pytest.raises(ApplyFileError, match="two of your jobs are named 'a'"):
        plan(desired, twins, prune=False)


def test_an_endpoint_comes_from_flags_the_environment_or_the_local_instance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TICKWORK_URL", "TICKWORK_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    flags = {"url": None, "token": None, "state_dir": tmp_path, "stack": None, "region": None, "sigv4": False}
    with pytest.raises(ConnectionSetupError, match="no running `tickwork local`"):
        resolve_endpoint(**flags)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "api.json").write_text(json.dumps({"url": "http://127.0.0.1:8080", "token": "t"}))
    assert resolve_endpoint(**flags) == Endpoint("http://127.0.0.1:8080", "t")
    monkeypatch.setenv("TICKWORK_URL", "https://api.example.com/prod/")
    monkeypatch.setenv("TICKWORK_TOKEN", "jwt")
    assert resolve_endpoint(**flags) == Endpoint("https://api.example.com/prod", "jwt")
    with pytest.raises(ConnectionSetupError, match="needs a region"):
        resolve_endpoint(**{**flags, "sigv4": True})
    signed = resolve_endpoint(**{**flags, "sigv4": True, "region": "eu-west-1"})
    assert signed == Endpoint("https://api.example.com/prod", None, "eu-west-1")
    with pytest.raises(ConnectionSetupError, match="not an http"):
        resolve_endpoint(**{**flags, "url": "ftp://x"})


def test_sigv4_signs_for_execute_api_in_the_region(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    endpoint = Endpoint("https://abc.execute-api.eu-west-1.amazonaws.com", sigv4_region="eu-west-1")
    headers = _sigv4_headers(endpoint, "GET", "/jobs?limit=5", None, {"Accept": "application/json"})
    authorization = headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    assert "X-Amz-Date" in headers


def test_a_new_job_whose_target_keeps_a_stored_secret_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    desired = load_file(_write(tmp_path, [_job("a", headers={"Authorization": "<redacted>"})]))
    with pytest.raises(ApplyFileError, match="keeps a stored secret value"):
        plan(desired, [], prune=False)
