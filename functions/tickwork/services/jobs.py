"""Job management: create (optionally idempotent), list, edit, pause, resume, delete, preview. A write whose
next fire falls inside the ticker's horizon plans those fires itself, in the same transaction, so no tick can
pass them over. Every user write bumps the version; the store's condition (version AND next fire) makes a
write that raced the ticker fail, and the service re-reads and tries again."""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TypeVar

from tickwork.domain.alert_rules import NO_ALERTS, AlertRules, ChannelKind, address_key
from tickwork.domain.bulk import is_maintenance
from tickwork.domain.calendars import Calendar, exclusion
from tickwork.domain.clock import Clock
from tickwork.domain.errors import (
    ConflictError,
    DispatchError,
    NotFoundError,
    TargetNotGrantedError,
    ValidationError,
    VersionMismatchError,
)
from tickwork.domain.execution import VIEW_REFRESH_WINDOW, rewritten_views
from tickwork.domain.grants import TargetGrants, refusal
from tickwork.domain.jobs import (
    JobPatch,
    JobSpec,
    apply_patch,
    describe_outcomes,
    describe_paused_fires,
    fires_between,
    resume_from,
    rollback_patch,
)
from tickwork.domain.models import (
    Job,
    JobState,
    JobView,
    MissedFirePolicy,
    Run,
    RunState,
    Target,
    shard_of,
)
from tickwork.domain.planning import PausedFireOutcomes, paused_fire_outcomes, plan_batch
from tickwork.domain.quotas import OwnerQuotas
from tickwork.domain.revisions import Action, Authored, checked_note
from tickwork.domain.schedule import (
    DstGapPolicy,
    FireTime,
    Schedule,
    describe_schedule,
    next_fire_after,
    preview,
)
from tickwork.domain.secrets import (
    REDACTED,
    SECRET_HEADERS,
    SECRET_REFS,
    HeaderSecretStore,
    check_kept_origin,
    has_secret_values,
    is_credential_header,
    kept_reference,
    sealed,
    with_plain_values,
)
from tickwork.domain.targets import validate_target
from tickwork.services.planning import DEFAULT_LOOKAHEAD
from tickwork.services.ports import (
    AlertDefaults,
    CalendarReader,
    Dispatcher,
    EmailChannel,
    ManagedJobStore,
    RevisionReader,
)
from tickwork.services.runs import decode_cursor, encode_cursor, plausible_id

logger = logging.getLogger(__name__)
T = TypeVar("T")


def new_job_id() -> str:
    return "job_" + uuid.uuid4().hex[:20]


@dataclass(frozen=True, slots=True)
class JobServiceConfig:
    shard_count: int
    lookahead: timedelta = DEFAULT_LOOKAHEAD
    # A transaction holds at most 100 items; with the interval floor (10 s) and lookahead 120 s a write plans
    # at most 13 runs, far below this bound.
    max_self_planned_runs: int = 90
    # The AWS resources each owner's jobs may target (None: any the executor's role may call: one tenant).
    grants: TargetGrants | None = None
    quotas: OwnerQuotas = field(default_factory=OwnerQuotas)


# What a channel's address is checked with: the payload a target of its kind needs (the real one is the
# event, added at send time).
_PROBE_PAYLOAD = {"http": {"body": "{}"}, "sns": {"message": "{}"}}
MAX_WRITE_ATTEMPTS = 5  # re-reads after the ticker advanced the job between our read and our write
MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 20
# Filters (state, tag) apply after reading ids: one request reads at most this many pages of ids.
MAX_PAGES_PER_REQUEST = 10
PAUSED_FIRES_COUNT_CAP = 10_000
_PREVIEW_SHIFT_WINDOW = 100  # fires of the `shift` twin compared with a `skip` schedule to find skipped ones


def idempotent_job_id(owner: str, key: str) -> str:
    """The job id an Idempotency-Key names: the same (owner, key) always names the same job, so a retried
    create meets its first attempt at the store's conditional put."""
    return "job_" + hashlib.sha256(f"{owner}\0{key}".encode()).hexdigest()[:20]


class IdempotencyKeyReusedError(ConflictError):
    """The Idempotency-Key already created a job from a different request body."""


