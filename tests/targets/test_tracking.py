"""Tracked starts and the looks that follow them: Step Functions executions and ECS tasks.

What runs where. On moto (executed for real, in-process): StartExecution and DescribeExecution of a RUNNING
execution (moto's executions never leave RUNNING), ExecutionAlreadyExists, ExecutionDoesNotExist; ECS
RunTask on Fargate with its network configuration, overrides and startedBy (a cluster, a task definition,
a VPC subnet and security group on moto), DescribeTasks of a RUNNING task and of a task ECS does not know,
ClusterNotFoundException. With botocore's Stubber (the answers are written here, the requests are checked
against the service model): an execution's SUCCEEDED / FAILED / TIMED_OUT / ABORTED / PENDING_REDRIVE,
Express starts, throttling and access errors on a look, RunTask's exact request, its `failures[]` and
ConflictException, and every STOPPED task (exit codes, stop codes). Network failures come from a client that
raises them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import boto3
import jsonschema_rs
import pytest
from botocore.exceptions import EndpointConnectionError, ParamValidationError, ReadTimeoutError
from botocore.parsers import ResponseParserError
from botocore.stub import ANY, Stubber

from tickwork.adapters.targets import AwsInvoker, HttpInvoker, TargetRegistry
from tickwork.adapters.targets.aws import (
    EXPRESS_NOT_TRACKED,
    TRACK_TIMEOUT_SECONDS,
    boto3_client_factory,
    ecs_failure_retryable,
)
from tickwork.domain.errors import ValidationError
from tickwork.domain.models import Target
from tickwork.domain.targets import (
    ECS_MAX_OVERRIDES_CHARS,
    MAX_DETAIL_BYTES,
    Invocation,
    TargetResult,
    config_json_schemas,
    ecs_client_token,
    ecs_started_by,
    sfn_execution_name,
    validate_target,
)

from .conftest import EPOCH, SCHEDULED_FOR, SECRET, invocation

REGION = "us-east-1"
ACCOUNT = "123456789012"
RUN_ID = "job-1:20261202T120500Z"
PASS_MACHINE = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}})
MACHINE = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:nightly"
EXECUTION = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:nightly:{sfn_execution_name(RUN_ID)}"
CLUSTER = "batch"
TASK = f"arn:aws:ecs:{REGION}:{ACCOUNT}:task/{CLUSTER}/0123456789abcdef0123456789abcdef"
SUBNET = "subnet-0a1b2c3d"
GROUP = "sg-0a1b2c3d"
TICKWORK_ENV = [
    {"name": "TICKWORK_RUN_ID", "value": RUN_ID},
    {"name": "TICKWORK_JOB_ID", "value": "job-1"},
    {"name": "TICKWORK_SCHEDULED_FOR", "value": "2026-12-02T12:05:00Z"},
    {"name": "TICKWORK_ATTEMPT", "value": "1"},
    {"name": "TICKWORK_REVISION", "value": "4"},
    {"name": "TICKWORK_TRIGGER", "value": "catch-up"},
    {"name": "TICKWORK_PREVIOUS_SLOT", "value": "2026-12-02T12:00:00Z"},
    {"name": "TICKWORK_NEXT_SLOT", "value": "2026-12-02T12:10:00Z"},
]


def tracked(attempt: int = 1) -> Invocation:
    return replace(invocation(attempt=attempt), track=True)


def sfn_target(machine: str = MACHINE) -> Target:
    return validate_target("stepfunctions", {"state_machine_arn": machine, "input": {"day": "monday"}})


def ecs_target(**config: Any) -> Target:
    base: dict[str, Any] = {
        "cluster": CLUSTER,
        "task_definition": "nightly",
        "container": "main",
        "subnets": [SUBNET],
        "security_groups": [GROUP],
    }
    return validate_target("ecs", base | config)


def http_invoker() -> HttpInvoker:
    return HttpInvoker(SECRET, lambda: float(EPOCH), allow_loopback=False)


def outcome(result: TargetResult | None) -> tuple[bool, bool, str] | None:
    return None if result is None else (result.ok, result.retryable, result.status)


# --- the start: Invocation.track -----------------------------------------------------------------------


def test_an_invocation_follows_nothing_unless_told() -> None:
    assert invocation().track is False
    assert tracked().track is True


# --- Step Functions on moto ----------------------------------------------------------------------------


@pytest.fixture
def aws(moto: None) -> AwsInvoker:
    return AwsInvoker(boto3_client_factory(region_name=REGION))


@pytest.fixture
def machine(moto: None) -> str:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    arn: str = sfn.create_state_machine(
        name="nightly", definition=PASS_MACHINE, roleArn=f"arn:aws:iam::{ACCOUNT}:role/sfn"
    )["stateMachineArn"]
    return arn


def test_a_tracked_start_answers_with_the_execution_it_began_and_a_look_finds_it_running(
    aws: AwsInvoker, machine: str
) -> None:
    started = aws.invoke(sfn_target(machine), tracked())

    [execution] = boto3.client("stepfunctions", region_name=REGION).list_executions(stateMachineArn=machine)[
        "executions"
    ]
    assert (started.ok, started.accepted, started.handle) == (True, True, execution["executionArn"])
    assert started.detail == f"executionArn={execution['executionArn']}"
    assert aws.track(sfn_target(machine), execution["executionArn"]) is None  # moto: RUNNING


def test_a_later_attempt_follows_the_runs_execution_instead_of_starting_a_second(
    aws: AwsInvoker, machine: str
) -> None:
    first = aws.invoke(sfn_target(machine), tracked())
    again = aws.invoke(sfn_target(machine), tracked(attempt=2))

    assert (again.ok, again.accepted, again.status) == (True, True, "ExecutionAlreadyExists")
    assert again.handle == first.handle
    sfn = boto3.client("stepfunctions", region_name=REGION)
    assert len(sfn.list_executions(stateMachineArn=machine)["executions"]) == 1


def test_a_delivery_start_is_not_followed(aws: AwsInvoker, machine: str) -> None:
    started = aws.invoke(sfn_target(machine), invocation())
    again = aws.invoke(sfn_target(machine), invocation(attempt=2))

    assert (started.ok, started.accepted, started.handle) == (True, False, None)
    assert (again.ok, again.accepted, again.handle, again.status) == (
        True,
        False,
        None,
        "ExecutionAlreadyExists",
    )


def test_an_execution_that_does_not_exist_cannot_be_followed(aws: AwsInvoker, machine: str) -> None:
    gone = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:nightly:never-started"

    result = aws.track(sfn_target(machine), gone)

    assert outcome(result) == (False, False, "ExecutionDoesNotExist")


# --- Step Functions looks, stubbed ---------------------------------------------------------------------


def _stubbed(service: str) -> tuple[AwsInvoker, Stubber]:
    client = boto3.client(service, region_name=REGION)  # type: ignore[call-overload]
    stubber = Stubber(client)
    stubber.activate()
    return AwsInvoker(lambda _service: client), stubber


def _execution(status: str, **fields: Any) -> dict[str, Any]:
    return {
        "executionArn": EXECUTION,
        "stateMachineArn": MACHINE,
        "status": status,
        "startDate": SCHEDULED_FOR,
        **fields,
    }


@pytest.mark.parametrize(
    ("answer", "expected", "detail"),
    [
        pytest.param(
            _execution("SUCCEEDED", output='{"rows": 12}'),
            (True, False, "SUCCEEDED"),
            '{"rows": 12}',
            id="succeeded_with_its_output",
        ),
        pytest.param(
            _execution("FAILED", error="States.TaskFailed", cause="the report lambda raised"),
            (False, False, "FAILED"),
            "States.TaskFailed: the report lambda raised",
            id="failed_is_for_the_retry_policy",
        ),
        pytest.param(
            _execution("TIMED_OUT", error="States.Timeout"),
            (False, False, "TIMED_OUT"),
            "States.Timeout",
            id="timed_out_is_for_the_retry_policy",
        ),
        pytest.param(
            _execution("ABORTED"),
            (False, False, "ABORTED"),
            f"executionArn={EXECUTION}",
            id="aborted_on_purpose_is_final",
        ),
    ],
)
def test_an_ended_execution_is_the_runs_end(
    aws_env: None, answer: dict[str, Any], expected: tuple[bool, bool, str], detail: str
) -> None:
    aws, stubber = _stubbed("stepfunctions")
    stubber.add_response("describe_execution", answer, {"executionArn": EXECUTION})

    result = aws.track(sfn_target(), EXECUTION)

    assert outcome(result) == expected
    assert result is not None and result.detail == detail and not result.accepted
    stubber.assert_no_pending_responses()


@pytest.mark.parametrize("status", ["RUNNING", "PENDING_REDRIVE", "SOMETHING_NEW"])
def test_an_execution_that_has_not_ended_is_looked_at_again(aws_env: None, status: str) -> None:
    aws, stubber = _stubbed("stepfunctions")
    stubber.add_response("describe_execution", _execution("RUNNING") | {"status": status})

    assert aws.track(sfn_target(), EXECUTION) is None


def test_a_succeeded_executions_output_is_cut_to_a_kib(aws_env: None) -> None:
    aws, stubber = _stubbed("stepfunctions")
    stubber.add_response("describe_execution", _execution("SUCCEEDED", output=json.dumps({"x": "é" * 5000})))

    result = aws.track(sfn_target(), EXECUTION)

    assert result is not None and result.ok
    assert len(result.detail.encode()) <= MAX_DETAIL_BYTES and result.detail.endswith("[truncated]")


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        pytest.param("ThrottlingException", 400, None, id="throttled_looks_again"),
        pytest.param("KmsThrottlingException", 400, None, id="kms_throttled_looks_again"),
        pytest.param("InternalFailure", 500, None, id="service_fault_looks_again"),
        pytest.param(
            "AccessDeniedException", 400, (False, False, "AccessDeniedException"), id="no_permission_is_final"
        ),
        pytest.param(
            "ExecutionDoesNotExist", 400, (False, False, "ExecutionDoesNotExist"), id="no_execution_is_final"
        ),
        pytest.param("InvalidArn", 400, (False, False, "InvalidArn"), id="invalid_arn_is_final"),
    ],
)
def test_a_look_that_fails_is_looked_at_again_unless_it_never_can_succeed(
    aws_env: None, code: str, status: int, expected: tuple[bool, bool, str] | None
) -> None:
    aws, stubber = _stubbed("stepfunctions")
    stubber.add_client_error("describe_execution", service_error_code=code, http_status_code=status)

    assert outcome(aws.track(sfn_target(), EXECUTION)) == expected


class _Raising:
    """A client whose every call raises the given botocore error (Stubber raises only ClientErrors)."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    def __getattr__(self, name: str) -> Any:
        def call(**kwargs: Any) -> Any:
            raise self._error

        return call


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(EndpointConnectionError(endpoint_url="https://states"), None, id="unreachable"),
        pytest.param(ReadTimeoutError(endpoint_url="https://states"), None, id="timed_out"),
        pytest.param(ResponseParserError("<html>proxy</html>"), None, id="garbled"),
        pytest.param(
            ParamValidationError(report="bad"), (False, False, "ParamValidationError"), id="bad_request"
        ),
    ],
)
@pytest.mark.parametrize("target", [sfn_target(), ecs_target()], ids=["stepfunctions", "ecs"])
def test_a_look_the_network_failed_is_looked_at_again(
    target: Target, error: Exception, expected: tuple[bool, bool, str] | None
) -> None:
    aws = AwsInvoker(lambda _service: _Raising(error))

    assert outcome(aws.track(target, EXECUTION if target.kind == "stepfunctions" else TASK)) == expected


