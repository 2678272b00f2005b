"""Pre-deploy check: does this deployment fit the account, and is its prefix free?

    python -m infra.preflight [-c name=value ...]      # the same -c values as `cdk deploy`

Context is read as the app reads it: `cdk.json`'s `context`, overridden by `-c`/`--context` (strings, parsed
by `DeploymentConfig.from_context`). AWS is reached with the default boto3 credentials and region; the
endpoint follows `AWS_ENDPOINT_URL` (botocore reads it; passed explicitly here too), so the check runs against
an emulator as well.

Two refusals, exit code 2, each with what to do:
- **Capacity.** The stack reserves concurrency for the executor (`size_executor`), ticker, sweeper, API and
  watcher. Lambda refuses a reservation that leaves fewer than 100 concurrent executions unreserved, and
  CloudFormation then rolls the deploy back at that function. The check reads `GetAccountSettings`, adds back
  what this stack's functions already reserve (an update replaces them), and names the account quota to ask
  for.
- **Prefix collision.** A table `<prefix>-jobs` (etc.) that exists but is not a resource of the CloudFormation
  stack `Tickwork-<prefix>` belongs to someone else: the deploy would fail on it (or, with a second stack,
  two deployments would share one name space). Choose another prefix.

Exit code 1: the check itself could not run (no credentials, an API error); 0: the deploy fits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from infra.config import ConfigError, DeploymentConfig
from infra.constructs.executor import executor_sizing
from infra.constructs.scheduler import shard_groups
from tickwork.domain.layout import Layout, shrinking
from tickwork.resources import TABLES, ResourceNames

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_REFUSED = 2

UNRESERVED_MINIMUM = 100  # Lambda keeps this many concurrent executions unreserved per account and region
CONCURRENCY_QUOTA_CODE = "L-B99A9384"  # Service Quotas: AWS Lambda "Concurrent executions"
FUNCTIONS = ("executor", "ticker", "sweeper", "api", "watcher")


@dataclass(frozen=True, slots=True)
class Reservations:
    """The reserved concurrency the stack asks for, per function."""

    executor: int
    ticker: int
    sweeper: int
    api: int
    watcher: int

    @property
    def total(self) -> int:
        return self.executor + self.ticker + self.sweeper + self.api + self.watcher

    def describe(self) -> str:
        return (
            f"executor {self.executor} + ticker {self.ticker} + sweeper {self.sweeper} + API {self.api} "
            f"+ watcher {self.watcher}"
        )


def reservations(config: DeploymentConfig) -> Reservations:
    """What the stack reserves: the same sizing functions the constructs use."""
    sizing = executor_sizing(config)
    groups = len(shard_groups(config.shard_count, config.ticker_shards_per_invocation))
    return Reservations(
        executor=sizing.reserved_concurrency,
        ticker=config.ticker_reserved_concurrency or groups,
        sweeper=config.sweeper_reserved_concurrency,
        api=config.api_reserved_concurrency,
        watcher=config.watcher_reserved_concurrency,
    )


def read_context(args: Sequence[str], cdk_json: Path) -> dict[str, Any]:
    """cdk.json's context, then each `name=value` of `args` over it (as strings, like the CLI passes them)."""
    context: dict[str, Any] = {}
    if cdk_json.exists():
        context.update(json.loads(cdk_json.read_text()).get("context", {}))
    for item in args:
        name, separator, value = item.partition("=")
        if not separator or not name.strip():
            raise ConfigError(f"-c {item!r} must be name=value")
        context[name.strip()] = value
    return context


def _own_reservations(lambda_client: Any, prefix: str) -> int:
    """What this stack's functions reserve today (0 for a first deploy)."""
    held = 0
    for name in FUNCTIONS:
        try:
            answer = lambda_client.get_function_concurrency(FunctionName=f"{prefix}-{name}")
        except ClientError as error:
            if error.response["Error"]["Code"] == "ResourceNotFoundException":
                continue
            raise
        held += int(answer.get("ReservedConcurrentExecutions") or 0)
    return held


