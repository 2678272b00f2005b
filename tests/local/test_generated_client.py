"""Typed clients generated from docs/openapi.json work (issue 33, "Clients that generate"): the suite
generates one with openapi-python-client (the `dev` extra), without a schema it cannot process, and one
with openapi-typescript + openapi-fetch (`make install`, from npm) checked by `tsc --strict`; each builds a
job of every target kind with its types, and drives create, list, preview, pause, resume, run now, runs and
delete against a running `tickwork local`."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.local.harness import TOKEN, Supervisor, Target

REPO = Path(__file__).resolve().parents[2]
GENERATOR = Path(sys.executable).with_name("openapi-python-client")
TS_BIN = REPO / ".tools" / "ts" / "node_modules" / ".bin"  # `make install` puts them there
TS_DRIVER = Path(__file__).with_name("ts") / "drive.mts"
PACKAGE = "tickwork_client"
CONFIGS: dict[str, dict[str, Any]] = {
    "sqs": {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs", "message": "m"},
    "sns": {"topic_arn": "arn:aws:sns:us-east-1:123456789012:alerts", "message": "m"},
    "eventbridge": {"source": "a", "detail_type": "b"},
    "lambda": {"function_name": "f", "invocation_type": "Event"},
    "stepfunctions": {"state_machine_arn": "arn:aws:states:eu-west-1:123456789012:stateMachine:etl"},
    "ecs": {"cluster": "c", "task_definition": "t", "container": "main", "subnets": ["subnet-0123abcd"]},
}

needs_python_generator = pytest.mark.skipif(
    not GENERATOR.exists(), reason="openapi-python-client is missing: `make install` installs the dev extra"
)
needs_ts_tools = pytest.mark.skipif(
    not (TS_BIN / "tsc").exists() or not (TS_BIN / "openapi-typescript").exists(),
    reason="openapi-typescript and tsc are missing: `make install` installs them into .tools/ts with npm",
)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    out = tmp_path_factory.mktemp("client")
    done = subprocess.run(
        [str(GENERATOR), "generate", "--path", str(REPO / "docs" / "openapi.json"), "--meta", "none",
         "--output-path", str(out / PACKAGE)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Unable to process schema" not in output, output
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    with Supervisor(tmp_path_factory.mktemp("tickwork-client"), "--engine", "sqlite") as supervisor:
        yield supervisor


@needs_python_generator
def test_a_generated_client_builds_every_target_kind_and_drives_the_api(
    generated: Any, instance: Supervisor
) -> None:
    jobs = importlib.import_module(f"{PACKAGE}.api.jobs")
    runs = importlib.import_module(f"{PACKAGE}.api.runs")
    schedules = importlib.import_module(f"{PACKAGE}.api.schedules")
    models = importlib.import_module(f"{PACKAGE}.models")
    for name in ("create_job", "list_jobs", "pause_job", "resume_job", "delete_job"):
        importlib.import_module(f"{PACKAGE}.api.jobs.{name}")
    for name in ("run_job_now", "list_runs"):
        importlib.import_module(f"{PACKAGE}.api.runs.{name}")
    importlib.import_module(f"{PACKAGE}.api.schedules.preview_job")
    client = generated.AuthenticatedClient(base_url=f"http://127.0.0.1:{instance.port}", token=TOKEN)

    with Target() as target:
        configs = {"http": {"url": f"{target.url}/generated", "method": "POST"}, **CONFIGS}
        made = {}
        for kind, config in configs.items():
            body = models.JobCreate.from_dict(
                {"name": f"generated {kind}", "schedule": {"expression": "0 4 * * *"},
                 "target": {"kind": kind, "config": config}}
            )  # fmt: skip
            assert type(body.target).__name__.lower() == f"{kind}target", type(body.target)
            job = jobs.create_job.sync(client=client, body=body)
            assert isinstance(job, models.JobOut), job
            assert job.target.kind == kind
            made[kind] = job.id

        listed = jobs.list_jobs.sync(client=client, limit=100)
        assert isinstance(listed, models.JobListOut)
        assert {j.id for j in listed.items} >= set(made.values())
        http = made["http"]
        preview = schedules.preview_job.sync(http, client=client, count=3)
        assert isinstance(preview, models.PreviewOut) and len(preview.fires) == 3
        paused = jobs.pause_job.sync(http, client=client, note="generated client")
        assert isinstance(paused, models.JobOut) and paused.state == models.JobState.PAUSED
        resumed = jobs.resume_job.sync(http, client=client)
        assert isinstance(resumed, models.ResumedJobOut) and resumed.state == models.JobState.ACTIVE
        run = runs.run_job_now.sync(http, client=client)
        assert isinstance(run, models.RunOut), run
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            listed_runs = runs.list_runs.sync(http, client=client)
            assert isinstance(listed_runs, models.RunListOut)
            if any(r.id == run.id and r.state == models.RunState.SUCCEEDED for r in listed_runs.items):
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"run {run.id} did not succeed: {listed_runs}")
        assert any(call["run_id"] == run.id for call in target.calls)
        for job_id in made.values():
            assert jobs.delete_job.sync_detailed(job_id, client=client, note="done").status_code == 204
    left = jobs.list_jobs.sync(client=client, limit=100)
    assert not {j.id for j in left.items} & set(made.values())


@needs_ts_tools
def test_a_generated_typescript_client_compiles_strictly_and_drives_the_api(
    instance: Supervisor, tmp_path: Path
) -> None:
    """openapi-typescript as its users run it, with `--default-non-nullable false` (docs/clients.md says why:
    a field with a default is optional in a request), then tests/local/ts/drive.mts compiled by tsc --strict
    (it holds one target the types must refuse, marked @ts-expect-error) and run by node."""
    (tmp_path / "node_modules").symlink_to(TS_BIN.parent)
    (tmp_path / "drive.mts").write_text(TS_DRIVER.read_text())
    steps = [
        [str(TS_BIN / "openapi-typescript"), str(REPO / "docs" / "openapi.json"), "--default-non-nullable",
         "false", "-o", "schema.d.ts"],
        [str(TS_BIN / "tsc"), "--strict", "--module", "nodenext", "--moduleResolution", "nodenext",
         "--target", "es2022", "--types", "node", "--outDir", "out", "drive.mts"],
    ]  # fmt: skip
    for step in steps:
        done = subprocess.run(step, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    with Target() as target:
        done = subprocess.run(
            ["node", "out/drive.mjs", f"http://127.0.0.1:{instance.port}", TOKEN, target.url],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        run_id = report["run"]["id"]
        assert any(call["run_id"] == run_id for call in target.calls)
    assert sorted(report["made"]) == sorted(["http", *CONFIGS])
    assert set(report["listed"]) >= set(report["made"].values())
    assert report["fires"] == 3
    assert (report["paused"], report["resumed"]) == ("paused", "active")
    assert report["run"]["state"] == "succeeded"
    assert report["deleted"] == [204] * len(report["made"])
