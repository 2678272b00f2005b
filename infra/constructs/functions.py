"""The one Lambda factory: arm64, Python 3.12, the bundled package, JSON logs into a log group of its own,
active X-Ray tracing, and a role of its own that starts with nothing but writing those logs (and traces)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from cdk_nag import NagPackSuppression, NagSuppressions

from constructs import Construct

RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64

RETENTION: dict[int, logs.RetentionDays] = {
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    731: logs.RetentionDays.TWO_YEARS,
}


def retention(days: int) -> logs.RetentionDays:
    """The smallest CloudWatch retention that keeps at least `days`."""
    for allowed in sorted(RETENTION):
        if allowed >= days:
            return RETENTION[allowed]
    return logs.RetentionDays.TEN_YEARS


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    name: str  # short: "ticker", "executor", ...
    handler: str  # "tickwork.handlers.ticker.handler"
    description: str
    timeout: Duration
    memory_mb: int = 512
    reserved_concurrency: int | None = None
    async_retry_attempts: int | None = None  # for functions invoked asynchronously (EventBridge)
    # Lambda's recursive loop detection stops a Lambda -> SQS -> same Lambda chain after ~16 hops. Only a
    # function that sends to its own trigger by design (the executor) sets ALLOW.
    recursive_loop: lambda_.RecursiveLoop = lambda_.RecursiveLoop.TERMINATE


class FunctionFactory(Construct):
    """Builds every Tickwork function from one code asset and one shared environment."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        prefix: str,
        environment: Mapping[str, str],
        log_retention_days: int,
        production: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        self.code = code
        self.prefix = prefix
        self.environment = dict(environment)
        self.retention = retention(log_retention_days)
        self.removal = RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY
        self.functions: dict[str, lambda_.Function] = {}

    def create(self, scope: Construct, spec: FunctionSpec) -> lambda_.Function:
        function_name = f"{self.prefix}-{spec.name}"
        log_group = logs.LogGroup(
            scope,
            "Logs",
            log_group_name=f"/aws/lambda/{function_name}",
            retention=self.retention,
            removal_policy=self.removal,
        )
        role = iam.Role(
            scope,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Tickwork {spec.name}: its log group, plus the grants its construct adds",
        )
        log_group.grant_write(role)
        function = lambda_.Function(
            scope,
            "Function",
            function_name=function_name,
            description=spec.description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=self.code,
            handler=spec.handler,
            timeout=spec.timeout,
            memory_size=spec.memory_mb,
            role=role,
            log_group=log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            application_log_level_v2=lambda_.ApplicationLogLevel.INFO,
            system_log_level_v2=lambda_.SystemLogLevel.WARN,
            environment=self.environment,
            reserved_concurrent_executions=spec.reserved_concurrency,
            recursive_loop=spec.recursive_loop,
            tracing=lambda_.Tracing.ACTIVE,
            retry_attempts=spec.async_retry_attempts,
            max_event_age=Duration.minutes(1) if spec.async_retry_attempts is not None else None,
        )
        # Active tracing makes CDK add xray:PutTraceSegments / PutTelemetryRecords on `*` to the role: X-Ray
        # has no resource-level permissions. Suppressed here, next to its one cause, for that finding only.
        NagSuppressions.add_resource_suppressions(
            role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="Active X-Ray tracing: xray:PutTraceSegments and xray:PutTelemetryRecords support "
                    "no resource-level permissions, so CDK grants them on `*`.",
                    applies_to=["Resource::*"],
                )
            ],
            apply_to_children=True,
        )
        self.functions[spec.name] = function
        return function


DYNAMODB_READ = ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem")
DYNAMODB_WRITE = ("dynamodb:PutItem", "dynamodb:UpdateItem")


def allow(function: lambda_.Function, actions: tuple[str, ...] | list[str], resources: list[str]) -> None:
    """One statement on the function's own role; resources are always named, never `*`."""
    function.add_to_role_policy(iam.PolicyStatement(actions=sorted(set(actions)), resources=resources))
