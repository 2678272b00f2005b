"""Revisions on both engines (issue 33, part 3): each job write records its revision and audit entry in its
own transaction (a write that loses records nothing), Tickwork's own pause is signed `tickwork` with its
reason, and the history outlives the job."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NAMES
from tests.fakes import RecordingDispatcher
from tickwork.adapters.dynamodb.events import DynamoRevisions
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.events import SqliteRevisions
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.errors import NotFoundError, VersionMismatchError
from tickwork.domain.jobs import JobPatch, JobSpec
from tickwork.domain.models import Target
from tickwork.domain.revisions import Action
from tickwork.domain.schedule import parse_schedule
from tickwork.services.jobs import TICKWORK, Author, JobService, JobServiceConfig
from tickwork.services.revisions import RevisionService

NOW = datetime(2026, 12, 2, 12, 0, 30, tzinfo=UTC)
HOOK = Target("http", {"url": "https://hooks.example.com/a", "method": "POST"})


@pytest.fixture(params=["sqlite", "moto"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    if request.param == "sqlite":
        db = Database(tmp_path / "tickwork.db").open()
        yield SqliteStore(db), SqliteRevisions(db)
        db.close()
        return
    dynamodb = request.getfixturevalue("dynamodb")
    tables = TableNames.from_resources(NAMES)
    yield DynamoStore(dynamodb, tables), DynamoRevisions(dynamodb, tables)


def test_each_write_records_its_revision_and_a_write_that_loses_records_none(engine: tuple[Any, Any]) -> None:
    store, reader = engine
    clock = FakeClock(NOW)
    jobs = JobService(store, RecordingDispatcher(), clock, JobServiceConfig(shard_count=2))
    job = jobs.create("alice", JobSpec(name="n", schedule=parse_schedule("0 4 * * *"), target=HOOK))
    clock.advance(1)
    jobs.update("alice", job.job_id, JobPatch(name="renamed"), by=Author("alice/session-1", "clearer name"))
    with pytest.raises(VersionMismatchError):
        jobs.update("alice", job.job_id, JobPatch(name="lost"), if_match=1)  # stale: it records nothing
    clock.advance(1)
    # Tickwork's own pause (failures in a row): signed tickwork, its reason the note.
    jobs.pause("alice", job.job_id, reason="5 failures in a row", cause_at=NOW)
    clock.advance(1)
    jobs.delete("alice", job.job_id, by=Author("alice", "retired"))

    revisions, cursor = reader.job_revisions(job.job_id, 10, None)
    assert cursor is None
    assert [(r.revision, r.action, r.actor, r.note) for r in revisions] == [
        (4, Action.DELETE, "alice", "retired"),
        (3, Action.AUTO_PAUSE, TICKWORK, "5 failures in a row"),
        (2, Action.UPDATE, "alice/session-1", "clearer name"),
        (1, Action.CREATE, "alice", None),
    ]
    assert revisions[2].changed == ("name",) and revisions[2].definition["name"] == "renamed"
    assert revisions[0].definition == {} and "name" in revisions[0].changed
    audit, _ = reader.owner_audit("alice", 10, None)
    assert [(r.job_id, r.revision) for r in audit] == [(job.job_id, n) for n in (4, 3, 2, 1)]
    assert reader.owner_audit("bob", 10, None) == ([], None)
    # The history outlives the job, its owner's only.
    service = RevisionService(jobs, reader)
    assert len(service.history("alice", job.job_id, 10, None).revisions) == 4
    old, new, changes = service.diff("alice", job.job_id, 1, 2)
    assert (old.revision, new.revision) == (1, 2)
    assert [(c.field, c.before, c.after) for c in changes] == [("name", "n", "renamed")]
    with pytest.raises(NotFoundError):
        service.history("bob", job.job_id, 10, None)


def test_a_history_pages_with_cursors_and_holds_revisions_only(engine: tuple[Any, Any]) -> None:
    store, reader = engine
    clock = FakeClock(NOW)
    jobs = JobService(store, RecordingDispatcher(), clock, JobServiceConfig(shard_count=2))
    job = jobs.create("alice", JobSpec(name="n", schedule=parse_schedule("0 4 * * *"), target=HOOK))
    for name in ("b", "c", "d"):
        clock.advance(1)
        jobs.update("alice", job.job_id, JobPatch(name=name))
    seen, cursor, pages = [], None, 0
    while True:
        page, cursor = reader.job_revisions(job.job_id, 1, cursor)
        seen += [r.revision for r in page]
        pages += 1
        if cursor is None:
            break
    assert seen == [4, 3, 2, 1] and pages == 4
    audit, cursor = reader.owner_audit("alice", 3, None)
    assert [r.revision for r in audit] == [4, 3, 2] and cursor is not None
    assert [r.revision for r in reader.owner_audit("alice", 3, cursor)[0]] == [1]


def test_the_dynamodb_listings_put_one_condition_on_the_sort_key(dynamodb: Any) -> None:
    """DynamoDB refuses two conditions on one key ("KeyConditionExpressions must only contain one condition
    per key"); moto does not, so the expressions sent are checked here."""
    tables = TableNames.from_resources(NAMES)
    sent: list[str] = []
    dynamodb.meta.events.register(
        "provide-client-params.dynamodb.Query",
        lambda params, **_: sent.append(params["KeyConditionExpression"]),
    )
    reader = DynamoRevisions(dynamodb, tables)
    reader.job_revisions("job_1", 5, None)
    reader.job_revisions("job_1", 5, "r#0000000003")
    reader.owner_audit("alice", 5, None)
    assert len(sent) == 3 and all(expression.count("#k") == 1 for expression in sent), sent
