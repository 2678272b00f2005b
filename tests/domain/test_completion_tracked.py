"""Completion tracked: Tickwork follows a Step Functions execution or an ECS task it started to its end. Which
targets allow it (and delivery instead), the day-long timeout it allows, no heartbeat, at create (JobSpec)
and at edit (apply_patch), table-driven."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from tickwork.adapters.records import completion_from_item
from tickwork.domain.errors import ValidationError
from tickwork.domain.jobs import (
    MAX_CALLBACK_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    JobPatch,
    JobSpec,
    apply_patch,
    check_completion,
    max_timeout_seconds,
)
from tickwork.domain.models import Completion, Job, JobView, Target
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.targets import (
    TRACKED_KINDS,
    allowed_completions,
    default_completion,
    describe_target,
    validate_target,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
R, C, D, T = Completion.RESPONSE, Completion.CALLBACK, Completion.DELIVERY, Completion.TRACKED

HTTP = validate_target("http", {"url": "https://hooks.example.com/x"})
SQS = validate_target(
    "sqs", {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "message": "m"}
)
LAMBDA_ASYNC = validate_target("lambda", {"function_name": "f", "invocation_type": "Event"})
LAMBDA_SYNC = validate_target("lambda", {"function_name": "f"})
STEPFUNCTIONS = validate_target(
    "stepfunctions", {"state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:m"}
)
ECS = validate_target(
    "ecs",
    {"cluster": "batch", "task_definition": "nightly", "container": "main", "subnets": ["subnet-0a1b2c3d"]},
)


@pytest.mark.parametrize(
    ("target", "default", "allowed"),
    [
        pytest.param(STEPFUNCTIONS, T, (T, D), id="stepfunctions_is_followed_or_delivered"),
        pytest.param(ECS, T, (T, D), id="ecs_is_followed_or_delivered"),
        pytest.param(HTTP, R, (R, C), id="http_is_never_tracked"),
        pytest.param(SQS, D, (D,), id="sqs_is_never_tracked"),
        pytest.param(LAMBDA_ASYNC, D, (D,), id="lambda_event_is_never_tracked"),
        pytest.param(LAMBDA_SYNC, R, (R,), id="lambda_request_response_is_never_tracked"),
    ],
)
def test_stepfunctions_and_ecs_are_tracked_by_default_and_may_be_delivered(
    target: Target, default: Completion, allowed: tuple[Completion, ...]
) -> None:
    assert default_completion(target) is default
    assert allowed_completions(target) == allowed
    assert (T in allowed) is (target.kind in TRACKED_KINDS)


def test_an_ecs_target_is_named_as_one() -> None:
    assert describe_target(ECS) == "an ecs target"


def test_a_job_stored_without_a_completion_reads_as_its_targets_default_now_tracked() -> None:
    """The store keeps a completion only when it is not the target's default: a Step Functions job stored
    with the default before tracked existed (then delivery) reads as tracked now."""
    assert completion_from_item(None, STEPFUNCTIONS) is T
    assert completion_from_item("delivery", STEPFUNCTIONS) is D
    assert completion_from_item(None, ECS) is T


def a_spec(target: Target = STEPFUNCTIONS, **changes: Any) -> JobSpec:
    return JobSpec(name="n", schedule=parse_schedule("*/5 * * * *"), target=target, **changes)


@pytest.mark.parametrize(
    ("timeout", "completion"),
    [
        pytest.param(MAX_CALLBACK_TIMEOUT_SECONDS, None, id="the_default_for_a_day"),
        pytest.param(MAX_CALLBACK_TIMEOUT_SECONDS, T, id="named_for_a_day"),
        pytest.param(1, T, id="a_second"),
        pytest.param(MAX_TIMEOUT_SECONDS, D, id="delivered_at_840_s"),
    ],
)
def test_a_tracked_job_may_follow_its_work_for_a_day(timeout: int, completion: Completion | None) -> None:
    for target in (STEPFUNCTIONS, ECS):
        spec = a_spec(target, completion=completion, timeout_seconds=timeout)
        assert spec.resolved_completion is (completion or T)
    assert max_timeout_seconds(T) == max_timeout_seconds(C) == MAX_CALLBACK_TIMEOUT_SECONDS
    assert max_timeout_seconds(D) == MAX_TIMEOUT_SECONDS


@pytest.mark.parametrize(
    ("make", "field", "words"),
    [
        pytest.param(
            lambda: a_spec(SQS, completion=T),
            "completion",
            "tracked is not how an sqs target ends; an sqs target allows delivery",
            id="tracked_on_sqs",
        ),
        pytest.param(
            lambda: a_spec(HTTP, completion=T),
            "completion",
            "an http target allows response or callback",
            id="tracked_on_http",
        ),
        pytest.param(
            lambda: a_spec(LAMBDA_ASYNC, completion=T),
            "completion",
            "invocation_type Event allows delivery",
            id="tracked_on_lambda_event",
        ),
        pytest.param(
            lambda: a_spec(STEPFUNCTIONS, completion=C),
            "completion",
            "http targets only",
            id="callback_on_stepfunctions",
        ),
        pytest.param(
            lambda: a_spec(ECS, completion=R),
            "completion",
            "an ecs target allows tracked or delivery",
            id="response_on_ecs",
        ),
        pytest.param(
            lambda: a_spec(heartbeat_seconds=60, timeout_seconds=600),
            "heartbeat_seconds",
            "completion callback only (this job's completion is tracked)",
            id="heartbeat_on_tracked",
        ),
        pytest.param(
            lambda: a_spec(timeout_seconds=MAX_CALLBACK_TIMEOUT_SECONDS + 1),
            "timeout_seconds",
            "must be 1-86400 seconds for completion tracked",
            id="tracked_over_a_day",
        ),
        pytest.param(
            lambda: a_spec(completion=D, timeout_seconds=MAX_TIMEOUT_SECONDS + 1),
            "timeout_seconds",
            "1-840 seconds for completion delivery; only completion callback (http targets) and tracked "
            "(stepfunctions, ecs) allow up to 86,400 s",
            id="delivered_over_840_s",
        ),
    ],
)
def test_a_spec_is_refused_naming_the_field(make: Any, field: str, words: str) -> None:
    with pytest.raises(ValidationError) as refused:
        make()
    assert refused.value.field == field
    assert words in refused.value.message


def test_the_checks_take_the_completion_and_the_target_together() -> None:
    check_completion(ECS, T, None, 3600)
    check_completion(ECS, D, None, 840)
    with pytest.raises(ValidationError):
        check_completion(ECS, D, None, 3600)


# --- edits ---------------------------------------------------------------------------------------------


def a_job(target: Target = STEPFUNCTIONS, **changes: Any) -> Job:
    job = Job(
        job_id="job_a",
        owner="alice",
        name="n",
        schedule=parse_schedule("*/5 * * * *"),
        target=target,
        shard=0,
        created_at=NOW,
        updated_at=NOW,
        completion=default_completion(target),
    )
    return replace(job, **changes)


OTHER_MACHINE = validate_target(
    "stepfunctions", {"state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:other"}
)


@pytest.mark.parametrize(
    ("job", "patch", "completion"),
    [
        pytest.param(a_job(), JobPatch(name="x"), T, id="an_unrelated_edit_keeps_tracked"),
        pytest.param(
            a_job(completion=D), JobPatch(target=OTHER_MACHINE), D, id="another_machine_keeps_delivery"
        ),
        pytest.param(a_job(), JobPatch(target=ECS), T, id="stepfunctions_to_ecs_keeps_tracked"),
        pytest.param(a_job(completion=D), JobPatch(target=ECS), D, id="stepfunctions_to_ecs_keeps_delivery"),
        pytest.param(a_job(), JobPatch(target=SQS), D, id="to_sqs_redefaults_tracked_to_delivery"),
        pytest.param(a_job(), JobPatch(target=HTTP), R, id="to_http_redefaults_tracked_to_response"),
        pytest.param(a_job(SQS), JobPatch(target=STEPFUNCTIONS), D, id="sqs_to_stepfunctions_keeps_delivery"),
        pytest.param(a_job(HTTP), JobPatch(target=ECS), T, id="http_to_ecs_redefaults_response_to_tracked"),
        pytest.param(a_job(), JobPatch(completion=D), D, id="switching_to_delivery"),
        pytest.param(a_job(completion=D), JobPatch(completion=T), T, id="switching_to_tracked"),
        pytest.param(
            a_job(SQS),
            JobPatch(target=ECS, completion=T, timeout_seconds=7200),
            T,
            id="moving_to_a_long_ecs_job",
        ),
    ],
)
def test_an_edit_keeps_or_follows_tracked(job: Job, patch: JobPatch, completion: Completion) -> None:
    edited = apply_patch(job, patch, NOW)
    assert edited.completion is completion
    assert JobView.planned(edited).completion is completion


@pytest.mark.parametrize(
    ("job", "patch", "field", "words"),
    [
        pytest.param(
            a_job(timeout_seconds=7200),
            JobPatch(completion=D),
            "timeout_seconds",
            "1-840 seconds for completion delivery",
            id="a_long_tracked_job_delivered_keeps_its_timeout_only_if_lowered",
        ),
        pytest.param(
            a_job(timeout_seconds=7200),
            JobPatch(target=SQS),
            "timeout_seconds",
            "1-840 seconds for completion delivery",
            id="a_long_tracked_job_moved_to_sqs",
        ),
        pytest.param(
            a_job(),
            JobPatch(target=SQS, completion=T),
            "completion",
            "an sqs target allows delivery",
            id="tracked_given_for_sqs",
        ),
        pytest.param(
            a_job(),
            JobPatch(heartbeat_seconds=30),
            "heartbeat_seconds",
            "callback only",
            id="heartbeat_on_tracked",
        ),
    ],
)
def test_an_edit_is_refused_naming_the_field(job: Job, patch: JobPatch, field: str, words: str) -> None:
    with pytest.raises(ValidationError) as refused:
        apply_patch(job, patch, NOW)
    assert refused.value.field == field
    assert words in refused.value.message
