"""What a revision keeps (adapters/event_records.py, the same in every engine): no secret value, no TTL on a
job's own revisions (the one a job is at stays readable), a TTL on its owner's audit entry."""

from __future__ import annotations

from datetime import UTC, datetime

from tickwork.adapters.event_records import job_definition, revision_to_items
from tickwork.domain.revisions import AUDIT_RETENTION, Action, Authored, changed_fields, diff

AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_a_plain_credential_header_of_an_older_job_is_never_copied_into_a_revision() -> None:
    headers = {"Authorization": "Bearer x", "X-A": "1"}
    item = {
        "job_id": "job_1", "owner": "alice", "version": 3, "name": "n",
        "next_fire_at": "2026-12-03T04:00:00Z",
        "target": {"kind": "http", "config": {"url": "https://h", "headers": headers}},
    }  # fmt: skip
    definition = job_definition(item)
    assert definition["target"]["config"]["headers"] == {"Authorization": "<redacted>", "X-A": "1"}
    assert "next_fire_at" not in definition and "version" not in definition and definition["name"] == "n"


def test_a_jobs_revision_has_no_ttl_and_its_audit_entry_does() -> None:
    revision = Authored("alice", Action.UPDATE, AT, "why").revision(
        "job_1", "alice", 2, {"name": "a"}, {"name": "b"}
    )
    kept, entry = revision_to_items(revision)
    assert "expires_at" not in kept and kept["definition"] == {"name": "b"} and kept["key"] == "r#0000000002"
    assert entry["expires_at"] == int((AT + AUDIT_RETENTION).timestamp()) and "definition" not in entry
    assert entry["scope"] == "owner#alice" and entry["key"].startswith("a#2026-12-02T12:00:00.000Z#job_1#")


def test_changes_are_named_one_level_deep() -> None:
    before = {"name": "a", "schedule": {"expression": "0 4 * * *", "timezone": "UTC"}, "tags": {"x": "1"}}
    after = {
        "name": "a",
        "schedule": {"expression": "0 5 * * *", "timezone": "UTC"},
        "retry": {"max_attempts": 2},
    }
    assert changed_fields(before, after) == ("retry", "schedule.expression", "tags")
    assert [(c.field, c.before, c.after) for c in diff(before, after)][1] == (
        "schedule.expression",
        "0 4 * * *",
        "0 5 * * *",
    )
