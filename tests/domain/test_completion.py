"""How a job's runs end, chosen per job: each target kind's default completion, which completions it allows,
the heartbeat and the timeout each allows, at create (JobSpec) and at edit (apply_patch), table-driven."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from tickwork.api.models import MAX_ATTEMPTS
from tickwork.domain.dispatch import MAX_DELAY_SECONDS, MAX_HOPS
from tickwork.domain.errors import ValidationError
from tickwork.domain.execution import LEASE_MARGIN
from tickwork.domain.jobs import (
    MAX_CALLBACK_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    JobPatch,
    JobSpec,
    apply_patch,
    check_completion,
)
from tickwork.domain.models import Completion, Job, JobView, Target
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.targets import allowed_completions, default_completion

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
ARN = "arn:aws:{service}:us-east-1:123456789012:{rest}"

HTTP = Target("http", {"method": "POST", "url": "https://hooks.example.com/x", "headers": {}, "body": ""})
LAMBDA_SYNC = Target("lambda", {"function_name": "f", "invocation_type": "RequestResponse", "payload": {}})
LAMBDA_ASYNC = Target("lambda", {"function_name": "f", "invocation_type": "Event", "payload": {}})
SQS = Target("sqs", {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "message": "m"})
SNS = Target("sns", {"topic_arn": ARN.format(service="sns", rest="t"), "message": "m"})
EVENTBRIDGE = Target("eventbridge", {"event_bus_name": "default", "source": "s", "detail_type": "d"})
STEPFUNCTIONS = Target(
    "stepfunctions", {"state_machine_arn": ARN.format(service="states", rest="stateMachine:m"), "input": {}}
)

R, C, D, T = Completion.RESPONSE, Completion.CALLBACK, Completion.DELIVERY, Completion.TRACKED


@pytest.mark.parametrize(
    ("target", "default", "allowed"),
    [
        pytest.param(HTTP, R, (R, C), id="http_ends_with_its_response_or_by_callback"),
        pytest.param(LAMBDA_SYNC, R, (R,), id="lambda_request_response_ends_with_the_functions_answer"),
        pytest.param(LAMBDA_ASYNC, D, (D,), id="lambda_event_is_delivered_when_lambda_queues_it"),
        pytest.param(Target("lambda", {"function_name": "f"}), R, (R,), id="lambda_without_a_type_is_sync"),
        pytest.param(SQS, D, (D,), id="sqs_is_delivered"),
        pytest.param(SNS, D, (D,), id="sns_is_delivered"),
        pytest.param(EVENTBRIDGE, D, (D,), id="eventbridge_is_delivered"),
        pytest.param(STEPFUNCTIONS, T, (T, D), id="stepfunctions_is_tracked_to_its_end_or_delivered"),
    ],
)
def test_each_target_kind_has_a_default_completion_and_the_completions_it_allows(
    target: Target, default: Completion, allowed: tuple[Completion, ...]
) -> None:
    assert default_completion(target) is default
    assert allowed_completions(target) == allowed


def a_spec(target: Target = HTTP, **changes: Any) -> JobSpec:
    return JobSpec(name="n", schedule=parse_schedule("*/5 * * * *"), target=target, **changes)


def test_a_spec_without_a_completion_takes_its_targets_default() -> None:
    assert a_spec().resolved_completion is R
    assert a_spec(SQS).resolved_completion is D
    assert a_spec(LAMBDA_ASYNC).resolved_completion is D
    assert a_spec(completion=C).resolved_completion is C


@pytest.mark.parametrize(
    ("make", "field", "words"),
    [
        pytest.param(
            lambda: a_spec(SQS, completion=C), "completion", "http targets only", id="callback_on_sqs"
        ),
        pytest.param(
            lambda: a_spec(LAMBDA_SYNC, completion=C),
            "completion",
            "http targets only",
            id="callback_on_lambda",
        ),
        pytest.param(
            lambda: a_spec(completion=D),
            "completion",
            "an http target allows response or callback",
            id="delivery_on_http",
        ),
        pytest.param(
            lambda: a_spec(SQS, completion=R),
            "completion",
            "an sqs target allows delivery",
            id="response_on_sqs",
        ),
        pytest.param(
            lambda: a_spec(LAMBDA_ASYNC, completion=R),
            "completion",
            "invocation_type Event allows delivery",
            id="response_on_async_lambda",
        ),
        pytest.param(
            lambda: a_spec(heartbeat_seconds=60),
            "heartbeat_seconds",
            "completion callback only (this job's completion is response)",
            id="heartbeat_without_callback",
        ),
        pytest.param(
            lambda: a_spec(completion=C, heartbeat_seconds=9),
            "heartbeat_seconds",
            "10-86,400",
            id="heartbeat_below_10_s",
        ),
        pytest.param(
            lambda: a_spec(completion=C, heartbeat_seconds=86_401, timeout_seconds=86_400),
            "heartbeat_seconds",
            "10-86,400",
            id="heartbeat_above_a_day",
        ),
        pytest.param(
            lambda: a_spec(completion=C, heartbeat_seconds=120, timeout_seconds=60),
            "heartbeat_seconds",
            "longer than timeout_seconds 60 s",
            id="heartbeat_longer_than_the_timeout",
        ),
        pytest.param(
            lambda: a_spec(timeout_seconds=841),
            "timeout_seconds",
            "1-840 seconds for completion response; only completion callback (http targets) and tracked "
            "(stepfunctions, ecs) allow up to 86,400 s",
            id="response_over_840_s",
        ),
        pytest.param(
            lambda: a_spec(SQS, timeout_seconds=3600),
            "timeout_seconds",
            "1-840 seconds for completion delivery",
            id="delivery_over_840_s",
        ),
        pytest.param(
            lambda: a_spec(completion=C, timeout_seconds=86_401),
            "timeout_seconds",
            "1-86400 seconds for completion callback",
            id="callback_over_a_day",
        ),
        pytest.param(lambda: a_spec(timeout_seconds=0), "timeout_seconds", "1-840", id="no_timeout"),
    ],
)
def test_a_spec_is_refused_naming_the_field(make: Callable[[], JobSpec], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as refused:
        make()
    assert refused.value.field == field
    assert words in refused.value.message


@pytest.mark.parametrize(
    ("completion", "heartbeat", "timeout"),
    [
        pytest.param(R, None, MAX_TIMEOUT_SECONDS, id="response_at_840_s"),
        pytest.param(C, None, MAX_CALLBACK_TIMEOUT_SECONDS, id="callback_for_a_day_without_heartbeat"),
        pytest.param(C, 10, 10, id="callback_with_the_shortest_heartbeat"),
        pytest.param(C, 86_400, 86_400, id="callback_with_the_longest_heartbeat"),
    ],
)
def test_the_limits_themselves_are_accepted(
    completion: Completion, heartbeat: int | None, timeout: int
) -> None:
    check_completion(HTTP, completion, heartbeat, timeout)
    spec = a_spec(completion=completion, heartbeat_seconds=heartbeat, timeout_seconds=timeout)
    assert (spec.resolved_completion, spec.heartbeat_seconds) == (completion, heartbeat)


def test_a_day_long_callback_attempt_retried_to_the_apis_limit_stays_under_the_hop_bound() -> None:
    """Why the callback timeout stops at 24 h: each attempt's message is re-sent at most every 900 s while it
    watches the lease (timeout + margin), and a run's messages may hop at most MAX_HOPS times."""
    lease = MAX_CALLBACK_TIMEOUT_SECONDS + LEASE_MARGIN.total_seconds()
    hops_per_attempt = math.ceil(lease / MAX_DELAY_SECONDS)
    assert hops_per_attempt == 97
    assert hops_per_attempt * MAX_ATTEMPTS <= MAX_HOPS


