"""The TargetInvoker and TargetTracker the executor uses: routes each target to the adapter for its kind."""

from __future__ import annotations

from tickwork.adapters.targets._common import invalid_target
from tickwork.adapters.targets.aws import AwsInvoker
from tickwork.adapters.targets.http import HttpInvoker
from tickwork.domain.models import Target
from tickwork.domain.targets import AWS_TARGET_KINDS, TARGET_KINDS, TRACKED_KINDS, Invocation, TargetResult


class TargetRegistry:
    def __init__(self, http: HttpInvoker, aws: AwsInvoker) -> None:
        self._http = http
        self._aws = aws

    def invoke(self, target: Target, invocation: Invocation) -> TargetResult:
        if target.kind == "http":
            return self._http.invoke(target, invocation)
        if target.kind in AWS_TARGET_KINDS:
            return self._aws.invoke(target, invocation)
        # A stored job with a kind this version does not know: fail the run visibly, don't crash the executor.
        return invalid_target(
            f"unknown target kind {target.kind!r}; expected one of {', '.join(TARGET_KINDS)}"
        )

    def track(self, target: Target, handle: str) -> TargetResult | None:
        """A look at what a tracked start of `target` began. Only stepfunctions and ecs starts are followed;
        any other kind (an http target, a kind this version does not know) cannot be, and its run fails for
        good rather than the executor crashing on a stored run it cannot follow."""
        if target.kind in TRACKED_KINDS:
            return self._aws.track(target, handle)
        return invalid_target(
            f"{target.kind!r} targets are not tracked; only {', '.join(sorted(TRACKED_KINDS))} are"
        )
