"""Per-owner quotas (issue 31: fair shares): how many jobs an owner may have, how often a job of theirs may
fire, and how fast a backfill of theirs may start runs. Each is an operator's setting, the same for every
owner; unset, there is no such limit. A request that would break one is refused with the quota's name."""

from __future__ import annotations

from dataclasses import dataclass

from tickwork.domain.errors import QuotaExceededError
from tickwork.domain.schedule import Schedule, shortest_interval_seconds


@dataclass(frozen=True, slots=True)
class OwnerQuotas:
    max_jobs: int | None = None  # jobs per owner (the by_owner index counts them)
    min_interval_seconds: int | None = None  # the shortest gap between two fires of one job
    max_backfill_rate: float | None = None  # runs a second a backfill may start

    def check_job_count(self, existing: int) -> None:
        """`existing`: the owner's jobs before the one being created."""
        if self.max_jobs is not None and existing >= self.max_jobs:
            raise QuotaExceededError(
                "max_jobs", f"an owner may have at most {self.max_jobs} jobs; delete one first"
            )

    def check_schedule(self, schedule: Schedule) -> None:
        if self.min_interval_seconds is None:
            return
        interval = shortest_interval_seconds(schedule)
        if interval < self.min_interval_seconds:
            raise QuotaExceededError(
                "min_interval_seconds",
                f"the schedule fires as often as every {interval} s; an owner's jobs may fire at most every "
                f"{self.min_interval_seconds} s",
            )

    def check_backfill_rate(self, rate_per_second: float) -> None:
        if self.max_backfill_rate is not None and rate_per_second > self.max_backfill_rate:
            raise QuotaExceededError(
                "max_backfill_rate",
                f"a backfill may start at most {self.max_backfill_rate:g} runs a second; "
                f"asked {rate_per_second:g}",
            )