def check_capacity(config: DeploymentConfig, lambda_client: Any, target_headroom: int = 0) -> list[str]:
    """Refusals (empty: fits). `target_headroom`: unreserved concurrency Lambda targets of jobs need."""
    limits = lambda_client.get_account_settings()["AccountLimit"]
    quota = int(limits["ConcurrentExecutions"])
    unreserved = int(limits["UnreservedConcurrentExecutions"])
    own = _own_reservations(lambda_client, config.prefix)
    wanted = reservations(config)
    keep = UNRESERVED_MINIMUM + target_headroom
    available = unreserved + own - keep
    if wanted.total <= available:
        return []
    ask = quota + wanted.total - available
    return [
        f"concurrency: Tickwork-{config.prefix} reserves {wanted.total} concurrent executions "
        f"({wanted.describe()}; concurrency_cap={config.concurrency_cap} in batches of "
        f"{config.executor_batch_size} over {config.queue_count} queues), but the account's quota is {quota} "
        f"with {unreserved} unreserved ({own} of them held by this stack today) and {keep} must stay "
        "unreserved "
        f"(Lambda's {UNRESERVED_MINIMUM}"
        + (f" + {target_headroom} for Lambda targets)" if target_headroom else ")")
        + f". Ask for a Lambda concurrent executions quota of at least {ask} (Service Quotas, code "
        f"{CONCURRENCY_QUOTA_CODE}), or lower concurrency_cap."
    ]


def check_tables(config: DeploymentConfig, dynamodb: Any) -> list[str]:
    """Refusals (empty: fits): a table's warm throughput above what the account lets one table have."""
    limits = dynamodb.describe_limits()
    most = {
        "reads": int(limits["TableMaxReadCapacityUnits"]),
        "writes": int(limits["TableMaxWriteCapacityUnits"]),
    }
    problems = []
    for table, (reads, writes) in config.warm().items():
        for kind, wanted in (("reads", reads), ("writes", writes)):
            if wanted is not None and wanted > most[kind]:
                lower = f"set {table}_warm_{kind} lower" if table != "slots" else "lower concurrency_cap"
                problems.append(
                    f"dynamodb: the {table} table is pre-warmed to {wanted} {kind}/s (concurrency_cap="
                    f"{config.concurrency_cap}), above the account's per-table maximum of {most[kind]} "
                    f"(DescribeLimits: TableMax{kind.title()[:-1]}CapacityUnits). Ask for a higher per-table "
                    f"{kind[:-1]} throughput quota (Service Quotas, DynamoDB), or {lower}."
                )
    return problems


def _stack_tables(cloudformation: Any, stack_name: str) -> set[str] | None:
    """Physical table names of the stack's resources; None if the stack does not exist."""
    try:
        answer = cloudformation.describe_stack_resources(StackName=stack_name)
    except ClientError as error:
        if error.response["Error"]["Code"] == "ValidationError":  # "Stack with id ... does not exist"
            return None
        raise
    return {
        str(r.get("PhysicalResourceId"))
        for r in answer["StackResources"]
        if r.get("ResourceType") == "AWS::DynamoDB::Table"
    }


def check_prefix(config: DeploymentConfig, dynamodb: Any, cloudformation: Any) -> list[str]:
    """Refusals for tables of this prefix that exist outside the stack `Tickwork-<prefix>`."""
    names = ResourceNames(prefix=config.prefix)
    stack_name = f"Tickwork-{config.prefix}"
    existing = []
    for definition in TABLES:
        name = names.table(definition)
        try:
            dynamodb.describe_table(TableName=name)
        except ClientError as error:
            if error.response["Error"]["Code"] == "ResourceNotFoundException":
                continue
            raise
        existing.append(name)
    if not existing:
        return []
    owned = _stack_tables(cloudformation, stack_name)
    foreign = [name for name in existing if owned is None or name not in owned]
    if not foreign:
        return []
    whose = "no such stack exists" if owned is None else f"they are not resources of {stack_name}"
    return [
        f"prefix: table(s) {', '.join(foreign)} already exist and {whose}: another deployment (or a local "
        f"bootstrap) uses prefix {config.prefix!r}. Deploy with another prefix (-c prefix=<name>), or delete "
        "those tables if they are really unused."
    ]


