"""Request and response bodies of groups and bulk actions (handlers/api.py, domain/bulk.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tickwork.api.models import _TAGS_SCHEMA, MAX_TAGS, GroupName, Instant, RequestModel, TagKey, TagValue
from tickwork.domain.bulk import BulkAction, BulkKind, Selector
from tickwork.domain.models import JobState
from tickwork.domain.revisions import MAX_NOTE_CHARS
from tickwork.services.bulk import BulkRequest
from tickwork.services.jobs import GroupCounts


class BulkActionIn(RequestModel):
    """Pause, resume, or retry the failed runs of every job of yours a group and/or tags select."""

    action: Literal["pause", "resume", "retry_failed"]
    group: GroupName | None = Field(default=None, description="Only this group's jobs.")
    tags: dict[TagKey, TagValue] = Field(
        default_factory=dict,
        max_length=MAX_TAGS,
        description="Only jobs carrying every one of these tags (with a group: both must hold).",
        json_schema_extra=_TAGS_SCHEMA,
    )
    note: str = Field(
        min_length=1, max_length=MAX_NOTE_CHARS, description="Why: required, in every job's revision."
    )
    resume_at: Instant | None = Field(
        default=None,
        description="pause only: a maintenance window's end (at most 30 days ahead): the jobs this pause "
        "paused are resumed then, their missed fires following each job's missed-fire policy.",
    )
    runs_from: Instant | None = Field(
        default=None, alias="from", description="retry_failed only: runs that failed at or after this."
    )
    runs_to: Instant | None = Field(
        default=None, alias="to", description="retry_failed only: runs that failed at or before this."
    )

    def to_request(self) -> BulkRequest:
        return BulkRequest(
            kind=BulkKind(self.action),
            selector=Selector(self.group, dict(self.tags)),
            note=self.note,
            resume_at=self.resume_at,
            runs_from=self.runs_from,
            runs_to=self.runs_to,
        )


class BulkProgressOut(BaseModel):
    scanned: int = Field(description="Your jobs (or failed runs) looked at so far.")
    matched: int = Field(description="Of them, those the selector takes.")
    changed: int = Field(description="Paused, resumed or retried.")
    unchanged: int = Field(description="Already as wanted (a paused job, to a pause): nothing written.")
    failed: int
    failures: list[str] = Field(description="The first 20 failures: `<job or run id>: <why>`.")


class BulkActionOut(BaseModel):
    # `from` and `to` as the request names them (and backfill does).
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    id: str
    action: str
    group: str | None
    tags: dict[str, str]
    note: str
    actor: str
    state: Literal["scheduled", "running", "done"] = Field(
        description="scheduled: due later (a maintenance window's resume); running: being worked through "
        "(by this request, then the watcher's passes); done."
    )
    progress: BulkProgressOut
    created_at: datetime
    not_before: datetime = Field(description="When it starts (a maintenance resume: the window's end).")
    finished_at: datetime | None
    resume_at: datetime | None
    resume_action: str | None = Field(description="A maintenance pause: the action that resumes its jobs.")
    maintenance_of: str | None = Field(description="A maintenance resume: the pause whose jobs it resumes.")
    runs_from: datetime | None = Field(alias="from")
    runs_to: datetime | None = Field(alias="to")

    @classmethod
    def of(cls, action: BulkAction) -> BulkActionOut:
        p = action.progress
        return cls.model_validate(
            dict(
                id=action.action_id,
                action=str(action.kind),
                group=action.selector.group,
                tags=dict(action.selector.tags),
                note=action.note,
                actor=action.actor,
                state=action.state.value,
                progress=BulkProgressOut(
                    scanned=p.scanned,
                    matched=p.matched,
                    changed=p.changed,
                    unchanged=p.unchanged,
                    failed=p.failed,
                    failures=list(p.failures),
                ),
                created_at=action.created_at,
                not_before=action.not_before,
                finished_at=action.finished_at,
                resume_at=action.resume_at,
                resume_action=action.resume_action,
                maintenance_of=action.maintenance_of,
                runs_from=action.runs_from,
                runs_to=action.runs_to,
            )
        )


class BulkActionsOut(BaseModel):
    items: list[BulkActionOut]


class GroupOut(BaseModel):
    name: str
    jobs: int
    active: int
    paused: int


class GroupsOut(BaseModel):
    items: list[GroupOut]
    scanned: int = Field(description="Your jobs counted.")
    complete: bool = Field(description="False: the count stopped at the request's time budget (see scanned).")

    @classmethod
    def of(cls, counts: GroupCounts) -> GroupsOut:
        items = [
            GroupOut(
                name=name,
                jobs=sum(by_state.values()),
                active=by_state[JobState.ACTIVE],
                paused=by_state[JobState.PAUSED],
            )
            for name, by_state in counts.groups.items()
        ]
        return cls(items=items, scanned=counts.scanned, complete=counts.complete)