# --- edits ---------------------------------------------------------------------------------------------


def a_job(target: Target = HTTP, **changes: Any) -> Job:
    job = Job(
        job_id="job_a",
        owner="alice",
        name="n",
        schedule=parse_schedule("*/5 * * * *"),
        target=target,
        shard=0,
        created_at=NOW,
        updated_at=NOW,
    )
    return replace(job, **changes)


CALLBACK_JOB = a_job(completion=C, heartbeat_seconds=60, timeout_seconds=600)


@pytest.mark.parametrize(
    ("job", "patch", "completion", "heartbeat"),
    [
        pytest.param(a_job(), JobPatch(name="x"), R, None, id="an_unrelated_edit_keeps_response"),
        pytest.param(
            CALLBACK_JOB, JobPatch(name="x"), C, 60, id="an_unrelated_edit_keeps_callback_and_heartbeat"
        ),
        pytest.param(
            CALLBACK_JOB,
            JobPatch(target=Target("http", {**HTTP.config, "url": "https://other.example.com/"})),
            C,
            60,
            id="another_http_target_keeps_callback",
        ),
        pytest.param(
            a_job(), JobPatch(target=SQS), D, None, id="http_to_sqs_redefaults_response_to_delivery"
        ),
        pytest.param(
            a_job(SQS), JobPatch(target=HTTP), R, None, id="sqs_to_http_redefaults_delivery_to_response"
        ),
        pytest.param(a_job(), JobPatch(target=LAMBDA_SYNC), R, None, id="http_to_sync_lambda_keeps_response"),
        pytest.param(
            a_job(LAMBDA_ASYNC, completion=D),
            JobPatch(target=LAMBDA_SYNC),
            R,
            None,
            id="event_to_request_response_lambda_redefaults_to_response",
        ),
        pytest.param(
            a_job(completion=C, timeout_seconds=600),
            JobPatch(target=SNS),
            D,
            None,
            id="a_callback_job_moved_to_sns_is_delivered",
        ),
        pytest.param(
            CALLBACK_JOB, JobPatch(completion=R), R, None, id="leaving_callback_takes_the_heartbeat_with_it"
        ),
        pytest.param(
            CALLBACK_JOB, JobPatch(heartbeat_seconds=None), C, None, id="a_null_heartbeat_removes_it"
        ),
        pytest.param(
            a_job(),
            JobPatch(completion=C, heartbeat_seconds=30),
            C,
            30,
            id="switching_to_callback_with_a_heartbeat",
        ),
        pytest.param(
            CALLBACK_JOB,
            JobPatch(target=SQS, completion=D, heartbeat_seconds=None),
            D,
            None,
            id="an_explicit_completion_with_the_target",
        ),
    ],
)
def test_an_edit_keeps_or_follows_the_completion(
    job: Job, patch: JobPatch, completion: Completion, heartbeat: int | None
) -> None:
    edited = apply_patch(job, patch, NOW)
    assert (edited.completion, edited.heartbeat_seconds) == (completion, heartbeat)
    assert JobView.planned(edited).completion is completion
    assert JobView.planned(edited).heartbeat_seconds == heartbeat


