"""Who may call what (issue 31): an operator's registry of the AWS resources each owner's jobs may target.

The executor has one role, allowed to call every `<prefix>-target-*` resource of the account. Without a
registry any caller of the API could point a job at another team's function and have Tickwork call it.
With one, an AWS target is named `<kind>:<resource name>` (`lambda:tickwork-target-billing-sync`,
`sqs:tickwork-target-alice-inbox`) and must match a pattern granted to the job's owner (`*` matches any
run of characters); the API refuses the job (403) and the executor refuses the call (the run fails, not
retried), so a grant taken back stops the jobs made under it. Grants name owners in full (an IAM role's
ARN, a JWT subject): no pattern derives a namespace from an owner's name, which two owners in two accounts,
or `alice` and `alice-prod`, could share. `*` grants to every owner (shared resources). HTTP targets are
not AWS resources: their calls are signed with the owner's own key (tickwork/signing.py) instead.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tickwork.domain.models import Target
from tickwork.domain.targets import Invocation, TargetInvoker, TargetResult

EVERY_OWNER = "*"  # a grant for every owner


def resources_of(target: Target) -> tuple[str, ...]:
    """The `<kind>:<resource name>`s an AWS target touches (none for an HTTP one): names without account,
    region, path or qualifier, as the executor's IAM policy names what it may call. An ECS task names its
    task definition's family and the cluster it runs on; each must be granted."""
    config = target.config
    kind = target.kind
    if kind == "lambda":
        name = str(config["function_name"])
        if name.startswith("arn:"):
            parts = name.split(":")
            name = parts[6] if len(parts) > 6 else name
        elif ":function:" in name:  # a partial ARN: <account>:function:<name>
            name = name.split(":function:", 1)[1]
        return (f"lambda:{name.split(':', 1)[0]}",)
    if kind == "sqs":
        return (f"sqs:{str(config['queue_url']).rstrip('/').rsplit('/', 1)[-1]}",)
    if kind == "sns":
        return (f"sns:{str(config['topic_arn']).rsplit(':', 1)[-1]}",)
    if kind == "eventbridge":
        return (f"eventbridge:{str(config['event_bus_name']).rsplit('/', 1)[-1]}",)
    if kind == "stepfunctions":
        # arn:aws:states:<region>:<account>:stateMachine:<name>[:<version or alias>]: the name only
        parts = str(config["state_machine_arn"]).split(":")
        return (f"stepfunctions:{parts[6] if len(parts) > 6 else parts[-1]}",)
    if kind == "ecs":
        family = str(config["task_definition"]).rsplit("/", 1)[-1].split(":", 1)[0]
        return (f"ecs:{family}", f"ecs-cluster:{str(config['cluster']).rsplit('/', 1)[-1]}")
    return ()


@dataclass(frozen=True, slots=True)
class TargetGrants:
    """Owner (or `*`) -> the resource patterns its jobs may target."""

    grants: Mapping[str, Sequence[str]]

    @classmethod
    def parse(cls, text: str) -> TargetGrants:
        """From JSON `{"<owner>": ["<kind>:<pattern>", ...]}`; ValueError naming what is wrong."""
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"target grants must be a JSON object: {error}") from error
        if not isinstance(value, dict) or not all(
            isinstance(owner, str) and isinstance(patterns, list) and all(_is_pattern(p) for p in patterns)
            for owner, patterns in value.items()
        ):
            raise ValueError('target grants must map owners to lists of "<kind>:<pattern>" strings')
        return cls({owner: tuple(patterns) for owner, patterns in value.items()})

    def allows(self, owner: str, target: Target) -> bool:
        patterns = [*self.grants.get(owner, ()), *self.grants.get(EVERY_OWNER, ())]
        return all(
            any(fnmatch.fnmatchcase(resource, pattern) for pattern in patterns)
            for resource in resources_of(target)
        )


def _is_pattern(value: object) -> bool:
    return isinstance(value, str) and ":" in value


def refusal(owner: str, target: Target) -> str:
    return (
        f"{', '.join(resources_of(target))} is not granted to {owner}: an operator grants the AWS resources "
        "each owner's jobs may call (target grants, docs/targets.md)"
    )


NOT_GRANTED = "TargetNotGranted"  # the run's status when its target is not granted to its owner at call time


@dataclass(frozen=True, slots=True)
class GrantedTargets:
    """The executor's target invoker, behind the registry: a call to an AWS target its run's owner is not
    (or no longer) granted fails for good, before any request leaves."""

    inner: TargetInvoker
    grants: TargetGrants

    def invoke(self, target: Target, invocation: Invocation) -> TargetResult:
        if not self.grants.allows(invocation.owner, target):
            return TargetResult(
                ok=False,
                retryable=False,
                status=NOT_GRANTED,
                latency_ms=0,
                detail=refusal(invocation.owner, target),
            )
        return self.inner.invoke(target, invocation)
