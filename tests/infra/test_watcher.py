"""The watcher's infrastructure (issue 32, constructs/watcher.py): the runs table's stream, the mapping that
reads it, the minutely schedule, and what the function may do besides (tests/infra/test_iam_coverage.py checks
every call its code makes against its role)."""

from __future__ import annotations

from typing import Any

import pytest
from infra.constructs.watcher import BATCH_SIZE, MAX_RECORD_AGE, RETRY_ATTEMPTS

from tests.infra.conftest import Synth, as_list, policy_statements
from tickwork.handlers.watcher import DELIVERY_MARGIN_SECONDS
from tickwork.resources import RUNS, TABLES, TableDef

STREAM_READ = {
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
}
STREAM_RETENTION_SECONDS = 24 * 3600  # DynamoDB Streams keeps a record this long


def _logical_id(synth: Synth, construct: Any) -> str:
    return synth.stack.get_logical_id(construct.node.default_child)


def _function(synth: Synth, name: str) -> tuple[str, dict[str, Any]]:
    [(key, found)] = [
        (k, f["Properties"])
        for k, f in synth.resources("AWS::Lambda::Function").items()
        if f["Properties"]["FunctionName"] == f"{synth.stack.config.prefix}-{name}"
    ]
    return key, found


def _role_statements(synth: Synth, function: str) -> list[dict[str, Any]]:
    role = _function(synth, function)[1]["Role"]["Fn::GetAtt"][0]
    policies = {
        k: p
        for k, p in synth.resources("AWS::IAM::Policy").items()
        if {"Ref": role} in p["Properties"]["Roles"]
    }
    return policy_statements(policies, "PolicyDocument")


def _mapping(synth: Synth) -> dict[str, Any]:
    watcher, _ = _function(synth, "watcher")
    mappings: list[dict[str, Any]] = [
        m["Properties"]
        for m in synth.resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": watcher}
    ]
    assert len(mappings) == 1
    return mappings[0]


