"""AWS targets: SQS, SNS, EventBridge and Step Functions on moto; Lambda (moto needs Docker) and error mapping
with botocore's Stubber."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError, ParamValidationError, ReadTimeoutError
from botocore.parsers import ResponseParserError
from botocore.response import StreamingBody
from botocore.stub import Stubber

from tickwork.adapters.targets.aws import EXPRESS_CAVEAT, AwsInvoker, boto3_client_factory
from tickwork.domain.models import Target
from tickwork.domain.targets import json_dumps, sfn_execution_name

from .conftest import CONTEXT_REST, SCHEDULED_FOR, invocation

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/tickwork-sfn"
PASS_MACHINE = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}})
EXPECTED_ATTRIBUTES = {
    "tickwork.run_id": {"DataType": "String", "StringValue": "job-1:20261202T120500Z"},
    "tickwork.job_id": {"DataType": "String", "StringValue": "job-1"},
    "tickwork.scheduled_for": {"DataType": "String", "StringValue": "2026-12-02T12:05:00Z"},
    "tickwork.attempt": {"DataType": "Number", "StringValue": "1"},
    "tickwork.revision": {"DataType": "Number", "StringValue": "4"},
    "tickwork.trigger": {"DataType": "String", "StringValue": "catch-up"},
    "tickwork.previous_slot": {"DataType": "String", "StringValue": "2026-12-02T12:00:00Z"},
    "tickwork.next_slot": {"DataType": "String", "StringValue": "2026-12-02T12:10:00Z"},
}


def _receive(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    response = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], AttributeNames=["All"]
    )
    return list(response.get("Messages", []))


def _attributes(message: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {
        name: {"DataType": value["DataType"], "StringValue": value["StringValue"]}
        for name, value in message.get("MessageAttributes", {}).items()
    }


@pytest.fixture
def invoker(moto: None) -> AwsInvoker:
    return AwsInvoker(boto3_client_factory(region_name=REGION))


@pytest.fixture
def sqs(moto: None) -> Any:
    return boto3.client("sqs", region_name=REGION)


# --- moto ------------------------------------------------------------------------------------------------


def test_sqs_message_arrives_with_run_attributes(invoker: AwsInvoker, sqs: Any) -> None:
    queue_url = sqs.create_queue(QueueName="jobs")["QueueUrl"]

    result = invoker.invoke(Target("sqs", {"queue_url": queue_url, "message": "rebuild"}), invocation())

    assert result.ok and result.status == "200" and result.detail.startswith("MessageId=")
    [message] = _receive(sqs, queue_url)
    assert message["Body"] == "rebuild"
    assert _attributes(message) == EXPECTED_ATTRIBUTES


def test_sqs_fifo_deduplicates_a_repeated_send_of_the_same_run(invoker: AwsInvoker, sqs: Any) -> None:
    queue_url = sqs.create_queue(QueueName="jobs.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    target = Target("sqs", {"queue_url": queue_url, "message": "m"})

    first = invoker.invoke(target, invocation(attempt=1))
    second = invoker.invoke(target, invocation(attempt=2))  # a retry after a lost response

    assert first.ok and second.ok
    [message] = _receive(sqs, queue_url)
    assert message["Attributes"]["MessageDeduplicationId"] == "job-1:20261202T120500Z"
    assert message["Attributes"]["MessageGroupId"] == "job-1"


def test_sqs_missing_queue_is_not_retryable(invoker: AwsInvoker) -> None:
    target = Target(
        "sqs", {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/gone", "message": "m"}
    )

    result = invoker.invoke(target, invocation())

    assert (result.ok, result.retryable) == (False, False)
    assert "NonExistentQueue" in result.status or "QueueDoesNotExist" in result.status


def test_sns_publish_reaches_a_subscribed_queue(invoker: AwsInvoker, sqs: Any) -> None:
    sns = boto3.client("sns", region_name=REGION)
    topic_arn = sns.create_topic(Name="alerts")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="alerts-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns.subscribe(
        TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"}
    )

    result = invoker.invoke(
        Target("sns", {"topic_arn": topic_arn, "message": "disk full", "subject": "Ops"}), invocation()
    )

    assert result.ok, result
    [message] = _receive(sqs, queue_url)
    assert message["Body"] == "disk full"
    assert _attributes(message) == EXPECTED_ATTRIBUTES


def test_eventbridge_event_reaches_a_rule_target(invoker: AwsInvoker, sqs: Any) -> None:
    events = boto3.client("events", region_name=REGION)
    events.create_event_bus(Name="ops")
    queue_url = sqs.create_queue(QueueName="events-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(Name="ticks", EventBusName="ops", EventPattern=json.dumps({"source": ["my.app"]}))
    events.put_targets(Rule="ticks", EventBusName="ops", Targets=[{"Id": "q", "Arn": queue_arn}])
    target = Target(
        "eventbridge",
        {"event_bus_name": "ops", "source": "my.app", "detail_type": "Nightly", "detail": {"region": "eu"}},
    )

    result = invoker.invoke(target, invocation())

    assert result.ok and result.detail.startswith("EventId="), result
    [message] = _receive(sqs, queue_url)
    event = json.loads(message["Body"])
    assert event["source"] == "my.app" and event["detail-type"] == "Nightly"
    assert event["detail"] == {
        "region": "eu",
        "tickwork": {
            "run_id": "job-1:20261202T120500Z",
            "job_id": "job-1",
            "scheduled_for": "2026-12-02T12:05:00Z",
            "attempt": 1,
            **CONTEXT_REST,
        },
    }


def test_stepfunctions_starts_one_execution_per_run_across_attempts(invoker: AwsInvoker) -> None:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(name="nightly", definition=PASS_MACHINE, roleArn=ROLE)[
        "stateMachineArn"
    ]
    target = Target("stepfunctions", {"state_machine_arn": machine, "input": {"day": "monday"}})

    first = invoker.invoke(target, invocation())
    # Same name and same input while the execution runs (a lost response, retried within the attempt): SFN
    # (and moto) answer with the running execution.
    again = invoker.invoke(target, invocation())

    assert first.ok and again.ok
    assert first.detail == again.detail  # the same executionArn
    [execution] = sfn.list_executions(stateMachineArn=machine)["executions"]
    assert execution["name"] == sfn_execution_name("job-1:20261202T120500Z")
    described = sfn.describe_execution(executionArn=execution["executionArn"])
    assert json.loads(described["input"]) == {
        "input": {"day": "monday"},
        "tickwork": {
            "run_id": "job-1:20261202T120500Z",
            "job_id": "job-1",
            "scheduled_for": "2026-12-02T12:05:00Z",
            "attempt": 1,
            **CONTEXT_REST,
        },
    }

    # Attempt 2 of the same run (attempt 1's response was lost, its lease expired): same name, another input.
    # SFN refuses it; the run's execution exists, so the run is delivered, and no second execution starts.
    retried = invoker.invoke(target, invocation(attempt=2))

    assert (retried.ok, retried.retryable, retried.status) == (True, False, "ExecutionAlreadyExists")
    assert retried.detail.startswith(f"executionArn={execution['executionArn']};")
    assert len(sfn.list_executions(stateMachineArn=machine)["executions"]) == 1

    # Once that execution has closed, AWS refuses the name even for the same input: still delivered.
    sfn.stop_execution(executionArn=execution["executionArn"])
    after_close = invoker.invoke(target, invocation())

    assert (after_close.ok, after_close.status) == (True, "ExecutionAlreadyExists")
    assert len(sfn.list_executions(stateMachineArn=machine)["executions"]) == 1

    # Another run is another execution.
    other_run = invocation(scheduled_for=SCHEDULED_FOR + timedelta(minutes=5))
    assert invoker.invoke(target, other_run).ok
    assert len(sfn.list_executions(stateMachineArn=machine)["executions"]) == 2


def test_stepfunctions_missing_machine_is_not_retryable(invoker: AwsInvoker) -> None:
    arn = "arn:aws:states:us-east-1:123456789012:stateMachine:gone"

    result = invoker.invoke(Target("stepfunctions", {"state_machine_arn": arn}), invocation())

    assert (result.ok, result.retryable, result.status) == (False, False, "StateMachineDoesNotExist")


def test_clients_are_created_lazily_per_service(aws_env: None) -> None:
    asked: list[str] = []

    def client_for(service: str) -> Any:
        asked.append(service)
        return _Raising(EndpointConnectionError(endpoint_url="https://sqs.example"))

    invoker = AwsInvoker(client_for)
    assert asked == []

    result = invoker.invoke(
        Target("sqs", {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "message": "m"}),
        invocation(),
    )

    assert asked == ["sqs"]
    assert (result.ok, result.retryable, result.status) == (False, True, "EndpointConnectionError")


# --- Stubber: Lambda and error mapping -------------------------------------------------------------------

FUNCTION = "report"


def _payload(data: bytes) -> StreamingBody:
    return StreamingBody(io.BytesIO(data), len(data))


def _stubbed(service: str) -> tuple[AwsInvoker, Stubber]:
    client = boto3.client(service, region_name=REGION)  # type: ignore[call-overload]
    stubber = Stubber(client)
    stubber.activate()
    return AwsInvoker(lambda _service: client), stubber


def _lambda_target(invocation_type: str = "RequestResponse") -> Target:
    return Target(
        "lambda", {"function_name": FUNCTION, "invocation_type": invocation_type, "payload": {"k": 1}}
    )


def _expected_lambda_params(invocation_type: str = "RequestResponse") -> dict[str, Any]:
    payload = {
        "payload": {"k": 1},
        "tickwork": {
            "run_id": "job-1:20261202T120500Z",
            "job_id": "job-1",
            "scheduled_for": "2026-12-02T12:05:00Z",
            "attempt": 1,
            **CONTEXT_REST,
        },
    }
    return {
        "FunctionName": FUNCTION,
        "InvocationType": invocation_type,
        "Payload": json_dumps(payload).encode(),
    }


def test_lambda_success_wraps_the_payload(aws_env: None) -> None:
    invoker, stubber = _stubbed("lambda")
    stubber.add_response(
        "invoke", {"StatusCode": 200, "Payload": _payload(b'{"rows": 12}')}, _expected_lambda_params()
    )

    result = invoker.invoke(_lambda_target(), invocation())

    stubber.assert_no_pending_responses()
    assert (result.ok, result.status, result.detail) == (True, "200", '{"rows": 12}')


def test_lambda_async_event_is_accepted(aws_env: None) -> None:
    invoker, stubber = _stubbed("lambda")
    stubber.add_response(
        "invoke", {"StatusCode": 202, "Payload": _payload(b"")}, _expected_lambda_params("Event")
    )

    result = invoker.invoke(_lambda_target("Event"), invocation())

    assert (result.ok, result.status) == (True, "202")


def test_lambda_function_error_is_a_retryable_failure(aws_env: None) -> None:
    invoker, stubber = _stubbed("lambda")
    error_body = b'{"errorMessage": "boom", "errorType": "ValueError"}'
    stubber.add_response(
        "invoke", {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": _payload(error_body)}
    )

    result = invoker.invoke(_lambda_target(), invocation())

    assert (result.ok, result.retryable, result.status) == (False, True, "FunctionError")
    assert result.detail.startswith("Unhandled: ") and "boom" in result.detail


@pytest.mark.parametrize(
    ("code", "http_status", "retryable"),
    [
        pytest.param("TooManyRequestsException", 429, True, id="throttled"),
        pytest.param("ServiceException", 500, True, id="service-fault"),
        pytest.param("ResourceConflictException", 409, True, id="function-being-updated"),
        pytest.param("ResourceNotFoundException", 404, False, id="no-such-function"),
        pytest.param("AccessDeniedException", 403, False, id="access-denied"),
        pytest.param("InvalidRequestContentException", 400, False, id="bad-request"),
        pytest.param("SomeNewFault", 503, True, id="unknown-5xx"),
    ],
)
def test_lambda_client_errors_are_classified(
    aws_env: None, code: str, http_status: int, retryable: bool
) -> None:
    invoker, stubber = _stubbed("lambda")
    stubber.add_client_error(
        "invoke", service_error_code=code, service_message="nope", http_status_code=http_status
    )

    result = invoker.invoke(_lambda_target(), invocation())

    assert (result.ok, result.retryable, result.status, result.detail) == (False, retryable, code, "nope")


@pytest.mark.parametrize(
    ("code", "retryable"),
    [("ThrottlingException", True), ("AccessDenied", False), ("KMS.AccessDeniedException", False)],
)
def test_sqs_errors_are_classified(aws_env: None, code: str, retryable: bool) -> None:
    invoker, stubber = _stubbed("sqs")
    stubber.add_client_error("send_message", service_error_code=code, http_status_code=400)

    result = invoker.invoke(
        Target("sqs", {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "message": "m"}),
        invocation(),
    )

    assert (result.ok, result.retryable, result.status) == (False, retryable, code)


SFN_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:m"


@pytest.mark.parametrize(
    "machine",
    [pytest.param(SFN_MACHINE, id="machine"), pytest.param(f"{SFN_MACHINE}:prod", id="alias-or-version")],
)
def test_stepfunctions_execution_already_exists_counts_as_started(aws_env: None, machine: str) -> None:
    invoker, stubber = _stubbed("stepfunctions")
    stubber.add_client_error(
        "start_execution", service_error_code="ExecutionAlreadyExists", http_status_code=400
    )

    result = invoker.invoke(Target("stepfunctions", {"state_machine_arn": machine}), invocation(attempt=3))

    assert (result.ok, result.retryable, result.status) == (True, False, "ExecutionAlreadyExists")
    name = sfn_execution_name("job-1:20261202T120500Z")
    assert result.detail.startswith(f"executionArn=arn:aws:states:us-east-1:123456789012:execution:m:{name};")


def test_stepfunctions_express_start_says_it_is_not_deduplicated(aws_env: None) -> None:
    invoker, stubber = _stubbed("stepfunctions")
    name = sfn_execution_name("job-1:20261202T120500Z")
    arn = f"arn:aws:states:us-east-1:123456789012:express:m:{name}:0f1e2d3c-aaaa-bbbb-cccc-111122223333"
    stubber.add_response("start_execution", {"executionArn": arn, "startDate": SCHEDULED_FOR})

    result = invoker.invoke(Target("stepfunctions", {"state_machine_arn": SFN_MACHINE}), invocation())

    assert (result.ok, result.status) == (True, "200")
    assert result.detail == f"executionArn={arn}; {EXPRESS_CAVEAT}"
    assert "at least once" in EXPRESS_CAVEAT


def test_stepfunctions_standard_start_carries_no_caveat(aws_env: None) -> None:
    invoker, stubber = _stubbed("stepfunctions")
    arn = "arn:aws:states:us-east-1:123456789012:execution:m:x"
    stubber.add_response("start_execution", {"executionArn": arn, "startDate": SCHEDULED_FOR})

    result = invoker.invoke(Target("stepfunctions", {"state_machine_arn": SFN_MACHINE}), invocation())

    assert result.detail == f"executionArn={arn}"


@pytest.mark.parametrize(
    ("code", "retryable"), [("ThrottlingException", True), ("AccessDeniedException", False)]
)
def test_eventbridge_failed_entries_are_failures(aws_env: None, code: str, retryable: bool) -> None:
    invoker, stubber = _stubbed("events")
    stubber.add_response(
        "put_events",
        {"FailedEntryCount": 1, "Entries": [{"ErrorCode": code, "ErrorMessage": "entry failed"}]},
    )

    result = invoker.invoke(Target("eventbridge", {"source": "a", "detail_type": "b"}), invocation())

    assert (result.ok, result.retryable, result.status, result.detail) == (
        False,
        retryable,
        code,
        "entry failed",
    )


class _Raising:
    """A client whose every call raises the given botocore error (Stubber cannot raise non-ClientErrors)."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    def __getattr__(self, name: str) -> Any:
        def call(**kwargs: Any) -> Any:
            raise self._error

        return call


