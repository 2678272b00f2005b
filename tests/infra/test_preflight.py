"""`python -m infra.preflight`: capacity against the account's Lambda quota, and prefix collisions.

DynamoDB is moto's. moto 5.2.5 does not implement Lambda's GetAccountSettings (it answers 404 "Not yet
implemented"), and its CloudFormation backend needs `openapi_spec_validator` (not installed), so the quota and
the stack's resources come from botocore Stubbers, as an account would answer them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from infra.config import DeploymentConfig
from infra.preflight import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_REFUSED,
    FUNCTIONS,
    check_tables,
    clients,
    read_context,
    reservations,
    run,
)

from tests.infra.conftest import Synth
from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.resources import TABLES, ResourceNames

REGION = "us-east-1"


@pytest.fixture
def cdk_json(tmp_path: Path) -> Path:
    """The repository's cdk.json context, as the CLI would read it."""
    path = tmp_path / "cdk.json"
    path.write_text(json.dumps({"context": json.loads(Path("cdk.json").read_text())["context"]}))
    return path


def _lambda(quota: int, unreserved: int, own: dict[str, int] | None = None) -> Iterator[Any]:
    client = boto3.client("lambda", region_name=REGION)
    with Stubber(client) as stub:
        stub.add_response(
            "get_account_settings",
            {
                "AccountLimit": {
                    "ConcurrentExecutions": quota,
                    "UnreservedConcurrentExecutions": unreserved,
                },
                "AccountUsage": {},
            },
        )
        for name in FUNCTIONS:
            if own and name in own:
                stub.add_response(
                    "get_function_concurrency",
                    {"ReservedConcurrentExecutions": own[name]},
                    {"FunctionName": f"tickwork-{name}"},
                )
            else:
                stub.add_client_error(
                    "get_function_concurrency", "ResourceNotFoundException", http_status_code=404
                )
        yield client


class _CloudFormation:
    """CloudFormation as an account answers for `Tickwork-tickwork`: holding `tables` and reporting
    `layout` in its outputs (None: no such stack). Records what it was asked."""

    def __init__(self, tables: list[str] | None, layout: tuple[int, int] | None = None) -> None:
        self.tables = tables
        self.layout = layout
        self.asked: list[str] = []

    def _stack(self, operation: str, name: str) -> None:
        self.asked.append(operation)
        if self.tables is None or name != "Tickwork-tickwork":
            raise ClientError(
                {"Error": {"Code": "ValidationError", "Message": f"Stack with id {name} does not exist"}},
                operation,
            )

    def describe_stack_resources(self, StackName: str) -> dict[str, Any]:
        self._stack("DescribeStackResources", StackName)
        resources = [
            {"LogicalResourceId": f"T{i}", "PhysicalResourceId": name, "ResourceType": "AWS::DynamoDB::Table"}
            for i, name in enumerate(self.tables or [])
        ]
        return {"StackResources": resources}

    def describe_stacks(self, StackName: str) -> dict[str, Any]:
        self._stack("DescribeStacks", StackName)
        outputs = []
        if self.layout is not None:
            outputs = [
                {"OutputKey": "ShardCount", "OutputValue": str(self.layout[0])},
                {"OutputKey": "QueueCount", "OutputValue": str(self.layout[1])},
            ]
        return {"Stacks": [{"StackName": StackName, "Outputs": outputs}]}


def _run(
    argv: list[str],
    cdk_json: Path,
    lambda_client: Any,
    stack_tables: list[str] | None = None,
    cloudformation: _CloudFormation | None = None,
) -> tuple[int, str]:
    lines: list[str] = []
    stack = cloudformation or _CloudFormation(stack_tables)

    def make(_region: str | None) -> tuple[Any, Any, Any]:
        return lambda_client, boto3.client("dynamodb", region_name=REGION), stack

    code = run(argv, cdk_json=cdk_json, make_clients=make, out=lines.append)
    return code, "\n".join(lines)


# capacity ------------------------------------------------------------------------------------------------


def test_the_development_default_fits_a_default_account(moto: None, cdk_json: Path) -> None:
    for client in _lambda(quota=1000, unreserved=1000):
        code, output = _run([], cdk_json, client)
    assert code == EXIT_OK, output
    # executor 220 (10 queues x 2 pollers x 10, the long-call lane's 2 x 10) + ticker 16 groups + sweeper 2 +
    # API 20 + watcher 10
    assert "reserves 268 concurrent executions" in output
    assert "+ watcher 10" in output


