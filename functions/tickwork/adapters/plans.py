"""A round's plans on an engine whose transactions do not widen (DynamoDB's TransactWriteItems is one job's,
and the in-memory tables are its test double): each job's commit on its own, its refusal returned."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from tickwork.domain.errors import TickworkError
from tickwork.domain.models import Job, Run
from tickwork.domain.planning import JobPlan

CommitPlan = Callable[[Job, Sequence[Run], datetime | None], None]


def commit_each(commit_plan: CommitPlan, plans: Sequence[JobPlan]) -> list[Exception | None]:
    """PlanStore.commit_plans as one `commit_plan` per job, in order. What the adapters raise by contract
    (their domain errors, and ValueError for a job with no fire to plan) is returned; anything else is a bug
    and is raised, with the plans before it committed (the planner then sees them as conflicts)."""
    outcomes: list[Exception | None] = []
    for plan in plans:
        try:
            commit_plan(plan.job, plan.runs, plan.next_fire_at)
        except (TickworkError, ValueError) as error:  # returned: the planner handles it as this call's own
            outcomes.append(error)
        else:
            outcomes.append(None)
    return outcomes
