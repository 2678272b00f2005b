"""Template assertions on the synthesised stack: what must hold for Tickwork to work and stay safe."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match
from infra.config import DeploymentConfig
from infra.constructs.executor import INVOCATIONS_PER_POLLER, size_executor
from infra.constructs.observability import NAMESPACE
from infra.constructs.scheduler import shard_groups

from tests.infra.conftest import PRODUCTION_CONTEXT, Synth, alarm_topic, as_list, policy_statements
from tickwork.adapters.sqs_provision import dispatch_queue_name
from tickwork.resources import (
    DISPATCH,
    DISPATCH_DLQ,
    DISPATCH_LONG_CALL,
    RUNS,
    TABLES,
    ResourceNames,
    TableDef,
)
from tickwork.settings import Settings

XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}

HANDLERS = {
    "ticker": "tickwork.handlers.ticker.handler",
    "sweeper": "tickwork.handlers.sweeper.handler",
    "executor": "tickwork.handlers.executor.handler",
    "api": "tickwork.handlers.api.handler",
    "watcher": "tickwork.handlers.watcher.handler",
}


def _one(synth: Synth, type_name: str, **match: Any) -> dict[str, Any]:
    found = [
        r
        for r in synth.resources(type_name).values()
        if all(r["Properties"].get(k) == v for k, v in match.items())
    ]
    assert len(found) == 1, f"expected one {type_name} with {match}, found {len(found)}"
    return found[0]


def _logical_id(synth: Synth, type_name: str, **match: Any) -> str:
    ids = [
        k
        for k, r in synth.resources(type_name).items()
        if all(r["Properties"].get(p) == v for p, v in match.items())
    ]
    assert len(ids) == 1
    return ids[0]


def _function(synth: Synth, name: str) -> dict[str, Any]:
    return _one(synth, "AWS::Lambda::Function", FunctionName=f"{synth.stack.config.prefix}-{name}")


def _keys(table: TableDef | Any) -> list[dict[str, str]]:
    keys = [{"AttributeName": table.partition.name, "KeyType": "HASH"}]
    if table.sort is not None:
        keys.append({"AttributeName": table.sort.name, "KeyType": "RANGE"})
    return keys


# storage -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("definition", TABLES, ids=lambda t: t.logical_name)
def test_tables_have_the_shared_keys_and_indexes(default: Synth, definition: TableDef) -> None:
    table = _one(default, "AWS::DynamoDB::Table", TableName=ResourceNames("tickwork").table(definition))
    props = table["Properties"]
    assert props["KeySchema"] == _keys(definition)
    declared = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    expected = {definition.partition.name: definition.partition.type}
    if definition.sort:
        expected[definition.sort.name] = definition.sort.type
    for index in definition.indexes:
        expected[index.partition.name] = index.partition.type
        if index.sort:
            expected[index.sort.name] = index.sort.type
    assert declared == expected
    indexes = {i["IndexName"]: i for i in props.get("GlobalSecondaryIndexes", [])}
    assert set(indexes) == {i.name for i in definition.indexes}
    for index in definition.indexes:
        assert indexes[index.name]["KeySchema"] == _keys(index)
        assert indexes[index.name]["Projection"]["ProjectionType"] == index.projection


@pytest.mark.parametrize("definition", TABLES, ids=lambda t: t.logical_name)
def test_ttl_only_where_defined(default: Synth, definition: TableDef) -> None:
    props = _one(default, "AWS::DynamoDB::Table", TableName=f"tickwork-{definition.logical_name}")[
        "Properties"
    ]
    if definition.ttl_attribute:
        assert props["TimeToLiveSpecification"] == {
            "AttributeName": definition.ttl_attribute,
            "Enabled": True,
        }
    else:
        assert "TimeToLiveSpecification" not in props
    assert RUNS.ttl_attribute  # the runs table is the one that expires


def test_tables_are_on_demand_and_encrypted_and_disposable_outside_production(default: Synth) -> None:
    for table in default.resources("AWS::DynamoDB::Table").values():
        props = table["Properties"]
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        # the deployment's own key (tests/infra/test_data_protection.py)
        assert props["SSESpecification"]["SSEType"] == "KMS"
        # Point-in-time recovery in every environment; only production retains and protects.
        assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
        assert not props.get("DeletionProtectionEnabled", False)
        assert table["DeletionPolicy"] == "Delete"


def test_production_tables_are_retained_protected_and_recoverable(production: Synth) -> None:
    tables = production.resources("AWS::DynamoDB::Table").values()
    assert {t["Properties"]["TableName"] for t in tables} == {f"tw-prod-{t.logical_name}" for t in TABLES}
    for table in tables:
        props = table["Properties"]
        assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
        assert props["DeletionProtectionEnabled"] is True
        assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Retain"


# dispatch ------------------------------------------------------------------------------------------------


def test_dispatch_queues_redrive_to_the_dlq_after_max_receive_count(default: Synth) -> None:
    names = ResourceNames("tickwork")
    dlq_id = _logical_id(default, "AWS::SQS::Queue", QueueName=names.queue(DISPATCH_DLQ))
    dlq = default.resources("AWS::SQS::Queue")[dlq_id]["Properties"]
    assert dlq["MessageRetentionPeriod"] == DISPATCH_DLQ.retention_seconds
    for index in range(10):
        props = _one(default, "AWS::SQS::Queue", QueueName=dispatch_queue_name(names, index))["Properties"]
        assert props["RedrivePolicy"] == {
            "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
            "maxReceiveCount": DISPATCH.max_receive_count,
        }
        assert props["VisibilityTimeout"] == DISPATCH.visibility_timeout_seconds
        assert props["MessageRetentionPeriod"] == DISPATCH.retention_seconds
        assert props["SqsManagedSseEnabled"] is True
    long_calls = _one(default, "AWS::SQS::Queue", QueueName=names.queue(DISPATCH_LONG_CALL))["Properties"]
    assert long_calls["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
        "maxReceiveCount": DISPATCH.max_receive_count,
    }
    assert long_calls["VisibilityTimeout"] == DISPATCH.visibility_timeout_seconds
    # 10 dispatch, the long-call queue, the DLQ, the watcher's on-failure queue
    assert len(default.resources("AWS::SQS::Queue")) == 13


def test_visibility_timeout_exceeds_the_executor_timeout(default: Synth) -> None:
    assert DISPATCH.visibility_timeout_seconds > _function(default, "executor")["Properties"]["Timeout"]


def test_queues_refuse_unencrypted_transport(default: Synth) -> None:
    policies = default.resources("AWS::SQS::QueuePolicy").values()
    assert len(policies) == len(default.resources("AWS::SQS::Queue")) == 13
    for policy in policies:
        (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
        assert statement["Effect"] == "Deny"
        assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


# functions -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HANDLERS)
def test_functions_come_from_one_factory(default: Synth, name: str) -> None:
    props = _function(default, name)["Properties"]
    assert props["Handler"] == HANDLERS[name]
    assert props["Runtime"] == "python3.12"
    assert props["Architectures"] == ["arm64"]
    assert props["LoggingConfig"]["LogFormat"] == "JSON"


def test_all_functions_share_one_code_asset(default: Synth) -> None:
    keys = {json.dumps(f["Properties"]["Code"]) for f in default.resources("AWS::Lambda::Function").values()}
    assert len(keys) == 1


def test_every_function_has_its_own_role(default: Synth) -> None:
    roles = [
        f["Properties"]["Role"]["Fn::GetAtt"][0] for f in default.resources("AWS::Lambda::Function").values()
    ]
    assert len(set(roles)) == len(roles) == len(HANDLERS) == 5
    for role in default.resources("AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"]


def test_environment_is_what_the_settings_accept(default: Synth) -> None:
    variables = _function(default, "executor")["Properties"]["Environment"]["Variables"]
    # Queue URLs and the secret ARN are CloudFormation references here; stand in plain strings for them.
    plain = {k: v if isinstance(v, str) else f"ref-{k.lower()}" for k, v in variables.items()}
    settings = Settings.from_env(plain)
    assert settings.mode == "aws"
    assert settings.table_prefix == "tickwork"
    assert settings.shard_count == 16
    assert settings.concurrency_cap == 100  # the development default
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == NAMESPACE
    assert variables["POWERTOOLS_SERVICE_NAME"] == "tickwork"
    joined = variables["TICKWORK_DISPATCH_QUEUE_URLS"]["Fn::Join"]
    assert joined[0] == "" and len([p for p in joined[1] if p != ","]) == 10
    assert set(variables) >= {"TICKWORK_DLQ_URL", "TICKWORK_SIGNING_SECRET_ARN", "TICKWORK_ALLOWED_NETWORKS"}


@pytest.mark.parametrize(("fixture", "auth"), [("default", "iam"), ("production", "jwt")])
def test_the_api_tells_the_console_its_auth_and_dashboard(fixture: str, auth: str, request: Any) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    variables = _function(synth, "api")["Properties"]["Environment"]["Variables"]
    assert variables["TICKWORK_API_AUTH"] == auth  # JWT exactly when a JWT issuer is configured
    (dashboard,) = synth.resources("AWS::CloudWatch::Dashboard").values()
    assert variables["TICKWORK_DASHBOARD_NAME"] == dashboard["Properties"]["DashboardName"]


# executor ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["default", "production"])
def test_event_source_mappings_share_the_reserved_concurrency(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    config = synth.stack.config
    sizing = size_executor(config.concurrency_cap, config.queue_count, config.executor_batch_size)
    executor_id = _logical_id(synth, "AWS::Lambda::Function", FunctionName=f"{config.prefix}-executor")
    every_mapping = [
        m
        for m in synth.resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": executor_id}
    ]
    [long_calls] = [m for m in every_mapping if m["Properties"]["BatchSize"] == 1]
    mappings = [m for m in every_mapping if m is not long_calls]
    assert len(mappings) == config.queue_count
    assert long_calls["Properties"]["ProvisionedPollerConfig"] == {
        "MinimumPollers": sizing.long_call_pollers,
        "MaximumPollers": sizing.long_call_pollers,
    }
    assert long_calls["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    for mapping in mappings:
        props = mapping["Properties"]
        assert props["BatchSize"] == 10
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert props["ProvisionedPollerConfig"] == {
            "MinimumPollers": sizing.min_pollers,
            "MaximumPollers": sizing.max_pollers,
        }
        assert "ScalingConfig" not in props  # MaximumConcurrency excludes provisioned mode
        assert "MaximumBatchingWindowInSeconds" not in props
    reserved = _function(synth, "executor")["Properties"]["ReservedConcurrentExecutions"]
    assert reserved == sizing.reserved_concurrency
    pollers = sum(m["Properties"]["ProvisionedPollerConfig"]["MaximumPollers"] for m in every_mapping)
    assert pollers * INVOCATIONS_PER_POLLER <= reserved
    assert (reserved - sizing.long_call_runs) * 10 >= config.concurrency_cap


def test_default_sizing_is_a_small_development_stack(default: Synth) -> None:
    # 100 runs need 10 environments, but 10 mappings at the SQS floor of 2 pollers can drive 200; the
    # long-call lane's mapping adds its floor of 2 pollers, 20.
    assert _function(default, "executor")["Properties"]["ReservedConcurrentExecutions"] == 200 + 20


# scheduler -----------------------------------------------------------------------------------------------


def _schedules_of(synth: Synth, function_name: str) -> list[dict[str, Any]]:
    function_id = _logical_id(synth, "AWS::Lambda::Function", FunctionName=function_name)
    return [
        s["Properties"]
        for s in synth.resources("AWS::Scheduler::Schedule").values()
        if s["Properties"]["Target"]["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    ]


def _at_second_zero_each_minute(schedule: dict[str, Any], prefix: str) -> None:
    # Scheduler, not a legacy rate rule: second :00 of every minute, no flexible window, its own group,
    # and no delivery retry past the minute the tick was for.
    assert schedule["ScheduleExpression"] == "cron(* * * * ? *)"
    assert schedule["ScheduleExpressionTimezone"] == "Etc/UTC"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert schedule["GroupName"] == prefix
    assert schedule["Target"]["RetryPolicy"] == {"MaximumEventAgeInSeconds": 60, "MaximumRetryAttempts": 2}


@pytest.mark.parametrize("fixture", ["default", "production"])
def test_ticker_schedules_cover_every_shard_once_each_minute(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    config = synth.stack.config
    groups: list[list[int]] = []
    for schedule in _schedules_of(synth, f"{config.prefix}-ticker"):
        _at_second_zero_each_minute(schedule, config.prefix)
        payload = json.loads(schedule["Target"]["Input"])
        assert payload["time"] == "<aws.scheduler.scheduled-time>"  # keeps TickerLag measurable
        groups.append(payload["shards"])
    assert sorted(groups) == shard_groups(config.shard_count, config.ticker_shards_per_invocation)
    assert sorted(s for g in groups for s in g) == list(range(config.shard_count))


def test_sweeper_runs_every_minute(default: Synth) -> None:
    schedules = _schedules_of(default, "tickwork-sweeper")
    assert len(schedules) == 1
    _at_second_zero_each_minute(schedules[0], "tickwork")


def test_only_the_deployments_schedules_may_invoke_its_functions(default: Synth) -> None:
    groups = default.resources("AWS::Scheduler::ScheduleGroup")
    assert [g["Properties"]["Name"] for g in groups.values()] == ["tickwork"]
    (group_id,) = groups
    for schedule in default.resources("AWS::Scheduler::Schedule").values():
        role_id = schedule["Properties"]["Target"]["RoleArn"]["Fn::GetAtt"][0]
        trust = default.resources("AWS::IAM::Role")[role_id]["Properties"]["AssumeRolePolicyDocument"]
        (statement,) = trust["Statement"]
        assert statement["Principal"] == {"Service": "scheduler.amazonaws.com"}
        assert statement["Condition"]["StringEquals"]["aws:SourceArn"] == {"Fn::GetAtt": [group_id, "Arn"]}


def test_scheduled_functions_do_not_retry_into_the_next_minute(default: Synth) -> None:
    configs = list(default.resources("AWS::Lambda::EventInvokeConfig").values())
    assert len(configs) == 3  # the ticker, the sweeper and the watcher
    for config in configs:
        assert config["Properties"]["MaximumRetryAttempts"] == 0
    assert _function(default, "ticker")["Properties"]["Timeout"] < 60


# IAM -----------------------------------------------------------------------------------------------------


def _statements(synth: Synth) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        role = policy["Properties"]["Roles"][0]["Ref"]
        found.extend((role, s) for s in policy["Properties"]["PolicyDocument"]["Statement"])
    return found


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@pytest.mark.parametrize("fixture", ["default", "production"])
def test_data_actions_are_scoped_to_the_stacks_tables_and_queues(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    tables = set(synth.resources("AWS::DynamoDB::Table"))
    queues = set(synth.resources("AWS::SQS::Queue"))
    target_arns = set(synth.stack.config.target_arns)
    for _role, statement in _statements(synth):
        actions = _as_list(statement["Action"])
        assert statement["Effect"] == "Allow"
        for resource in _as_list(statement["Resource"]):
            # X-Ray has no resource-level permissions: active tracing is the one `*`.
            assert resource != "*" or set(actions) <= XRAY_ACTIONS, statement
            if any(a.startswith("dynamodb:") for a in actions):
                ref = (
                    resource["Fn::GetAtt"][0]
                    if "Fn::GetAtt" in resource
                    else resource["Fn::Join"][1][0]["Fn::GetAtt"][0]
                )
                assert ref in tables
            if any(a.startswith("sqs:") for a in actions):
                if isinstance(resource, str):  # a configured target queue
                    assert resource in target_arns and actions == ["sqs:SendMessage"]
                elif "Fn::GetAtt" in resource:
                    assert resource["Fn::GetAtt"][0] in queues
                else:  # the default `<prefix>-target-*` convention
                    assert resource["Fn::Join"][1][-1] == f":{synth.stack.config.prefix}-target-*"


def test_who_deletes_items_and_only_the_sweeper_reads_the_dlq(
    default: Synth,
) -> None:
    roles = {name: _function(default, name)["Properties"]["Role"]["Fn::GetAtt"][0] for name in HANDLERS}
    tables = {
        _logical_id(default, "AWS::DynamoDB::Table", TableName=f"tickwork-{t.logical_name}"): t.logical_name
        for t in TABLES
    }
    deleters: dict[str, set[str]] = {}
    for role, statement in _statements(default):
        if "dynamodb:DeleteItem" in _as_list(statement["Action"]):
            for resource in _as_list(statement["Resource"]):
                deleters.setdefault(tables[resource["Fn::GetAtt"][0]], set()).add(role)
    # A job is deleted by its owner (the API); in the events table, sent messages and spent deadline timers
    # by the watcher, an owner's alert defaults by the API.
    assert deleters == {"jobs": {roles["api"]}, "events": {roles["watcher"], roles["api"]}}
    dlq_id = _logical_id(default, "AWS::SQS::Queue", QueueName="tickwork-dispatch-dlq")
    readers = {
        role
        for role, s in _statements(default)
        if {"Fn::GetAtt": [dlq_id, "Arn"]} in _as_list(s["Resource"])
        and "sqs:ReceiveMessage" in _as_list(s["Action"])
    }
    assert readers == {roles["sweeper"]}
    # The API reads the callback key (it verifies callback tokens), never the key that signs target calls.
    signing_id = _logical_id(default, "AWS::SecretsManager::Secret", Name="tickwork/signing-secret")
    callback_id = _logical_id(default, "AWS::SecretsManager::Secret", Name="tickwork/callback-token-key")
    secret_readers: dict[str, set[str]] = {}
    for role, statement in _statements(default):
        if "secretsmanager:GetSecretValue" in _as_list(statement["Action"]):
            for resource in _as_list(statement["Resource"]):
                secret_readers.setdefault(resource.get("Ref", ""), set()).add(role)
    # The watcher signs its webhook messages as the executor signs target calls.
    assert secret_readers[signing_id] == {roles["executor"], roles["watcher"]}
    assert secret_readers[callback_id] == {roles["executor"], roles["api"]}


def test_configured_target_arns_replace_the_naming_convention(production: Synth) -> None:
    executor_role = _function(production, "executor")["Properties"]["Role"]["Fn::GetAtt"][0]
    granted = {
        a: _as_list(s["Resource"])
        for role, s in _statements(production)
        if role == executor_role
        for a in _as_list(s["Action"])
        if a in ("lambda:InvokeFunction", "sns:Publish", "events:PutEvents", "states:StartExecution")
    }
    function = PRODUCTION_CONTEXT["target_arns"][0]
    assert granted == {"lambda:InvokeFunction": [function, f"{function}:*"]}


# API -----------------------------------------------------------------------------------------------------


CONSOLE_ROUTES = {"GET /ui", "GET /ui/{file}"}
# A callback run's target reports with its token, the credential the handler checks.
CALLBACK_ROUTES = {"POST /callbacks/{token}/complete", "POST /callbacks/{token}/heartbeat"}
OPEN_ROUTES = CONSOLE_ROUTES | CALLBACK_ROUTES


def _authorization_by_route(synth: Synth) -> dict[str, str]:
    routes = synth.resources("AWS::ApiGatewayV2::Route").values()
    return {r["Properties"]["RouteKey"]: r["Properties"]["AuthorizationType"] for r in routes}


def test_api_requires_iam_by_default(default: Synth) -> None:
    by_route = _authorization_by_route(default)
    # Only the console's static files (GET, no data) and the token-checked callback routes are open; every
    # other route needs SigV4.
    assert {k for k, v in by_route.items() if v == "NONE"} == OPEN_ROUTES
    assert {v for k, v in by_route.items() if k not in OPEN_ROUTES} == {"AWS_IAM"}
    assert "ANY /{proxy+}" in by_route
    assert not default.resources("AWS::ApiGatewayV2::Authorizer")


def test_api_uses_the_jwt_authorizer_when_configured(production: Synth) -> None:
    (authorizer,) = production.resources("AWS::ApiGatewayV2::Authorizer").values()
    assert authorizer["Properties"]["AuthorizerType"] == "JWT"
    assert authorizer["Properties"]["JwtConfiguration"] == {
        "Issuer": "https://issuer.example.com/",
        "Audience": ["tickwork-api", "tickwork-cli"],
    }
    by_route = _authorization_by_route(production)
    assert {k for k, v in by_route.items() if v == "NONE"} == OPEN_ROUTES
    assert {v for k, v in by_route.items() if k not in OPEN_ROUTES} == {"JWT"}


def test_api_stage_throttles_and_logs(default: Synth) -> None:
    (stage,) = default.resources("AWS::ApiGatewayV2::Stage").values()
    props = stage["Properties"]
    assert props["DefaultRouteSettings"] == {"ThrottlingBurstLimit": 400, "ThrottlingRateLimit": 200}
    # The open console routes are throttled on their own, far below what signed callers share.
    assert props["RouteSettings"] == {
        route: {"ThrottlingBurstLimit": 40, "ThrottlingRateLimit": 20} for route in CONSOLE_ROUTES
    } | {route: {"ThrottlingBurstLimit": 400, "ThrottlingRateLimit": 200} for route in CALLBACK_ROUTES}
    log_format = json.loads(props["AccessLogSettings"]["Format"])
    assert {"requestId", "status", "caller", "routeKey"} <= set(log_format)


# observability -------------------------------------------------------------------------------------------


def _alarm(synth: Synth, name: str) -> dict[str, Any]:
    alarm = synth.stack.observability.alarms[name]
    logical_id = synth.stack.get_logical_id(alarm.node.default_child)  # type: ignore[arg-type]
    props: dict[str, Any] = synth.resources("AWS::CloudWatch::Alarm")[logical_id]["Properties"]
    return props


def _metric_names(props: dict[str, Any]) -> set[str]:
    if "MetricName" in props:
        return {props["MetricName"]}
    return {q["MetricStat"]["Metric"]["MetricName"] for q in props.get("Metrics", []) if "MetricStat" in q}


_DEFAULTS = DeploymentConfig()
_DEFAULT_RESERVED = size_executor(
    _DEFAULTS.concurrency_cap, _DEFAULTS.queue_count, _DEFAULTS.executor_batch_size
).reserved_concurrency

ALARMS = {
    # name: (metric names, threshold, operator)
    "DlqNotEmpty": (
        {"ApproximateNumberOfMessagesVisible", "DeadLettered"},
        1,
        "GreaterThanOrEqualToThreshold",
    ),
    "RunsFailed": ({"RunsFailed"}, 1, "GreaterThanOrEqualToThreshold"),
    "TickerErrors": ({"Errors"}, 1, "GreaterThanOrEqualToThreshold"),
    "TickerLag": ({"TickerLag"}, 120, "GreaterThanThreshold"),
    "PlanFailures": ({"PlanFailures"}, 1, "GreaterThanOrEqualToThreshold"),
    "SweepFailures": ({"SweepFailures"}, 1, "GreaterThanOrEqualToThreshold"),
    "AuditFailures": ({"AuditFailures"}, 1, "GreaterThanOrEqualToThreshold"),
    "AuditRepairs": ({"AuditRepairs"}, 1, "GreaterThanOrEqualToThreshold"),
    "AuditIncomplete": ({"AuditCutShort"}, 1, "GreaterThanOrEqualToThreshold"),
    "StartDelayP99": ({"StartDelay"}, 1000, "GreaterThanThreshold"),
    "StartDelayBurstP99": ({"StartDelay"}, 10_000, "GreaterThanThreshold"),
    "ShardsOutOfTime": ({"ShardsOutOfTime"}, 1, "GreaterThanOrEqualToThreshold"),
    "OldestMessageAge": ({"ApproximateAgeOfOldestMessage"}, 1200, "GreaterThanThreshold"),
    "LambdaThrottles": ({"Throttles"}, 1, "GreaterThanOrEqualToThreshold"),
    "DynamoDbThrottles": ({"ReadThrottleEvents", "WriteThrottleEvents"}, 1, "GreaterThanOrEqualToThreshold"),
    "DynamoDbIndexThrottles": (
        {"ReadThrottleEvents", "WriteThrottleEvents"},
        1,
        "GreaterThanOrEqualToThreshold",
    ),
    "SweeperErrors": ({"Errors"}, 1, "GreaterThanOrEqualToThreshold"),
    "ExecutorErrors": ({"Errors"}, 1, "GreaterThanOrEqualToThreshold"),
    "ApiErrors": ({"Errors"}, 1, "GreaterThanOrEqualToThreshold"),
    "Api5xx": ({"5xx"}, 1, "GreaterThanOrEqualToThreshold"),
    "ExecutorDurationNearTimeout": ({"Duration"}, 720_000, "GreaterThanThreshold"),
    "ExecutorConcurrencyNearCap": ({"ConcurrentExecutions"}, 0.9 * _DEFAULT_RESERVED, "GreaterThanThreshold"),
    "OldestOverdueRun": ({"OldestOverdueRunAge"}, 900, "GreaterThanThreshold"),
    "WatcherErrors": ({"Errors"}, 1, "GreaterThanOrEqualToThreshold"),
    "WatcherFailedBatches": ({"ApproximateNumberOfMessagesVisible"}, 1, "GreaterThanOrEqualToThreshold"),
}


@pytest.mark.parametrize("name", ALARMS)
def test_alarm_watches_the_right_metric_with_its_threshold(default: Synth, name: str) -> None:
    metrics, threshold, operator = ALARMS[name]
    props = _alarm(default, name)
    assert _metric_names(props) == metrics
    assert props["Threshold"] == threshold
    assert props["ComparisonOperator"] == operator
    topic, _ = alarm_topic(default)
    assert props["AlarmActions"] == [{"Ref": topic}]
    assert f"docs/deploy.md#{name.lower()}" in props["AlarmDescription"]


def test_alarm_details(default: Synth, production: Synth) -> None:
    lag = _alarm(default, "TickerLag")
    assert lag["TreatMissingData"] == "breaching"  # no tick at all is the worst lag
    assert lag["Namespace"] == NAMESPACE and lag["Dimensions"] == [{"Name": "service", "Value": "tickwork"}]
    assert _alarm(default, "StartDelayP99")["ExtendedStatistic"] == "p99"
    assert _alarm(production, "StartDelayP99")["Threshold"] == 2500
    # At most 10 metrics in one alarm's math: 11 queues' ages take two alarms (OldestMessageAge1 is extra),
    # and so do 6 tables' read and write throttles (DynamoDbThrottles1) and 6 indexes'
    # (DynamoDbIndexThrottles1).
    assert len(default.resources("AWS::CloudWatch::Alarm")) == len(ALARMS) + 3
    assert {"OldestMessageAge1", "DynamoDbThrottles1", "DynamoDbIndexThrottles1"} <= set(
        default.stack.observability.alarms
    )
    dlq = _alarm(default, "DlqNotEmpty")
    assert any(q.get("Expression") == "FILL(depth, 0) + FILL(drained, 0)" for q in dlq["Metrics"])


def test_alarm_topic_is_encrypted_and_mails_only_when_asked(default: Synth, production: Synth) -> None:
    _, topic = alarm_topic(default)
    assert "KmsMasterKeyId" in topic["Properties"]
    assert not default.resources("AWS::SNS::Subscription")
    (subscription,) = production.resources("AWS::SNS::Subscription").values()
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == "oncall@example.com"


def test_dashboard_shows_every_emitted_metric(default: Synth) -> None:
    (dashboard,) = default.resources("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in (
        "StartDelay",
        "RunsPlanned",
        "RunsCatchUp",
        "RunsMissed",
        "RunsStarted",
        "RunsSucceeded",
        "RunsFailed",
        "RunsSkipped",
        "RunsCancelled",
        "RunsQueued",
        "Retries",
        "ExpiredLeases",
        "StaleCompletions",
        "SweeperRedispatched",
        "DeadLettered",
        "DispatchFailures",
        "PlanConflicts",
        "TickerDuration",
        "TickerLag",
        "OrphanMessages",
        "ApproximateAgeOfOldestMessage",
        "ApproximateNumberOfMessagesVisible",
        "ConcurrentExecutions",
        "Throttles",
        "WriteThrottleEvents",
        "NotificationsSent",
        "NotificationSendFailures",
        "IteratorAge",
    ):
        assert f'\\"{metric}\\"' in body, metric


# cdk-nag -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["default", "production"])
def test_cdk_nag_finds_nothing_unsuppressed(fixture: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    annotations = Annotations.from_stack(synth.stack)
    pattern = Match.string_like_regexp("(AwsSolutions|Serverless)-.*")
    findings = [*annotations.find_error("*", pattern), *annotations.find_warning("*", pattern)]
    assert not findings, "\n".join(f"{f.id}: {f.entry.data}" for f in findings)
    # Nor any other CDK warning (e.g. metric periods silently overridden on the dashboard).
    warnings = annotations.find_warning("*", Match.any_value())
    assert not warnings, "\n".join(f"{w.id}: {w.entry.data}" for w in warnings)


def test_the_ticker_may_set_the_batched_mappings_warm_pollers_and_knows_them(production: Synth) -> None:
    """Starting warm (domain/prescale.py): the ticker's environment names the batched lane's mappings and
    their bounds, and its role may update exactly those mappings."""
    variables = _function(production, "ticker")["Properties"]["Environment"]["Variables"]
    mappings = production.resources("AWS::Lambda::EventSourceMapping")
    batched = {key for key, m in mappings.items() if m["Properties"]["BatchSize"] == 10}
    ids = variables["TICKWORK_EXECUTOR_MAPPING_IDS"]["Fn::Join"][1]
    assert {ref["Ref"] for ref in ids if isinstance(ref, dict)} == batched
    sizing = production.stack.sizing
    assert (variables["TICKWORK_EXECUTOR_MIN_POLLERS"], variables["TICKWORK_EXECUTOR_MAX_POLLERS"]) == (
        str(sizing.min_pollers),
        str(sizing.max_pollers),
    )
    granted = [
        s
        for s in policy_statements(production.resources("AWS::IAM::Policy"), "PolicyDocument")
        if "lambda:UpdateEventSourceMapping" in as_list(s["Action"])
    ]
    assert len(granted) == 1 and len(as_list(granted[0]["Resource"])) == len(batched)
    assert set(as_list(granted[0]["Action"])) == {
        "lambda:GetEventSourceMapping",
        "lambda:UpdateEventSourceMapping",
    }
