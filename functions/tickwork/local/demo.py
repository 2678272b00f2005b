"""Demo jobs for `tickwork local --demo`: runs appear within the first minute."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import partial

from tickwork.composition import Components
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Job, Policies, RetryPolicy, Target
from tickwork.domain.schedule import parse_schedule

DEMO_OWNER = "local-user"


def demo_specs(echo_url: str) -> list[JobSpec]:
    return [
        JobSpec(
            name="heartbeat every 15 s",
            schedule=parse_schedule("*/15 * * * * *"),
            target=Target(
                "http", {"url": f"{echo_url}/echo", "method": "POST", "body": '{"hello": "tickwork"}'}
            ),
        ),
        JobSpec(
            name="report every minute (New York time)",
            schedule=parse_schedule("* * * * *", "America/New_York"),
            target=Target("http", {"url": f"{echo_url}/echo?sleep=0.5", "method": "POST"}),
        ),
        JobSpec(
            name="flaky endpoint every 30 s (shows retries and a final failure)",
            schedule=parse_schedule("*/30 * * * * *"),
            target=Target("http", {"url": f"{echo_url}/fail", "method": "POST"}),
            policies=Policies(
                retry=RetryPolicy(max_attempts=3, backoff_base_seconds=2, backoff_max_seconds=10)
            ),
        ),
    ]


def _fingerprint(spec: JobSpec, _secret_refs: Mapping[str, str]) -> str:
    return hashlib.sha256(repr(spec).encode()).hexdigest()


def register_demo_jobs(parts: Components, echo_url: str) -> list[Job]:
    """Idempotent: a restart with the same state finds the demo jobs it registered before, not new copies."""
    service = parts.job_service()
    jobs = []
    for number, spec in enumerate(demo_specs(echo_url)):
        # (the demo's targets carry no secret headers: their fingerprint needs no references)
        created = service.create_idempotent(DEMO_OWNER, spec, f"demo-{number}", partial(_fingerprint, spec))
        jobs.append(created.job)
    return jobs
