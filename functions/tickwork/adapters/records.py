"""Domain objects as records: the plain-dict items every store adapter keeps (DynamoDB as attribute
values, SQLite as JSON), and the open-runs index key. One mapping for every engine."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tickwork.domain.alert_rules import NO_ALERTS, alerts_from_mapping, alerts_to_mapping
from tickwork.domain.alerts import RunBefore, WatchedJob
from tickwork.domain.audit import AuditedJob
from tickwork.domain.bulk import DEFAULT_GROUP
from tickwork.domain.execution import check_at
from tickwork.domain.models import (
    Completion,
    Concurrency,
    Job,
    JobState,
    JobView,
    MissedFirePolicy,
    OverlapPolicy,
    Policies,
    RetryPolicy,
    Run,
    RunState,
    Standing,
    Target,
    Trigger,
)
from tickwork.domain.requests import RequestKind, RunRequest
from tickwork.domain.schedule import DstGapPolicy, DstRepeatPolicy, Schedule
from tickwork.domain.targets import default_completion
from tickwork.domain.timekeys import epoch_seconds, format_instant, format_instant_ms, parse_instant

# Write shards per shard in the open-runs index (see `open_key`).
OPEN_KEY_SPREAD = 8
# Write shards per owner in the failed-runs index (see `failed_key`).
FAILED_KEY_SPREAD = 4
# Attributes of a job record that `job_to_item` leaves out when they are empty or at their default: a job
# edit must remove them when the edited job has none (the rest of what job management owns it always writes).
REMOVABLE_JOB_ATTRIBUTES = (
    "next_fire_at",
    "due_key",
    "paused_at",
    "resumed_at",
    "due_floor",
    "completion",
    "heartbeat_seconds",
    "concurrency",
    "alerts",
    "paused_reason",
    "calendars",
    "job_group",
)


def _opt_instant(value: datetime | None) -> str | None:
    return None if value is None else format_instant(value)


def _opt_instant_ms(value: datetime | None) -> str | None:
    return None if value is None else format_instant_ms(value)


def _opt_parse(value: Any) -> datetime | None:
    return None if value is None else parse_instant(str(value))


def schedule_to_item(schedule: Schedule) -> dict[str, Any]:
    return {
        "expression": schedule.expression,
        "timezone": schedule.timezone,
        "start_at": _opt_instant(schedule.start_at),
        "end_at": _opt_instant(schedule.end_at),
        "jitter_seconds": schedule.jitter_seconds,
        "dst_gap": str(schedule.dst_gap),
        "dst_repeat": str(schedule.dst_repeat),
    }


def schedule_from_item(item: Mapping[str, Any]) -> Schedule:
    return Schedule(
        expression=item["expression"],
        timezone=item.get("timezone", "UTC"),
        start_at=_opt_parse(item.get("start_at")),
        end_at=_opt_parse(item.get("end_at")),
        jitter_seconds=int(item.get("jitter_seconds", 0)),
        dst_gap=DstGapPolicy(item.get("dst_gap", "shift")),
        dst_repeat=DstRepeatPolicy(item.get("dst_repeat", "first")),
    )


def job_to_item(job: Job) -> dict[str, Any]:
    item: dict[str, Any] = {
        "job_id": job.job_id,
        "owner": job.owner,
        "name": job.name,
        "description": job.description,
        "tags": dict(job.tags),
        "schedule": {k: v for k, v in schedule_to_item(job.schedule).items() if v is not None},
        "target": {"kind": job.target.kind, "config": dict(job.target.config)},
        "shard": job.shard,
        "state": str(job.state),
        "version": job.version,
        "next_fire_at": _opt_instant(job.next_fire_at),
        "due_key": job.due_key,
        "paused_at": _opt_instant_ms(job.paused_at),
        "resumed_at": _opt_instant_ms(job.resumed_at),
        "due_floor": _opt_instant_ms(job.due_floor),
        # The policies stay top-level attributes of the item (their layout predates the value object).
        "overlap": str(job.policies.overlap),
        "missed_fire": str(job.policies.missed_fire),
        "retry": retry_to_item(job.policies.retry),
        "concurrency": concurrency_to_item(job.policies.concurrency),
        "timeout_seconds": job.timeout_seconds,
        # Stored only when it is not the target's default (`completion_from_item`).
        "completion": _completion_to_item(job.completion, job.target),
        "heartbeat_seconds": job.heartbeat_seconds,
        "retention_days": job.retention_days,
        "run_requests": job.run_requests or None,
        # Stored only when set: most jobs keep the default rules and no channel.
        "alerts": alerts_to_mapping(job.alerts) if job.alerts != NO_ALERTS else None,
        "paused_reason": job.paused_reason,
        "calendars": list(job.calendars) or None,
        # Stored only when named: most jobs stay in the default group ("group" is a DynamoDB reserved word).
        "job_group": job.group if job.group != DEFAULT_GROUP else None,
        "created_at": format_instant_ms(job.created_at),
        "updated_at": format_instant_ms(job.updated_at),
    }
    return {k: v for k, v in item.items() if v is not None}


def job_from_item(item: Mapping[str, Any]) -> Job:
    target = item["target"]
    return Job(
        job_id=item["job_id"],
        owner=item["owner"],
        name=item.get("name", ""),
        description=item.get("description", ""),
        tags=dict(item.get("tags", {})),
        schedule=schedule_from_item(item["schedule"]),
        target=target_from_item(target),
        shard=int(item["shard"]),
        state=JobState(item["state"]),
        version=int(item["version"]),
        next_fire_at=_opt_parse(item.get("next_fire_at")),
        paused_at=_opt_parse(item.get("paused_at")),
        resumed_at=_opt_parse(item.get("resumed_at")),
        due_floor=_opt_parse(item.get("due_floor")),
        policies=Policies(
            overlap=OverlapPolicy(item.get("overlap", OverlapPolicy.ALLOW)),
            missed_fire=MissedFirePolicy(item.get("missed_fire", MissedFirePolicy.RUN_ALL)),
            retry=retry_from_item(item.get("retry", {})),
            concurrency=concurrency_from_item(item.get("concurrency")),
        ),
        timeout_seconds=int(item.get("timeout_seconds", 60)),
        completion=completion_from_item(item.get("completion"), target_from_item(target)),
        heartbeat_seconds=_opt_int(item.get("heartbeat_seconds")),
        retention_days=int(item.get("retention_days", 30)),
        run_requests=int(item.get("run_requests", 0)),
        alerts=alerts_from_mapping(item["alerts"]) if item.get("alerts") else NO_ALERTS,
        paused_reason=item.get("paused_reason"),
        calendars=tuple(str(name) for name in item.get("calendars", ())),
        group=str(item.get("job_group", DEFAULT_GROUP)),
        created_at=parse_instant(item["created_at"]),
        updated_at=parse_instant(item["updated_at"]),
    )


# The attributes of a job's record the audit reads (`audited_job_from_item`).
AUDITED_JOB_ATTRIBUTES = (
    "job_id",
    "shard",
    "state",
    "version",
    "run_requests",
    "schedule",
    "next_fire_at",
    "due_floor",
    "created_at",
    "updated_at",
    "timeout_seconds",
    "due_key",
)


def audited_job_from_item(item: Mapping[str, Any]) -> AuditedJob:
    """What the audit reads of a job, from its record's AUDITED_JOB_ATTRIBUTES alone: each as
    `job_from_item` reads it (the store contract compares the two on every engine)."""
    return AuditedJob(
        job_id=item["job_id"],
        shard=int(item["shard"]),
        state=JobState(item["state"]),
        version=int(item["version"]),
        run_requests=int(item.get("run_requests", 0)),
        schedule=schedule_from_item(item["schedule"]),
        next_fire_at=_opt_parse(item.get("next_fire_at")),
        due_floor=_opt_parse(item.get("due_floor")),
        created_at=parse_instant(item["created_at"]),
        updated_at=parse_instant(item["updated_at"]),
        timeout_seconds=int(item.get("timeout_seconds", 60)),
        filed_under=filed_under(item),
    )


# The attributes of a job's record the watcher reads (`watched_job_from_item`).
WATCHED_JOB_ATTRIBUTES = ("job_id", "owner", "alerts", "retention_days", "resumed_at")


def watched_job_from_item(item: Mapping[str, Any]) -> WatchedJob:
    """What the watcher reads of a job, from its record or from the record's WATCHED_JOB_ATTRIBUTES alone:
    each as `job_from_item` reads it."""
    return WatchedJob(
        job_id=item["job_id"],
        owner=item["owner"],
        alerts=alerts_from_mapping(item["alerts"]) if item.get("alerts") else NO_ALERTS,
        retention_days=int(item.get("retention_days", 30)),
        resumed_at=_opt_parse(item.get("resumed_at")),
    )


def target_from_item(item: Mapping[str, Any]) -> Target:
    return Target(kind=item["kind"], config=dict(item.get("config", {})))


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _completion_to_item(completion: Completion, target: Target | None) -> str | None:
    """A completion as stored: left out when it is its target's default (most jobs, and every run's view
    of them, pay nothing for it); always kept when the target is not at hand (a view without its target)."""
    if target is not None and completion == default_completion(target):
        return None
    return str(completion)


def completion_from_item(value: Any, target: Target | None) -> Completion:
    """A stored completion; absent, the target's default, which is also how runs of a job or view stored
    before completions existed ended (delivery for SQS, SNS, EventBridge, Step Functions and asynchronous
    Lambda, response for the rest), and response for a view stored without its target."""
    if value is not None:
        return Completion(value)
    return Completion.RESPONSE if target is None else default_completion(target)


def open_key(shard: int, run_id: str) -> str:
    """Partition key of a run in the open-runs index: its shard and one of OPEN_KEY_SPREAD write shards
    (a stable hash of the run id), so a top-of-hour burst spreads its index writes over
    shards x OPEN_KEY_SPREAD keys instead of one key per shard."""
    digest = hashlib.blake2b(run_id.encode(), digest_size=4, person=b"tickwork-open").digest()
    return f"{shard:04d}#{int.from_bytes(digest, 'big') % OPEN_KEY_SPREAD}"


def open_keys(shard: int) -> list[str]:
    """Every open-runs partition of a shard (what the sweeper reads)."""
    return [f"{shard:04d}#{spread}" for spread in range(OPEN_KEY_SPREAD)]


def failed_key(owner: str, run_id: str) -> str:
    """Partition key of a failed run in the failed-runs index: its owner and one of FAILED_KEY_SPREAD write
    shards, so a burst of failures of one owner is not one hot key."""
    digest = hashlib.blake2b(run_id.encode(), digest_size=4, person=b"tickwork-fail").digest()
    return f"{owner}#{int.from_bytes(digest, 'big') % FAILED_KEY_SPREAD}"


def failed_keys(owner: str) -> list[str]:
    """Every failed-runs partition of an owner (a listing reads them all and merges)."""
    return [f"{owner}#{spread}" for spread in range(FAILED_KEY_SPREAD)]


def failed_order(finished_at: datetime, run_id: str) -> str:
    """Sort key in the failed-runs index: the finish time, then the run id (unique, so it is a cursor)."""
    return f"{format_instant_ms(finished_at)}#{run_id}"


def job_view_to_item(view: JobView) -> dict[str, Any]:
    item = {
        "version": view.version,
        "standing": str(view.standing),
        "target": None
        if view.target is None
        else {"kind": view.target.kind, "config": dict(view.target.config)},
        "timeout_seconds": view.timeout_seconds,
        "retry": retry_to_item(view.retry),
        "overlap": str(view.overlap),
        "completion": _completion_to_item(view.completion, view.target),
        "heartbeat_seconds": view.heartbeat_seconds,
        "concurrency": concurrency_to_item(view.concurrency),
        "calendars": list(view.calendars) or None,
    }
    return {k: v for k, v in item.items() if v is not None}


def job_view_from_item(item: Mapping[str, Any]) -> JobView:
    raw_target = item.get("target")
    target = None if raw_target is None else target_from_item(raw_target)
    return JobView(
        version=int(item["version"]),
        standing=Standing(item["standing"]),
        target=target,
        timeout_seconds=int(item["timeout_seconds"]),
        retry=retry_from_item(item["retry"]),
        overlap=OverlapPolicy(item["overlap"]),
        completion=completion_from_item(item.get("completion"), target),
        heartbeat_seconds=_opt_int(item.get("heartbeat_seconds")),
        concurrency=concurrency_from_item(item.get("concurrency")),
        calendars=tuple(str(name) for name in item.get("calendars", ())),
    )


def concurrency_to_item(concurrency: Concurrency | None) -> dict[str, Any] | None:
    """A job's concurrency key and limit as stored on the job and on its runs' views (None: absent)."""
    return None if concurrency is None else {"key": concurrency.key, "limit": concurrency.limit}


def concurrency_from_item(item: Mapping[str, Any] | None) -> Concurrency | None:
    return None if item is None else Concurrency(str(item["key"]), int(item["limit"]))


def retry_to_item(retry: RetryPolicy) -> dict[str, Any]:
    return {
        "max_attempts": retry.max_attempts,
        "backoff_base_seconds": retry.backoff_base_seconds,
        "backoff_max_seconds": retry.backoff_max_seconds,
    }


def retry_from_item(item: Mapping[str, Any]) -> RetryPolicy:
    """A stored retry policy; a field missing from an old item takes the policy's default."""
    default = RetryPolicy()
    return RetryPolicy(
        max_attempts=int(item.get("max_attempts", default.max_attempts)),
        backoff_base_seconds=float(item.get("backoff_base_seconds", default.backoff_base_seconds)),
        backoff_max_seconds=float(item.get("backoff_max_seconds", default.backoff_max_seconds)),
    )