def test_a_production_cap_that_cannot_fit_is_refused_with_the_quota_to_ask_for(
    moto: None, cdk_json: Path
) -> None:
    for client in _lambda(quota=1000, unreserved=1000):
        code, output = _run(["-c", "production=true", "-c", "concurrency_cap=10000"], cdk_json, client)
    assert code == EXIT_REFUSED
    # 1,000 + 1,000 (the long-call lane: a tenth of the cap, one per invocation) + 16 + 2 + 20 + 10 = 2,048
    # reserved, 100 unreserved: 2,148
    assert "reserves 2048 concurrent executions" in output
    assert "quota of at least 2148" in output and "L-B99A9384" in output


def test_an_update_counts_what_the_stack_already_reserves(moto: None, cdk_json: Path) -> None:
    own = {"executor": 220, "ticker": 16, "sweeper": 2, "api": 20, "watcher": 10}
    for client in _lambda(quota=400, unreserved=132, own=own):  # 400 - 268 already reserved by this stack
        code, output = _run([], cdk_json, client)
    assert code == EXIT_OK, output


def test_other_reservations_in_the_account_count(moto: None, cdk_json: Path) -> None:
    for client in _lambda(quota=1000, unreserved=300):  # 700 reserved by other functions
        code, output = _run([], cdk_json, client)
    assert code == EXIT_REFUSED
    assert "quota of at least 1068" in output  # 1,000 + 268 - (300 - 100)


def test_headroom_for_lambda_targets_is_kept_unreserved(moto: None, cdk_json: Path) -> None:
    for client in _lambda(quota=1000, unreserved=1000):
        code, output = _run(["--target-headroom", "700"], cdk_json, client)
    assert code == EXIT_REFUSED
    assert "+ 700 for Lambda targets" in output


def test_moto_has_no_account_settings_so_the_check_says_it_could_not_run(moto: None, cdk_json: Path) -> None:
    code, output = _run([], cdk_json, boto3.client("lambda", region_name=REGION))
    assert code == EXIT_ERROR
    assert "could not check the account" in output and "GetAccountSettings" in output


def test_production_without_an_explicit_cap_is_refused(cdk_json: Path, tmp_path: Path) -> None:
    code, output = _run(["-c", "production=true"], cdk_json, lambda_client=None)
    assert code == EXIT_REFUSED  # cdk.json's mapping has only a development value
    assert "concurrency_cap has no value for production: pass -c concurrency_cap=" in output
    bare = tmp_path / "bare.json"
    bare.write_text("{}")
    code, output = _run(["-c", "production=true"], bare, lambda_client=None)
    assert code == EXIT_REFUSED
    assert "concurrency_cap is required with production=true" in output


def test_reservations_match_what_the_stack_reserves() -> None:
    config = DeploymentConfig(concurrency_cap=10_000, shard_count=10, ticker_shards_per_invocation=3)
    wanted = reservations(config)
    assert (wanted.executor, wanted.ticker, wanted.sweeper, wanted.api, wanted.watcher) == (
        1000 + 1000,
        4,
        2,
        20,
        10,
    )


