"""The management API: an HTTP API in front of `tickwork.handlers.api.handler`.

Every route needs AWS IAM (SigV4) credentials unless a JWT issuer is configured, throttling is set on the
stage, and each request is logged as one JSON line.
"""

from __future__ import annotations

from typing import Any

import jsii
from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_apigateway as apigw_v1
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager

from constructs import Construct
from infra.constructs.dispatch import Dispatch
from infra.constructs.functions import DYNAMODB_READ, DYNAMODB_WRITE, FunctionFactory, FunctionSpec, allow
from infra.constructs.storage import Storage
from tickwork.resources import EVENTS, JOBS, REQUESTS, RUNS, SLOTS

CONSOLE_PATHS = ("/ui", "/ui/{file}")  # the web console's files: no data, no authorizer
CONSOLE_RATE_LIMIT = 20  # requests/s over both routes' keys, each; a page load is four requests
CONSOLE_BURST_LIMIT = 40
# A callback run's target reports here with the token its call carried (the token is the credential): no
# authorizer, and a throttle of its own so that reports cannot use up what signed callers share.
CALLBACK_PATHS = ("/callbacks/{token}/complete", "/callbacks/{token}/heartbeat")
CALLBACK_RATE_LIMIT = 200
CALLBACK_BURST_LIMIT = 400

ACCESS_LOG_FIELDS: dict[str, str] = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "caller": "$context.identity.caller",
    "user": "$context.identity.user",
    "principal": "$context.authorizer.principalId",
    "time": "$context.requestTime",
    "method": "$context.httpMethod",
    "path": "$context.path",
    "routeKey": "$context.routeKey",
    "status": "$context.status",
    "length": "$context.responseLength",
    "latencyMs": "$context.responseLatency",
    "integrationLatencyMs": "$context.integrationLatency",
    "integrationError": "$context.integrationErrorMessage",
    "authorizerError": "$context.authorizer.error",
}


@jsii.implements(apigw.IAccessLogSettings)
class _AccessLogs:
    def __init__(self, log_group: logs.ILogGroup) -> None:
        self._destination = apigw.LogGroupLogDestination(log_group)
        self._format = apigw_v1.AccessLogFormat.custom(_json(ACCESS_LOG_FIELDS))

    @property
    def destination(self) -> apigw.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw_v1.AccessLogFormat:
        return self._format


def _json(fields: dict[str, str]) -> str:
    # `$context` values are substituted unquoted: quote each so the line stays valid JSON.
    return "{" + ",".join(f'"{key}":"{value}"' for key, value in fields.items()) + "}"


