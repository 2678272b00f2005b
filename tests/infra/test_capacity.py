"""Capacity, scaling and production defaults: what a default account can hold and what the stack reserves."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Template
from infra.app import build
from infra.config import ConfigError, DeploymentConfig
from infra.constructs.executor import INVOCATIONS_PER_POLLER, size_executor
from infra.constructs.scheduler import shard_groups
from infra.constructs.storage import Storage

from tests.infra.conftest import SKIP_BUNDLING, Synth
from tickwork.resources import JOBS, RUNS, SHARDS, ResourceNames

DEFAULT_ACCOUNT_QUOTA = 1000
UNRESERVED_MINIMUM = 100


def _functions(synth: Synth) -> dict[str, dict[str, Any]]:
    prefix = synth.stack.config.prefix
    return {
        f["Properties"]["FunctionName"].removeprefix(f"{prefix}-"): f["Properties"]
        for f in synth.resources("AWS::Lambda::Function").values()
    }


# capacity ------------------------------------------------------------------------------------------------


def test_the_default_stack_fits_a_default_account(default: Synth) -> None:
    reserved = sum(p["ReservedConcurrentExecutions"] for p in _functions(default).values())
    # Executor (10 queues x 2 pollers x 10, plus the long-call lane's 2 x 10), ticker (16 shard groups of
    # one), sweeper, API, watcher.
    assert reserved == 200 + 20 + 16 + 2 + 20 + 10
    assert reserved + UNRESERVED_MINIMUM <= DEFAULT_ACCOUNT_QUOTA


@pytest.mark.parametrize("fixture", ["default", "production"])
def test_every_function_has_its_own_reservation(fixture: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    config = synth.stack.config
    functions = _functions(synth)
    groups = len(shard_groups(config.shard_count, config.ticker_shards_per_invocation))
    assert functions["ticker"]["ReservedConcurrentExecutions"] == groups
    assert functions["sweeper"]["ReservedConcurrentExecutions"] == config.sweeper_reserved_concurrency == 2
    assert functions["api"]["ReservedConcurrentExecutions"] == config.api_reserved_concurrency == 20
    assert functions["watcher"]["ReservedConcurrentExecutions"] == config.watcher_reserved_concurrency == 10
    assert set(functions) == {"executor", "ticker", "sweeper", "api", "watcher"}


def test_production_states_its_cap_explicitly() -> None:
    with pytest.raises(ConfigError, match="concurrency_cap is required with production=true"):
        DeploymentConfig.from_context({"production": "true"}.get)
    per_environment = {"development": 100, "production": 10_000}
    context: dict[str, Any] = {"production": "true", "concurrency_cap": per_environment}
    assert DeploymentConfig.from_context(context.get).concurrency_cap == 10_000
    assert DeploymentConfig.from_context({"concurrency_cap": per_environment}.get).concurrency_cap == 100
    with pytest.raises(ConfigError, match="no value for production"):
        DeploymentConfig.from_context({"production": True, "concurrency_cap": {"development": 100}}.get)


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"executor_min_pollers": "1"}, "executor_min_pollers=1 is outside"),
        ({"executor_min_pollers": "5", "executor_max_pollers": "4"}, "below executor_min_pollers"),
        ({"jobs_warm_writes": "100"}, "jobs_warm_writes=100 is outside"),
        ({"api_reserved_concurrency": "0"}, "api_reserved_concurrency=0 is outside"),
        ({"watcher_reserved_concurrency": "0"}, "watcher_reserved_concurrency=0 is outside"),
    ],
)
def test_capacity_context_is_validated_by_name(context: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DeploymentConfig.from_context(context.get)


# scaling -------------------------------------------------------------------------------------------------


def test_mappings_are_provisioned_and_the_reservation_holds_every_poller(production: Synth) -> None:
    config = production.stack.config
    mappings = [m["Properties"] for m in production.resources("AWS::Lambda::EventSourceMapping").values()]
    assert all("ScalingConfig" not in m for m in mappings)
    batched = [m for m in mappings if m["BatchSize"] == config.executor_batch_size]
    [long_calls] = [m for m in mappings if m["BatchSize"] == 1]
    # 3,000 runs / 10 = 300 environments over 3 queues: 10 pollers x 10 invocations each; the long-call lane
    # carries a tenth of the cap, 300 runs, one per invocation: 30 pollers.
    assert {
        (m["ProvisionedPollerConfig"]["MinimumPollers"], m["ProvisionedPollerConfig"]["MaximumPollers"])
        for m in batched
    } == {(2, 10)}
    assert long_calls["ProvisionedPollerConfig"] == {"MinimumPollers": 30, "MaximumPollers": 30}
    reserved = _functions(production)["executor"]["ReservedConcurrentExecutions"]
    assert reserved == 300 + 300 == (len(batched) * 10 + 30) * INVOCATIONS_PER_POLLER
    assert (reserved - 300) * config.executor_batch_size >= config.concurrency_cap


def test_explicit_pollers_must_carry_the_cap() -> None:
    sizing = size_executor(10_000, 10, 10, min_pollers=5, max_pollers=20, long_call_runs=200)
    assert (sizing.min_pollers, sizing.max_pollers, sizing.reserved_concurrency) == (5, 20, 2000 + 200)
    assert (sizing.long_call_pollers, sizing.long_call_runs) == (20, 200)
    with pytest.raises(
        ValueError, match="executor_max_pollers=5 on 10 queues carries 500; it must be at least 10"
    ):
        size_executor(10_000, 10, 10, max_pollers=5)


def test_the_long_call_lane_is_a_tenth_of_the_cap_by_default_with_the_poller_floor() -> None:
    assert size_executor(10_000, 10, 10).long_call_runs == 1_000
    assert size_executor(100, 10, 10).long_call_runs == 20  # 2 pollers at least, as every mapping
    with pytest.raises(ValueError, match="long_call_runs=0"):
        size_executor(100, 10, 10, long_call_runs=0)


# warm throughput -----------------------------------------------------------------------------------------


def _storage_template(warm: dict[str, tuple[int | None, int | None]] | None) -> Template:
    stack = Stack(App(), "StorageOnly")
    key = kms.Key(stack, "Key")
    Storage(stack, "Storage", names=ResourceNames("tw"), production=False, warm=warm, encryption_key=key)
    return Template.from_stack(stack)


def test_warm_throughput_on_the_jobs_and_runs_tables_and_their_indexes() -> None:
    template = _storage_template({"jobs": (24_000, 8_000), "runs": (None, 20_000)})
    tables = {
        t["Properties"]["TableName"]: t["Properties"]
        for t in template.find_resources("AWS::DynamoDB::Table").values()
    }
    assert tables["tw-jobs"]["WarmThroughput"] == {"ReadUnitsPerSecond": 24_000, "WriteUnitsPerSecond": 8_000}
    assert tables["tw-runs"]["WarmThroughput"] == {"WriteUnitsPerSecond": 20_000}
    assert "WarmThroughput" not in tables[f"tw-{SHARDS.logical_name}"]
    for name, definition in (("tw-jobs", JOBS), ("tw-runs", RUNS)):
        indexes = tables[name]["GlobalSecondaryIndexes"]
        assert len(indexes) == len(definition.indexes)
        assert all(i["WarmThroughput"] == tables[name]["WarmThroughput"] for i in indexes)


def test_no_warm_throughput_unless_asked(default: Synth) -> None:
    for table in default.resources("AWS::DynamoDB::Table").values():
        assert "WarmThroughput" not in table["Properties"]


def test_warm_throughput_comes_from_context() -> None:
    config = DeploymentConfig.from_context({"runs_warm_writes": "20000", "jobs_warm_reads": 24000}.get)
    assert (config.jobs_warm_reads, config.jobs_warm_writes, config.runs_warm_writes) == (
        24_000,
        None,
        20_000,
    )


def test_production_pre_warms_the_tables_the_burst_writes_from_the_cap(production: Synth) -> None:
    """A new on-demand table starts at 4,000 write units/s; the top of the hour at a cap of N takes about
    3 x N on the jobs table and 2 x N on the runs and slots tables (infra/config.burst_write_units)."""
    cap = production.stack.config.concurrency_cap
    tables = {
        t["Properties"]["TableName"].removeprefix(f"{production.stack.config.prefix}-"): t["Properties"]
        for t in production.resources("AWS::DynamoDB::Table").values()
    }
    for name, per_run in (("jobs", 3), ("runs", 2), ("slots", 2)):
        assert tables[name]["WarmThroughput"]["WriteUnitsPerSecond"] == max(4_000, per_run * cap), name
    assert "WarmThroughput" not in tables[SHARDS.logical_name]


def test_a_named_warm_throughput_wins_over_the_cap() -> None:
    config = DeploymentConfig(production=True, concurrency_cap=10_000, runs_warm_writes=30_000)
    assert config.warm()["runs"] == (None, 30_000)
    assert config.warm()["jobs"] == (None, 30_000) and config.warm()["slots"] == (None, 20_000)
    assert DeploymentConfig(concurrency_cap=10_000).warm()["runs"] == (None, None)  # development: not asked


# recursive loop, tracing ---------------------------------------------------------------------------------


def test_only_the_executor_may_loop_through_its_own_queues(default: Synth) -> None:
    loops = {name: p["RecursiveLoop"] for name, p in _functions(default).items()}
    assert loops == {
        "executor": "Allow",
        "ticker": "Terminate",
        "sweeper": "Terminate",
        "api": "Terminate",
        "watcher": "Terminate",
    }


def test_every_function_is_traced(default: Synth) -> None:
    assert {name: p["TracingConfig"] for name, p in _functions(default).items()} == {
        name: {"Mode": "Active"} for name in ("executor", "ticker", "sweeper", "api", "watcher")
    }


# account and region --------------------------------------------------------------------------------------


def test_account_and_region_are_pinned_from_the_cli_each_when_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDK_DEFAULT_ACCOUNT", raising=False)
    monkeypatch.setenv("CDK_DEFAULT_REGION", "eu-west-1")
    _, stack = build(SKIP_BUNDLING)
    assert stack.region == "eu-west-1"
    assert stack.account.startswith("${Token[")  # unknown: stays environment-agnostic
    monkeypatch.setenv("CDK_DEFAULT_ACCOUNT", "123456789012")
    _, stack = build(SKIP_BUNDLING)
    assert (stack.account, stack.region) == ("123456789012", "eu-west-1")