# DynamoDB's limit on the items of one transaction: a job write, the runs it plans and the views it rewrites,
# and its revision (the revision in the job's history, the entry in the owner's audit log).
MAX_TRANSACTION_ITEMS = 100
REVISION_ITEMS = 2
TICKWORK = "tickwork"  # the actor of the writes Tickwork makes itself (an auto-pause)


@dataclass(frozen=True, slots=True)
class Author:
    """Who makes a job write and why (None: the owner, no note)."""

    actor: str
    note: str | None = None


def _authored(by: Author | None, owner: str, action: Action, now: datetime) -> Authored:
    """The write's revision as the store records it: the note checked (required for some actions)."""
    author = by or Author(owner)
    note = author.note if action is Action.AUTO_PAUSE else checked_note(action, author.note)
    return Authored(author.actor, action, now, note)


@dataclass(frozen=True, slots=True)
class CreateResult:
    job: Job
    replayed: bool  # True: an earlier request with the same Idempotency-Key created it


@dataclass(frozen=True, slots=True)
class PausedFires:
    """What resuming does with the fires that fell inside the pause."""

    count: int
    count_capped: bool  # True: at least `count` (counting stopped at the cap)
    policy: MissedFirePolicy
    effect: str
    outcomes: PausedFireOutcomes = field(default_factory=PausedFireOutcomes)  # of the fires counted


@dataclass(frozen=True, slots=True)
class ResumeResult:
    job: Job
    paused_fires: PausedFires
    # The auto-pause this resume cleared (its reason), None if the owner had paused the job.
    cleared_auto_pause: str | None = None