def run_to_item(run: Run) -> dict[str, Any]:
    sweep_at = check_at(run)
    item: dict[str, Any] = {
        "job_id": run.job_id,
        "scheduled_for": format_instant(run.scheduled_for),
        "run_id": run.run_id,
        "due_at": format_instant(run.due_at),
        "state": str(run.state),
        "trigger": str(run.trigger),
        "job_version": run.job_version,
        "attempt": run.attempt,
        "shard": run.shard,
        "planned_at": format_instant_ms(run.planned_at),
        "dispatched_at": _opt_instant_ms(run.dispatched_at),
        "redispatched_at": _opt_instant_ms(run.redispatched_at),
        "started_at": _opt_instant_ms(run.started_at),
        "finished_at": _opt_instant_ms(run.finished_at),
        "lease_owner": run.lease_owner,
        "lease_expires_at": _opt_instant_ms(run.lease_expires_at),
        "retry_at": _opt_instant_ms(run.retry_at),
        "outcome": run.outcome,
        "reason": run.reason,
        "attempts": [dict(a) for a in run.attempts] or None,
        "expires_at": epoch_seconds(run.expires_at),
        "job_view": None if run.job_view is None else job_view_to_item(run.job_view),
        # Sparse index of unfinished runs: the sweeper's work list, never a scan of all runs.
        "open_key": None if sweep_at is None else open_key(run.shard, run.run_id),
        "check_at": None if sweep_at is None else format_instant_ms(sweep_at),
        "owner": run.owner or None,
        "queue_carried": True if run.queue_carried else None,
        "heartbeat_at": _opt_instant_ms(run.heartbeat_at),
        "tracking": run.tracking,
        "previous_slot": _opt_instant(run.previous_slot),
        "next_slot": _opt_instant(run.next_slot),
        "retry_requested": True if run.retry_requested else None,
    }
    if run.state is RunState.FAILED and run.owner and run.finished_at is not None:
        item["failed_key"] = failed_key(run.owner, run.run_id)
        item["failed_order"] = failed_order(run.finished_at, run.run_id)
    return {k: v for k, v in item.items() if v is not None}


