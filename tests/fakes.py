"""In-memory test doubles for the ports (fakes, not mocks: they behave, and tests read their state)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tickwork.adapters.plans import commit_each
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.errors import DispatchError, TransientStoreError
from tickwork.domain.models import Job, Run, Target
from tickwork.domain.planning import JobPlan
from tickwork.domain.targets import Invocation, TargetResult
from tickwork.services.ports import PlanStore


@dataclass
class RecordingDispatcher:
    """Records dispatched runs; can be told to fail the next N calls."""

    sent: list[Run] = field(default_factory=list)
    messages: list[RunMessage] = field(default_factory=list)
    fail_next: int = 0
    sends: list[tuple[datetime, list[Run]]] = field(default_factory=list)  # (now given, runs) per call
    batches: list[int] = field(default_factory=list)  # size of each redispatch_many call

    commit_bys: list[datetime | None] = field(default_factory=list)  # commit_by given, per dispatch call

    def dispatch(self, runs: Sequence[Run], now: datetime, *, commit_by: datetime | None = None) -> None:
        if self.fail_next > 0:
            self.fail_next -= 1
            raise DispatchError([RunMessage.for_run(r).dedupe_id for r in runs], "injected failure")
        self.sent.extend(runs)
        self.sends.append((now, list(runs)))
        self.commit_bys.append(commit_by)

    def redispatch(self, message: RunMessage, shard: int, now: datetime) -> None:
        if self.fail_next > 0:
            self.fail_next -= 1
            raise DispatchError([message.dedupe_id], "injected failure")
        self.messages.append(message)

    def redispatch_many(self, messages: Sequence[RunMessage], now: datetime) -> None:
        if self.fail_next > 0:
            self.fail_next -= 1
            raise DispatchError([m.dedupe_id for m in messages], "injected failure")
        self.messages.extend(messages)
        self.batches.append(len(messages))

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.sent]


class CrashError(BaseException):
    """Stands for the process dying at a chosen point. A BaseException, like the SystemExit or
    KeyboardInterrupt a dying process sees: the services' per-job isolation catches Exception and must not
    turn a simulated death into a recorded, survived error."""


class FaultyPlanStore:
    """Wraps a real store and injects faults at chosen points of the planning path."""

    def __init__(self, inner: PlanStore) -> None:
        self.inner = inner
        self.crash_before_commit = False
        self.crash_after_commit = False
        self.throttle_commits = 0
        self.hidden_from_index: set[str] = set()  # simulates the GSI lagging behind the table
        self.commits = 0

    def query_due(self, due_key: str, through: datetime) -> Iterator[Job]:
        for job in self.inner.query_due(due_key, through):
            if job.job_id not in self.hidden_from_index:
                yield job

    def get_job(self, job_id: str) -> Job | None:
        return self.inner.get_job(job_id)

    def commit_plan(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        if self.crash_before_commit:
            raise CrashError("crash just before the commit")
        if self.throttle_commits > 0:
            self.throttle_commits -= 1
            raise TransientStoreError("ThrottlingException: injected")
        self.inner.commit_plan(job, runs, next_fire_at)
        self.commits += 1
        if self.crash_after_commit:
            raise CrashError("crash just after the commit")

    def commit_plans(self, plans: Sequence[JobPlan]) -> list[Exception | None]:
        return commit_each(self.commit_plan, plans)  # each through the faults above

    def existing_run_times(self, job_id: str, scheduled_fors: Sequence[datetime]) -> set[datetime]:
        return self.inner.existing_run_times(job_id, scheduled_fors)

    def get_watermark(self, shard: int) -> datetime | None:
        return self.inner.get_watermark(shard)

    def set_watermark(self, shard: int, planned_through: datetime) -> None:
        self.inner.set_watermark(shard, planned_through)


@dataclass
class RecordingMetrics:
    counts: dict[str, float] = field(default_factory=dict)
    timings: dict[str, list[float]] = field(default_factory=dict)

    def count(self, name: str, value: float = 1.0) -> None:
        self.counts[name] = self.counts.get(name, 0.0) + value

    def timing_ms(self, name: str, value_ms: float) -> None:
        self.timings.setdefault(name, []).append(value_ms)


@dataclass
class ScriptedInvoker:
    """A target whose answers are scripted; records every call. `during_call` runs inside the call
    (to simulate what happens elsewhere while a slow target is running)."""

    results: list[TargetResult] = field(default_factory=list)
    calls: list[tuple[Target, Invocation]] = field(default_factory=list)
    during_call: Callable[[], None] | None = None
    crash: bool = False

    def invoke(self, target: Target, invocation: Invocation) -> TargetResult:
        self.calls.append((target, invocation))
        if self.during_call is not None:
            hook, self.during_call = self.during_call, None
            hook()
        if self.crash:
            raise CrashError("the worker died mid-run")
        if self.results:
            return self.results.pop(0)
        return TargetResult(ok=True, retryable=False, status="200", latency_ms=5, detail="ok")


def failure(retryable: bool = True, status: str = "500") -> TargetResult:
    return TargetResult(ok=False, retryable=retryable, status=status, latency_ms=5, detail=f"HTTP {status}")
