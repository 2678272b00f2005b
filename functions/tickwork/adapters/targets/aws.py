"""AWS targets: SQS, SNS, EventBridge, Lambda, Step Functions and ECS, each one API call; and the look at a
tracked start (a Step Functions execution, an ECS task) that says whether it still runs or how it ended.

Clients come from a `client_for(service)` callable, so none is created at import or before a target of that
kind is called, and tests can hand in moto-backed or Stubber-wrapped clients. Every botocore error becomes a
TargetResult (a call) or None (a look that failed: the next look tries again); the error code decides whether
another attempt could succeed.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    ParamValidationError,
    ReadTimeoutError,
)
from botocore.parsers import ResponseParserError

from tickwork.adapters.targets._common import Stopwatch, checked_target
from tickwork.domain.models import Target
from tickwork.domain.targets import (
    AWS_TARGET_KINDS,
    CONTEXT_KEY,
    TRACKED_KINDS,
    Invocation,
    TargetResult,
    ecs_client_token,
    ecs_container_override,
    ecs_environment,
    ecs_started_by,
    fifo_id,
    invocation_context,
    is_fifo_queue_url,
    is_fifo_topic_arn,
    json_dumps,
    run_context,
    sfn_execution_name,
)

ClientFor = Callable[[str], Any]

MAX_LAMBDA_RESPONSE_BYTES = 64 * 1024
EXECUTION_ALREADY_EXISTS = "ExecutionAlreadyExists"
FUNCTION_ERROR = "FunctionError"
# Express workflows neither keep execution names unique nor make StartExecution idempotent.
EXPRESS_CAVEAT = (
    "express workflow: not deduplicated by execution name, a retried start can run it twice (at least once)"
)
# Nor can their executions be described later: a tracked start of one ends delivered.
EXPRESS_NOT_TRACKED = (
    "express executions cannot be followed (DescribeExecution does not serve them): the run ends when the "
    "execution starts (delivered)"
)
TIMEOUT_ERROR = "TimeoutError"
# ECS: RunTask refused a repeated clientToken whose parameters differ (the job was edited between two tries
# of one attempt); the error names the task the token started.
ECS_CONFLICT = "ConflictException"
# How long one look at a tracked start may take (DescribeExecution / DescribeTasks), retries included.
TRACK_TIMEOUT_SECONDS = 10.0
# Step Functions statuses: still running, and how each end maps to a result (ok, retryable).
SFN_RUNNING = frozenset({"RUNNING", "PENDING_REDRIVE"})
SFN_ENDS: Mapping[str, tuple[bool, bool]] = {
    "SUCCEEDED": (True, False),
    # A failed or timed-out workflow is the run's end: the execution's name is the run's, so another attempt
    # would only follow the same ended execution (ExecutionAlreadyExists). Its own retriers and a redrive
    # are where a workflow retries.
    "FAILED": (False, False),
    "TIMED_OUT": (False, False),
    # Someone stopped it (StopExecution): on purpose, not to be started again by Tickwork.
    "ABORTED": (False, False),
}
ECS_ENDED = frozenset({"STOPPED", "DELETED"})
# Why an ECS task stopped (`stopCode`): stopped on purpose by someone (not retried), or never started.
ECS_USER_STOPPED = "UserInitiated"
ECS_FAILED_TO_START = "TaskFailedToStart"
ECS_NOT_FOUND = "MISSING"
# Tickwork's own statuses for a tracked end that carries no service code.
NOT_TRACKABLE = "NotTrackable"
NO_EXIT_CODE = "NoExitCode"

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
        "ServerException",  # ECS's 5xx
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
    "ecs": "ecs",
}


def error_retryable(code: str, http_status: int | None) -> bool:
    """Retry throttling and server faults; access, not-found and validation errors will fail the same way
    again."""
    if code in RETRYABLE_ERROR_CODES or "Throttl" in code:
        return True
    return http_status is not None and (http_status >= 500 or http_status == 429)


def ecs_failure_retryable(reason: str) -> bool:
    """A RunTask `failures[]` reason worth another attempt: no capacity now (`RESOURCE:CPU`,
    `RESOURCE:MEMORY`, `RESOURCE:ENI`, ..., Fargate's "Capacity is unavailable at this time"), no container
    instance (`MISSING`), an agent that is not connected (`AGENT`), throttling. Placement constraints that
    nothing meets (`ATTRIBUTE`) and the rest fail the same way again."""
    lowered = reason.lower()
    return (
        reason.startswith("RESOURCE")
        or reason in (ECS_NOT_FOUND, "AGENT")
        or "capacity" in lowered
        or "throttl" in lowered
    )


# How long one target call may take is the job's `timeout_seconds`, for the whole call: connect, send, read
# and every botocore retry with its backoff. `call_budget` splits that time; `Boto3Clients.timed` builds
# clients that keep to it.
MAX_CONNECT_TIMEOUT_SECONDS = 5.0
MAX_READ_TIMEOUT_SECONDS = 30.0  # SQS, SNS, EventBridge, Step Functions answer in milliseconds when healthy
MAX_ATTEMPTS = 3
MIN_ATTEMPT_SECONDS = 1.0  # below this an attempt is not worth making: spend the time on fewer, longer ones
# botocore's standard mode sleeps rand(0, 1) * min(2 ** (n - 1), 20) s after try n (throttling scale; other
# errors 1/20 of it), raised to an `x-amz-retry-after` header by at most 5 s more.
_RETRY_AFTER_EXTRA_SECONDS = 5.0
_MAX_BACKOFF_SECONDS = 20.0
# Lambda is never retried by botocore: a retried read timeout would run the function a second time behind
# Tickwork's back, and a retried async invoke could queue the event twice.
_SINGLE_ATTEMPT_SERVICES = frozenset({"lambda"})


@dataclass(frozen=True, slots=True)
class CallBudget:
    """How one AWS target call spends the job's timeout: `attempts` tries of at most `connect_timeout` +
    `read_timeout` each, with botocore's backoff between them."""

    attempts: int
    connect_timeout: float
    read_timeout: float

    def worst_case_seconds(self) -> float:
        """The longest the call can take: every try times out and every backoff is the longest possible."""
        return self.attempts * (self.connect_timeout + self.read_timeout) + worst_backoff_seconds(
            self.attempts
        )


def worst_backoff_seconds(attempts: int) -> float:
    """The longest total sleep botocore's standard retry mode can add between `attempts` tries."""
    return sum(
        min(2.0 ** (n - 1), _MAX_BACKOFF_SECONDS) + _RETRY_AFTER_EXTRA_SECONDS for n in range(1, attempts)
    )


def call_budget(service: str, timeout_seconds: float) -> CallBudget:
    """The attempts and socket timeouts that keep one call to `service` within `timeout_seconds`.

    As many tries as fit (at most 3, each at least 1 s) after reserving the worst-case backoff; each try's
    time is split into a connect timeout (a quarter, at most 5 s) and a read timeout (the rest, at most 30 s
    except for Lambda, whose synchronous invoke runs the function for the whole of it).
    """
    if timeout_seconds <= 0:
        raise ValueError(f"timeout_seconds must be positive, got {timeout_seconds}")
    attempts = 1
    if service not in _SINGLE_ATTEMPT_SERVICES:
        while (
            attempts < MAX_ATTEMPTS
            and (timeout_seconds - worst_backoff_seconds(attempts + 1)) / (attempts + 1)
            >= MIN_ATTEMPT_SECONDS
        ):
            attempts += 1
    per_attempt = (timeout_seconds - worst_backoff_seconds(attempts)) / attempts
    connect = min(MAX_CONNECT_TIMEOUT_SECONDS, per_attempt / 4)
    read = per_attempt - connect
    if service not in _SINGLE_ATTEMPT_SERVICES:
        read = min(read, MAX_READ_TIMEOUT_SECONDS)
    return CallBudget(attempts=attempts, connect_timeout=connect, read_timeout=read)


@runtime_checkable
class TimedClients(Protocol):
    """A `client_for` that can also hand out a client whose calls (retries included) end within a time."""

    def __call__(self, service: str) -> Any: ...

    def timed(self, service: str, timeout_seconds: float) -> Any: ...


DEFAULT_POOL_CONNECTIONS = 64  # a Lambda executor's threads; the local executor passes its cap


class Boto3Clients:
    """Thread-safe boto3 clients, each created on first use and reused after.

    `clients("sqs")` is the general-purpose client (for Tickwork's own tables and queues). `clients.timed(
    "lambda", 60)` is a target client whose calls end within 60 s (`call_budget`); one is kept per (service,
    timeout), the most recently used `max_timed_clients` of them.
    """

    def __init__(
        self,
        session: Any = None,
        *,
        region_name: str | None = None,
        lambda_read_timeout_seconds: float = 910.0,
        unsigned: bool = False,
        max_timed_clients: int = 32,
        max_pool_connections: int = DEFAULT_POOL_CONNECTIONS,
    ) -> None:
        import boto3  # deferred: importing this module must not need (or configure) boto3

        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}
        self._timed: OrderedDict[tuple[str, float], Any] = OrderedDict()
        self._max_timed = max_timed_clients
        self._pool_connections = max_pool_connections
        self._base: Any = session or boto3.session.Session()
        self._region_name = region_name
        self._configs = {
            "lambda": Config(
                connect_timeout=5, read_timeout=lambda_read_timeout_seconds, retries={"total_max_attempts": 1}
            ),
        }
        self._default = Config(
            connect_timeout=5,
            read_timeout=30,
            retries={"mode": "standard", "total_max_attempts": 3},
            # Executors call DynamoDB and SQS from many threads at once; botocore's default pool of 10
            # connections made the rest open and drop a connection per call under a burst.
            max_pool_connections=max_pool_connections,
        )
        self._no_signing = Config(signature_version=UNSIGNED) if unsigned else None
        if self._no_signing is not None:
            self._configs = {name: config.merge(self._no_signing) for name, config in self._configs.items()}
            self._default = self._default.merge(self._no_signing)

    def __call__(self, service: str) -> Any:
        with self._lock:  # boto3 sessions are not thread-safe; clients are, once created
            if service not in self._clients:
                self._clients[service] = self._base.client(
                    service, region_name=self._region_name, config=self._configs.get(service, self._default)
                )
            return self._clients[service]

    def timed(self, service: str, timeout_seconds: float) -> Any:
        key = (service, float(timeout_seconds))
        with self._lock:
            client = self._timed.get(key)
            if client is None:
                client = self._base.client(
                    service, region_name=self._region_name, config=self.timed_config(service, timeout_seconds)
                )
                self._timed[key] = client
                if len(self._timed) > self._max_timed:
                    self._timed.popitem(last=False)  # a thread still using it keeps its reference
            self._timed.move_to_end(key)
            return client

    def timed_config(self, service: str, timeout_seconds: float) -> Config:
        budget = call_budget(service, timeout_seconds)
        config = Config(
            connect_timeout=budget.connect_timeout,
            read_timeout=budget.read_timeout,
            retries={"mode": "standard", "total_max_attempts": budget.attempts},
            max_pool_connections=self._pool_connections,
        )
        return config if self._no_signing is None else config.merge(self._no_signing)


