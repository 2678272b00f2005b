"""The infra's pure parts, without a synth: sizing, fan-out, configuration, bundling, target grants."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
pytest.importorskip("aws_cdk", reason="the infra extra is not installed")

from infra.config import ConfigError, DeploymentConfig
from infra.constructs.bundling import PipLocalBundler, docker_command, requirements
from infra.constructs.executor import ExecutorSizing, size_executor
from infra.constructs.scheduler import shard_groups
from infra.constructs.targets import service_of, target_statements

# sizing ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cap", "queues", "batch", "expected"),
    [
        # (batch, min pollers, max pollers, reserved, concurrent runs, long-call pollers): the long-call lane
        # carries a tenth of the cap, one run per invocation, at least 2 pollers (20 runs).
        pytest.param(
            10_000,
            10,
            10,
            ExecutorSizing(10, 2, 10, 1000 + 1000, 10_000 + 1000, 100),
            id="10k runs: 10 pollers a queue",
        ),
        pytest.param(3000, 3, 10, ExecutorSizing(10, 2, 10, 300 + 300, 3000 + 300, 30), id="even split"),
        pytest.param(
            100_000, 10, 10, ExecutorSizing(10, 2, 100, 10_000 + 10_000, 110_000, 1000), id="100k runs"
        ),
        pytest.param(
            10,
            10,
            10,
            ExecutorSizing(10, 2, 2, 200 + 20, 2000 + 20, 2),
            id="tiny cap: the poller minimum is 2",
        ),
        pytest.param(
            1000, 3, 1, ExecutorSizing(1, 2, 34, 1020 + 100, 1020 + 100, 10), id="uneven split rounds up"
        ),
    ],
)
def test_executor_sizing(cap: int, queues: int, batch: int, expected: ExecutorSizing) -> None:
    assert size_executor(cap, queues, batch) == expected


def test_sizing_refuses_more_than_a_mapping_can_carry() -> None:
    with pytest.raises(ValueError, match="queue_count must be at least 5"):
        size_executor(100_000, 1, 1)


# fan-out ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("shards", "per"), [(16, 4), (10, 3), (1, 4), (64, 1), (5, 64)])
def test_shard_groups_cover_every_shard_once(shards: int, per: int) -> None:
    groups = shard_groups(shards, per)
    assert [s for g in groups for s in g] == list(range(shards))
    assert all(1 <= len(g) <= per for g in groups)


# configuration ---------------------------------------------------------------------------------------


def test_defaults_are_a_small_development_stack() -> None:
    config = DeploymentConfig.from_context(lambda _name: None)
    assert (config.prefix, config.shard_count, config.queue_count, config.concurrency_cap) == (
        "tickwork",
        16,
        10,
        100,
    )
    assert not config.production and config.alarm_email is None and config.jwt_issuer is None


def test_command_line_strings_are_parsed() -> None:
    context: dict[str, Any] = {
        "production": "true",
        "concurrency_cap": "5000",  # production has no default cap
        "shard_count": "32",
        "jwt_issuer": "https://id.example.com",
        "jwt_audience": "a, b",
        "target_arns": "arn:aws:sns:us-east-1:123456789012:x",
    }
    config = DeploymentConfig.from_context(context.get)
    assert config.production is True
    assert config.shard_count == 32
    assert config.jwt_audience == ("a", "b")
    assert config.target_arns == ("arn:aws:sns:us-east-1:123456789012:x",)


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"production": "maybe"}, "production"),
        ({"shard_count": "0"}, "shard_count=0 is outside"),
        ({"queue_count": "ten"}, "queue_count"),
        ({"prefix": "Tick Work"}, "prefix"),
        ({"jwt_issuer": "https://id.example.com"}, "jwt_audience"),
        ({"alarm_email": "nobody"}, "alarm_email"),
    ],
)
def test_bad_context_is_refused_by_name(context: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DeploymentConfig.from_context(context.get)


# bundling --------------------------------------------------------------------------------------------


def test_requirements_are_the_projects_pinned_to_what_is_installed() -> None:
    pinned = requirements()
    names = [r.split("==")[0] for r in pinned]
    # croniter is the schedule tests' oracle (the dev extra), not a runtime dependency: it is not bundled.
    assert names == ["boto3", "aws-lambda-powertools[parser,tracer]", "pydantic", "orjson"]
    assert all("==" in r for r in pinned)


def test_no_bundled_module_imports_croniter() -> None:
    """The bundle leaves croniter out, so the code it carries must not import it."""
    functions = Path(__file__).resolve().parents[2] / "functions"
    sources = sorted(functions.rglob("*.py"))
    assert functions / "tickwork" / "domain" / "schedule.py" in sources
    importers = []
    for source in sources:
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            if any(module.partition(".")[0] == "croniter" for module in modules):
                importers.append(str(source.relative_to(functions)))
    assert importers == []


def test_pip_targets_the_lambda_platform_with_wheels_only(tmp_path: Path) -> None:
    bundler = PipLocalBundler(tmp_path, ["croniter==7.0.0", "pydantic==2.9.0"])
    command = bundler.pip_command("/out")
    assert command[:4] == [sys.executable, "-m", "pip", "install"]
    joined = " ".join(command)
    for flag in (
        "--target /out",
        "--platform manylinux2014_aarch64",
        "--implementation cp",
        "--python-version 3.12",
        "--only-binary=:all:",
        "--no-compile",
    ):
        assert flag in joined
    assert command[-2:] == ["croniter==7.0.0", "pydantic==2.9.0"]


def test_sources_are_copied_without_bytecode(tmp_path: Path) -> None:
    source = tmp_path / "functions"
    (source / "tickwork" / "handlers" / "__pycache__").mkdir(parents=True)
    (source / "tickwork" / "__init__.py").write_text("")
    (source / "tickwork" / "handlers" / "ticker.py").write_text("handler = None\n")
    (source / "tickwork" / "handlers" / "__pycache__" / "ticker.cpython-311.pyc").write_bytes(b"\0")
    (source / "tickwork.egg-info").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    PipLocalBundler(source, []).copy_sources(str(out))
    copied = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert copied == ["tickwork", "tickwork/__init__.py", "tickwork/handlers", "tickwork/handlers/ticker.py"]


def test_docker_fallback_installs_the_same_pins() -> None:
    command = docker_command(["croniter==7.0.0"])
    assert command[:2] == ["bash", "-c"]
    assert "'croniter==7.0.0'" in command[2] and "/asset-output" in command[2]


# target grants ---------------------------------------------------------------------------------------


def test_each_target_service_gets_its_one_action() -> None:
    statements = target_statements(
        [
            "arn:aws:lambda:eu-west-1:123456789012:function:f",
            "arn:aws:lambda:eu-west-1:123456789012:function:g:live",
            "arn:aws:states:eu-west-1:123456789012:stateMachine:m",
        ]
    )
    rendered = {
        tuple(
            s.to_json()["Action"] if isinstance(s.to_json()["Action"], list) else [s.to_json()["Action"]]
        ): s.to_json()["Resource"]
        for s in statements
    }
    assert rendered == {
        ("lambda:InvokeFunction",): [
            "arn:aws:lambda:eu-west-1:123456789012:function:f",
            "arn:aws:lambda:eu-west-1:123456789012:function:f:*",
            "arn:aws:lambda:eu-west-1:123456789012:function:g:live",
        ],
        ("states:StartExecution",): "arn:aws:states:eu-west-1:123456789012:stateMachine:m",
        # A tracked run follows the machine's executions to their end.
        ("states:DescribeExecution",): "arn:aws:states:eu-west-1:123456789012:execution:m:*",
    }


@pytest.mark.parametrize(
    "arn", ["*", "arn:aws:dynamodb:us-east-1:123456789012:table/jobs", "arn:aws:s3:::bucket"]
)
def test_other_services_are_refused(arn: str) -> None:
    with pytest.raises(ValueError, match="target ARN"):
        service_of(arn)


def test_ecs_targets_run_and_describe_tasks_and_pass_their_roles_to_ecs_only() -> None:
    statements = target_statements(
        [
            "arn:aws:ecs:eu-west-1:123456789012:task-definition/nightly-*",
            "arn:aws:ecs:eu-west-1:123456789012:task/batch/*",
            "arn:aws:iam::123456789012:role/nightly-*",
        ]
    )
    rendered = {
        s.to_json()["Action"]: (s.to_json()["Resource"], s.to_json().get("Condition")) for s in statements
    }
    assert rendered == {
        "ecs:RunTask": ("arn:aws:ecs:eu-west-1:123456789012:task-definition/nightly-*", None),
        "ecs:DescribeTasks": ("arn:aws:ecs:eu-west-1:123456789012:task/batch/*", None),
        "iam:PassRole": (
            "arn:aws:iam::123456789012:role/nightly-*",
            {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}},
        ),
    }


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:ecs:us-east-1:123456789012:cluster/batch",  # a cluster: name its tasks, task/batch/*
        "arn:aws:iam::123456789012:user/alice",
        "arn:aws:lambda:us-east-1:123456789012:layer:x",
        "arn:aws:states:us-east-1:123456789012:activity:x",
    ],
)
def test_resource_types_that_are_no_target_are_refused(arn: str) -> None:
    with pytest.raises(ValueError, match="is not a target resource"):
        target_statements([arn])
