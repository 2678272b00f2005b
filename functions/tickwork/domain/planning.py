"""Pure planning rules: which fires of a job a tick plans, and how a missed fire is treated."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from tickwork.domain.models import Job, MissedFirePolicy, Run, RunState, Trigger
from tickwork.domain.schedule import next_fire_after

# The `due` index lags its table (DynamoDB: usually well under a second; this allows far more), and a job is
# filed under the minute of its next fire. A tick re-reads `reread` behind its watermark; with less than a
# bucket plus the lag, a job written just before a tick, still invisible to it, could fall behind the
# window of every later tick and never be planned. Settings refuse a smaller `reread`.
INDEX_LAG_ALLOWANCE_SECONDS = 30
MIN_REREAD_SECONDS = 60 + INDEX_LAG_ALLOWANCE_SECONDS


@dataclass(frozen=True, slots=True)
class PlanBatch:
    """Runs to create in one commit, and where the job's next fire moves to."""

    runs: tuple[Run, ...]
    next_fire_at: datetime | None


@dataclass(frozen=True, slots=True)
class JobPlan:
    """One job's commit as the ticker hands it to the store: its runs to create, and its next fire moving
    from the job's own (`job.next_fire_at`, read with `job.version`) to `next_fire_at`."""

    job: Job
    runs: tuple[Run, ...]
    next_fire_at: datetime | None


def classify_fire(job: Job, scheduled_for: datetime, following: datetime | None, now: datetime) -> RunState:
    """A fire still ahead of `now` is planned. A fire already past (the ticker was behind) follows the
    job's missed-fire policy; every slot still gets a run record, so nothing is skipped silently."""
    if scheduled_for >= now:
        return RunState.PLANNED
    if job.policies.missed_fire is MissedFirePolicy.RUN_ALL:
        return RunState.PLANNED
    if job.policies.missed_fire is MissedFirePolicy.SKIP:
        return RunState.MISSED
    # COALESCE: only the latest missed fire runs.
    latest_missed = following is None or following >= now
    return RunState.PLANNED if latest_missed else RunState.MISSED


def plan_batch(
    job: Job, *, now: datetime, horizon: datetime, max_runs: int, queue_carried: bool = False
) -> PlanBatch:
    """The next at most `max_runs` fires of `job` at or before `horizon`, from its stored next fire
    (`queue_carried`: the messages of its planned runs go out before their commit)."""
    runs: list[Run] = []
    fire = job.next_fire_at
    while fire is not None and fire <= horizon and len(runs) < max_runs:
        following = next_fire_after(job.schedule, fire)
        state = classify_fire(job, fire, following, now)
        trigger = Trigger.SCHEDULE if fire >= now else Trigger.CATCH_UP
        reason = (
            f"missed while the scheduler was behind (missed_fire={job.policies.missed_fire})"
            if (state is RunState.MISSED)
            else None
        )
        carried = queue_carried and state is RunState.PLANNED
        runs.append(
            Run.for_fire(
                job, fire, now=now, trigger=trigger, state=state, reason=reason, queue_carried=carried
            )
        )
        fire = following
    return PlanBatch(runs=tuple(runs), next_fire_at=fire)


@dataclass(frozen=True, slots=True)
class PausedFireOutcomes:
    """What becomes of the fires that fell inside a pause, counted the way planning will treat them."""

    catch_up: int = 0  # no run record yet: planned now and run late (the missed-fire policy lets them)
    missed: int = 0  # no run record yet: recorded `missed` (the policy skips them)
    cancelled: int = 0  # planned before the pause and cancelled at claim while paused: they do not run
    pending: int = 0  # planned before the pause and not claimed yet: they run, late


def paused_fire_outcomes(
    job: Job, fires: Sequence[datetime], existing: Mapping[datetime, RunState], now: datetime
) -> PausedFireOutcomes:
    """`fires` in time order; `existing` the states of the run records some of them already have. A fire
    with a record is never planned again (resume and ticker both skip it); the others follow
    classify_fire exactly as plan_batch applies it (coalesce keeps only the latest missed fire, even if
    that one is a fire with a record)."""
    catch_up = missed = cancelled = pending = 0
    for index, fire in enumerate(fires):
        state = existing.get(fire)
        if state is not None:
            if state.is_terminal:
                cancelled += 1
            else:
                pending += 1
            continue
        following = fires[index + 1] if index + 1 < len(fires) else next_fire_after(job.schedule, fire)
        if classify_fire(job, fire, following, now) is RunState.PLANNED:
            catch_up += 1
        else:
            missed += 1
    return PausedFireOutcomes(catch_up=catch_up, missed=missed, cancelled=cancelled, pending=pending)
