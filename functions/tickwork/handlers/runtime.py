"""What every Lambda handler shares: Powertools logger, metrics and tracer, and the components, built once
per execution environment on first use (never at import).

The tracer (X-Ray, needs the `tracer` extra of aws-lambda-powertools) records each invocation and patches
botocore so every AWS call is a subsegment; outside Lambda it is disabled and does nothing."""

from __future__ import annotations

import os
import threading

from aws_lambda_powertools import Logger, Metrics, Tracer

from tickwork.adapters.metrics import PowertoolsMetrics
from tickwork.adapters.targets.aws import boto3_client_factory
from tickwork.composition import Components
from tickwork.domain.clock import SystemClock
from tickwork.settings import Settings

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "tickwork")
logger = Logger(service=SERVICE)
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Tickwork"))
tracer = Tracer(service=SERVICE)


_lock = threading.Lock()
_components: Components | None = None


def components() -> Components:
    """Settings are validated here, at cold start: a bad environment fails the first invocation loudly."""
    global _components
    with _lock:
        if _components is None:
            settings = Settings.from_env(os.environ)
            _components = Components(
                settings,
                SystemClock(),
                boto3_client_factory(region_name=settings.region),
                PowertoolsMetrics(metrics),
            )
        return _components


def install(replacement: Components | None) -> None:
    """Use these components instead of building them from the environment (local runtime, tests)."""
    global _components
    with _lock:
        _components = replacement


def reset_for_tests(replacement: Components | None = None) -> None:
    install(replacement)
