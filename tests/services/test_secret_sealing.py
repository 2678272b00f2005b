"""A job's secret header values are stored only once the write that references them is allowed: a refused
create or update leaves no secret behind (Tickwork never deletes one), and a retried create replays."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from tests.fakes import RecordingDispatcher
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.errors import NotFoundError, QuotaExceededError, VersionMismatchError
from tickwork.domain.jobs import JobPatch, JobSpec
from tickwork.domain.quotas import OwnerQuotas
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.targets import validate_target
from tickwork.services.jobs import IdempotencyKeyReusedError, JobService, JobServiceConfig


class CountingSecrets:
    """A secret store that keeps what it is given, named like the real ones (by owner and value)."""

    def __init__(self) -> None:
        self.kept: dict[str, str] = {}

    def reference(self, owner: str, value: str) -> str:
        return f"ref:{owner}:{len(value)}:{hash(value) & 0xFFFF:x}"

    def put(self, owner: str, value: str) -> str:
        reference = self.reference(owner, value)
        self.kept[reference] = value
        return reference

    def get(self, owner: str, reference: str) -> str:
        return self.kept[reference]


def spec(token: str) -> JobSpec:
    target = validate_target("http", {"url": "https://x.example", "headers": {"Authorization": token}})
    return JobSpec(name="j", schedule=parse_schedule("0 * * * *"), target=target)


def fingerprint_of(token: str) -> Callable[[Mapping[str, str]], str]:
    """A request's fingerprint: over its references (as the API's), and a part that differs per token."""
    return lambda refs: f"{token}|{sorted(refs.items())}"


@pytest.fixture
def service(clock: FakeClock) -> tuple[JobService, CountingSecrets]:
    secrets = CountingSecrets()
    config = JobServiceConfig(shard_count=2, quotas=OwnerQuotas(max_jobs=1))
    return JobService(MemoryStore(), RecordingDispatcher(), clock, config, secrets=secrets), secrets


def test_a_create_stores_the_value_and_the_job_only_its_reference(
    service: tuple[JobService, CountingSecrets],
) -> None:
    jobs, secrets = service
    job = jobs.create("alice", spec("Bearer one"))
    assert list(secrets.kept.values()) == ["Bearer one"]
    assert job.target.config["secret_refs"] == {"Authorization": next(iter(secrets.kept))}
    assert "Bearer one" not in repr(jobs.get("alice", job.job_id))


def test_refused_writes_store_no_secret(service: tuple[JobService, CountingSecrets]) -> None:
    jobs, secrets = service
    job = jobs.create("alice", spec("Bearer one"))
    with pytest.raises(QuotaExceededError):
        jobs.create("alice", spec("Bearer two"))
    with pytest.raises(NotFoundError):
        jobs.update("alice", "job_missing", JobPatch(target=spec("Bearer three").target))
    with pytest.raises(VersionMismatchError):
        jobs.update(
            "alice", job.job_id, JobPatch(target=spec("Bearer four").target), if_match=job.version + 5
        )
    assert list(secrets.kept.values()) == ["Bearer one"]
    jobs.update("alice", job.job_id, JobPatch(target=spec("Bearer five").target))
    assert sorted(secrets.kept.values()) == ["Bearer five", "Bearer one"]


def test_an_idempotent_retry_replays_even_at_the_quota_and_a_reused_key_stores_nothing(
    service: tuple[JobService, CountingSecrets],
) -> None:
    jobs, secrets = service
    first = jobs.create_idempotent("alice", spec("Bearer one"), "k", fingerprint_of("Bearer one"))
    again = jobs.create_idempotent("alice", spec("Bearer one"), "k", fingerprint_of("Bearer one"))
    assert (first.replayed, again.replayed) == (False, True) and again.job.job_id == first.job.job_id
    with pytest.raises(IdempotencyKeyReusedError):
        jobs.create_idempotent("alice", spec("Bearer two"), "k", fingerprint_of("Bearer two"))
    assert list(secrets.kept.values()) == ["Bearer one"]
