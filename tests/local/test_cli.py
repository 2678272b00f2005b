"""The `tickwork` API commands against a running `tickwork local` (SQLite): every command, its exit codes
(0 done, 1 the API refused, 2 usage), tables and JSON, apply run twice, and the README's walk-through."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from tests.local.harness import Supervisor, Target, free_port, wait_until
from tickwork.client.commands import tickwork

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    with Supervisor(tmp_path_factory.mktemp("tickwork-cli"), "--engine", "sqlite") as supervisor:
        yield supervisor


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    with Target() as t:
        yield t


def cli(instance: Supervisor, *args: str, output: str = "json") -> Result:
    """The CLI in-process, finding the instance from its state dir (run/api.json) as a user would."""
    return CliRunner().invoke(tickwork, ["--state-dir", str(instance.state_dir), "-o", output, *args])


def ok(result: Result) -> Any:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return json.loads(result.stdout)


def test_jobs_are_created_read_listed_paused_resumed_and_deleted(
    instance: Supervisor, target: Target
) -> None:
    job = ok(
        cli(instance, "jobs", "create", "--name", "cli-a", "--schedule", "0 3 * * *", "--http", target.url)
    )
    assert job["schedule"]["expression"] == "0 3 * * *" and job["state"] == "active"
    assert ok(cli(instance, "jobs", "get", job["id"]))["id"] == job["id"]
    listed = ok(cli(instance, "jobs", "list", "--all"))
    assert job["id"] in [j["id"] for j in listed["items"]]
    assert ok(cli(instance, "jobs", "pause", job["id"], "--note", "quiet night"))["state"] == "paused"
    assert ok(cli(instance, "jobs", "list", "--all", "--state", "paused"))["items"][0]["state"] == "paused"
    assert ok(cli(instance, "jobs", "resume", job["id"]))["state"] == "active"
    updated = ok(cli(instance, "jobs", "update", job["id"], "--schedule", "15 4 * * *", "--if-match", "3"))
    assert updated["schedule"]["expression"] == "15 4 * * *"
    stale = cli(instance, "jobs", "update", job["id"], "--name", "x", "--if-match", "1")
    assert stale.exit_code == 1 and "412" in stale.stderr
    table = cli(instance, "jobs", "get", job["id"], output="table")
    assert table.exit_code == 0 and "15 4 * * *" in table.stdout and "every day at 04:15" in table.stdout
    assert ok(cli(instance, "jobs", "delete", job["id"], "--yes", "--note", "done")) == {"deleted": job["id"]}
    gone = cli(instance, "jobs", "get", job["id"])
    assert gone.exit_code == 1 and "not found" in gone.stderr


def test_revisions_a_diff_a_rollback_and_the_audit_log(instance: Supervisor, target: Target) -> None:
    """Issue 33, part 3, on the SQLite engine through the CLI: a rollback that restores an earlier schedule
    and target, with every write's revision and note in the job's history and the audit log."""
    job = ok(
        cli(instance, "jobs", "create", "--name", "cli-rev", "--schedule", "0 3 * * *", "--http", target.url)
    )
    moved = ok(
        cli(instance, "jobs", "update", job["id"], "--schedule", "30 5 * * *", "--http", f"{target.url}/v2",
            "--note", "new endpoint")
    )  # fmt: skip
    assert moved["target"]["config"]["url"].endswith("/v2")
    assert ok(cli(instance, "jobs", "pause", job["id"], "--note", "v2 is failing"))["state"] == "paused"
    changes = {c["field"]: c for c in ok(cli(instance, "jobs", "diff", job["id"], "1", "2"))["changes"]}
    assert changes["schedule.expression"]["after"] == "30 5 * * *" and "target.config" in changes
    refused = cli(instance, "jobs", "rollback", job["id"], "1")
    assert refused.exit_code == 2 and "--note" in refused.stderr
    rolled = ok(cli(instance, "jobs", "rollback", job["id"], "1", "--note", "back to v1"))
    assert rolled["schedule"]["expression"] == "0 3 * * *" and rolled["target"]["config"]["url"] == target.url
    assert rolled["state"] == "paused"
    history = ok(cli(instance, "jobs", "revisions", job["id"]))["items"]
    assert [(r["revision"], r["action"], r["note"]) for r in history] == [
        (4, "rollback", "back to v1"),
        (3, "pause", "v2 is failing"),
        (2, "update", "new endpoint"),
        (1, "create", None),
    ]
    audit = ok(cli(instance, "audit", "--limit", "100"))["items"]
    assert [(e["revision"], e["action"]) for e in audit if e["job_id"] == job["id"]][:2] == [
        (4, "rollback"),
        (3, "pause"),
    ]
    table = cli(instance, "jobs", "revisions", job["id"], output="table")
    assert table.exit_code == 0 and "back to v1" in table.stdout


def test_run_now_retry_and_failed_runs(instance: Supervisor, target: Target, tmp_path: Path) -> None:
    job = ok(
        cli(instance, "jobs", "create", "--name", "cli-run", "--schedule", "0 3 * * *", "--http", target.url)
    )
    run = ok(cli(instance, "jobs", "run", job["id"]))
    assert run["trigger"] == "manual"
    wait_until(
        "the run now to succeed",
        lambda: ok(cli(instance, "runs", "get", run["id"]))["state"] == "succeeded",
        30,
        step=0.3,
    )
    assert [r["id"] for r in ok(cli(instance, "runs", "list", job["id"]))["items"]] == [run["id"]]
    refused = cli(instance, "runs", "retry", run["id"])
    assert refused.exit_code == 1 and "only a failed or cancelled run can be retried" in refused.stderr

    # A job whose target refuses the connection, one attempt: its run fails, shows in `runs failed`.
    closed = f"http://127.0.0.1:{free_port()}/"
    spec = tmp_path / "failing.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "cli-fails",
                "schedule": {"expression": "0 3 * * *"},
                "target": {"kind": "http", "config": {"url": closed}},
                "policies": {"retry": {"max_attempts": 1}},
            }
        )
    )
    failing = ok(cli(instance, "jobs", "create", "-f", str(spec)))
    failed_run = ok(cli(instance, "jobs", "run", failing["id"]))
    wait_until(
        "the run to fail",
        lambda: ok(cli(instance, "runs", "get", failed_run["id"]))["state"] == "failed",
        30,
        step=0.3,
    )
    failed = ok(cli(instance, "runs", "failed", "--since", "10m"))
    assert failed_run["id"] in [r["id"] for r in failed["items"]]
    retried = ok(cli(instance, "runs", "retry", failed_run["id"]))
    assert retried["state"] == "retry_wait" and len(retried["attempts"]) == 1

    ok(cli(instance, "jobs", "pause", job["id"], "--note", "hold it"))
    paused = cli(instance, "jobs", "run", job["id"])
    assert paused.exit_code == 1 and "paused" in paused.stderr
    assert ok(cli(instance, "jobs", "run", job["id"], "--even-if-paused"))["trigger"] == "manual"


def test_backfill_and_preview(instance: Supervisor, target: Target) -> None:
    job = ok(
        cli(
            instance,
            "jobs",
            "create",
            "--name",
            "cli-fill",
            "--schedule",
            "*/10 * * * *",
            "--http",
            target.url,
        )
    )
    first = ok(cli(instance, "jobs", "backfill", job["id"], "--from", "1h", "--rate", "50"))
    # The fires of */10 in [1h ago, 1s ago]: 6, or 5 when the command runs within a second after a tenth
    # minute (that fire is past the window's end; seen once at 07:30:0x).
    assert first["created"] in (5, 6) and first["skipped"] == 0
    too_big = cli(instance, "jobs", "backfill", job["id"], "--from", "30d")
    assert too_big.exit_code == 1 and "more than 1000" in too_big.stderr
    preview = ok(cli(instance, "preview", "30 2 * * *", "--tz", "Europe/Berlin", "--count", "3"))
    assert len(preview["fires"]) == 3 and preview["timezone"] == "Europe/Berlin"
    table = cli(instance, "preview", "30 2 * * *", "--tz", "Europe/Berlin", output="table")
    assert table.exit_code == 0 and "Europe/Berlin" in table.stdout


def test_calendars_exclude_a_holiday_across_a_dst_change(instance: Supervisor, target: Target) -> None:
    """Issue 33, part 2, on the SQLite engine through the CLI: a calendar written from flags, a job naming
    it, and its preview across the day New York springs forward (23 hourly fires marked)."""
    made = ok(
        cli(instance, "calendars", "put", "exchange", "--tz", "America/New_York",
            "--date", "2027-03-14=spring holiday", "--window", "2027-11-07T01:00/02:00=patching")
    )  # fmt: skip
    assert made["version"] == 1 and made["windows"][0]["end"] == "2027-11-07T02:00:00"
    job = ok(
        cli(instance, "jobs", "create", "--name", "cli-cal", "--schedule", "0 * * * *",
            "--tz", "America/New_York", "--http", target.url, "--calendar", "exchange")
    )  # fmt: skip
    assert job["calendars"] == ["exchange"]
    preview = ok(
        cli(instance, "jobs", "preview", job["id"], "--count", "30", "--after", "2027-03-14T04:59:59Z")
    )
    marked = [fire for fire in preview["fires"] if fire["excluded"]]
    assert len(marked) == 23 and {fire["local"][:10] for fire in marked} == {"2027-03-14"}
    table = cli(instance, "jobs", "preview", job["id"], "--after", "2027-03-14T04:59:59Z", output="table")
    assert table.exit_code == 0 and table.stdout.count("excluded by calendar") == 10  # all on the day
    unsaved = ok(
        cli(instance, "preview", "30 1 * * *", "--tz", "America/New_York", "--count", "2",
            "--after", "2027-11-06T12:00:00Z", "--calendar", "exchange")
    )  # fmt: skip
    assert [bool(fire["excluded"]) for fire in unsaved["fires"]] == [True, False]
    assert [c["name"] for c in ok(cli(instance, "calendars", "list"))["items"]] == ["exchange"]
    stale = cli(
        instance, "calendars", "put", "exchange", "--tz", "UTC", "--date", "2027-01-01", "--if-match", "0"
    )
    assert stale.exit_code == 1 and "412" in stale.stderr
    assert "2027-03-14" in cli(instance, "calendars", "get", "exchange", output="table").stdout
    cleared = ok(cli(instance, "jobs", "update", job["id"], "--no-calendars"))
    assert cleared["calendars"] == []
    assert ok(cli(instance, "calendars", "delete", "exchange", "--yes")) == {"deleted": "exchange"}
    refused = cli(instance, "jobs", "update", job["id"], "--calendar", "exchange")
    assert refused.exit_code == 1 and "calendars[0]" in refused.stderr, (refused.stdout, refused.stderr)


def test_a_group_paused_and_resumed_with_one_command_each(instance: Supervisor, target: Target) -> None:
    """Issue 33, part 1, on the SQLite engine through the CLI: jobs in a group, counted; one command
    pauses the group (a progress bar, then what it did), again changes nothing; a maintenance window."""
    made = [
        ok(cli(instance, "jobs", "create", "--name", f"cli-g{i}", "--schedule", "0 3 * * *",
               "--http", target.url, "--group", "cli-nightly"))
        for i in range(12)
    ]  # fmt: skip
    assert {job["group"] for job in made} == {"cli-nightly"}
    groups = {g["name"]: g for g in ok(cli(instance, "groups"))["items"]}
    assert groups["cli-nightly"] == {"name": "cli-nightly", "jobs": 12, "active": 12, "paused": 0}
    shown = cli(instance, "jobs", "pause", "--group", "cli-nightly", "--note", "db migration", output="table")
    assert shown.exit_code == 0, shown.output
    assert "12 changed, 0 unchanged, 0 failed" in shown.stdout and "done in" in shown.stdout
    assert "pause" in shown.stderr  # the progress bar
    again = ok(cli(instance, "jobs", "pause", "--group", "cli-nightly", "--note", "db migration"))
    assert again["state"] == "done" and again["progress"]["unchanged"] == 12
    listed = ok(cli(instance, "jobs", "list", "--all", "--group", "cli-nightly"))["items"]
    assert [job["state"] for job in listed] == ["paused"] * 12
    resumed = ok(cli(instance, "jobs", "resume", "--group", "cli-nightly", "--note", "migrated"))
    assert resumed["progress"]["changed"] == 12
    window = ok(cli(instance, "jobs", "pause", "--group", "cli-nightly", "--note", "move", "--until", "+1h"))
    assert window["resume_action"] and window["progress"]["changed"] == 12
    scheduled = ok(cli(instance, "bulk", "get", window["resume_action"]))
    assert scheduled["state"] == "scheduled" and scheduled["maintenance_of"] == window["id"]
    assert window["id"] in [a["id"] for a in ok(cli(instance, "bulk", "list"))["items"]]
    retried = ok(
        cli(instance, "runs", "retry-failed", "--group", "cli-nightly", "--from", "1h", "--note", "back")
    )
    assert retried["state"] == "done" and retried["progress"]["matched"] == 0
    both = cli(instance, "jobs", "pause", made[0]["id"], "--group", "cli-nightly", "--note", "x")
    assert both.exit_code == 2 and "not both" in both.output
    ok(cli(instance, "jobs", "resume", "--group", "cli-nightly", "--note", "done"))


def test_apply_creates_then_changes_nothing_then_updates_and_prunes(
    instance: Supervisor, tmp_path: Path
) -> None:
    token = "apply-" + os.urandom(3).hex()  # names of this test's own jobs, so the other tests' stay alone
    jobs = [
        {
            "name": f"{token}-{i}",
            "schedule": {"expression": f"{i} 4 * * *", "timezone": "Europe/Berlin"},
            "target": {"kind": "http", "config": {"url": f"http://127.0.0.1:9/{i}"}},
        }
        for i in range(3)
    ]
    spec = tmp_path / "jobs.yaml"
    spec.write_text(yaml.safe_dump({"jobs": jobs}))
    first = ok(cli(instance, "jobs", "apply", "-f", str(spec), "--yes"))
    assert first["counts"] == {"create": 3, "update": 0, "delete": 0, "unchanged": 0}
    second = ok(cli(instance, "jobs", "apply", "-f", str(spec), "--yes"))
    assert second["counts"] == {"create": 0, "update": 0, "delete": 0, "unchanged": 3}

    jobs[1]["schedule"]["expression"] = "45 4 * * *"
    spec.write_text(yaml.safe_dump({"jobs": jobs[:2]}))
    # Prune would delete every other job of this owner too: apply it to this test's own view only.
    dry = cli(instance, "jobs", "apply", "-f", str(spec), "--dry-run", output="table")
    assert dry.exit_code == 0, dry.output
    assert f"~ {token}-1" in dry.stdout and "schedule.expression: 1 4 * * * -> 45 4 * * *" in dry.stdout
    assert "dry run: nothing written" in dry.stdout
    third = ok(cli(instance, "jobs", "apply", "-f", str(spec), "--yes"))
    assert third["counts"] == {"create": 0, "update": 1, "delete": 0, "unchanged": 1}
    plan = ok(cli(instance, "jobs", "apply", "-f", str(spec), "--prune", "--dry-run"))
    deleted = {p["name"] for p in plan["plan"] if p["action"] == "delete"}
    assert f"{token}-2" in deleted and not any(n.startswith(token) and n != f"{token}-2" for n in deleted)


def test_usage_errors_exit_2_and_say_why(instance: Supervisor, tmp_path: Path) -> None:
    assert cli(instance, "jobs", "get").exit_code == 2
    assert cli(instance, "jobs", "list", "--limit", "0").exit_code == 2
    assert cli(instance, "runs", "failed", "--since", "yesterday").exit_code == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "jobs:\n  - name: x\n    schedule: {expression: '61 * * * *'}\n    target: {kind: http, config: {url: 'http://h/'}}\n"
    )
    refused = cli(instance, "jobs", "apply", "-f", str(bad), "--yes")
    assert refused.exit_code == 2 and "jobs[0] ('x')" in refused.output and "61" in refused.output
    nowhere = CliRunner().invoke(tickwork, ["--state-dir", str(tmp_path / "none"), "jobs", "list"])
    assert nowhere.exit_code == 2 and "no running `tickwork local`" in nowhere.output


def test_the_installed_command_and_the_readme_walkthrough(instance: Supervisor, tmp_path: Path) -> None:
    """The `tickwork` entry point itself (exit codes through the real process), and the README's CLI
    walk-through run line by line as it stands in README.md, against the instance."""
    script = (REPO / "docs" / "cli-walkthrough.sh").read_text()
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```sh\n(# The README's CLI walk-through.*?)```", readme, re.S)
    assert block is not None and block.group(1) == script, "README.md's walk-through differs from the script"
    api = json.loads((instance.state_dir / "run" / "api.json").read_text())
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TICKWORK_"))},
        "TICKWORK_URL": api["url"],
        "TICKWORK_TOKEN": api["token"],
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "nothing to change" in done.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "tickwork.cli", "jobs", "get", "job_nope"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1 and "not found" in missing.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "tickwork.cli", "jobs", "frobnicate"], env=env, capture_output=True, text=True
    )
    assert usage.returncode == 2 and "No such command" in usage.stderr