def test_programming_errors_in_a_look_propagate() -> None:
    aws = AwsInvoker(lambda _service: _Raising(KeyError("bug")))

    with pytest.raises(KeyError):
        aws.track(sfn_target(), EXECUTION)


# --- Express: cannot be followed -----------------------------------------------------------------------

EXPRESS = f"arn:aws:states:{REGION}:{ACCOUNT}:express:nightly:{sfn_execution_name(RUN_ID)}:0f1e2d3c-aaaa"


def test_a_tracked_start_of_an_express_workflow_ends_delivered_and_says_why(aws_env: None) -> None:
    aws, stubber = _stubbed("stepfunctions")
    stubber.add_response("start_execution", {"executionArn": EXPRESS, "startDate": SCHEDULED_FOR})

    result = aws.invoke(sfn_target(), tracked())

    assert (result.ok, result.accepted, result.handle) == (True, False, None)
    assert EXPRESS_NOT_TRACKED in result.detail and "cannot be followed" in result.detail


def test_an_express_execution_handed_to_a_look_cannot_be_followed(aws_env: None) -> None:
    aws, _ = _stubbed("stepfunctions")  # no answer queued: a call would fail the test

    assert outcome(aws.track(sfn_target(), EXPRESS)) == (False, False, "NotTrackable")


