"""AWS targets: SQS, SNS, EventBridge, Lambda and Step Functions, each one API call.

Clients come from a `client_for(service)` callable, so none is created at import or before a target of that
kind is called, and tests can hand in moto-backed or Stubber-wrapped clients. Every botocore error becomes a
TargetResult; the error code decides whether another attempt could succeed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    ParamValidationError,
    ReadTimeoutError,
)

from tickwork.adapters.targets._common import Stopwatch, checked_target
from tickwork.domain.models import Target
from tickwork.domain.targets import (
    AWS_TARGET_KINDS,
    CONTEXT_KEY,
    Invocation,
    TargetResult,
    fifo_id,
    invocation_context,
    is_fifo_queue_url,
    is_fifo_topic_arn,
    json_dumps,
    sfn_execution_name,
)

ClientFor = Callable[[str], Any]

MAX_LAMBDA_RESPONSE_BYTES = 64 * 1024
EXECUTION_ALREADY_EXISTS = "ExecutionAlreadyExists"
FUNCTION_ERROR = "FunctionError"
TIMEOUT_ERROR = "TimeoutError"

# Codes that mean "not now" rather than "never": throttling, service-side faults, a resource mid-update.
RETRYABLE_ERROR_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "ProvisionedThroughputExceededException",
        "SlowDown",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "InternalServerException",
        "ServiceException",  # Lambda's 5xx
        "ResourceConflictException",  # Lambda: the function is being updated
        "ResourceNotReadyException",  # Lambda: the function is still being created
        "EC2ThrottledException",
        "KMSThrottlingException",
        "KMSThrottling",
        "RequestTimeout",
        "RequestTimeoutException",
        "ExecutionLimitExceeded",  # Step Functions: too many open executions
    }
)

# What the service names the boto3 client after, per target kind.
SERVICE_OF_KIND: Mapping[str, str] = {
    "sqs": "sqs",
    "sns": "sns",
    "eventbridge": "events",
    "lambda": "lambda",
    "stepfunctions": "stepfunctions",
}


def error_retryable(code: str, http_status: int | None) -> bool:
    """Retry throttling and server faults; access, not-found and validation errors will fail the same way
    again."""
    if code in RETRYABLE_ERROR_CODES or "Throttl" in code:
        return True
    return http_status is not None and (http_status >= 500 or http_status == 429)


def boto3_client_factory(
    session: Any = None,
    *,
    region_name: str | None = None,
    lambda_read_timeout_seconds: float = 910.0,
    unsigned: bool = False,
) -> ClientFor:
    """A thread-safe `client_for` creating each service's client on first use and reusing it after.

    Lambda gets a read timeout above its 15-minute maximum and NO botocore retries: botocore retries read
    timeouts, which for a synchronous invoke would run the function a second time behind Tickwork's back. The
    other services keep botocore's standard retries (short, throttling-aware) under a shorter timeout.

    `unsigned` is for the embedded emulator only, which checks no signatures: SigV4 signing is about a third
    of the client's CPU per call, and the local runtime is CPU-bound under a burst.
    """
    import boto3  # deferred: importing this module must not need (or configure) boto3

    lock = threading.Lock()
    clients: dict[str, Any] = {}
    base: Any = session or boto3.session.Session()
    configs = {
        "lambda": Config(
            connect_timeout=5, read_timeout=lambda_read_timeout_seconds, retries={"total_max_attempts": 1}
        ),
    }
    default = Config(
        connect_timeout=5,
        read_timeout=30,
        retries={"mode": "standard", "total_max_attempts": 3},
        # Executors call DynamoDB and SQS from many threads at once; botocore's default pool of 10
        # connections made the rest open and drop a connection per call under a burst.
        max_pool_connections=64,
    )

    if unsigned:
        no_signing = Config(signature_version=UNSIGNED)
        configs = {name: config.merge(no_signing) for name, config in configs.items()}
        default = default.merge(no_signing)

    def client_for(service: str) -> Any:
        with lock:  # boto3 sessions are not thread-safe; clients are, once created
            if service not in clients:
                clients[service] = base.client(
                    service, region_name=region_name, config=configs.get(service, default)
                )
            return clients[service]

    return client_for


class AwsInvoker:
    """Calls sqs, sns, eventbridge, lambda and stepfunctions targets."""

    def __init__(self, client_for: ClientFor, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._client_for = client_for
        self._monotonic = monotonic
        self._calls: Mapping[str, Callable[[Mapping[str, Any], Invocation], _Outcome]] = {
            "sqs": self._sqs,
            "sns": self._sns,
            "eventbridge": self._eventbridge,
            "lambda": self._lambda,
            "stepfunctions": self._stepfunctions,
        }

    def invoke(self, target: Target, invocation: Invocation) -> TargetResult:
        checked = checked_target(target, AWS_TARGET_KINDS)
        if isinstance(checked, TargetResult):
            return checked
        watch = Stopwatch(self._monotonic)
        try:
            outcome = self._calls[checked.kind](checked.config, invocation)
        except ClientError as error:
            return self._client_error(checked.kind, error, watch.elapsed_ms())
        except (ReadTimeoutError, ConnectTimeoutError) as error:
            return TargetResult(False, True, TIMEOUT_ERROR, watch.elapsed_ms(), str(error))
        except ParamValidationError as error:
            # botocore refused to build the request: the target's config, not the network, so not retryable.
            return TargetResult(False, False, type(error).__name__, watch.elapsed_ms(), str(error))
        except BotoCoreError as error:
            # Endpoint unreachable, connection closed, credentials not (yet) available: transient from here.
            return TargetResult(False, True, type(error).__name__, watch.elapsed_ms(), str(error))
        return TargetResult(outcome.ok, outcome.retryable, outcome.status, watch.elapsed_ms(), outcome.detail)

    def _client_error(self, kind: str, error: ClientError, latency_ms: int) -> TargetResult:
        err = error.response.get("Error", {})
        code = str(err.get("Code") or "ClientError")
        message = str(err.get("Message") or error)
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if kind == "stepfunctions" and code == EXECUTION_ALREADY_EXISTS:
            # The execution name is derived from run + attempt: this exact attempt was already started (by us,
            # in an earlier try whose response was lost). Starting it again would duplicate the run.
            return TargetResult(True, False, EXECUTION_ALREADY_EXISTS, latency_ms, message)
        return TargetResult(False, error_retryable(code, status), code, latency_ms, message)

    def _client(self, kind: str) -> Any:
        return self._client_for(SERVICE_OF_KIND[kind])

    def _sqs(self, config: Mapping[str, Any], invocation: Invocation) -> _Outcome:
        queue_url: str = config["queue_url"]
        request: dict[str, Any] = {
            "QueueUrl": queue_url,
            "MessageBody": config["message"],
            "MessageAttributes": message_attributes(invocation),
        }
        if is_fifo_queue_url(queue_url):
            request["MessageGroupId"] = config.get("message_group_id") or fifo_id(invocation.job_id)
            request["MessageDeduplicationId"] = fifo_id(invocation.run_id)
        response = self._client("sqs").send_message(**request)
        return _success(_http_status(response), f"MessageId={response.get('MessageId', '')}")

    def _sns(self, config: Mapping[str, Any], invocation: Invocation) -> _Outcome:
        topic_arn: str = config["topic_arn"]
        request: dict[str, Any] = {
            "TopicArn": topic_arn,
            "Message": config["message"],
            "MessageAttributes": message_attributes(invocation),
        }
        if "subject" in config:
            request["Subject"] = config["subject"]
        if is_fifo_topic_arn(topic_arn):
            request["MessageGroupId"] = config.get("message_group_id") or fifo_id(invocation.job_id)
            request["MessageDeduplicationId"] = fifo_id(invocation.run_id)
        response = self._client("sns").publish(**request)
        return _success(_http_status(response), f"MessageId={response.get('MessageId', '')}")

    def _eventbridge(self, config: Mapping[str, Any], invocation: Invocation) -> _Outcome:
        detail = {**config["detail"], CONTEXT_KEY: invocation_context(invocation)}
        entry = {
            "EventBusName": config["event_bus_name"],
            "Source": config["source"],
            "DetailType": config["detail_type"],
            "Detail": json_dumps(detail),
        }
        response = self._client("eventbridge").put_events(Entries=[entry])
        entries = response.get("Entries") or [{}]
        if response.get("FailedEntryCount", 0):
            # put_events answers 200 and reports failures per entry; the entry's code says if a retry can
            # help.
            code = str(entries[0].get("ErrorCode") or "FailedEntry")
            return _Outcome(False, error_retryable(code, None), code, str(entries[0].get("ErrorMessage", "")))
        return _success(_http_status(response), f"EventId={entries[0].get('EventId', '')}")

    def _lambda(self, config: Mapping[str, Any], invocation: Invocation) -> _Outcome:
        payload = {CONTEXT_KEY: invocation_context(invocation), "payload": config["payload"]}
        response = self._client("lambda").invoke(
            FunctionName=config["function_name"],
            InvocationType=config["invocation_type"],
            Payload=json_dumps(payload).encode("utf-8"),
        )
        body = _read_payload(response.get("Payload"))
        status = str(response.get("StatusCode", ""))
        if response.get("FunctionError"):
            # The function ran and failed ("Unhandled": it raised or timed out). Its own bug or a dependency:
            # retryable, and the executor's retry policy bounds how often.
            kind = response["FunctionError"]
            return _Outcome(False, True, FUNCTION_ERROR, f"{kind}: {body}")
        return _success(status, body)

    def _stepfunctions(self, config: Mapping[str, Any], invocation: Invocation) -> _Outcome:
        execution_input = {CONTEXT_KEY: invocation_context(invocation), "input": config["input"]}
        response = self._client("stepfunctions").start_execution(
            stateMachineArn=config["state_machine_arn"],
            name=sfn_execution_name(invocation.run_id, invocation.attempt),
            # Identical bytes for a repeated start of the same attempt (sorted keys, no wall-clock time): SFN
            # then returns the running execution instead of refusing, which is the idempotent answer.
            input=json_dumps(execution_input),
        )
        return _success(_http_status(response), f"executionArn={response.get('executionArn', '')}")


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one call reports; `invoke` adds the latency."""

    ok: bool
    retryable: bool
    status: str
    detail: str


def _success(status: str, detail: str) -> _Outcome:
    return _Outcome(True, False, status, detail)


def message_attributes(invocation: Invocation) -> dict[str, dict[str, str]]:
    """SQS/SNS message attributes naming the run; `tickwork.run_id` is the idempotency key."""
    context = invocation_context(invocation)
    return {
        "tickwork.run_id": {"DataType": "String", "StringValue": context["run_id"]},
        "tickwork.job_id": {"DataType": "String", "StringValue": context["job_id"]},
        "tickwork.scheduled_for": {"DataType": "String", "StringValue": context["scheduled_for"]},
        "tickwork.attempt": {"DataType": "Number", "StringValue": str(context["attempt"])},
    }


def _http_status(response: Mapping[str, Any]) -> str:
    return str(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 200))


def _read_payload(stream: Any) -> str:
    if stream is None:
        return ""
    try:
        data: bytes = stream.read(MAX_LAMBDA_RESPONSE_BYTES)
    finally:
        stream.close()
    return data.decode("utf-8", errors="replace")
