"""The service tests run on the in-memory store (adapters/memory): the same conditions and refusals as the
DynamoDB and SQLite adapters (tests/contract/test_store_contract.py runs every engine through them), in
this process, offline. A test about the DynamoDB adapter itself asks for `dynamo_store` (moto) instead."""

from __future__ import annotations

from typing import Any

import pytest

from tickwork.adapters.memory.base import copied
from tickwork.adapters.memory.store import MemoryStore


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


def raw_job(store: MemoryStore, job_id: str) -> dict[str, Any]:
    """The job's stored record, with the attributes the job model does not carry (index keys, the slot)."""
    with store.tables.lock:
        return copied(store.tables.jobs[job_id])
