"""Metrics adapters: CloudWatch EMF through Powertools in Lambda, in memory for the local runtime."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any


class PowertoolsMetrics:
    """EMF metrics via Powertools; thread-safe because an executor runs its batch on threads."""

    def __init__(self, metrics: Any) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()

    def count(self, name: str, value: float = 1.0) -> None:
        from aws_lambda_powertools.metrics import MetricUnit

        with self._lock:
            self._metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)

    def timing_ms(self, name: str, value_ms: float) -> None:
        from aws_lambda_powertools.metrics import MetricUnit

        with self._lock:
            self._metrics.add_metric(name=name, unit=MetricUnit.Milliseconds, value=value_ms)

    def count_for_job(self, name: str, job_id: str, value: float = 1.0) -> None:
        """Its own EMF line with a JobId dimension (on the shared metrics it would split them all)."""
        from aws_lambda_powertools.metrics import MetricUnit, single_metric

        # With the service's dimension, as every other metric (a deployment's jobs are found by it). Only
        # jobs that skip or miss a slot get one: a custom metric each while they do.
        service = getattr(self._metrics, "service", None)
        with (
            self._lock,
            single_metric(
                name=name,
                unit=MetricUnit.Count,
                value=value,
                namespace=self._metrics.namespace,
                default_dimensions={"service": service} if service else None,
            ) as metric,
        ):
            metric.add_dimension(name="JobId", value=job_id)


class InMemoryMetrics:
    """Counters and timings kept in the process (local runtime status line, tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, float] = defaultdict(float)
        self.timings: dict[str, list[float]] = defaultdict(list)

    def count(self, name: str, value: float = 1.0) -> None:
        with self._lock:
            self.counts[name] += value

    def timing_ms(self, name: str, value_ms: float) -> None:
        with self._lock:
            self.timings[name].append(value_ms)

    def count_for_job(self, name: str, job_id: str, value: float = 1.0) -> None:
        with self._lock:
            self.counts[f"{name}|{job_id}"] += value
