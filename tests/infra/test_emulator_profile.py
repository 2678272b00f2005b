"""The emulator profile (`-c emulator=true`, used by `make e2e-aws`): MiniStack refuses metric-math alarms, so
every alarm is a single metric, and every signal the AWS profile alarms on is still alarmed on."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.conftest import Synth, _synth


@pytest.fixture(scope="module")
def emulator() -> Synth:
    return _synth({"emulator": "true"})


def _alarms(synth: Synth) -> dict[str, dict[str, Any]]:
    return {k: r["Properties"] for k, r in synth.resources("AWS::CloudWatch::Alarm").items()}


def test_no_alarm_uses_metric_math(emulator: Synth) -> None:
    alarms = _alarms(emulator)
    assert alarms
    assert [k for k, p in alarms.items() if "Metrics" in p] == []
    assert all("MetricName" in p and "Namespace" in p for p in alarms.values())


def test_every_aws_alarm_has_its_single_metric_counterparts(default: Synth, emulator: Synth) -> None:
    assert any("Metrics" in p for p in _alarms(default).values()), "the AWS profile uses metric math"
    aws = {name for name in default.stack.observability.alarms}
    single = set(emulator.stack.observability.alarms)
    for name in aws:
        assert name in single or any(s.startswith(f"{name}-") for s in single), name
    inputs = {(p["Namespace"], p["MetricName"], str(p.get("Dimensions"))) for p in _alarms(emulator).values()}
    # The math alarms' inputs: DLQ depth, per-queue age, each function's throttles, each table's throttles.
    assert ("AWS/SQS", "ApproximateNumberOfMessagesVisible") in {(n, m) for n, m, _ in inputs}
    assert sum(1 for n, m, _ in inputs if m == "Throttles") == len(default.stack.factory.functions)


def test_only_the_alarms_differ(default: Synth, emulator: Synth) -> None:
    for type_name in ("AWS::Lambda::Function", "AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::IAM::Policy"):
        assert len(default.resources(type_name)) == len(emulator.resources(type_name)), type_name