def run_update_base(expected: Run) -> dict[str, Any]:
    """The item a run update is diffed from: `expected` as mapped, plus the sweeper's index attributes even
    when its mapping has none. A queue-carried run that waited for a retry keeps its index entry through
    its next claim (a claim leaves the index alone) although its mapping, running, has none; the update
    that ends it must still remove the entry. Removing an attribute that is not there costs nothing."""
    item = run_to_item(expected)
    for name in ("open_key", "check_at"):
        item.setdefault(name, "")
    return item


def run_before_from_item(item: Mapping[str, Any]) -> RunBefore:
    """What a change tells of the run as it was, from its record (a stream's old image) or from the
    embedded change feed's note of it (only these two attributes)."""
    started = item.get("started_at")
    return RunBefore(RunState(str(item["state"])), None if started is None else parse_instant(str(started)))


def run_from_item(item: Mapping[str, Any]) -> Run:
    due_at = parse_instant(item["due_at"])
    started_at = _opt_parse(item.get("started_at"))
    return Run(
        job_id=item["job_id"],
        scheduled_for=parse_instant(item["scheduled_for"]),
        due_at=due_at,
        state=RunState(item["state"]),
        trigger=Trigger(item["trigger"]),
        job_version=int(item["job_version"]),
        attempt=int(item.get("attempt", 0)),
        shard=int(item.get("shard", 0)),
        planned_at=parse_instant(item["planned_at"]),
        dispatched_at=_opt_parse(item.get("dispatched_at")),
        redispatched_at=_opt_parse(item.get("redispatched_at")),
        started_at=started_at,
        finished_at=_opt_parse(item.get("finished_at")),
        # Derived, not stored: the claim is one UpdateItem that cannot compute it (the first start minus the
        # due time, which is what `claimed` records).
        start_delay_ms=None if started_at is None else int((started_at - due_at).total_seconds() * 1000),
        lease_owner=item.get("lease_owner"),
        lease_expires_at=_opt_parse(item.get("lease_expires_at")),
        retry_at=_opt_parse(item.get("retry_at")),
        outcome=item.get("outcome"),
        reason=item.get("reason"),
        attempts=tuple(item.get("attempts", ())),
        expires_at=datetime.fromtimestamp(int(item["expires_at"]), tz=UTC),
        job_view=None if item.get("job_view") is None else job_view_from_item(item["job_view"]),
        owner=str(item.get("owner", "")),
        queue_carried=bool(item.get("queue_carried", False)),
        heartbeat_at=_opt_parse(item.get("heartbeat_at")),
        tracking=None if item.get("tracking") is None else str(item["tracking"]),
        previous_slot=_opt_parse(item.get("previous_slot")),
        next_slot=_opt_parse(item.get("next_slot")),
        retry_requested=bool(item.get("retry_requested", False)),
    )


def request_to_item(request: RunRequest) -> dict[str, Any]:
    return {
        "request_key": request.request_key,
        "owner": request.owner,
        "kind": str(request.kind),
        "job_id": request.job_id,
        "fingerprint": request.fingerprint,
        "created_at": format_instant_ms(request.created_at),
        "expires_at": epoch_seconds(request.expires_at),
        "answer": dict(request.answer),
    }


def request_from_item(item: Mapping[str, Any]) -> RunRequest:
    return RunRequest(
        request_key=str(item["request_key"]),
        owner=str(item["owner"]),
        kind=RequestKind(item["kind"]),
        job_id=str(item["job_id"]),
        fingerprint=str(item["fingerprint"]),
        created_at=parse_instant(str(item["created_at"])),
        expires_at=datetime.fromtimestamp(int(item["expires_at"]), tz=UTC),
        answer=dict(item.get("answer", {})),
    )


def filed_under(item: Mapping[str, Any]) -> str | None:
    """The `due` key a stored job record is filed under (None: in no `due` minute)."""
    due = item.get("due_key")
    return None if due is None else str(due)