def deployed_layout(config: DeploymentConfig, cloudformation: Any) -> Layout | None:
    """The shard and dispatch-queue counts of the deployed stack `Tickwork-<prefix>` (its outputs
    ShardCount and QueueCount); None if there is no such stack, or it predates those outputs."""
    try:
        answer = cloudformation.describe_stacks(StackName=f"Tickwork-{config.prefix}")
    except ClientError as error:
        if error.response["Error"]["Code"] == "ValidationError":  # "Stack with id ... does not exist"
            return None
        raise
    outputs = {o["OutputKey"]: o["OutputValue"] for s in answer["Stacks"] for o in s.get("Outputs", [])}
    if "ShardCount" not in outputs or "QueueCount" not in outputs:
        return None
    return Layout(shard_count=int(outputs["ShardCount"]), queue_count=int(outputs["QueueCount"]))


def check_layout(config: DeploymentConfig, cloudformation: Any) -> list[str]:
    """Refusals for a deploy that would lower the deployed shard or queue count (domain/layout.py)."""
    wanted = Layout(shard_count=config.shard_count, queue_count=config.queue_count)
    return [f"layout: {problem}" for problem in shrinking(deployed_layout(config, cloudformation), wanted)]


def clients(region: str | None = None) -> tuple[Any, Any, Any]:
    """Lambda, DynamoDB and CloudFormation clients; the endpoint follows AWS_ENDPOINT_URL when set."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    session = boto3.session.Session(region_name=region)
    return (
        session.client("lambda", endpoint_url=endpoint),
        session.client("dynamodb", endpoint_url=endpoint),
        session.client("cloudformation", endpoint_url=endpoint),
    )


def run(
    argv: Sequence[str],
    *,
    cdk_json: Path = Path("cdk.json"),
    make_clients: Callable[[str | None], tuple[Any, Any, Any]] = clients,
    out: Callable[[str], None] = print,
) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.preflight", description=__doc__.split("\n")[0])
    parser.add_argument("-c", "--context", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--region", default=None, help="default: the AWS CLI/boto3 region")
    parser.add_argument(
        "--target-headroom",
        type=int,
        default=0,
        help="unreserved concurrency to keep for Lambda targets of jobs (on top of Lambda's 100)",
    )
    args = parser.parse_args(argv)
    try:
        context: Mapping[str, Any] = read_context(args.context, cdk_json)
        config = DeploymentConfig.from_context(context.get)
        wanted = reservations(config)
    except (ConfigError, ValueError) as error:
        out(f"preflight: refused: {error}")
        return EXIT_REFUSED
    try:
        lambda_client, dynamodb, cloudformation = make_clients(args.region)
        problems = [
            *check_capacity(config, lambda_client, args.target_headroom),
            *check_tables(config, dynamodb),
            *check_prefix(config, dynamodb, cloudformation),
            *check_layout(config, cloudformation),
        ]
    except (ClientError, BotoCoreError) as error:
        out(f"preflight: could not check the account: {error}")
        return EXIT_ERROR
    for problem in problems:
        out(f"preflight: refused: {problem}")
    if problems:
        return EXIT_REFUSED
    out(
        f"preflight: ok: Tickwork-{config.prefix} ({config.environment}, "
        f"concurrency_cap={config.concurrency_cap}) reserves {wanted.total} concurrent executions "
        f"({wanted.describe()}); its prefix is free or its own"
    )
    return EXIT_OK


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
