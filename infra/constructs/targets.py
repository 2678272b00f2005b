"""What the executor may call: AWS targets are user data, so their permissions come from configuration.

`target_arns` (context) lists ARNs or ARN patterns; the service in each ARN decides the one action granted.
Without it, the executor may call only resources named `<prefix>-target-*` in the stack's own account and
region: a naming convention that keeps the role least-privilege and needs no redeploy per job.
HTTP targets need no IAM.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import Aws
from aws_cdk import aws_iam as iam

ACTION_OF_SERVICE: dict[str, str] = {
    "lambda": "lambda:InvokeFunction",
    "sqs": "sqs:SendMessage",
    "sns": "sns:Publish",
    "events": "events:PutEvents",
    "states": "states:StartExecution",
}


def default_target_arns(prefix: str) -> tuple[str, ...]:
    here = f"{Aws.REGION}:{Aws.ACCOUNT_ID}"
    name = f"{prefix}-target-*"
    return (
        f"arn:{Aws.PARTITION}:lambda:{here}:function:{name}",
        f"arn:{Aws.PARTITION}:sqs:{here}:{name}",
        f"arn:{Aws.PARTITION}:sns:{here}:{name}",
        f"arn:{Aws.PARTITION}:events:{here}:event-bus/{name}",
        f"arn:{Aws.PARTITION}:states:{here}:stateMachine:{name}",
    )


def service_of(arn: str) -> str:
    parts = arn.split(":")
    if len(parts) < 6 or parts[0] != "arn" or parts[2] not in ACTION_OF_SERVICE:
        raise ValueError(f"target ARN {arn!r}: expected arn:<partition>:<{'|'.join(ACTION_OF_SERVICE)}>:...")
    return parts[2]


def target_statements(arns: Iterable[str]) -> list[iam.PolicyStatement]:
    """One statement per service, each with its own action only."""
    by_service: dict[str, list[str]] = {}
    for arn in arns:
        service = service_of(arn)
        resources = by_service.setdefault(service, [])
        resources.append(arn)
        if service == "lambda" and arn.count(":") == 6:
            resources.append(f"{arn}:*")  # the function's versions and aliases
    return [
        iam.PolicyStatement(actions=[ACTION_OF_SERVICE[service]], resources=resources)
        for service, resources in sorted(by_service.items())
    ]
