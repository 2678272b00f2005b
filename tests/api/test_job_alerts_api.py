"""A job's alert rules and channels (issue 32) at the API: written on create, answered on every read, replaced
whole by an edit (null: the defaults), refused field by field (422 naming `alerts.<field>`), an SNS channel
checked against the owner's grants (403, nothing stored); an auto-pause's reason on the job and on the
resume that clears it; `tickwork jobs apply` comparing and writing them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import ALICE, Api, Reply, job_body
from tickwork.api.models import JobCreate
from tickwork.client.apply import Action, load_file, plan
from tickwork.domain.grants import TargetGrants

HOOK = "https://hooks.example.com/alerts"
SLACK = "https://hooks.slack.example.com/services/T0/B0/x"
ALICE_TOPIC = "arn:aws:sns:us-east-1:123456789012:tickwork-target-alice-alerts"
BOB_TOPIC = "arn:aws:sns:us-east-1:123456789012:tickwork-target-bob-alerts"

DEFAULTS: dict[str, Any] = {
    "on_failure": True,
    "on_dead_letter": True,
    "on_skip": False,
    "late_after_seconds": None,
    "deadline_seconds": None,
    "duration_min_seconds": None,
    "duration_max_seconds": None,
    "anomaly_factor": None,
    "failures_in_a_row": None,
    "auto_pause_after": None,
    "window_seconds": 300,
    "channels": [],
}
RULES: dict[str, Any] = {
    "on_failure": False,
    "on_skip": True,
    "late_after_seconds": 30,
    "deadline_seconds": 900,
    "duration_min_seconds": 0.5,
    "duration_max_seconds": 120,
    "anomaly_factor": 3,
    "failures_in_a_row": 3,
    "auto_pause_after": 5,
    "window_seconds": 600,
    "channels": [
        {"kind": "webhook", "url": HOOK},
        {"kind": "slack", "url": SLACK},
        {"kind": "sns", "topic_arn": ALICE_TOPIC},
    ],
}
# RULES as answered: every field, the ones not given at their defaults.
ANSWERED = {**DEFAULTS, **RULES, "duration_max_seconds": 120.0, "anomaly_factor": 3.0}


def made(call: Api, **overrides: Any) -> dict[str, Any]:
    reply = call("POST", "/jobs", body=job_body(**overrides))
    assert reply.status == 201, reply
    return dict(reply.body)


def refused_naming(reply: Reply, field: str) -> None:
    assert reply.status == 422, reply
    assert reply.headers["Content-Type"] == "application/problem+json"
    assert field in [error["field"] for error in reply.body["errors"]], reply.body


@pytest.fixture
def granted(call: Api) -> Api:
    grants = TargetGrants({ALICE: ["sns:tickwork-target-alice-*"]})
    call.parts.settings = replace(call.parts.settings, target_grants=grants)
    return call


def test_a_job_without_alerts_answers_the_defaults_and_no_paused_reason(call: Api) -> None:
    job = made(call)

    assert job["alerts"] == DEFAULTS
    assert job["paused_reason"] is None
    listed = call("GET", "/jobs").body["items"]
    assert [item["alerts"] for item in listed] == [DEFAULTS]


def test_alerts_written_on_create_are_answered_and_read_back(call: Api) -> None:
    job = made(call, alerts=RULES)

    assert job["alerts"] == ANSWERED
    read = call("GET", f"/jobs/{job['id']}")
    assert read.status == 200
    assert read.body["alerts"] == ANSWERED
    assert read.body["paused_reason"] is None


def test_an_edit_replaces_the_rules_whole_and_the_answer_can_be_sent_back(call: Api) -> None:
    job = made(call, alerts=RULES)

    edited = call("PATCH", f"/jobs/{job['id']}", body={"alerts": {"deadline_seconds": 60}})

    assert edited.status == 200, edited
    assert edited.body["alerts"] == {**DEFAULTS, "deadline_seconds": 60}  # the rest back at the defaults
    assert call("GET", f"/jobs/{job['id']}").body["alerts"] == {**DEFAULTS, "deadline_seconds": 60}
    # An edit that does not name them keeps them.
    renamed = call("PATCH", f"/jobs/{job['id']}", body={"name": "renamed"})
    assert renamed.body["alerts"] == {**DEFAULTS, "deadline_seconds": 60}
    # A job's answer is a valid edit: the rules read back as they were written.
    restored = call("PATCH", f"/jobs/{job['id']}", body={"alerts": ANSWERED})
    assert restored.status == 200, restored
    assert restored.body["alerts"] == ANSWERED


def test_null_sets_the_default_rules_back(call: Api) -> None:
    job = made(call, alerts=RULES)

    reset = call("PATCH", f"/jobs/{job['id']}", body={"alerts": None})

    assert reset.status == 200, reset
    assert reset.body["alerts"] == DEFAULTS
    assert reset.body["version"] == job["version"] + 1
    assert call("GET", f"/jobs/{job['id']}").body["alerts"] == DEFAULTS


def webhooks(count: int) -> list[dict[str, str]]:
    return [{"kind": "webhook", "url": f"{HOOK}/{n}"} for n in range(count)]


@pytest.mark.parametrize(
    ("alerts", "field"),
    [
        pytest.param({"deadline_seconds": 0}, "alerts.deadline_seconds", id="deadline_zero"),
        pytest.param({"late_after_seconds": 604801}, "alerts.late_after_seconds", id="late_over_a_week"),
        pytest.param({"anomaly_factor": 1.0}, "alerts.anomaly_factor", id="anomaly_factor_one"),
        pytest.param({"failures_in_a_row": 101}, "alerts.failures_in_a_row", id="streak_over_100"),
        pytest.param({"window_seconds": 59}, "alerts.window_seconds", id="window_under_a_minute"),
        pytest.param({"on_failure": "yes"}, "alerts.on_failure", id="flag_not_a_boolean"),
        pytest.param({"deadline_seconds": "60"}, "alerts.deadline_seconds", id="seconds_as_a_string"),
        pytest.param(
            {"duration_min_seconds": 10, "duration_max_seconds": 10},
            "alerts.duration_min_seconds",
            id="duration_min_not_below_max",
        ),
        pytest.param(
            {"duration_min_seconds": 1e-200}, "alerts.duration_min_seconds", id="duration_not_storable"
        ),
        pytest.param({"on_fire": True}, "alerts.on_fire", id="unknown_rule"),
        pytest.param(
            {"channels": [{"kind": "pager", "url": HOOK}]}, "alerts.channels[0].kind", id="kind_pager"
        ),
        pytest.param(
            {"channels": [{"kind": "webhook", "url": "ftp://x"}]}, "alerts.channels[0].url", id="url_ftp"
        ),
        pytest.param(
            {"channels": [*webhooks(1), {"kind": "slack", "url": "https://user:pw@hooks.example.com/"}]},
            "alerts.channels[1].url",
            id="url_with_credentials",
        ),
        pytest.param(
            {"channels": [{"kind": "sns", "topic_arn": "arn:aws:sqs:us-east-1:123456789012:q"}]},
            "alerts.channels[0].topic_arn",
            id="topic_arn_not_sns",
        ),
        pytest.param(
            {"channels": [{"kind": "sns", "url": HOOK}]},
            "alerts.channels[0].topic_arn",
            id="sns_without_topic",
        ),
        pytest.param({"channels": webhooks(1) * 2}, "alerts.channels", id="same_channel_twice"),
        pytest.param({"channels": webhooks(6)}, "alerts.channels", id="six_channels"),
        pytest.param(
            {"channels": [{"kind": "webhook", "url": HOOK, "secret": "x"}]},
            "alerts.channels[0].secret",
            id="unknown_channel_field",
        ),
    ],
)
def test_bad_rules_are_a_422_naming_the_field_and_nothing_is_stored(
    call: Api, alerts: dict[str, Any], field: str
) -> None:
    refused_naming(call("POST", "/jobs", body=job_body(alerts=alerts)), field)
    assert call("GET", "/jobs").body["items"] == []

    job = made(call, alerts={"deadline_seconds": 60})
    refused_naming(call("PATCH", f"/jobs/{job['id']}", body={"alerts": alerts}), field)
    kept = call("GET", f"/jobs/{job['id']}").body
    assert kept["alerts"] == {**DEFAULTS, "deadline_seconds": 60}
    assert kept["version"] == job["version"]


def test_an_sns_channel_not_granted_to_the_owner_is_a_403_and_nothing_is_stored(granted: Api) -> None:
    theirs = {"channels": [{"kind": "sns", "topic_arn": BOB_TOPIC}]}

    refused = granted("POST", "/jobs", body=job_body(alerts=theirs))

    assert refused.status == 403, refused
    assert refused.headers["Content-Type"] == "application/problem+json"
    assert "sns:tickwork-target-bob-alerts is not granted to" in refused.body["detail"]
    assert granted("GET", "/jobs").body["items"] == []

    own = made(granted, alerts={"channels": [{"kind": "sns", "topic_arn": ALICE_TOPIC}]})
    moved = granted("PATCH", f"/jobs/{own['id']}", body={"alerts": theirs})
    assert moved.status == 403, moved
    kept = granted("GET", f"/jobs/{own['id']}").body["alerts"]["channels"]
    assert kept == [{"kind": "sns", "topic_arn": ALICE_TOPIC}]


def test_the_idempotency_fingerprint_covers_the_alerts(call: Api) -> None:
    key = {"Idempotency-Key": "alerts-once"}
    first = call("POST", "/jobs", body=job_body(alerts={"deadline_seconds": 60}), headers=key)
    assert first.status == 201, first

    again = call("POST", "/jobs", body=job_body(alerts={"deadline_seconds": 60}), headers=key)
    other = call("POST", "/jobs", body=job_body(alerts={"deadline_seconds": 61}), headers=key)

    assert (again.status, again.body["id"]) == (200, first.body["id"])
    assert other.status == 409, other


# job_body()'s fingerprint before jobs had alerts (commit 38adcc1): a request that names none keeps it.
FINGERPRINT_BEFORE_ALERTS = "d703f6b4e08e00bb4a6aa3b474ad2e0402f69d4bbdb9c56883e358eb43df2865"


def test_a_create_that_names_no_alerts_keeps_the_fingerprint_it_had_before_they_existed() -> None:
    plain = JobCreate.model_validate(job_body())
    named_null = JobCreate.model_validate(job_body(alerts=None))
    named = JobCreate.model_validate(job_body(alerts={}))

    assert plain.fingerprint() == named_null.fingerprint() == FINGERPRINT_BEFORE_ALERTS
    assert named.fingerprint() != FINGERPRINT_BEFORE_ALERTS


def test_an_auto_pause_is_on_the_job_and_the_resume_that_clears_it_says_so(call: Api) -> None:
    job = made(call, alerts={"auto_pause_after": 3})
    reason = "paused after 3 failures in a row (the last: HTTP 500)"
    call.parts.job_service().pause(ALICE, job["id"], reason=reason)

    paused = call("GET", f"/jobs/{job['id']}").body
    assert (paused["state"], paused["paused_reason"]) == ("paused", reason)

    resumed = call("POST", f"/jobs/{job['id']}/resume")

    assert resumed.status == 200, resumed
    assert resumed.body["cleared_auto_pause"] == reason
    assert resumed.body["paused_reason"] is None
    assert call("GET", f"/jobs/{job['id']}").body["paused_reason"] is None


def test_an_owners_pause_has_no_reason_and_its_resume_clears_no_auto_pause(call: Api) -> None:
    job = made(call)

    paused = call("POST", f"/jobs/{job['id']}/pause", query="note=test")
    assert (paused.body["state"], paused.body["paused_reason"]) == ("paused", None)

    resumed = call("POST", f"/jobs/{job['id']}/resume")
    assert resumed.status == 200, resumed
    assert resumed.body["cleared_auto_pause"] is None
    # Resuming an active job clears nothing either.
    assert call("POST", f"/jobs/{job['id']}/resume").body["cleared_auto_pause"] is None


def jobs_file(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(json.dumps([job_body(**extra)]))
    return path


def planned(call: Api, path: Path) -> Any:
    [change] = plan(load_file(path), call("GET", "/jobs").body["items"], prune=False)
    return change


def carried_out(call: Api, change: Any) -> Reply:
    """The PATCH `tickwork jobs apply` sends for an update (apply.execute's)."""
    return call(
        "PATCH",
        f"/jobs/{change.job_id}",
        body=dict(change.body),
        headers={"If-Match": f'"{change.version}"'},
    )


def test_apply_sees_a_changed_rule_and_leaves_unchanged_ones_alone(call: Api, tmp_path: Path) -> None:
    made(call, alerts=RULES)

    # The same rules (written with ints where the answer has floats): nothing to do.
    assert planned(call, jobs_file(tmp_path, alerts=RULES)).action is Action.UNCHANGED

    change = planned(call, jobs_file(tmp_path, alerts={**RULES, "deadline_seconds": 1800}))
    assert change.action is Action.UPDATE
    assert change.diff == (("alerts.deadline_seconds", 900, 1800),)
    done = carried_out(call, change)
    assert done.status == 200, done
    assert done.body["alerts"] == {**ANSWERED, "deadline_seconds": 1800}

    channel = planned(call, jobs_file(tmp_path, alerts={**RULES, "channels": RULES["channels"][:1]}))
    assert [path for path, _, _ in channel.diff] == ["alerts.channels", "alerts.deadline_seconds"]


def test_apply_of_a_file_without_alerts_leaves_the_jobs_rules_alone(call: Api, tmp_path: Path) -> None:
    """A file that does not name `alerts` does not manage them: a job created from it gets its owner's
    defaults, and applying it again leaves whatever rules the job has; naming them sets them."""
    made(call, alerts={"deadline_seconds": 60, "channels": [{"kind": "webhook", "url": HOOK}]})

    assert planned(call, jobs_file(tmp_path)).action is Action.UNCHANGED

    change = planned(call, jobs_file(tmp_path, alerts={}))
    assert change.action is Action.UPDATE
    assert ("alerts.deadline_seconds", 60, None) in change.diff
    assert ("alerts.channels", [{"kind": "webhook", "url": HOOK}], []) in change.diff
    done = carried_out(call, change)
    assert done.status == 200, done
    assert done.body["alerts"] == DEFAULTS
    assert planned(call, jobs_file(tmp_path, alerts={})).action is Action.UNCHANGED