# --- ECS on moto ---------------------------------------------------------------------------------------


@pytest.fixture
def fargate(moto: None) -> Iterator[dict[str, Any]]:
    """A cluster, a Fargate task definition with one container `main`, and a subnet and security group."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})  # moto names the task's ENI
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="tasks", Description="tasks", VpcId=vpc)["GroupId"]
    ecs = boto3.client("ecs", region_name=REGION)
    ecs.create_cluster(clusterName=CLUSTER)
    ecs.register_task_definition(
        family="nightly",
        containerDefinitions=[{"name": "main", "image": "busybox", "essential": True, "memory": 128}],
        requiresCompatibilities=["FARGATE"],
        networkMode="awsvpc",
        cpu="256",
        memory="512",
    )
    yield {"subnets": [subnet], "security_groups": [group]}


def test_a_tracked_task_start_carries_the_run_and_a_look_finds_it_running(
    aws: AwsInvoker, fargate: dict[str, Any]
) -> None:
    target = ecs_target(**fargate, command=["report", "--day", "monday"], environment={"MODE": "full"})

    started = aws.invoke(target, tracked())

    ecs = boto3.client("ecs", region_name=REGION)
    [arn] = ecs.list_tasks(cluster=CLUSTER)["taskArns"]
    assert (started.ok, started.accepted, started.handle, started.detail) == (
        True,
        True,
        arn,
        f"taskArn={arn}",
    )
    [task] = ecs.describe_tasks(cluster=CLUSTER, tasks=[arn])["tasks"]
    assert task["launchType"] == "FARGATE" and task["startedBy"] == ecs_started_by(RUN_ID)
    assert task["overrides"]["containerOverrides"] == [
        {
            "name": "main",
            "command": ["report", "--day", "monday"],
            "environment": [{"name": "MODE", "value": "full"}, *TICKWORK_ENV],
        }
    ]
    [attachment] = task["attachments"]
    assert {"name": "subnetId", "value": fargate["subnets"][0]} in attachment["details"]
    assert aws.track(target, arn) is None  # RUNNING


def test_a_delivery_task_start_is_not_followed(aws: AwsInvoker, fargate: dict[str, Any]) -> None:
    started = aws.invoke(ecs_target(**fargate), invocation())

    assert (started.ok, started.accepted, started.handle) == (True, False, None)
    assert started.detail.startswith(f"taskArn=arn:aws:ecs:{REGION}:{ACCOUNT}:task/{CLUSTER}/")


def test_a_task_ecs_does_not_know_yet_is_looked_at_again(aws: AwsInvoker, fargate: dict[str, Any]) -> None:
    # Just started (ECS is eventually consistent) or long gone: the run's lease ends it if it never shows up.
    assert aws.track(ecs_target(**fargate), TASK) is None


def test_a_task_in_a_cluster_that_does_not_exist_is_not_started(
    aws: AwsInvoker, fargate: dict[str, Any]
) -> None:
    result = aws.invoke(ecs_target(**fargate, cluster="elsewhere"), tracked())

    assert outcome(result) == (False, False, "ClusterNotFoundException") and not result.accepted


# --- ECS starts, stubbed -------------------------------------------------------------------------------


def _task(last_status: str = "STOPPED", **fields: Any) -> dict[str, Any]:
    return {
        "taskArn": TASK,
        "clusterArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/{CLUSTER}",
        "lastStatus": last_status,
        **fields,
    }


def test_run_task_asks_for_one_task_of_this_attempt_of_this_run(aws_env: None) -> None:
    aws, stubber = _stubbed("ecs")
    stubber.add_response(
        "run_task",
        {"tasks": [_task("PROVISIONING")], "failures": []},
        {
            "cluster": CLUSTER,
            "taskDefinition": "nightly:3",
            "launchType": "FARGATE",
            "count": 1,
            "startedBy": ecs_started_by(RUN_ID),
            "clientToken": f"{RUN_ID}#2",
            "overrides": {
                "containerOverrides": [
                    {
                        "name": "main",
                        "environment": [
                            *TICKWORK_ENV[:3],
                            {"name": "TICKWORK_ATTEMPT", "value": "2"},
                            *TICKWORK_ENV[4:],
                        ],
                    }
                ]
            },
            "networkConfiguration": {
                "awsvpcConfiguration": {
                    "subnets": [SUBNET],
                    "securityGroups": [GROUP],
                    "assignPublicIp": "ENABLED",
                }
            },
        },
    )

    result = aws.invoke(ecs_target(task_definition="nightly:3", assign_public_ip=True), tracked(attempt=2))

    assert (result.ok, result.accepted, result.handle) == (True, True, TASK)
    stubber.assert_no_pending_responses()


def test_an_ec2_task_without_subnets_runs_in_its_task_definitions_network_mode(aws_env: None) -> None:
    aws, stubber = _stubbed("ecs")
    expected = {
        "cluster": CLUSTER,
        "taskDefinition": "nightly",
        "launchType": "EC2",
        "count": 1,
        "startedBy": ANY,
        "clientToken": ANY,
        "overrides": ANY,
    }
    stubber.add_response("run_task", {"tasks": [_task("PENDING")]}, expected)

    result = aws.invoke(ecs_target(launch_type="EC2", subnets=[], security_groups=[]), invocation())

    assert (result.ok, result.accepted) == (True, False)
    stubber.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("reason", "retryable"),
    [
        ("RESOURCE:MEMORY", True),
        ("RESOURCE:ENI", True),
        ("MISSING", True),
        ("AGENT", True),
        (
            "Capacity is unavailable at this time. Please try again later or in a different availability "
            "zone",
            True,
        ),
        ("ATTRIBUTE", False),
        ("LOCATION", False),
    ],
)
def test_a_task_ecs_did_not_start_is_a_failure_retried_when_capacity_may_come_back(
    aws_env: None, reason: str, retryable: bool
) -> None:
    aws, stubber = _stubbed("ecs")
    stubber.add_response("run_task", {"tasks": [], "failures": [{"reason": reason, "detail": "no room"}]})

    result = aws.invoke(ecs_target(), tracked())

    assert outcome(result) == (False, retryable, reason) and result.detail == "no room"
    assert ecs_failure_retryable(reason) is retryable


def test_a_reused_token_with_other_parameters_follows_the_task_it_started(aws_env: None) -> None:
    """The job changed between two tries of one attempt: ECS names the attempt's task instead of starting
    another."""
    aws, stubber = _stubbed("ecs")
    stubber.add_client_error(
        "run_task",
        service_error_code="ConflictException",
        http_status_code=400,
        modeled_fields={"resourceIds": [TASK]},
    )
    stubber.add_client_error(
        "run_task",
        service_error_code="ConflictException",
        http_status_code=400,
        modeled_fields={"resourceIds": [TASK]},
    )

    followed = aws.invoke(ecs_target(), tracked())
    delivered = aws.invoke(ecs_target(), invocation())

    assert (followed.ok, followed.accepted, followed.handle, followed.status) == (
        True,
        True,
        TASK,
        "ConflictException",
    )
    assert (delivered.ok, delivered.accepted, delivered.handle) == (True, False, None)
    assert delivered.detail == f"taskArn={TASK}; already started"


def test_a_conflict_that_names_no_task_is_a_failure(aws_env: None) -> None:
    aws, stubber = _stubbed("ecs")
    stubber.add_client_error("run_task", service_error_code="ConflictException", http_status_code=400)

    assert outcome(aws.invoke(ecs_target(), tracked())) == (False, False, "ConflictException")


# --- ECS looks, stubbed --------------------------------------------------------------------------------


def _container(name: str = "main", **fields: Any) -> dict[str, Any]:
    return {"name": name, "lastStatus": "STOPPED", **fields}


@pytest.mark.parametrize(
    ("task", "expected", "detail"),
    [
        pytest.param(
            _task(stopCode="EssentialContainerExited", containers=[_container(exitCode=0)]),
            (True, False, "0"),
            f"taskArn={TASK}",
            id="exit_0_succeeded",
        ),
        pytest.param(
            _task(
                stopCode="EssentialContainerExited",
                stoppedReason="Essential container in task exited",
                containers=[_container(exitCode=3)],
            ),
            (False, True, "3"),
            f"taskArn={TASK}; stoppedReason=Essential container in task exited",
            id="non_zero_exit_is_for_the_retry_policy",
        ),
        pytest.param(
            _task(
                stopCode="EssentialContainerExited",
                containers=[_container(exitCode=0), _container("log-router", exitCode=137)],
            ),
            (True, False, "0"),
            f"taskArn={TASK}",
            id="the_jobs_container_decides_not_a_sidecar",
        ),
        pytest.param(
            _task(
                stopCode="TaskFailedToStart",
                stoppedReason="CannotPullContainerError: pull access denied",
                containers=[_container(reason="CannotPullContainerError")],
            ),
            (False, True, "TaskFailedToStart"),
            f"taskArn={TASK}; stoppedReason=CannotPullContainerError: pull access denied; "
            "main: CannotPullContainerError",
            id="never_started_is_retryable",
        ),
        pytest.param(
            _task(
                stopCode="UserInitiated",
                stoppedReason="Task stopped by user",
                containers=[_container(exitCode=143)],
            ),
            (False, False, "143"),
            f"taskArn={TASK}; stoppedReason=Task stopped by user",
            id="stopped_by_someone_is_final",
        ),
        pytest.param(
            _task(stopCode="UserInitiated", containers=[_container(exitCode=0)]),
            (True, False, "0"),
            f"taskArn={TASK}",
            id="stopped_after_its_container_exited_0",
        ),
        pytest.param(
            _task(stopCode="SpotInterruption", containers=[_container()]),
            (False, True, "NoExitCode"),
            f"taskArn={TASK}",
            id="no_exit_code_is_retryable",
        ),
        pytest.param(
            _task("DELETED", containers=[_container(exitCode=0)]),
            (True, False, "0"),
            f"taskArn={TASK}",
            id="deleted_after_stopping",
        ),
    ],
)
def test_a_stopped_task_ends_with_its_containers_exit_code(
    aws_env: None, task: dict[str, Any], expected: tuple[bool, bool, str], detail: str
) -> None:
    aws, stubber = _stubbed("ecs")
    stubber.add_response(
        "describe_tasks", {"tasks": [task], "failures": []}, {"cluster": CLUSTER, "tasks": [TASK]}
    )

    result = aws.track(ecs_target(), TASK)

    assert outcome(result) == expected
    assert result is not None and result.detail == detail


@pytest.mark.parametrize(
    "status", ["PROVISIONING", "PENDING", "ACTIVATING", "RUNNING", "DEACTIVATING", "STOPPING"]
)
def test_a_task_that_has_not_stopped_is_looked_at_again(aws_env: None, status: str) -> None:
    aws, stubber = _stubbed("ecs")
    stubber.add_response("describe_tasks", {"tasks": [_task(status, containers=[_container(exitCode=0)])]})

    assert aws.track(ecs_target(), TASK) is None


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param({"tasks": [], "failures": [{"arn": TASK, "reason": "MISSING"}]}, None, id="missing"),
        pytest.param(
            {"tasks": [], "failures": [{"arn": TASK, "reason": "INVALID_ARN", "detail": "bad"}]},
            (False, False, "INVALID_ARN"),
            id="another_reason_is_final",
        ),
    ],
)
def test_a_task_ecs_cannot_describe(
    aws_env: None, answer: dict[str, Any], expected: tuple[bool, bool, str] | None
) -> None:
    aws, stubber = _stubbed("ecs")
    stubber.add_response("describe_tasks", answer)

    assert outcome(aws.track(ecs_target(), TASK)) == expected


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("ThrottlingException", None),
        ("ServerException", None),  # ECS's own fault
        ("AccessDeniedException", (False, False, "AccessDeniedException")),
        ("ClusterNotFoundException", (False, False, "ClusterNotFoundException")),
    ],
)
def test_ecs_look_errors(aws_env: None, code: str, expected: tuple[bool, bool, str] | None) -> None:
    aws, stubber = _stubbed("ecs")
    stubber.add_client_error("describe_tasks", service_error_code=code, http_status_code=400)

    assert outcome(aws.track(ecs_target(), TASK)) == expected


# --- what can be tracked, and the clients a look uses --------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        Target("sqs", {"queue_url": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/q", "message": "m"}),
        Target("lambda", {"function_name": "f", "invocation_type": "Event"}),
        Target("http", {"url": "https://h/"}),
    ],
    ids=["sqs", "lambda", "http"],
)
def test_only_stepfunctions_and_ecs_starts_are_followed(target: Target) -> None:
    aws = AwsInvoker(lambda _service: pytest.fail("no client should be needed"))
    registry = TargetRegistry(http_invoker(), aws)

    for result in (aws.track(target, "arn"), registry.track(target, "arn")):
        assert outcome(result) == (False, False, "InvalidTarget")


def test_a_stored_target_no_longer_valid_is_not_looked_at() -> None:
    aws = AwsInvoker(lambda _service: pytest.fail("no client should be needed"))

    result = aws.track(Target("ecs", {"cluster": "c"}), TASK)

    assert outcome(result) == (False, False, "InvalidTarget")
    assert result is not None and "task_definition" in result.detail


def test_the_registry_routes_looks_by_kind(aws_env: None) -> None:
    aws, stubber = _stubbed("stepfunctions")
    stubber.add_response("describe_execution", _execution("SUCCEEDED", output="{}"))
    registry = TargetRegistry(http_invoker(), aws)

    assert outcome(registry.track(sfn_target(), EXECUTION)) == (True, False, "SUCCEEDED")


class _TimedClients:
    """A `TimedClients` that records which (service, timeout) each client was asked for."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.asked: list[tuple[str, float]] = []

    def __call__(self, service: str) -> Any:
        raise AssertionError("targets use timed clients")

    def timed(self, service: str, timeout_seconds: float) -> Any:
        self.asked.append((service, timeout_seconds))
        return self.client