@pytest.mark.parametrize(
    ("job", "patch", "field", "words"),
    [
        pytest.param(
            a_job(SQS), JobPatch(completion=C), "completion", "http targets only", id="callback_on_sqs"
        ),
        pytest.param(
            a_job(),
            JobPatch(target=SQS, completion=R),
            "completion",
            "allows delivery",
            id="response_given_for_sqs",
        ),
        pytest.param(
            a_job(),
            JobPatch(heartbeat_seconds=30),
            "heartbeat_seconds",
            "callback only",
            id="heartbeat_on_response",
        ),
        pytest.param(
            a_job(completion=C, timeout_seconds=3600),
            JobPatch(completion=R),
            "timeout_seconds",
            "1-840 seconds for completion response",
            id="leaving_callback_with_a_long_timeout",
        ),
        pytest.param(
            a_job(completion=C, timeout_seconds=3600),
            JobPatch(target=SQS),
            "timeout_seconds",
            "1-840 seconds for completion delivery",
            id="a_long_callback_job_moved_to_sqs",
        ),
        pytest.param(
            a_job(),
            JobPatch(timeout_seconds=900),
            "timeout_seconds",
            "only completion callback",
            id="response_to_900_s",
        ),
        pytest.param(
            CALLBACK_JOB,
            JobPatch(timeout_seconds=30),
            "heartbeat_seconds",
            "longer than timeout_seconds 30 s",
            id="a_timeout_below_the_heartbeat",
        ),
    ],
)
def test_an_edit_is_refused_naming_the_field(job: Job, patch: JobPatch, field: str, words: str) -> None:
    with pytest.raises(ValidationError) as refused:
        apply_patch(job, patch, NOW)
    assert refused.value.field == field
    assert words in refused.value.message


def test_a_callback_job_may_take_a_day_and_a_response_job_840_s() -> None:
    long = apply_patch(a_job(), JobPatch(completion=C, timeout_seconds=86_400), NOW)
    assert (long.completion, long.timeout_seconds, long.version) == (C, 86_400, 2)
    assert apply_patch(a_job(), JobPatch(timeout_seconds=840), NOW).timeout_seconds == 840
