"""What the executor may call: AWS targets are user data, so their permissions come from configuration.

`target_arns` (context) lists ARNs or ARN patterns; the service and resource type in each ARN decide the one
action granted (`action_of`). A state machine's entry also lets the executor describe that machine's
executions (a tracked run follows its execution to its end). Without `target_arns`, the executor may use only
resources named `<prefix>-target-*` in the stack's own account and region: a naming convention that keeps the
role least-privilege and needs no redeploy per job. For an ECS target that means the task definition family,
the cluster (its tasks are described) and the task's roles (passed to ECS) are all named `<prefix>-target-*`.
HTTP targets need no IAM.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import Aws
from aws_cdk import aws_iam as iam

# (IAM service prefix, resource type) -> the one action a target ARN of that type is granted. The resource
# type is the ARN's resource part up to its first ':' or '/' ("" for services whose ARNs have none).
ACTION_OF_RESOURCE: dict[tuple[str, str], str] = {
    ("lambda", "function"): "lambda:InvokeFunction",
    ("sqs", ""): "sqs:SendMessage",
    ("sns", ""): "sns:Publish",
    ("events", "event-bus"): "events:PutEvents",
    ("states", "stateMachine"): "states:StartExecution",
    ("states", "execution"): "states:DescribeExecution",  # tracked runs follow their execution
    ("ecs", "task-definition"): "ecs:RunTask",
    ("ecs", "task"): "ecs:DescribeTasks",  # tracked runs follow their task
    ("iam", "role"): "iam:PassRole",  # an ECS task's task role and execution role, passed to ECS only
}
TARGET_ACTIONS = frozenset(ACTION_OF_RESOURCE.values())
# The services target ARNs may name (also the IAM policy statements' services).
TARGET_SERVICES = tuple(sorted({service for service, _ in ACTION_OF_RESOURCE}))
# iam:PassRole is granted for ECS tasks only: the roles cannot be handed to any other service.
PASS_ROLE_CONDITION = {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}


def default_target_arns(prefix: str) -> tuple[str, ...]:
    here = f"{Aws.REGION}:{Aws.ACCOUNT_ID}"
    name = f"{prefix}-target-*"
    return (
        f"arn:{Aws.PARTITION}:lambda:{here}:function:{name}",
        f"arn:{Aws.PARTITION}:sqs:{here}:{name}",
        f"arn:{Aws.PARTITION}:sns:{here}:{name}",
        f"arn:{Aws.PARTITION}:events:{here}:event-bus/{name}",
        f"arn:{Aws.PARTITION}:states:{here}:stateMachine:{name}",
        f"arn:{Aws.PARTITION}:ecs:{here}:task-definition/{name}",
        f"arn:{Aws.PARTITION}:ecs:{here}:task/{name}",  # tasks of the clusters named by the convention
        f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:role/{name}",
    )


def _resource_type(arn: str) -> tuple[str, str]:
    parts = arn.split(":", 5)
    if len(parts) < 6 or parts[0] != "arn" or parts[2] not in TARGET_SERVICES:
        raise ValueError(f"target ARN {arn!r}: expected arn:<partition>:<{'|'.join(TARGET_SERVICES)}>:...")
    service, resource = parts[2], parts[5]
    kind = resource.replace("/", ":").split(":", 1)[0] if service not in ("sqs", "sns") else ""
    return service, kind


def service_of(arn: str) -> str:
    return _resource_type(arn)[0]


def action_of(arn: str) -> str:
    """The one action a target ARN is granted, by its service and resource type."""
    service, kind = _resource_type(arn)
    action = ACTION_OF_RESOURCE.get((service, kind))
    if action is None:
        known = ", ".join(f"{s}:{k}" if k else s for s, k in ACTION_OF_RESOURCE)
        raise ValueError(f"target ARN {arn!r}: {service} {kind!r} is not a target resource ({known})")
    return action


def executions_of(state_machine_arn: str) -> str:
    """The ARN pattern of a state machine's (Standard) executions: `...:stateMachine:<name>[:<version or
    alias>]` becomes `...:execution:<name>:*` (executions of a version or alias belong to the machine)."""
    prefix, _, rest = state_machine_arn.partition(":stateMachine:")
    return f"{prefix}:execution:{rest.split(':', 1)[0]}:*"


def target_statements(arns: Iterable[str]) -> list[iam.PolicyStatement]:
    """One statement per action, each with that action only (iam:PassRole only towards ECS tasks)."""
    by_action: dict[str, list[str]] = {}

    def grant(action: str, resource: str) -> None:
        resources = by_action.setdefault(action, [])
        if resource not in resources:
            resources.append(resource)

    for arn in arns:
        action = action_of(arn)
        grant(action, arn)
        if action == "lambda:InvokeFunction" and arn.count(":") == 6:
            grant(action, f"{arn}:*")  # the function's versions and aliases
        if action == "states:StartExecution":
            grant("states:DescribeExecution", executions_of(arn))
    return [
        iam.PolicyStatement(
            actions=[action],
            resources=resources,
            conditions=PASS_ROLE_CONDITION if action == "iam:PassRole" else None,
        )
        for action, resources in sorted(by_action.items())
    ]