def test_a_look_ends_within_its_own_timeout_not_the_jobs(aws_env: None) -> None:
    client = boto3.client("ecs", region_name=REGION)
    stubber = Stubber(client)
    stubber.activate()
    stubber.add_response("run_task", {"tasks": [_task("PENDING")]})
    stubber.add_response("describe_tasks", {"tasks": [_task("RUNNING")]})
    clients = _TimedClients(client)
    aws = AwsInvoker(clients)

    aws.invoke(ecs_target(), replace(tracked(), timeout_seconds=600))
    aws.track(ecs_target(), TASK)

    assert clients.asked == [("ecs", 600), ("ecs", TRACK_TIMEOUT_SECONDS)]


# --- ECS configs: validation, the document's schema, idempotency keys ----------------------------------

ECS_SCHEMA = jsonschema_rs.validator_for(config_json_schemas()["ecs"])


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(
            {"cluster": "c", "task_definition": "t", "container": "m", "subnets": [SUBNET]}, id="minimal"
        ),
        pytest.param(
            {
                "cluster": f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/c",
                "task_definition": f"arn:aws:ecs:{REGION}:{ACCOUNT}:task-definition/t:12",
                "launch_type": "FARGATE",
                "container": "m",
                "subnets": [SUBNET, "subnet-0123456789abcdef0"],
                "security_groups": [GROUP],
                "assign_public_ip": True,
                "command": ["run"],
                "environment": {"MODE": "full", "_x": ""},
            },
            id="everything",
        ),
        pytest.param(
            {"cluster": "c", "task_definition": "t:1", "launch_type": "EC2", "container": "m"},
            id="ec2_bridge",
        ),
    ],
)
def test_valid_ecs_configs_are_normalised_and_the_document_agrees(config: dict[str, Any]) -> None:
    target = validate_target("ecs", config)

    assert ECS_SCHEMA.is_valid(config)
    assert validate_target("ecs", target.config) == target  # a stored config validates as itself
    assert target.config["launch_type"] == config.get("launch_type", "FARGATE")
    assert target.config["assign_public_ip"] is config.get("assign_public_ip", False)
    assert ECS_SCHEMA.is_valid(target.config)


