"""Resume and the missed-fire policy: the fires that fell inside a pause are planned exactly as after an
outage. Part of them in the resume's own transaction, the rest by the next tick (the job is filed in the
`due` index under the resume minute)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.api.conftest import Api, job_body
from tests.fakes import RecordingDispatcher, RecordingMetrics, ScriptedInvoker
from tickwork.adapters.dynamodb.store import DynamoStore
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import MissedFirePolicy, Policies, RunState, Target, Trigger
from tickwork.domain.schedule import parse_schedule
from tickwork.services.executing import Executor, ExecutorConfig
from tickwork.services.jobs import Author, JobService, JobServiceConfig
from tickwork.services.planning import Planner

PAUSED_FIRES = [datetime(2026, 12, 2, 12, minute, tzinfo=UTC) for minute in (5, 10, 15, 20, 25, 30)]


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("policy", "expected", "effect"),
    [
        pytest.param(
            MissedFirePolicy.RUN_ALL,
            [RunState.PLANNED] * 6,
            "All 6 fires missed during the pause run now, late, as catch-up runs (missed_fire=run_all).",
            id="run_all_runs_every_paused_fire_late",
        ),
        pytest.param(
            MissedFirePolicy.COALESCE,
            [RunState.MISSED] * 5 + [RunState.PLANNED],
            "Only the latest of the 6 fires missed during the pause (2026-12-02T12:30:00Z) runs now, as a "
            "catch-up run; the others are recorded as missed (missed_fire=coalesce).",
            id="coalesce_runs_only_the_latest",
        ),
        pytest.param(
            MissedFirePolicy.SKIP,
            [RunState.MISSED] * 6,
            "None of the 6 fires missed during the pause runs; each is recorded as missed "
            "(missed_fire=skip).",
            id="skip_records_every_paused_fire_missed",
        ),
    ],
)
def test_paused_fires_follow_the_missed_fire_policy_through_the_next_tick(
    store: DynamoStore, clock: FakeClock, policy: MissedFirePolicy, expected: list[RunState], effect: str
) -> None:
    dispatcher = RecordingDispatcher()
    # Room for only two runs in the resume's own transaction: the ticker must plan the rest.
    service = JobService(store, dispatcher, clock, JobServiceConfig(shard_count=4, max_self_planned_runs=2))
    spec = JobSpec(
        name="j",
        schedule=parse_schedule("*/5 * * * *"),
        target=Target("http", {"url": "https://example.com/"}),
        policies=Policies(missed_fire=policy),
    )
    job = service.create("alice", spec)
    clock.set(at("2026-12-02T12:01:00"))
    service.pause("alice", job.job_id, by=Author("alice", "a test"))

    clock.set(at("2026-12-02T12:31:10"))
    result = service.resume("alice", job.job_id)

    assert (result.paused_fires.count, result.paused_fires.count_capped) == (6, False)
    assert result.paused_fires.policy is policy and result.paused_fires.effect == effect
    resumed = store.get_job(job.job_id)
    assert resumed is not None and resumed.next_fire_at == at("2026-12-02T12:15:00")  # two planned by resume
    # Filed under the resume's horizon (12:31:10 + 120 s), which the next tick reads, not under 12:15.
    assert resumed.due_key == f"{job.shard:04d}#2026-12-02T12:33"

    clock.set(at("2026-12-02T12:31:30"))
    report = Planner(store, dispatcher, clock).plan(job.shard)

    assert report.complete
    runs = store.list_runs(job.job_id, newest_first=False)
    assert [r.scheduled_for for r in runs] == PAUSED_FIRES
    assert [r.state for r in runs] == expected
    assert all(r.trigger is Trigger.CATCH_UP for r in runs)
    assert sorted(r.run_id for r in dispatcher.sent) == sorted(
        r.run_id for r in runs if r.state is RunState.PLANNED
    )
    after = store.get_job(job.job_id)
    assert after is not None and after.next_fire_at == at("2026-12-02T12:35:00")
    assert after.due_key == f"{job.shard:04d}#2026-12-02T12:35"


def test_resume_answers_with_the_paused_fires_and_plans_them_at_once(call: Api) -> None:
    body = job_body(policies={"missed_fire": "coalesce"})
    job = call("POST", "/jobs", body=body).body
    call.clock.set(at("2026-12-02T12:01:00"))
    assert (
        call("POST", f"/jobs/{job['id']}/pause", query="note=test").body["paused_at"]
        == "2026-12-02T12:01:00Z"
    )
    call.clock.set(at("2026-12-02T12:31:10"))

    reply = call("POST", f"/jobs/{job['id']}/resume", headers={"If-Match": '"2"'})

    assert reply.status == 200 and reply.headers["ETag"] == '"3"'
    assert reply.body["paused_fires"]["count"] == 6 and reply.body["paused_fires"]["policy"] == "coalesce"
    assert reply.body["resumed_at"] == "2026-12-02T12:31:10Z" and reply.body["paused_at"] is None
    runs = call("GET", f"/jobs/{job['id']}/runs", query="limit=100").body["items"]
    assert [(r["timings"]["scheduled_for"][11:16], r["state"]) for r in runs] == [
        ("12:30", "planned"),
        ("12:25", "missed"),
        ("12:20", "missed"),
        ("12:15", "missed"),
        ("12:10", "missed"),
        ("12:05", "missed"),
    ]
    again = call("POST", f"/jobs/{job['id']}/resume")
    assert again.status == 200 and again.body["paused_fires"]["count"] == 0


def test_a_fire_already_planned_before_the_pause_is_not_planned_twice(call: Api) -> None:
    job = call("POST", "/jobs", body=job_body(schedule={"expression": "*/30 * * * * *"})).body
    before = {r["id"] for r in call("GET", f"/jobs/{job['id']}/runs").body["items"]}
    assert len(before) == 4  # 12:01:00 .. 12:02:30, planned by the create itself
    call("POST", f"/jobs/{job['id']}/pause", query="note=test")
    call.clock.set(at("2026-12-02T12:04:10"))
    reply = call("POST", f"/jobs/{job['id']}/resume")
    assert reply.status == 200, reply.body
    runs = call("GET", f"/jobs/{job['id']}/runs", query="limit=100").body["items"]
    times = [r["timings"]["scheduled_for"] for r in runs]
    assert len(times) == len(set(times))
    assert times[0] == "2026-12-02T12:06:00Z" and times[-1] == "2026-12-02T12:01:00Z"


def test_runs_are_paged_newest_first_and_filtered_by_time_and_state(call: Api) -> None:
    job = call("POST", "/jobs", body=job_body(schedule={"expression": "*/30 * * * * *"})).body
    path = f"/jobs/{job['id']}/runs"
    first = call("GET", path, query="limit=3").body
    assert [r["timings"]["scheduled_for"][11:19] for r in first["items"]] == [
        "12:02:30",
        "12:02:00",
        "12:01:30",
    ]
    rest = call("GET", path, query=f"limit=3&cursor={first['next_cursor']}").body
    assert [r["timings"]["scheduled_for"][11:19] for r in rest["items"]] == ["12:01:00"]
    assert rest["next_cursor"] is None
    window = call("GET", path, query="from=2026-12-02T12:01:30Z&to=2026-12-02T12:02:00Z").body["items"]
    assert [r["timings"]["scheduled_for"][11:19] for r in window] == ["12:02:00", "12:01:30"]
    assert call("GET", path, query="state=missed").body["items"] == []
    backwards = call("GET", path, query="from=2026-12-02T13:00:00Z&to=2026-12-02T12:00:00Z")
    assert backwards.status == 422 and backwards.body["errors"][0]["field"] == "to"


def test_resume_does_not_promise_runs_for_fires_cancelled_during_the_pause(
    store: DynamoStore, clock: FakeClock
) -> None:
    """A fire planned before the pause (inside the lookahead) is claimed while the job is paused and
    cancelled. Resume must not count it among the catch-up runs: it has a run record and is not planned
    again. The answer must match what the next tick then does."""
    dispatcher = RecordingDispatcher()
    service = JobService(store, dispatcher, clock, JobServiceConfig(shard_count=4))
    spec = JobSpec(
        name="j",
        schedule=parse_schedule("*/5 * * * *"),
        target=Target("http", {"url": "https://example.com/"}),
        policies=Policies(missed_fire=MissedFirePolicy.RUN_ALL),
    )
    clock.set(at("2026-12-02T12:03:30"))
    job = service.create("alice", spec)  # plans 12:05 itself (inside its lookahead)
    [planned] = dispatcher.sent
    assert planned.scheduled_for == at("2026-12-02T12:05:00")
    service.pause("alice", job.job_id, by=Author("alice", "a test"))
    clock.set(at("2026-12-02T12:05:00"))
    executor = Executor(
        store, ScriptedInvoker(), dispatcher, clock, RecordingMetrics(), ExecutorConfig(worker_id="w")
    )
    executor.execute(RunMessage.for_run(planned))
    cancelled = store.get_run(job.job_id, planned.scheduled_for)
    assert cancelled is not None and cancelled.state is RunState.CANCELLED

    clock.set(at("2026-12-02T12:21:10"))
    result = service.resume("alice", job.job_id)

    paused = result.paused_fires
    assert (paused.count, paused.outcomes.cancelled, paused.outcomes.catch_up) == (4, 1, 3)
    assert "1 planned before the pause were cancelled when they came due and do not run" in paused.effect
    assert "3 run now, late, as catch-up runs" in paused.effect
    Planner(store, dispatcher, clock).plan(job.shard)
    runs = {r.scheduled_for: r for r in store.list_runs(job.job_id, newest_first=False)}
    catch_up = [r for r in runs.values() if r.trigger is Trigger.CATCH_UP and r.state is RunState.PLANNED]
    assert len(catch_up) == paused.outcomes.catch_up  # what the answer promised is what was planned
    assert runs[at("2026-12-02T12:05:00")].state is RunState.CANCELLED
