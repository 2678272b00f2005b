"""The TargetInvoker the executor uses: routes each target to the adapter for its kind."""

from __future__ import annotations

from tickwork.adapters.targets._common import INVALID_TARGET
from tickwork.adapters.targets.aws import AwsInvoker
from tickwork.adapters.targets.http import HttpInvoker
from tickwork.domain.models import Target
from tickwork.domain.targets import AWS_TARGET_KINDS, TARGET_KINDS, Invocation, TargetResult


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
        return TargetResult(
            ok=False,
            retryable=False,
            status=INVALID_TARGET,
            latency_ms=0,
            detail=f"unknown target kind {target.kind!r}; expected one of {', '.join(TARGET_KINDS)}",
        )
