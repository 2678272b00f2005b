"""The alarms issue 10 adds (index throttles, function errors, API 5xx, executor duration and concurrency, the
oldest overdue run), their runbook links, and the emulator profile covering the same signals without math."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from infra.constructs.executor import EXECUTOR_TIMEOUT_SECONDS
from infra.constructs.observability import NAMESPACE, OVERDUE_RUN_AGE_LIMIT_SECONDS

from tests.infra.conftest import Synth, _synth, alarm_topic
from tickwork.resources import TABLES

DEPLOY_DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
Signal = tuple[str, str, frozenset[tuple[str, str]]]  # namespace, metric name, dimensions


@pytest.fixture(scope="module")
def emulator() -> Synth:
    return _synth({"emulator": "true"})


def _alarm(synth: Synth, name: str) -> dict[str, Any]:
    alarm = synth.stack.observability.alarms[name]
    logical_id = synth.stack.get_logical_id(alarm.node.default_child)  # type: ignore[arg-type]
    props: dict[str, Any] = synth.resources("AWS::CloudWatch::Alarm")[logical_id]["Properties"]
    return props


def _ref(synth: Synth, construct: Any) -> dict[str, str]:
    return {"Ref": synth.stack.get_logical_id(construct.node.default_child)}


def _dimensions(raw: list[dict[str, Any]] | None) -> frozenset[tuple[str, str]]:
    return frozenset((d["Name"], json.dumps(d["Value"], sort_keys=True)) for d in raw or [])


def _signals(props: dict[str, Any]) -> set[Signal]:
    """The metrics one alarm reads: itself if single-metric, else the inputs of its math."""
    if "MetricName" in props:
        return {(props["Namespace"], props["MetricName"], _dimensions(props.get("Dimensions")))}
    return {
        (m["Namespace"], m["MetricName"], _dimensions(m.get("Dimensions")))
        for q in props["Metrics"]
        if "MetricStat" in q
        for m in [q["MetricStat"]["Metric"]]
    }


def _single(props: dict[str, Any]) -> Signal:
    (signal,) = _signals(props)
    assert "Metrics" not in props
    return signal


# index-level throttles ---------------------------------------------------------------------------------


def _group(synth: Synth, name: str) -> list[dict[str, Any]]:
    """A sum alarm split in groups of at most 10 metrics (`name`, `name1`, ...): each group's properties."""
    names = [n for n in synth.stack.observability.alarms if re.fullmatch(rf"{name}[0-9]*", n)]
    assert name in names
    return [_alarm(synth, n) for n in sorted(names)]


def test_index_throttles_cover_every_global_secondary_index(default: Synth) -> None:
    tables = {
        json.dumps(_ref(default, default.stack.storage.table(d)), sort_keys=True): d.logical_name
        for d in TABLES
    }
    expected = {
        (t.logical_name, i.name, f"{kind}ThrottleEvents")
        for t in TABLES
        for i in t.indexes
        for kind in ("Read", "Write")
    }
    watched: list[tuple[str, str, str]] = []
    for props in _group(default, "DynamoDbIndexThrottles"):
        signals = _signals(props)
        assert len(signals) <= 10  # CloudWatch's limit for one alarm's metric math
        for namespace, metric, dims in signals:
            assert namespace == "AWS/DynamoDB"
            by_name = dict(dims)
            table, index = tables[by_name["TableName"]], json.loads(by_name["GlobalSecondaryIndexName"])
            watched.append((table, index, metric))
        assert props["Threshold"] == 1 and props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        (expression,) = [q["Expression"] for q in props["Metrics"] if "Expression" in q]
        assert expression.count("FILL(") == len(signals)
    assert expected and sorted(watched) == sorted(expected)  # each index once, in one group


def test_the_table_throttle_alarm_still_watches_the_tables_only(default: Synth) -> None:
    dims = [dict(d) for props in _group(default, "DynamoDbThrottles") for _, _, d in _signals(props)]
    assert len(dims) == 2 * len(TABLES)
    assert all(set(d) == {"TableName"} for d in dims)


# functions and API -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "function", "period"),
    [
        ("ExecutorErrors", "executor", 300),
        ("SweeperErrors", "sweeper", 60),
        ("ApiErrors", "api", 300),
        ("WatcherErrors", "watcher", 60),
    ],
)
def test_function_errors_alarm(default: Synth, name: str, function: str, period: int) -> None:
    props = _alarm(default, name)
    fn = getattr(default.stack.observability.m, function)
    assert _single(props) == (
        "AWS/Lambda",
        "Errors",
        _dimensions([{"Name": "FunctionName", "Value": _ref(default, fn)}]),
    )
    assert props["Statistic"] == "Sum" and props["Period"] == period
    assert props["Threshold"] == 1 and props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_api_5xx_alarm_reads_the_http_api_default_stage(default: Synth) -> None:
    props = _alarm(default, "Api5xx")
    (api_id,) = default.resources("AWS::ApiGatewayV2::Api")
    assert _single(props) == (
        "AWS/ApiGateway",
        "5xx",
        _dimensions([{"Name": "ApiId", "Value": {"Ref": api_id}}, {"Name": "Stage", "Value": "$default"}]),
    )
    assert props["Statistic"] == "Sum" and props["Threshold"] == 1


