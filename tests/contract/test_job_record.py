"""A job edit removes what the edited job no longer has: every attribute `job_to_item` may leave out is one
the stores remove on an edit (REMOVABLE_JOB_ATTRIBUTES). An optional field added to the record but not to
that list would keep its old value forever once cleared (a calendar list emptied, found in issue 33)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from tickwork.adapters.records import REMOVABLE_JOB_ATTRIBUTES, job_to_item
from tickwork.domain.alert_rules import AlertRules
from tickwork.domain.models import Completion, Concurrency, Job, JobState, Policies, Target
from tickwork.domain.schedule import parse_schedule

AT = datetime(2026, 12, 5, 12, tzinfo=UTC)


def test_every_attribute_a_job_record_may_leave_out_is_removed_by_an_edit() -> None:
    bare = Job(
        job_id="job_a",
        owner="alice",
        name="a",
        schedule=parse_schedule("0 * * * *"),
        target=Target("http", {"url": "https://example.com/hook"}),
        shard=0,
        created_at=AT,
        updated_at=AT,
    )
    full = replace(
        bare,
        state=JobState.ACTIVE,
        next_fire_at=AT,
        paused_at=AT,
        resumed_at=AT,
        due_floor=AT,
        policies=Policies(concurrency=Concurrency("host", 2)),
        completion=Completion.CALLBACK,
        heartbeat_seconds=30,
        run_requests=0,
        alerts=AlertRules(on_failure=False),
        paused_reason="failed 5 times in a row",
        calendars=("holidays",),
        group="nightly",
    )
    left_out = set(job_to_item(full)) - set(job_to_item(bare))
    assert left_out <= set(REMOVABLE_JOB_ATTRIBUTES), left_out - set(REMOVABLE_JOB_ATTRIBUTES)
    assert {"calendars", "job_group"} <= left_out
