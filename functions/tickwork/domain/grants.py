"""Who may call what (issue 31): an operator's registry of the AWS resources each owner's jobs may target.

The executor has one role, allowed to call every `<prefix>-target-*` resource of the account. Without a
registry any caller of the API could point a job at another team's function and have Tickwork call it.
With one, an AWS target is named `<kind>:<resource name>` (`lambda:tickwork-target-billing-sync`,
`sqs:tickwork-target-alice-inbox`) and must match a pattern granted to the job's owner (`*` matches any
run of characters); the API refuses the job (403) and the executor refuses the call (the run fails, not
retried), so a grant taken back stops the jobs made under it. The pattern `{owner}` in a grant stands for
the owner's own name's last path part (`arn:aws:iam::1:role/billing` -> `billing`), so one grant
(`"*": ["*:tickwork-target-{owner}-*"]`) can give every owner their own namespace. HTTP targets are not
AWS resources: their calls are signed with the owner's key (tickwork/signing.py) instead.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tickwork.domain.models import Target
from tickwork.domain.targets import Invocation, TargetInvoker, TargetResult

EVERY_OWNER = "*"  # a grant for every owner


def resource_of(target: Target) -> str | None:
    """`<kind>:<resource name>` of an AWS target (None for an HTTP one): the name, without account, region,
    path or qualifier, as the executor's IAM policy names the resources it may call."""
    config = target.config
    kind = target.kind
    if kind == "lambda":
        name = str(config["function_name"])
        if name.startswith("arn:"):
            name = name.split(":")[6] if len(name.split(":")) > 6 else name
        elif ":function:" in name:  # a partial ARN: <account>:function:<name>
            name = name.split(":function:", 1)[1]
        return f"lambda:{name.split(':', 1)[0]}"
    if kind == "sqs":
        return f"sqs:{str(config['queue_url']).rstrip('/').rsplit('/', 1)[-1]}"
    if kind == "sns":
        return f"sns:{str(config['topic_arn']).rsplit(':', 1)[-1]}"
    if kind == "eventbridge":
        return f"eventbridge:{str(config['event_bus_name']).rsplit('/', 1)[-1]}"
    if kind == "stepfunctions":
        return f"stepfunctions:{str(config['state_machine_arn']).rsplit(':', 1)[-1]}"
    if kind == "ecs":
        return f"ecs:{str(config['task_definition']).rsplit('/', 1)[-1].split(':', 1)[0]}"
    return None


def owner_name(owner: str) -> str:
    """What `{owner}` stands for in a grant: the owner's last path part (an IAM role's or user's name)."""
    return owner.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]


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
        resource = resource_of(target)
        if resource is None:
            return True
        patterns = [*self.grants.get(owner, ()), *self.grants.get(EVERY_OWNER, ())]
        own = re.sub(r"([*?\[])", r"[\1]", owner_name(owner))  # the owner's name matches only itself
        return any(fnmatch.fnmatchcase(resource, pattern.replace("{owner}", own)) for pattern in patterns)


def _is_pattern(value: object) -> bool:
    return isinstance(value, str) and ":" in value


def refusal(owner: str, target: Target) -> str:
    return (
        f"{resource_of(target)} is not granted to {owner}: an operator grants the AWS resources each owner's "
        "jobs may call (target grants, docs/targets.md)"
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
