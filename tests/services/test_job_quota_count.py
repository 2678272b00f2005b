"""The job quota counts an owner's jobs page after page: an index page may stop short of its limit
(DynamoDB returns at most 1 MB a page), and a count of one page would let an owner past the quota."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import RecordingDispatcher
from tickwork.adapters.memory.store import MemoryStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.errors import QuotaExceededError
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Target
from tickwork.domain.quotas import OwnerQuotas
from tickwork.domain.schedule import parse_schedule
from tickwork.services.jobs import JobService, JobServiceConfig


class ShortPages(MemoryStore):
    def owner_job_ids(
        self, owner: str, *, limit: int, after_job_id: str | None = None
    ) -> tuple[list[str], bool]:
        ids, more = super().owner_job_ids(owner, limit=limit, after_job_id=after_job_id)
        return ids[:1], more or len(ids) > 1  # one id a page, as a full 1 MB page would cut it


def test_an_owner_at_the_quota_is_refused_however_the_index_pages(clock: FakeClock) -> None:
    config = JobServiceConfig(shard_count=2, quotas=OwnerQuotas(max_jobs=3))
    service = JobService(ShortPages(), RecordingDispatcher(), clock, config)
    spec: Any = JobSpec(
        name="j", schedule=parse_schedule("0 * * * *"), target=Target("http", {"url": "https://x.example"})
    )
    for _ in range(3):
        service.create("alice", spec)

    with pytest.raises(QuotaExceededError, match="max_jobs"):
        service.create("alice", spec)
