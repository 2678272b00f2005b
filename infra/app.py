"""CDK entry point: `cdk synth` from the repository root (cdk.json runs `python -m infra.app`).

Context parameters are described in docs/deploy.md. Synth needs no AWS credentials. The stack is pinned to
the CLI's environment: the account and the region are each pinned whenever CDK_DEFAULT_ACCOUNT /
CDK_DEFAULT_REGION is set (the CLI sets them from its credentials and profile), so `cdk deploy` cannot land in
an account or region other than the one the CLI resolved; without them (offline synth, tests) that part stays
environment-agnostic.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from aws_cdk import App, Aspects, Environment
from cdk_nag import AwsSolutionsChecks, ServerlessChecks

from infra.config import DeploymentConfig
from infra.nag import suppress
from infra.stack import TickworkStack


def cli_environment() -> Environment:
    """Account and region from the CLI, each pinned when known (empty values count as unknown)."""
    account = os.environ.get("CDK_DEFAULT_ACCOUNT") or None
    region = os.environ.get("CDK_DEFAULT_REGION") or None
    return Environment(account=account, region=region)


def build(context: Mapping[str, Any] | None = None, **stack_kwargs: Any) -> tuple[App, TickworkStack]:
    # Statements with the same actions merge: the executor's policy stays small for any queue count.
    app = App(context={"@aws-cdk/aws-iam:minimizePolicies": True, **(context or {})})
    config = DeploymentConfig.from_context(app.node.try_get_context)
    stack = TickworkStack(
        app, f"Tickwork-{config.prefix}", config=config, env=cli_environment(), **stack_kwargs
    )
    suppress(stack)
    Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    Aspects.of(app).add(ServerlessChecks(verbose=True))
    return app, stack


def main() -> None:
    app, _ = build()
    app.synth()


if __name__ == "__main__":
    main()