@pytest.mark.parametrize("fixture", ["default", "production"])
def test_preflight_counts_every_function_the_stack_reserves_for(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    prefix = synth.stack.config.prefix
    reserved = {
        f["Properties"]["FunctionName"].removeprefix(f"{prefix}-"): f["Properties"][
            "ReservedConcurrentExecutions"
        ]
        for f in synth.resources("AWS::Lambda::Function").values()
    }
    wanted = reservations(synth.stack.config)
    assert set(reserved) == set(FUNCTIONS)
    assert reserved == {name: getattr(wanted, name) for name in FUNCTIONS}
    assert wanted.total == sum(reserved.values())


def test_context_is_cdk_json_overridden_by_the_command_line(cdk_json: Path) -> None:
    context = read_context(["prefix=tw-prod", "concurrency_cap=5000"], cdk_json)
    assert context["prefix"] == "tw-prod" and context["concurrency_cap"] == "5000"
    assert context["shard_count"] == 16  # from cdk.json
    assert DeploymentConfig.from_context(read_context([], cdk_json).get).concurrency_cap == 100


def test_clients_follow_aws_endpoint_url(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
    for client in clients(REGION):
        assert client.meta.endpoint_url == "http://127.0.0.1:4566"


# prefix collision ----------------------------------------------------------------------------------------


def test_tables_of_the_prefix_outside_its_stack_are_refused(moto: None, cdk_json: Path) -> None:
    ensure_tables(boto3.client("dynamodb", region_name=REGION), ResourceNames(prefix="tickwork"))
    for client in _lambda(quota=1000, unreserved=1000):
        code, output = _run([], cdk_json, client)
    assert code == EXIT_REFUSED
    assert "tickwork-jobs" in output and "no such stack exists" in output and "-c prefix=" in output


def test_tables_of_the_prefix_in_its_own_stack_pass(moto: None, cdk_json: Path) -> None:
    names = ResourceNames(prefix="tickwork")
    ensure_tables(boto3.client("dynamodb", region_name=REGION), names)
    for client in _lambda(quota=1000, unreserved=1000):
        code, output = _run([], cdk_json, client, stack_tables=[names.table(t) for t in TABLES])
    assert code == EXIT_OK, output


def test_tables_of_the_prefix_in_another_stack_are_refused(moto: None, cdk_json: Path) -> None:
    names = ResourceNames(prefix="tickwork")
    ensure_tables(boto3.client("dynamodb", region_name=REGION), names)
    for client in _lambda(quota=1000, unreserved=1000):
        # The stack exists, but holds other tables (e.g. another prefix's stack renamed into this one).
        code, output = _run([], cdk_json, client, stack_tables=["other-jobs"])
    assert code == EXIT_REFUSED
    assert "tickwork-jobs" in output and "not resources of Tickwork-tickwork" in output


def test_no_tables_no_question_to_cloudformation_about_them(moto: None, cdk_json: Path) -> None:
    stack = _CloudFormation(None)
    for client in _lambda(quota=1000, unreserved=1000):
        code, output = _run([], cdk_json, client, cloudformation=stack)
    assert code == EXIT_OK, output
    assert stack.asked == ["DescribeStacks"]  # the layout's question only


# layout ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "deployed", "refused"),
    [
        ([], (16, 10), []),  # the same layout
        (["-c", "shard_count=32", "-c", "queue_count=12"], (16, 10), []),  # grown
        (["-c", "shard_count=8"], (16, 10), ["shard_count 8 is below the deployed 16", "shards 8..15"]),
        (["-c", "queue_count=4"], (16, 10), ["queue_count 4 is below the deployed 10", "queues 4..9"]),
    ],
)
def test_a_deploy_may_add_shards_and_queues_but_never_remove_them(
    moto: None, cdk_json: Path, context: list[str], deployed: tuple[int, int], refused: list[str]
) -> None:
    stack = _CloudFormation([], layout=deployed)
    for client in _lambda(quota=1000, unreserved=1000):
        code, output = _run(context, cdk_json, client, cloudformation=stack)
    assert code == (EXIT_REFUSED if refused else EXIT_OK), output
    for words in refused:
        assert words in output
    assert ("only be added" in output) == bool(refused)


def test_a_stack_without_the_layout_outputs_is_not_refused(moto: None, cdk_json: Path) -> None:
    # Deployed before the outputs existed: nothing to compare with (this deploy adds them).
    for client in _lambda(quota=1000, unreserved=1000):
        code, output = _run(["-c", "shard_count=4"], cdk_json, client, cloudformation=_CloudFormation([]))
    assert code == EXIT_OK, output


def test_warm_throughput_above_the_accounts_per_table_maximum_is_refused(moto: None) -> None:
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    maximum = dynamodb.describe_limits()["TableMaxWriteCapacityUnits"]  # moto: 10,000
    big = DeploymentConfig(production=True, concurrency_cap=maximum)  # pre-warms 2-3 x cap writes

    problems = check_tables(big, dynamodb)

    assert len(problems) == 3  # jobs, runs, slots
    assert all(f"above the account's per-table maximum of {maximum}" in p for p in problems)
    assert any("or lower concurrency_cap" in p for p in problems)  # the slots table has no context key
    assert check_tables(DeploymentConfig(production=True, concurrency_cap=maximum // 3), dynamodb) == []
    assert check_tables(DeploymentConfig(concurrency_cap=maximum * 10), dynamodb) == []  # development