class Api(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        factory: FunctionFactory,
        storage: Storage,
        dispatch: Dispatch,
        jwt_issuer: str | None,
        jwt_audience: tuple[str, ...],
        rate_limit: int,
        burst_limit: int,
        log_retention: logs.RetentionDays,
        production: bool,
        callback_key: secretsmanager.ISecret,
        reserved_concurrency: int = 10,
    ) -> None:
        super().__init__(scope, construct_id)
        self.function = factory.create(
            Construct(self, "Handler"),
            FunctionSpec(
                name="api",
                handler="tickwork.handlers.api.handler",
                description="Tickwork management API: jobs, runs, cancellations",
                timeout=Duration.seconds(29),  # API Gateway's integration limit
                # Its own share: API traffic neither starves nor is starved by Lambda targets.
                reserved_concurrency=reserved_concurrency,
            ),
        )
        jobs, runs, requests = storage.table(JOBS), storage.table(RUNS), storage.table(REQUESTS)
        allow(
            self.function,
            DYNAMODB_READ,
            [
                jobs.table_arn,
                runs.table_arn,
                requests.table_arn,
                *storage.index_arns(JOBS),
                *storage.index_arns(RUNS),
            ],
        )
        # Runs on request write their Idempotency-Key record in the runs' own transaction.
        allow(self.function, DYNAMODB_WRITE, [jobs.table_arn, runs.table_arn, requests.table_arn])
        allow(self.function, ("dynamodb:DeleteItem",), [jobs.table_arn])
        # list_jobs reads a page of owned jobs (from the keys-only by_owner index) in one BatchGetItem; the
        # health page counts the runs in flight from the slots' stripes the same way.
        allow(self.function, ("dynamodb:BatchGetItem",), [jobs.table_arn, storage.table(SLOTS).table_arn])
        allow(self.function, ("sqs:SendMessage",), dispatch.queue_arns)  # "run now" and immediate fires
        # Callback routes: a token is checked with the callback key (not the key that signs target calls),
        # and a heartbeat moves the attempt's run lease and its concurrency slot's lease.
        callback_key.grant_read(self.function)
        allow(self.function, ("dynamodb:UpdateItem",), [storage.table(SLOTS).table_arn])
        # The events table (adapters/dynamodb/events.py). GET /events: a job's events and its channels' health
        # from the table itself, an owner's across their jobs from the `by_owner` index. /alert-defaults: the
        # owner's defaults are one item of it, read at every create, put and deleted. A resume that clears
        # an auto-pause records its event (with the messages it owes) in one transaction of puts.
        events = storage.table(EVENTS)
        allow(
            self.function, ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"), [events.table_arn]
        )
        allow(self.function, ("dynamodb:Query",), [events.table_arn, storage.index_arn(EVENTS, "by_owner")])

        authorizer: Any
        if jwt_issuer:
            authorizer = authorizers.HttpJwtAuthorizer("Jwt", jwt_issuer, jwt_audience=list(jwt_audience))
        else:
            authorizer = authorizers.HttpIamAuthorizer()
        self.http_api = apigw.HttpApi(
            self,
            "HttpApi",
            api_name=f"{factory.prefix}-api",
            description="Tickwork management API",
            create_default_stage=False,
            default_authorizer=authorizer,
        )
        integration = integrations.HttpLambdaIntegration("Lambda", self.function)
        self.http_api.add_routes(path="/{proxy+}", methods=[apigw.HttpMethod.ANY], integration=integration)
        # The web console's own files carry no data: a browser loads them without credentials, then calls
        # the API with its JWT (with IAM auth the page says how to enable a JWT authorizer).
        self.console_routes = [
            route
            for path in CONSOLE_PATHS
            for route in self.http_api.add_routes(
                path=path,
                methods=[apigw.HttpMethod.GET],
                integration=integration,
                authorizer=apigw.HttpNoneAuthorizer(),
            )
        ]
        self.callback_routes = [
            route
            for path in CALLBACK_PATHS
            for route in self.http_api.add_routes(
                path=path,
                methods=[apigw.HttpMethod.POST],
                integration=integration,
                authorizer=apigw.HttpNoneAuthorizer(),
            )
        ]
        self.access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=log_retention,
            removal_policy=RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY,
        )
        self.stage = apigw.HttpStage(
            self,
            "Stage",
            http_api=self.http_api,
            stage_name="$default",
            auto_deploy=True,
            throttle=apigw.ThrottleSettings(rate_limit=rate_limit, burst_limit=burst_limit),
            access_log_settings=_AccessLogs(self.access_logs),
        )
        # The console's open routes get a throttle of their own: anonymous requests must not use up the
        # API function's reserved concurrency that signed callers share (a browser loads three files).
        cfn_stage = self.stage.node.default_child
        assert isinstance(cfn_stage, apigw.CfnStage)
        cfn_stage.route_settings = {
            f"GET {path}": {
                "ThrottlingRateLimit": CONSOLE_RATE_LIMIT,
                "ThrottlingBurstLimit": CONSOLE_BURST_LIMIT,
            }
            for path in CONSOLE_PATHS
        } | {
            f"POST {path}": {
                "ThrottlingRateLimit": CALLBACK_RATE_LIMIT,
                "ThrottlingBurstLimit": CALLBACK_BURST_LIMIT,
            }
            for path in CALLBACK_PATHS
        }

    @property
    def url(self) -> str:
        return self.http_api.api_endpoint