def test_executor_duration_alarm_is_at_80_percent_of_its_timeout(default: Synth) -> None:
    props = _alarm(default, "ExecutorDurationNearTimeout")
    executor = default.stack.executor.function
    function = default.resources("AWS::Lambda::Function")[_ref(default, executor)["Ref"]]
    assert function["Properties"]["Timeout"] == EXECUTOR_TIMEOUT_SECONDS
    namespace, metric, _ = _single(props)
    assert (namespace, metric) == ("AWS/Lambda", "Duration")
    assert props["Statistic"] == "Maximum" and props["Period"] == 60
    assert props["Threshold"] == 0.8 * EXECUTOR_TIMEOUT_SECONDS * 1000
    assert props["ComparisonOperator"] == "GreaterThanThreshold"


@pytest.mark.parametrize("fixture", ["default", "production"])
def test_concurrency_alarm_is_at_90_percent_of_the_reservation(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    props = _alarm(synth, "ExecutorConcurrencyNearCap")
    executor = synth.stack.executor.function
    assert _single(props) == (
        "AWS/Lambda",
        "ConcurrentExecutions",
        _dimensions([{"Name": "FunctionName", "Value": _ref(synth, executor)}]),
    )
    (reserved,) = [
        f["Properties"]["ReservedConcurrentExecutions"]
        for k, f in synth.resources("AWS::Lambda::Function").items()
        if k == synth.stack.get_logical_id(executor.node.default_child)  # type: ignore[arg-type]
    ]
    assert reserved == synth.stack.sizing.reserved_concurrency
    assert props["Threshold"] == pytest.approx(0.9 * reserved)
    assert props["Statistic"] == "Maximum" and props["ComparisonOperator"] == "GreaterThanThreshold"


def test_the_watchers_failed_batches_alarm_reads_its_on_failure_queue(default: Synth) -> None:
    props = _alarm(default, "WatcherFailedBatches")
    queue = default.stack.watcher.failures
    assert _single(props) == (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        _dimensions(
            [{"Name": "QueueName", "Value": {"Fn::GetAtt": [_ref(default, queue)["Ref"], "QueueName"]}}]
        ),
    )
    assert props["Statistic"] == "Maximum" and props["Period"] == 60
    assert props["Threshold"] == 1 and props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    # The alarm watches the queue the stream mapping gives up to.
    (mapping,) = [
        m["Properties"]
        for m in default.resources("AWS::Lambda::EventSourceMapping").values()
        if "DestinationConfig" in m["Properties"]
    ]
    destination = mapping["DestinationConfig"]["OnFailure"]["Destination"]
    assert destination == {"Fn::GetAtt": [_ref(default, queue)["Ref"], "Arn"]}


def test_oldest_overdue_run_alarm(default: Synth) -> None:
    props = _alarm(default, "OldestOverdueRun")
    assert _single(props) == (
        NAMESPACE,
        "OldestOverdueRunAge",
        _dimensions([{"Name": "service", "Value": "tickwork"}]),
    )
    assert props["Statistic"] == "Maximum" and props["Threshold"] == OVERDUE_RUN_AGE_LIMIT_SECONDS
    # No data (no sweep yet) must not page anyone; SweeperErrors covers a sweeper that fails.
    assert props["TreatMissingData"] == "notBreaching"


# every alarm ------------------------------------------------------------------------------------------


def _runbook_anchors() -> set[str]:
    text = DEPLOY_DOC.read_text(encoding="utf-8")
    section = text.split("## Alarms (runbook)", 1)[1].split("\n## ", 1)[0]
    return {m.lower() for m in re.findall(r"^### (\S+)\s*$", section, flags=re.MULTILINE)}


@pytest.mark.parametrize("fixture", ["default", "production", "emulator"])
def test_every_alarm_notifies_and_links_a_runbook_entry(fixture: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    anchors = _runbook_anchors()
    topic, _ = alarm_topic(synth)
    alarms = synth.resources("AWS::CloudWatch::Alarm")
    assert len(alarms) == len(synth.stack.observability.alarms)
    for logical_id, alarm in alarms.items():
        props = alarm["Properties"]
        assert props["AlarmActions"] == [{"Ref": topic}] == props["OKActions"], logical_id
        (anchor,) = re.findall(r"docs/deploy\.md#([a-z0-9-]+)", props["AlarmDescription"])
        assert anchor in anchors, (logical_id, anchor)


# emulator profile -------------------------------------------------------------------------------------


def test_emulator_alarms_are_single_metric_and_cover_the_same_signals(
    default: Synth, emulator: Synth
) -> None:
    single = emulator.resources("AWS::CloudWatch::Alarm").values()
    assert all("Metrics" not in a["Properties"] for a in single)
    aws = {s for a in default.resources("AWS::CloudWatch::Alarm").values() for s in _signals(a["Properties"])}
    emulated = {_single(a["Properties"]) for a in single}
    assert emulated == aws
    # The new alarms are there under their own names.
    for name in (
        "DynamoDbIndexThrottles",
        "ExecutorErrors",
        "Api5xx",
        "OldestOverdueRun",
        "WatcherErrors",
        "WatcherFailedBatches",
    ):
        assert any(n == name or n.startswith(f"{name}-") for n in emulator.stack.observability.alarms), name