def boto3_client_factory(
    session: Any = None,
    *,
    region_name: str | None = None,
    lambda_read_timeout_seconds: float = 910.0,
    unsigned: bool = False,
    max_pool_connections: int = DEFAULT_POOL_CONNECTIONS,
) -> Boto3Clients:
    """A thread-safe `client_for` creating each service's client on first use and reusing it after, with
    `timed(service, seconds)` for target calls that must end within the job's timeout.

    The general-purpose Lambda client gets a read timeout above Lambda's 15-minute maximum and NO botocore
    retries (a retried read timeout would run the function again); the other services keep botocore's
    standard retries (short, throttling-aware) under a shorter timeout. Targets never use these: they use
    `timed` clients.

    `unsigned` is for the embedded emulator only, which checks no signatures: SigV4 signing is about a third
    of the client's CPU per call, and the local runtime is CPU-bound under a burst. `max_pool_connections`:
    connections kept per client, at least the threads that call it at once (the local executor's cap).
    """
    return Boto3Clients(
        session,
        region_name=region_name,
        lambda_read_timeout_seconds=lambda_read_timeout_seconds,
        unsigned=unsigned,
        max_pool_connections=max_pool_connections,
    )


class AwsInvoker:
    """Calls sqs, sns, eventbridge, lambda, stepfunctions and ecs targets, and follows what a tracked start
    of a stepfunctions or ecs target began (`track`).

    Each call ends within the invocation's `timeout_seconds` when `client_for` is `TimedClients` (what
    `boto3_client_factory` returns): the client comes from `client_for.timed(service, timeout)`; a look
    (`track`) within `track_timeout_seconds`. A plain `client_for` (tests, a custom per-region factory) is
    used as given, and its clients' own config bounds the call.
    """

    def __init__(
        self,
        client_for: ClientFor,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        track_timeout_seconds: float = TRACK_TIMEOUT_SECONDS,
    ) -> None:
        self._client_for = client_for
        self._timed = client_for if isinstance(client_for, TimedClients) else None
        self._monotonic = monotonic
        self._track_timeout = track_timeout_seconds
        self._calls: Mapping[str, Callable[[Mapping[str, Any], Invocation], _Outcome]] = {
            "sqs": self._sqs,
            "sns": self._sns,
            "eventbridge": self._eventbridge,
            "lambda": self._lambda,
            "stepfunctions": self._stepfunctions,
            "ecs": self._ecs,
        }
        self._looks: Mapping[str, Callable[[Mapping[str, Any], str], _Outcome | None]] = {
            "stepfunctions": self._look_stepfunctions,
            "ecs": self._look_ecs,
        }

    def invoke(self, target: Target, invocation: Invocation) -> TargetResult:
        checked = checked_target(target, AWS_TARGET_KINDS)
        if isinstance(checked, TargetResult):
            return checked
        watch = Stopwatch(self._monotonic)
        try:
            outcome = self._calls[checked.kind](checked.config, invocation)
        except ClientError as error:
            return self._client_error(error, watch.elapsed_ms())
        except (ReadTimeoutError, ConnectTimeoutError) as error:
            return TargetResult(False, True, TIMEOUT_ERROR, watch.elapsed_ms(), str(error))
        except ParamValidationError as error:
            # botocore refused to build the request: the target's config, not the network, so not retryable.
            return TargetResult(False, False, type(error).__name__, watch.elapsed_ms(), str(error))
        except (BotoCoreError, ResponseParserError) as error:
            # Endpoint unreachable, connection closed, credentials not (yet) available, a garbled answer (a
            # proxy's error page): transient from here.
            return TargetResult(False, True, type(error).__name__, watch.elapsed_ms(), str(error))
        return outcome.result(watch.elapsed_ms())

    def track(self, target: Target, handle: str) -> TargetResult | None:
        """Where the execution or task a tracked start began (`handle`, its ARN) is: None while it runs, and
        None when the look itself fails for now (throttled, unreachable, timed out: the next look tries
        again); its end otherwise. A look that can never succeed (access denied, the execution or cluster
        does not exist, an invalid ARN) is a non-retryable failure: the run cannot be followed."""
        checked = checked_target(target, TRACKED_KINDS)
        if isinstance(checked, TargetResult):
            return checked
        watch = Stopwatch(self._monotonic)
        try:
            outcome = self._looks[checked.kind](checked.config, handle)
        except ClientError as error:
            failed = self._client_error(error, watch.elapsed_ms())
            return None if failed.retryable else failed
        except (BotoCoreError, ResponseParserError) as error:
            if isinstance(error, ParamValidationError):
                # The handle or config cannot even form a request: looking again will not change that.
                return TargetResult(False, False, type(error).__name__, watch.elapsed_ms(), str(error))
            return None  # timed out, unreachable, garbled: look again later
        return None if outcome is None else outcome.result(watch.elapsed_ms())

    def _client_error(self, error: ClientError, latency_ms: int) -> TargetResult:
        err = error.response.get("Error", {})
        code = str(err.get("Code") or "ClientError")
        message = str(err.get("Message") or error)
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return TargetResult(False, error_retryable(code, status), code, latency_ms, message)

    def _client(self, kind: str, invocation: Invocation) -> Any:
        service = SERVICE_OF_KIND[kind]
        if self._timed is not None:
            return self._timed.timed(service, invocation.timeout_seconds)
        return self._client_for(service)

    def _look_client(self, kind: str) -> Any:
        service = SERVICE_OF_KIND[kind]
        if self._timed is not None:
            return self._timed.timed(service, self._track_timeout)
        return self._client_for(service)

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
        response = self._client("sqs", invocation).send_message(**request)
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
        response = self._client("sns", invocation).publish(**request)
        return _success(_http_status(response), f"MessageId={response.get('MessageId', '')}")

    def _eventbridge(self, config: Mapping[str, Any], invocation: Invocation) -> _Outcome:
        detail = {**config["detail"], CONTEXT_KEY: invocation_context(invocation)}
        entry = {
            "EventBusName": config["event_bus_name"],
            "Source": config["source"],
            "DetailType": config["detail_type"],
            "Detail": json_dumps(detail),
        }
        response = self._client("eventbridge", invocation).put_events(Entries=[entry])
        entries = response.get("Entries") or [{}]
        if response.get("FailedEntryCount", 0):
            # put_events answers 200 and reports failures per entry; the entry's code says if a retry can
            # help.
            code = str(entries[0].get("ErrorCode") or "FailedEntry")
            return _Outcome(False, error_retryable(code, None), code, str(entries[0].get("ErrorMessage", "")))
        return _success(_http_status(response), f"EventId={entries[0].get('EventId', '')}")

    def _lambda(self, config: Mapping[str, Any], invocation: Invocation) -> _Outcome:
        payload = {CONTEXT_KEY: invocation_context(invocation), "payload": config["payload"]}
        response = self._client("lambda", invocation).invoke(
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
        machine_arn: str = config["state_machine_arn"]
        name = sfn_execution_name(invocation.run_id)
        try:
            response = self._client("stepfunctions", invocation).start_execution(
                stateMachineArn=machine_arn,
                name=name,
                # Identical bytes for a repeated start within one attempt (sorted keys, no wall-clock time): a
                # Standard workflow then returns the running execution instead of refusing.
                input=json_dumps(execution_input),
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != EXECUTION_ALREADY_EXISTS:
                raise
            # The name is the run's, so the run's execution was already started: by an earlier attempt (whose
            # input differs in `attempt`) or by this one before its response was lost, and it may have closed
            # since. Starting another would run the workflow twice for one run: the run is delivered, or,
            # tracked, follows that execution. Its ARN follows from machine and name (only Standard
            # workflows refuse a name, so it is a Standard execution).
            arn = sfn_execution_arn(machine_arn, name)
            detail = f"executionArn={arn}; already started"
            return _Outcome(True, False, EXECUTION_ALREADY_EXISTS, detail, arn if invocation.track else None)
        arn = str(response.get("executionArn", ""))
        detail = f"executionArn={arn}"
        if is_express_execution_arn(arn):
            detail += f"; {EXPRESS_CAVEAT}"
            if invocation.track:
                detail += f"; {EXPRESS_NOT_TRACKED}"
            return _success(_http_status(response), detail)
        return _Outcome(True, False, _http_status(response), detail, arn if invocation.track else None)

    def _ecs(self, config: Mapping[str, Any], invocation: Invocation) -> _Outcome:
        """One task (count 1). `clientToken` makes a repeated start of the same attempt return the task it
        started; `startedBy` names the run (ListTasks can find its tasks); the named container gets the
        run's identity as environment variables, and the job's command and environment."""
        container = ecs_container_override(config, ecs_environment(invocation))
        request: dict[str, Any] = {
            "cluster": config["cluster"],
            "taskDefinition": config["task_definition"],
            "launchType": config["launch_type"],
            "count": 1,
            "startedBy": ecs_started_by(invocation.run_id),
            "clientToken": ecs_client_token(invocation.run_id, invocation.attempt),
            "overrides": {"containerOverrides": [container]},
        }
        if config["subnets"]:
            awsvpc: dict[str, Any] = {
                "subnets": list(config["subnets"]),
                "assignPublicIp": "ENABLED" if config["assign_public_ip"] else "DISABLED",
            }
            if config["security_groups"]:
                awsvpc["securityGroups"] = list(config["security_groups"])
            request["networkConfiguration"] = {"awsvpcConfiguration": awsvpc}
        try:
            response = self._client("ecs", invocation).run_task(**request)
        except ClientError as error:
            answer: Mapping[str, Any] = error.response  # ECS adds `resourceIds` to the error answer
            started = [str(arn) for arn in answer.get("resourceIds") or []]
            if error.response.get("Error", {}).get("Code") != ECS_CONFLICT or not started:
                raise
            # This attempt's token already started a task (the job changed between two tries of the
            # attempt): that task is the attempt's; starting another would run it twice.
            detail = f"taskArn={started[0]}; already started"
            return _Outcome(True, False, ECS_CONFLICT, detail, started[0] if invocation.track else None)
        tasks = response.get("tasks") or []
        if not tasks:
            failures = response.get("failures") or [{}]
            reason = str(failures[0].get("reason") or "NoTaskStarted")
            detail = "; ".join(
                str(part) for part in (failures[0].get("arn"), failures[0].get("detail")) if part
            )
            return _Outcome(False, ecs_failure_retryable(reason), reason, detail)
        arn = str(tasks[0].get("taskArn", ""))
        return _Outcome(
            True, False, _http_status(response), f"taskArn={arn}", arn if invocation.track else None
        )

    def _look_stepfunctions(self, config: Mapping[str, Any], handle: str) -> _Outcome | None:
        if is_express_execution_arn(handle):
            return _Outcome(False, False, NOT_TRACKABLE, f"executionArn={handle}; {EXPRESS_NOT_TRACKED}")
        response = self._look_client("stepfunctions").describe_execution(executionArn=handle)
        status = str(response.get("status", ""))
        if status in SFN_RUNNING or status not in SFN_ENDS:
            return None  # running, waiting to be redriven, or a status this version does not know yet
        ok, retryable = SFN_ENDS[status]
        if ok:
            return _Outcome(True, False, status, str(response.get("output") or ""))
        cause = ": ".join(str(part) for part in (response.get("error"), response.get("cause")) if part)
        return _Outcome(False, retryable, status, cause or f"executionArn={handle}")

    def _look_ecs(self, config: Mapping[str, Any], handle: str) -> _Outcome | None:
        response = self._look_client("ecs").describe_tasks(cluster=config["cluster"], tasks=[handle])
        tasks = response.get("tasks") or []
        if not tasks:
            failures = response.get("failures") or [{}]
            reason = str(failures[0].get("reason") or ECS_NOT_FOUND)
            if reason == ECS_NOT_FOUND:
                # Just started (ECS is eventually consistent), or stopped so long ago that ECS forgot it
                # (it keeps a stopped task about an hour, far longer than looks are apart): the run's lease
                # ends the attempt if it never shows up.
                return None
            return _Outcome(False, False, reason, str(failures[0].get("detail") or f"taskArn={handle}"))
        task = tasks[0]
        if str(task.get("lastStatus", "")) not in ECS_ENDED:
            return None
        return _task_end(task, str(config["container"]))


def sfn_execution_arn(state_machine_arn: str, execution_name: str) -> str:
    """The ARN of a Standard workflow's execution: `arn:...:stateMachine:<machine>[:<version or alias>]`
    becomes `arn:...:execution:<machine>:<name>` (executions of a version or alias belong to the machine)."""
    prefix, _, rest = state_machine_arn.partition(":stateMachine:")
    machine = rest.split(":", 1)[0]
    return f"{prefix}:execution:{machine}:{execution_name}"


def is_express_execution_arn(execution_arn: str) -> bool:
    """Express executions are `arn:...:express:<machine>:<name>:<id>`, Standard ones `...:execution:...`."""
    parts = execution_arn.split(":")
    return len(parts) > 5 and parts[5] == "express"


def _task_end(task: Mapping[str, Any], container_name: str) -> _Outcome:
    """A stopped ECS task's outcome: the exit code of the job's `container` (0: succeeded). A task that
    never started, or whose container has no exit code, failed (retryable: capacity, an image pull); one
    someone stopped (StopTask) failed for good unless its container had already exited 0."""
    stop_code = str(task.get("stopCode") or "")
    stopped_reason = str(task.get("stoppedReason") or "")
    containers = [c for c in task.get("containers") or [] if c.get("name") == container_name]
    exit_code = containers[0].get("exitCode") if containers else None
    parts = [f"taskArn={task.get('taskArn', '')}"]
    if stopped_reason:
        parts.append(f"stoppedReason={stopped_reason}")
    if containers and containers[0].get("reason"):
        parts.append(f"{container_name}: {containers[0]['reason']}")
    detail = "; ".join(parts)
    if exit_code == 0 and stop_code != ECS_FAILED_TO_START:
        return _Outcome(True, False, "0", detail)
    status = NO_EXIT_CODE if exit_code is None else str(exit_code)
    if stop_code == ECS_FAILED_TO_START:
        status = ECS_FAILED_TO_START
    return _Outcome(False, stop_code != ECS_USER_STOPPED, status, detail)


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one call or look reports; `result` adds the latency. `handle`: the tracked start's ARN (the
    result is then accepted: Tickwork follows it)."""

    ok: bool
    retryable: bool
    status: str
    detail: str
    handle: str | None = None

    def result(self, latency_ms: int) -> TargetResult:
        return TargetResult(
            self.ok,
            self.retryable,
            self.status,
            latency_ms,
            self.detail,
            accepted=self.handle is not None,
            handle=self.handle,
        )


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
    } | {
        # SQS and SNS refuse an empty attribute: what a call does not have is left out
        f"tickwork.{name}": {
            "DataType": "Number" if name == "revision" else "String",
            "StringValue": str(value),
        }
        for name, value in run_context(invocation).items()
        if value is not None
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