MINIMAL = {"cluster": "c", "task_definition": "t", "container": "m", "subnets": [SUBNET]}


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        pytest.param({"cluster": "a b"}, "cluster", "cluster name or ARN", id="cluster"),
        pytest.param({"task_definition": "t:0"}, "task_definition", "family:revision", id="revision_0"),
        pytest.param({"launch_type": "EXTERNAL"}, "launch_type", "FARGATE, EC2", id="launch_type"),
        pytest.param({"container": ""}, "container", "container name", id="container"),
        pytest.param(
            {"subnets": []}, "subnets", "required for launch_type FARGATE", id="fargate_without_subnets"
        ),
        pytest.param({"subnets": ["subnet-xyz"]}, "subnets[0]", "subnet-", id="subnet_id"),
        pytest.param({"subnets": [SUBNET, SUBNET]}, "subnets", "twice", id="subnet_twice"),
        pytest.param(
            {"subnets": [f"subnet-{i:08x}" for i in range(17)]}, "subnets", "at most 16", id="17_subnets"
        ),
        pytest.param({"security_groups": ["sg-1"]}, "security_groups[0]", "sg-", id="group_id"),
        pytest.param(
            {"launch_type": "EC2", "subnets": [], "security_groups": [GROUP]},
            "security_groups",
            "only with subnets",
            id="groups_without_subnets",
        ),
        pytest.param({"assign_public_ip": "yes"}, "assign_public_ip", "true or false", id="public_ip_type"),
        pytest.param(
            {"launch_type": "EC2", "assign_public_ip": True},
            "assign_public_ip",
            "FARGATE only",
            id="public_ip_ec2",
        ),
        pytest.param({"command": []}, "command", "1-64 strings", id="empty_command"),
        pytest.param({"command": ["a", 1]}, "command[1]", "string", id="command_item"),
        pytest.param(
            {"environment": {"TICKWORK_RUN_ID": "x"}},
            "environment.TICKWORK_RUN_ID",
            "set by Tickwork",
            id="reserved",
        ),
        pytest.param(
            {"environment": {"tickwork_x": "x"}},
            "environment.tickwork_x",
            "set by Tickwork",
            id="reserved_any_case",
        ),
        pytest.param({"environment": {"1X": "x"}}, "environment.1X", "variable name", id="env_name"),
        pytest.param({"environment": {"X": 1}}, "environment.X", "string", id="env_value"),
        pytest.param(
            {"environment": {"X": "x" * ECS_MAX_OVERRIDES_CHARS}},
            "environment",
            "8192 (8 KiB)",
            id="too_large",
        ),
        pytest.param({"command": ["\udc00"]}, "command[0]", "lone surrogate", id="surrogate"),
        pytest.param({"platform_version": "1.4.0"}, "platform_version", "unknown key", id="unknown_key"),
    ],
)
def test_invalid_ecs_configs_name_the_field(change: dict[str, Any], field: str, words: str) -> None:
    config = MINIMAL | change

    with pytest.raises(ValidationError) as refused:
        validate_target("ecs", config)

    assert refused.value.field == f"target.config.{field}"
    assert words in refused.value.message
    if field not in ("environment", "command[0]"):  # sizes and surrogates are stated in words
        assert not ECS_SCHEMA.is_valid(config)


def test_the_started_by_and_client_token_follow_ecs_rules() -> None:
    long_run = "job_" + "x" * 80 + ":20261202T120500Z"

    assert ecs_started_by(RUN_ID) == ecs_started_by(RUN_ID) != ecs_started_by(long_run)
    assert len(ecs_started_by(long_run)) == 36 and ecs_started_by(long_run).startswith("tickwork-")
    assert ecs_client_token(RUN_ID, 1) == f"{RUN_ID}#1" != ecs_client_token(RUN_ID, 2)
    hashed = ecs_client_token(long_run, 1)
    assert len(hashed) == 64 and hashed != ecs_client_token(long_run, 2)
    assert ecs_client_token("job é:1", 1) != "job é:1#1"  # outside ASCII 33-126: hashed


def test_a_later_run_is_a_new_task_and_a_new_token(aws_env: None) -> None:
    later = invocation(scheduled_for=SCHEDULED_FOR + timedelta(minutes=5))

    assert ecs_client_token(later.run_id, 1) != ecs_client_token(RUN_ID, 1)
    assert ecs_started_by(later.run_id) != ecs_started_by(RUN_ID)
