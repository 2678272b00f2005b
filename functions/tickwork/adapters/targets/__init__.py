"""Target adapters: HTTP (stdlib, SSRF-guarded, signed) and AWS services, behind one TargetInvoker."""

from __future__ import annotations

from tickwork.adapters.targets.aws import AwsInvoker, boto3_client_factory
from tickwork.adapters.targets.http import HttpInvoker
from tickwork.adapters.targets.registry import TargetRegistry

__all__ = ["AwsInvoker", "HttpInvoker", "TargetRegistry", "boto3_client_factory"]
