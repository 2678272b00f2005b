"""CDK entry point: `cdk synth` from the repository root (cdk.json runs `python -m infra.app`).

Context parameters are described in docs/deploy.md. Synth needs no AWS credentials: the stack is
environment-agnostic unless CDK_DEFAULT_ACCOUNT / CDK_DEFAULT_REGION are set (the CLI sets them when it has
credentials).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from aws_cdk import App, Aspects, Environment
from cdk_nag import AwsSolutionsChecks

from infra.config import DeploymentConfig
from infra.nag import suppress
from infra.stack import TickworkStack


def build(context: Mapping[str, Any] | None = None, **stack_kwargs: Any) -> tuple[App, TickworkStack]:
    # Statements with the same actions merge: the executor's policy stays small for any queue count.
    app = App(context={"@aws-cdk/aws-iam:minimizePolicies": True, **(context or {})})
    config = DeploymentConfig.from_context(app.node.try_get_context)
    account, region = os.environ.get("CDK_DEFAULT_ACCOUNT"), os.environ.get("CDK_DEFAULT_REGION")
    env = Environment(account=account, region=region) if account and region else None
    stack = TickworkStack(app, f"Tickwork-{config.prefix}", config=config, env=env, **stack_kwargs)
    suppress(stack)
    Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return app, stack


def main() -> None:
    app, _ = build()
    app.synth()


if __name__ == "__main__":
    main()