@pytest.mark.parametrize(
    ("error", "retryable", "status"),
    [
        pytest.param(
            ReadTimeoutError(endpoint_url="https://lambda"), True, "TimeoutError", id="read-timeout"
        ),
        pytest.param(
            EndpointConnectionError(endpoint_url="https://lambda"),
            True,
            "EndpointConnectionError",
            id="unreachable",
        ),
        pytest.param(
            ParamValidationError(report="bad"), False, "ParamValidationError", id="param-validation"
        ),
        pytest.param(
            ResponseParserError("invalid XML received"), True, "ResponseParserError", id="garbled-answer"
        ),
    ],
)
def test_botocore_errors_become_results(error: Exception, retryable: bool, status: str) -> None:
    invoker = AwsInvoker(lambda _service: _Raising(error))

    result = invoker.invoke(_lambda_target(), invocation())

    assert (result.ok, result.retryable, result.status) == (False, retryable, status)


def test_programming_errors_propagate() -> None:
    invoker = AwsInvoker(lambda _service: _Raising(KeyError("bug")))

    with pytest.raises(KeyError):
        invoker.invoke(_lambda_target(), invocation())


def test_http_targets_are_refused_by_the_aws_invoker() -> None:
    invoker = AwsInvoker(lambda _service: pytest.fail("no client should be needed"))

    result = invoker.invoke(Target("http", {"url": "https://h/"}), invocation())

    assert (result.ok, result.retryable, result.status) == (False, False, "InvalidTarget")