@pytest.mark.parametrize("definition", TABLES, ids=lambda t: t.logical_name)
def test_a_table_has_a_stream_of_old_and_new_items_exactly_when_it_feeds_the_watcher(
    default: Synth, definition: TableDef
) -> None:
    table = default.resources("AWS::DynamoDB::Table")[
        _logical_id(default, default.stack.storage.table(definition))
    ]
    if definition.change_feed:
        assert table["Properties"]["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    else:
        assert "StreamSpecification" not in table["Properties"]
    assert RUNS.change_feed


@pytest.mark.parametrize("fixture", ["default", "production"])
def test_the_watcher_reads_the_runs_stream_in_bounded_retried_batches(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    mapping = _mapping(synth)
    runs = _logical_id(synth, synth.stack.storage.table(RUNS))
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [runs, "StreamArn"]}
    assert mapping["StartingPosition"] == "LATEST"
    assert mapping["BatchSize"] == BATCH_SIZE == 100
    assert mapping["BisectBatchOnFunctionError"] is True
    assert 0 < mapping["MaximumRetryAttempts"] == RETRY_ATTEMPTS <= 10
    # Given up while the stream still holds the records: they can be read again from what the queue says.
    age = mapping["MaximumRecordAgeInSeconds"]
    assert age == MAX_RECORD_AGE.to_seconds() and 60 <= age < STREAM_RETENTION_SECONDS
    failures = _logical_id(synth, synth.stack.watcher.failures)
    assert mapping["DestinationConfig"] == {"OnFailure": {"Destination": {"Fn::GetAtt": [failures, "Arn"]}}}
    # Removals (a run's retention ending) never invoke it; one batch per shard at a time, in order.
    assert mapping["FilterCriteria"] == {"Filters": [{"Pattern": '{"eventName":["INSERT","MODIFY"]}'}]}
    assert "ParallelizationFactor" not in mapping and "FunctionResponseTypes" not in mapping
    queue = synth.resources("AWS::SQS::Queue")[failures]["Properties"]
    assert queue["QueueName"] == f"{synth.stack.config.prefix}-watcher-failures"
    assert queue["MessageRetentionPeriod"] == 14 * 24 * 3600 and queue["SqsManagedSseEnabled"] is True
    _, watcher = _function(synth, "watcher")
    assert watcher["ReservedConcurrentExecutions"] == synth.stack.config.watcher_reserved_concurrency
    # A minutely pass ends before the next starts; the deliveries keep the handler's margin of it.
    assert DELIVERY_MARGIN_SECONDS < watcher["Timeout"] <= 60


def test_the_watcher_may_read_the_runs_stream_and_no_other(default: Synth) -> None:
    runs = _logical_id(default, default.stack.storage.table(RUNS))
    granted = [s for s in _role_statements(default, "watcher") if STREAM_READ & set(as_list(s["Action"]))]
    assert [set(as_list(s["Action"])) for s in granted] == [STREAM_READ]
    assert as_list(granted[0]["Resource"]) == [{"Fn::GetAtt": [runs, "StreamArn"]}]
    for function in ("executor", "ticker", "sweeper", "api"):
        assert not any(STREAM_READ & set(as_list(s["Action"])) for s in _role_statements(default, function))


def test_the_watcher_sends_whats_owed_every_minute(default: Synth) -> None:
    watcher, _ = _function(default, "watcher")
    [schedule] = [
        s["Properties"]
        for s in default.resources("AWS::Scheduler::Schedule").values()
        if s["Properties"]["Target"]["Arn"] == {"Fn::GetAtt": [watcher, "Arn"]}
    ]
    assert schedule["ScheduleExpression"] == "cron(* * * * ? *)"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert schedule["GroupName"] == "tickwork"  # the deployment's group: its role may invoke the watcher
    assert schedule["Target"]["Input"] == "{}"  # no records: only the outbox pass
    assert schedule["Target"]["RoleArn"] == {
        "Fn::GetAtt": [_logical_id(default, default.stack.scheduler.invoke_role), "Arn"]
    }
    # No retry into the next minute's pass.
    assert schedule["Target"]["RetryPolicy"]["MaximumEventAgeInSeconds"] == 60
    [invoke_config] = [
        c["Properties"]
        for c in default.resources("AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": watcher}
    ]
    assert invoke_config["MaximumRetryAttempts"] == 0


@pytest.mark.parametrize("fixture", ["default", "production"])
def test_the_watcher_calls_targets_as_the_executor_does(fixture: str, request: pytest.FixtureRequest) -> None:
    """Its messages go through the executor's target invokers: the same settings (the signing secret, the
    allowed networks, the grants) and SNS publish on the same topics, and no other target action."""
    synth: Synth = request.getfixturevalue(fixture)
    watcher = _function(synth, "watcher")[1]["Environment"]["Variables"]
    executor = _function(synth, "executor")[1]["Environment"]["Variables"]
    watcher.pop("TICKWORK_EMAIL_TOPIC_PREFIX")  # e-mail channels: the watcher's own topics
    assert {k: v for k, v in executor.items() if k != "TICKWORK_CALLBACK_URL"} == watcher

    def publish(function: str) -> list[Any]:
        return [
            r
            for s in _role_statements(synth, function)
            if "sns:Publish" in as_list(s["Action"])
            for r in as_list(s["Resource"])
            if not (isinstance(r, dict) and "Fn::Join" in r and "-mail-" in str(r))
        ]

    assert publish("watcher") == publish("executor")
    if synth.stack.config.target_arns:  # the production context names no topic
        assert publish("watcher") == []
    else:
        assert publish("watcher")
    actions = {a for s in _role_statements(synth, "watcher") for a in as_list(s["Action"])}
    assert not {a for a in actions if a.split(":")[0] in ("lambda", "states", "ecs", "iam", "events")}
    assert not {"sqs:ReceiveMessage", "sqs:DeleteMessage"} & actions