@dataclass(frozen=True, slots=True)
class JobQuery:
    limit: int = DEFAULT_PAGE_SIZE
    cursor: str | None = None
    state: JobState | None = None
    tag: tuple[str, str] | None = None  # key, value
    group: str | None = None
    name: str | None = None  # jobs whose name contains this, ignoring case


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: tuple[Job, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class GroupCounts:
    groups: Mapping[str, Counter[JobState]]
    scanned: int
    complete: bool


# GET /groups reads every job of the owner: within the API's 29 s, this much of it.
GROUPS_BUDGET_SECONDS = 20.0


@dataclass(frozen=True, slots=True)
class SchedulePreview:
    schedule: Schedule
    description: str
    fires: tuple[FireTime, ...]
    skipped: tuple[FireTime, ...]  # dst_gap=skip: wall-clock times a spring-forward gap swallowed
    # Fires one of the job's calendars excludes (as the calendars are now), with why.
    excluded: Mapping[datetime, str] = field(default_factory=dict)


class JobService:
    def __init__(
        self,
        store: ManagedJobStore,
        dispatcher: Dispatcher,
        clock: Clock,
        config: JobServiceConfig,
        new_id: Callable[[], str] = new_job_id,
        secrets: HeaderSecretStore | None = None,
        alert_defaults: AlertDefaults | None = None,
        email: EmailChannel | None = None,
        calendars: CalendarReader | None = None,
    ) -> None:
        self._store = store
        self._dispatcher = dispatcher
        self._clock = clock
        self._config = config
        self._new_id = new_id
        self._secrets = secrets  # where secret header values go (None: a job may not have any)
        self._alert_defaults = alert_defaults  # each owner's default rules (None: NO_ALERTS for all)
        self._email = email  # e-mail channels' subscriptions (None: no e-mail channel may be set)
        self._calendars = calendars  # the owners' exclusion calendars (None: a job may not name any)

    # --- create ------------------------------------------------------------------------------------

    def create(self, owner: str, spec: JobSpec, by: Author | None = None) -> Job:
        return self._create(owner, spec, self._new_id(), None, by)

    def create_idempotent(
        self,
        owner: str,
        spec: JobSpec,
        key: str,
        fingerprint: Callable[[Mapping[str, str]], str],
        by: Author | None = None,
    ) -> CreateResult:
        """Create under the id the key names. A retry with the same request (same fingerprint) returns the
        job its first attempt created; the same key with a different request is a conflict. `fingerprint`
        is given the references the request's secret header values get: the stored fingerprint covers them,
        never the values (a hash of a short password would let a reader of the table guess it)."""
        job_id = idempotent_job_id(owner, key)
        refs = self._sealed(owner, spec.target).config.get(SECRET_REFS) or {}
        stored = fingerprint(refs)
        # A retry finds its first attempt before any check (a create that reached the quota replays) and
        # before any secret is stored for it.
        replayed = self._replay(owner, job_id, stored)
        if replayed is not None:
            return replayed
        try:
            return CreateResult(self._create(owner, spec, job_id, stored, by), replayed=False)
        except VersionMismatchError:
            raise
        except ConflictError:
            replayed = self._replay(owner, job_id, stored)
            if replayed is None:
                # The put lost to run records left by a deleted job of the same key.
                raise IdempotencyKeyReusedError(
                    "this Idempotency-Key belonged to a job that was deleted; use a new key"
                ) from None
            return replayed

    def _replay(self, owner: str, job_id: str, fingerprint: str) -> CreateResult | None:
        """The job an earlier request with this key created (None: none yet); a conflict when that request
        differs from this one."""
        existing = self._store.get_job_fingerprint(job_id)
        if existing is None:
            return None
        job, stored_fingerprint = existing
        if job.owner != owner or stored_fingerprint != fingerprint:
            raise IdempotencyKeyReusedError(
                f"this Idempotency-Key already created job {job_id} from a different request"
            )
        return CreateResult(job, replayed=True)

    def _check_grant(self, owner: str, target: Target) -> None:
        grants = self._config.grants
        if grants is not None and not grants.allows(owner, target):
            raise TargetNotGrantedError(refusal(owner, target))

    def _check_channels(self, owner: str, rules: AlertRules) -> None:
        """A channel is a target Tickwork calls for the owner: its address is checked as that target's is
        (a 422 naming the channel's field), and a topic against the owner's grants (a 403)."""
        for index, channel in enumerate(rules.channels):
            key = address_key(channel.kind)
            if channel.kind is ChannelKind.EMAIL:
                if self._email is None:
                    raise ValidationError(
                        f"alerts.channels[{index}].{key}",
                        "this deployment sends no e-mail (the stack's notifications topic is not set): use "
                        "a webhook, a Slack webhook or an SNS topic",
                    )
                continue
            try:
                config = {**channel.target_config(), **_PROBE_PAYLOAD[channel.target_kind]}
                target = validate_target(channel.target_kind, config)
            except ValidationError as error:
                raise ValidationError(f"alerts.channels[{index}].{key}", error.message) from None
            self._check_grant(owner, target)

    def _subscribe(self, owner: str, rules: AlertRules, before: AlertRules = NO_ALERTS) -> None:
        """Subscribe the e-mail addresses `rules` adds (once the other checks passed: a refused write
        subscribes nobody). SNS mails each new address a confirmation; nothing reaches it before it is
        confirmed. An address another owner holds is a 422 naming the channel."""
        if self._email is None:
            return
        for index, channel in enumerate(rules.channels):
            if channel.kind is not ChannelKind.EMAIL or channel in before.channels:
                continue
            try:
                self._email.subscribe(owner, channel.address)
            except ValidationError as error:
                raise ValidationError(f"alerts.channels[{index}].address", error.message) from None

    def _sealed(self, owner: str, target: Target, current: Target | None = None) -> Target:
        """The target as it is stored: references in place of its secret header values (domain/secrets.py);
        a REDACTED value keeps the reference `current` (the job's stored target) has for that header.
        Nothing is stored yet: `_keep_secrets` does, once the write is known to be allowed."""
        if not has_secret_values(target):
            return target
        store = self._secret_store()

        def reference(name: str, value: str) -> str:
            return kept_reference(current, name) if value == REDACTED else store.reference(owner, value)

        return sealed(target, reference)

    def _keep_secrets(self, owner: str, target: Target) -> None:
        """Store the target's secret header values (idempotent: a value's reference names it), just before
        the write that references them, after every check passed. A kept value (REDACTED) is stored
        already: it is skipped."""
        values: Mapping[str, str] = target.config.get(SECRET_HEADERS) or {}
        if values:
            store = self._secret_store()
            for value in values.values():
                if value != REDACTED:
                    store.put(owner, value)

    def _secret_store(self) -> HeaderSecretStore:
        if self._secrets is None:
            raise ValidationError(
                f"target.config.{SECRET_HEADERS}",
                "this deployment has no secret store, so it cannot keep secret header values",
            )
        return self._secrets

    def _owner_job_count(self, owner: str, up_to: int) -> int:
        """How many jobs the owner has, counted up to `up_to`: page after page, since one page of the index
        may stop short of its limit (DynamoDB returns at most 1 MB a page)."""
        count, after, more = 0, None, True
        while more and count < up_to:
            ids, more = self._store.owner_job_ids(owner, limit=up_to - count, after_job_id=after)
            if not ids:
                break
            count += len(ids)
            after = ids[-1]
        return count

    def alert_defaults(self, owner: str) -> AlertRules:
        """The rules a job the owner creates without `alerts` gets."""
        found = None if self._alert_defaults is None else self._alert_defaults.get_defaults(owner)
        return NO_ALERTS if found is None else found

    def set_alert_defaults(self, owner: str, rules: AlertRules | None) -> AlertRules:
        """Set (None: remove) the owner's defaults; checked as a job's rules are. Jobs already created
        keep their own rules."""
        if self._alert_defaults is None:
            raise ValidationError("alerts", "this deployment keeps no per-owner defaults")
        if rules is not None:
            self._check_channels(owner, rules)
            self._subscribe(owner, rules)
        self._alert_defaults.set_defaults(owner, rules)
        return NO_ALERTS if rules is None else rules

    def _create(
        self, owner: str, spec: JobSpec, job_id: str, fingerprint: str | None, by: Author | None = None
    ) -> Job:
        self._check_grant(owner, spec.target)
        self.calendars_of(owner, spec.calendars, strict=True)
        alerts = spec.alerts if spec.alerts is not None else self.alert_defaults(owner)
        self._check_channels(owner, alerts)
        quotas = self._config.quotas
        quotas.check_schedule(spec.schedule)
        if quotas.max_jobs is not None:
            # The owner's jobs from the by_owner index (eventually consistent: creates racing at the limit may
            # pass it by the few that race).
            quotas.check_job_count(self._owner_job_count(owner, up_to=quotas.max_jobs))
        now = self._clock.now()
        job = Job(
            job_id=job_id,
            owner=owner,
            name=spec.name,
            description=spec.description,
            tags=dict(spec.tags),
            schedule=spec.schedule,
            target=self._sealed(owner, spec.target),
            shard=shard_of(job_id, self._config.shard_count),
            created_at=now,
            updated_at=now,
            next_fire_at=next_fire_after(spec.schedule, now),
            policies=spec.policies,
            timeout_seconds=spec.timeout_seconds,
            completion=spec.resolved_completion,
            heartbeat_seconds=spec.heartbeat_seconds,
            retention_days=spec.retention_days,
            alerts=alerts,
            calendars=spec.calendars,
            group=spec.group,
        )
        job, runs = self._plan_own_horizon(job, now)
        self._keep_secrets(owner, spec.target)
        if spec.alerts is not None:  # (the owner's defaults were subscribed when they were set)
            self._subscribe(owner, alerts)
        authored = _authored(by, owner, Action.CREATE, now)
        if fingerprint is None:
            self._store.create_job(job, runs, authored)
        else:
            self._store.create_job_with_fingerprint(job, runs, fingerprint, authored)
        self._dispatch(runs, now)
        return job

    # --- read --------------------------------------------------------------------------------------

    def get(self, owner: str, job_id: str) -> Job:
        job = self._store.get_job(job_id) if plausible_id(job_id) else None
        if job is None or job.owner != owner:
            # Another owner's job answers exactly like a missing one.
            raise NotFoundError(f"job {job_id} not found")
        return job

    def list(self, owner: str, query: JobQuery) -> JobPage:
        """The owner's jobs in id order, optionally only those in `state`, carrying `tag`, or whose name
        contains `name` (ignoring case)."""
        if not 1 <= query.limit <= MAX_PAGE_SIZE:
            raise ValidationError("limit", f"must be 1-{MAX_PAGE_SIZE}")
        scope = f"jobs\0{owner}"
        after = None if query.cursor is None else decode_cursor(query.cursor, ["job_id"], scope)["job_id"]
        jobs: list[Job] = []
        more = True
        for _ in range(MAX_PAGES_PER_REQUEST):
            ids, more = self._store.owner_job_ids(owner, limit=query.limit - len(jobs), after_job_id=after)
            if ids:
                after = ids[-1]
                found = self._store.get_jobs(ids)
                # The index lags the table: an id whose job is gone (or not yet visible) is passed over.
                jobs.extend(
                    job
                    for job in (found.get(job_id) for job_id in ids)
                    if job is not None and job.owner == owner and _matches(job, query)
                )
            if not more or len(jobs) >= query.limit:
                break
        next_cursor = encode_cursor({"job_id": after}, scope) if more and after is not None else None
        return JobPage(tuple(jobs), next_cursor)

    def groups(self, owner: str, budget_seconds: float = GROUPS_BUDGET_SECONDS) -> GroupCounts:
        """The owner's groups with their jobs counted by state, from one pass over the owner's jobs (the
        `by_owner` index, a page at a time): a pass cut by the budget says so (`complete` false)."""
        counts: dict[str, Counter[JobState]] = {}
        after, more, scanned = None, True, 0
        started = time.monotonic()
        while more and time.monotonic() - started < budget_seconds:
            ids, more = self._store.owner_job_ids(owner, limit=MAX_PAGE_SIZE, after_job_id=after)
            if not ids:
                break
            after, scanned = ids[-1], scanned + len(ids)
            for job in self._store.get_jobs(ids).values():
                if job.owner == owner:
                    counts.setdefault(job.group, Counter())[job.state] += 1
        return GroupCounts({g: counts[g] for g in sorted(counts)}, scanned, complete=not more)

    def preview(self, owner: str, job_id: str, count: int, after: datetime | None = None) -> SchedulePreview:
        job = self.get(owner, job_id)
        return self.preview_schedule(
            job.schedule, count, after, calendars=self.calendars_of(owner, job.calendars)
        )

    def calendars_of(self, owner: str, names: Sequence[str], *, strict: bool = False) -> tuple[Calendar, ...]:
        """The owner's calendars named, in order. `strict` (a job write): a ValidationError naming the
        first that does not exist; otherwise (a preview) a calendar deleted since is left out, as the
        claim leaves it out."""
        if not names:
            return ()
        if self._calendars is None:
            raise ValidationError("calendars", "this deployment keeps no calendars")
        found = self._calendars.get_calendars(owner, names)
        for index, name in enumerate(names):
            if strict and name not in found:
                raise ValidationError(
                    f"calendars[{index}]",
                    f"no calendar named '{name}': create it first (PUT /calendars/{name})",
                )
        return tuple(found[name] for name in names if name in found)

    def preview_schedule(
        self,
        schedule: Schedule,
        count: int,
        after: datetime | None = None,
        calendars: Sequence[Calendar] = (),
    ) -> SchedulePreview:
        """The next `count` fires after `after` (default now), for dst_gap=skip the ones skipped, and the
        ones `calendars` exclude (each still listed: it keeps its slot, recorded `excluded`)."""
        start = self._clock.now() if after is None else after
        fires = tuple(preview(schedule, start, count))
        skipped: tuple[FireTime, ...] = ()
        if schedule.dst_gap is DstGapPolicy.SKIP:
            twin = preview(replace(schedule, dst_gap=DstGapPolicy.SHIFT), start, _PREVIEW_SHIFT_WINDOW)
            last = fires[-1].at if len(fires) == count else None
            skipped = tuple(f for f in twin if f.dst == "shifted" and (last is None or f.at <= last))
        excluded = {fire.at: why for fire in fires if (why := exclusion(calendars, fire.at)) is not None}
        return SchedulePreview(schedule, describe_schedule(schedule), fires, skipped, excluded)

    # --- edit --------------------------------------------------------------------------------------

    def update(
        self, owner: str, job_id: str, patch: JobPatch, if_match: int | None = None, by: Author | None = None
    ) -> Job:
        return self._update(owner, job_id, patch, if_match, by, Action.UPDATE)

    def rollback(
        self,
        owner: str,
        job_id: str,
        revision: int,
        revisions: RevisionReader,
        if_match: int | None = None,
        by: Author | None = None,
    ) -> Job:
        """Write the job's definition at `revision` back, as a new revision (its note is required): an edit
        of every field a person sets, checked as any edit is (grants, quotas, channels)."""
        self.get(owner, job_id)  # another owner's job: NotFoundError before its history is read
        kept = revisions.get_revision(job_id, revision)
        if kept is None or kept.owner != owner or not kept.definition:
            raise NotFoundError(f"job {job_id} has no revision {revision} to roll back to")
        old = revisions.job_at(kept)
        plain = old.target.config.get("headers") or {}
        if any(is_credential_header(str(name)) for name in plain):
            raise ValidationError(
                "revision",
                f"revision {revision}'s target held a credential header in plain text (written before secret "
                "headers were kept as references; its revision kept no value): give the target again instead",
            )
        validate_target(old.target.kind, old.target.config, stored=True)  # today's rules: a 422 naming it
        return self._update(owner, job_id, rollback_patch(old), if_match, by, Action.ROLLBACK)

    def _update(
        self,
        owner: str,
        job_id: str,
        patch: JobPatch,
        if_match: int | None,
        by: Author | None,
        action: Action,
    ) -> Job:
        """Partial update. With `if_match`, only if the job is still at that version (else
        VersionMismatchError); without, the last writer wins."""
        given = patch.target if isinstance(patch.target, Target) else None

        def edit(job: Job, now: datetime, room: int) -> tuple[Job, tuple[Run, ...]] | None:
            # Sealed against the job as read: a REDACTED value keeps what it stores for that header.
            target = None if given is None else with_plain_values(given, job.target)
            patch_now = patch
            if target is not None:
                check_kept_origin(target, job.target)
                patch_now = replace(patch, target=self._sealed(owner, target, job.target))
            edited = apply_patch(job, patch_now, now)
            if edited.target != job.target:  # (sealed: equal secret values give equal references)
                self._check_grant(owner, edited.target)
            if edited.schedule != job.schedule:
                self._config.quotas.check_schedule(edited.schedule)
            if edited.calendars != job.calendars:
                self.calendars_of(owner, edited.calendars, strict=True)
            if edited.alerts != job.alerts:
                self._check_channels(owner, edited.alerts)
                self._subscribe(owner, edited.alerts, job.alerts)
            if target is not None:
                self._keep_secrets(owner, target)  # (checks passed; a lost write's retry stores nothing new)
            if edited.next_fire_at == job.next_fire_at and edited.schedule == job.schedule:
                return edited, ()
            return self._plan_own_horizon(edited, now, room)

        return self._edit(owner, job_id, if_match, edit, action, by)[1]

    def owner_of_job(self, job_id: str) -> str:
        """Whose job this is (the operator scope acts on any owner's job as that owner's): NotFoundError."""
        job = self._store.get_job(job_id)
        if job is None:
            raise NotFoundError(f"job {job_id} not found")
        return job.owner

    def pause(
        self,
        owner: str,
        job_id: str,
        if_match: int | None = None,
        *,
        reason: str | None = None,
        cause_at: datetime | None = None,
        by: Author | None = None,
    ) -> Job:
        """Paused jobs leave the `due` index; planned runs are cancelled when an executor claims them.
        `reason`: Tickwork pauses the job itself (auto-pause), and says why on the job; such a pause does
        nothing to a job resumed after `cause_at` (the owner resumed it after the failure that paused it).
        `reason` with `by`: the caller's pause that says why on the job (a maintenance window's)."""

        def edit(job: Job, now: datetime, room: int) -> tuple[Job, tuple[Run, ...]] | None:
            if job.state is JobState.PAUSED:
                return None
            if cause_at is not None and job.resumed_at is not None and job.resumed_at > cause_at:
                return None
            paused = replace(
                job,
                state=JobState.PAUSED,
                paused_at=now,
                paused_reason=reason,
                updated_at=now,
                version=job.version + 1,
            )
            return paused, ()

        if reason is not None and by is None:  # Tickwork's own pause: the reason is its note
            return self._edit(owner, job_id, if_match, edit, Action.AUTO_PAUSE, Author(TICKWORK, reason))[1]
        return self._edit(owner, job_id, if_match, edit, Action.PAUSE, by)[1]

    def resume(
        self, owner: str, job_id: str, if_match: int | None = None, by: Author | None = None
    ) -> ResumeResult:
        """The job fires again from the first fire after its pause: the fires that fell inside the pause
        follow the job's missed-fire policy, as after an outage. What fits in one transaction is planned
        here; the job is filed in the `due` index under `due_floor`, so the next tick plans the rest."""

        def edit(job: Job, now: datetime, room: int) -> tuple[Job, tuple[Run, ...]] | None:
            if job.state is JobState.ACTIVE:
                return None
            resumed = replace(
                job,
                state=JobState.ACTIVE,
                paused_at=None,
                paused_reason=None,
                resumed_at=now,
                updated_at=now,
                version=job.version + 1,
                next_fire_at=next_fire_after(job.schedule, resume_from(job, now)),
            )
            return self._plan_own_horizon(resumed, now, room)

        # The fires inside the pause that already have runs (planned before it), read before the resume
        # writes its own: no tick plans a paused job, so nothing else adds to them meanwhile.
        paused = self.get(owner, job_id)
        existing: dict[datetime, RunState] = {}
        if paused.state is JobState.PAUSED and paused.paused_at is not None:
            existing = self._store.run_states_between(job_id, paused.paused_at, self._clock.now())
        before, after = self._edit(owner, job_id, if_match, edit, Action.RESUME, by)
        if before is after or before.paused_at is None or after.resumed_at is None:
            effect = describe_paused_fires(after.policies.missed_fire, 0, False, None)
            return ResumeResult(after, PausedFires(0, False, after.policies.missed_fire, effect))
        # A maintenance window's pause says why on the job too, but Tickwork did not pause it on its own.
        cleared = None if is_maintenance(before.paused_reason) else before.paused_reason
        fires, capped = fires_between(
            after.schedule, before.paused_at, after.resumed_at, PAUSED_FIRES_COUNT_CAP
        )
        outcomes = paused_fire_outcomes(after, fires, existing, after.resumed_at)
        count = len(fires)
        if outcomes.cancelled or outcomes.pending:
            effect = describe_outcomes(after.policies.missed_fire, count, capped, outcomes)
        else:
            effect = describe_paused_fires(
                after.policies.missed_fire, count, capped, fires[-1] if fires else None
            )
        return ResumeResult(
            after, PausedFires(count, capped, after.policies.missed_fire, effect, outcomes), cleared
        )

    def delete(self, owner: str, job_id: str, if_match: int | None = None, by: Author | None = None) -> None:
        """Planned runs stay as history; an executor that claims one records it `cancelled` (the delete
        marks their job views deleted in the same transaction)."""
        for attempt in range(MAX_WRITE_ATTEMPTS):
            job = self.get(owner, job_id)
            _check_version(job, if_match)
            now = self._clock.now()
            unclaimed = self._unclaimed_runs(job_id, now)
            try:
                self._store.delete_job(
                    job, rewritten_views(None, unclaimed), _authored(by, owner, Action.DELETE, now)
                )
                return
            except VersionMismatchError:
                if attempt + 1 == MAX_WRITE_ATTEMPTS:
                    raise

    def _unclaimed_runs(self, job_id: str, now: datetime) -> Sequence[Run]:
        """The runs whose job view a write of this job must rewrite (docs/design.md: job views)."""
        return self._store.claimable_runs(job_id, now - VIEW_REFRESH_WINDOW)

    def _edit(
        self,
        owner: str,
        job_id: str,
        if_match: int | None,
        edit: Callable[[Job, datetime, int], tuple[Job, tuple[Run, ...]] | None],
        action: Action,
        by: Author | None,
    ) -> tuple[Job, Job]:
        """Read, check If-Match, edit, write conditionally; re-read and edit again when the write lost to
        another writer (usually the ticker advancing next_fire_at, which leaves the version alone).
        Returns (job as read, job as written); the same object when the edit had nothing to do."""
        for attempt in range(MAX_WRITE_ATTEMPTS):
            job = self.get(owner, job_id)
            _check_version(job, if_match)
            now = self._clock.now()
            # Read first: the views they carry are rewritten in the job's own transaction, and what they
            # take of it bounds how many fires the write may plan itself.
            unclaimed = self._unclaimed_runs(job_id, now)
            planned = edit(job, now, MAX_TRANSACTION_ITEMS - 1 - REVISION_ITEMS - len(unclaimed))
            if planned is None:
                return job, job
            updated, runs = planned
            # A fire that already has an unclaimed run keeps it (with a new view), not a second one.
            taken = {run.scheduled_for for run in unclaimed}
            runs = tuple(run for run in runs if run.scheduled_for not in taken)
            try:
                authored = _authored(by, owner, action, now)
                runs = self._write(job, updated, runs, rewritten_views(updated, unclaimed), authored)
            except VersionMismatchError:  # the ticker, a claim of one of those runs, or another writer
                if attempt + 1 == MAX_WRITE_ATTEMPTS:
                    raise
                continue
            self._dispatch(runs, now)
            return job, updated
        raise AssertionError("unreachable")  # pragma: no cover

    def _write(
        self,
        expected: Job,
        updated: Job,
        runs: tuple[Run, ...],
        refreshed: Sequence[tuple[Run, JobView]],
        authored: Authored,
    ) -> tuple[Run, ...]:
        """replace_job; fires that already have a run record (planned before a pause or an edit) are not
        planned twice. Returns the runs actually created."""
        try:
            self._store.replace_job(expected, updated, runs, refreshed, authored)
            return runs
        except VersionMismatchError:
            raise
        except ConflictError:
            if not runs:
                raise
        existing = self._store.run_times_between(
            expected.job_id, runs[0].scheduled_for, runs[-1].scheduled_for
        )
        fresh = tuple(r for r in runs if r.scheduled_for not in existing)
        self._store.replace_job(expected, updated, fresh, refreshed, authored)
        return fresh

    def _plan_own_horizon(
        self, job: Job, now: datetime, room: int | None = None
    ) -> tuple[Job, tuple[Run, ...]]:
        """Fires up to now + lookahead may lie inside a horizon a tick has already planned: plan them here,
        as many as fit (`room`: what the transaction has left)."""
        if job.state is not JobState.ACTIVE:
            return job, ()
        horizon = now + self._config.lookahead
        limit = (
            self._config.max_self_planned_runs
            if room is None
            else min(room, self._config.max_self_planned_runs)
        )
        batch = plan_batch(job, now=now, horizon=horizon, max_runs=max(1, limit))
        # More owed fires than one transaction holds: the ticker plans the rest. `due_floor` files the job
        # under the horizon's minute, which the next tick reads whatever the index lag.
        return replace(job.advanced_to(batch.next_fire_at), due_floor=horizon), batch.runs

    def _dispatch(self, runs: tuple[Run, ...], now: datetime) -> None:
        to_send = [r for r in runs if r.state is RunState.PLANNED]
        if not to_send:
            return
        try:
            self._dispatcher.dispatch(to_send, now)
        except DispatchError as error:
            # Committed already; the sweeper re-sends planned runs whose message never arrived.
            logger.error("dispatch failed after commit, sweeper will re-send: %s", error)


def _check_version(job: Job, if_match: int | None) -> None:
    if if_match is not None and job.version != if_match:
        raise VersionMismatchError(
            f"job {job.job_id} is at version {job.version}; the request expected version {if_match}"
        )


def _matches(job: Job, query: JobQuery) -> bool:
    if query.state is not None and job.state is not query.state:
        return False
    if query.name is not None and query.name.casefold() not in job.name.casefold():
        return False
    in_group = query.group is None or job.group == query.group
    return in_group and (query.tag is None or job.tags.get(query.tag[0]) == query.tag[1])
