"""The ticker's use case: plan every due fire of one shard, each through the commit point."""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from tickwork.domain.clock import Clock
from tickwork.domain.dispatch import COMMIT_WINDOW, RunMessage
from tickwork.domain.errors import DispatchError, PlanConflictError, TransientStoreError
from tickwork.domain.models import Job, JobState, Run, RunState
from tickwork.domain.planning import JobPlan, plan_batch
from tickwork.domain.timekeys import due_key, floor_minute, truncate_ms
from tickwork.services.ports import Dispatcher, PlanStore

logger = logging.getLogger(__name__)

DEFAULT_LOOKAHEAD = timedelta(seconds=120)
# Buckets behind the watermark read again on each tick: the `due` index is eventually consistent, so a job
# written just before a tick may have been invisible to it.
DEFAULT_REREAD = timedelta(seconds=120)
# Bounds one transaction (DynamoDB allows 100 items): a long catch-up commits in slices.
DEFAULT_MAX_RUNS_PER_COMMIT = 25
# SQS sends up to 10 messages per request.
DISPATCH_BATCH = 10
# A round's commits, at most, when its messages are fewer (jobs with several fires each): with its SQS batches
# it starts them all well inside the window. A round of one fire per job holds `round_messages` commits.
MAX_COMMITS_PER_ROUND = 25
# A shard's commits in flight at once on DynamoDB (the composition root's choice; the SQLite engine commits in
# order). 16 shards a ticker invocation x 8 = 128 transactions at once, far under a table's limits.
PLAN_COMMIT_THREADS = 8
# Shards planned side by side on DynamoDB where the caller does not say (the local ticker on the emulator;
# the Lambda ticker says, handlers/ticker.MAX_THREADS).
PLAN_SHARD_THREADS = 8
# No commit starts later than this after the tick's deadline: a round started just before it may hold a
# hundred commits, and under throttling they would outlast what the invocation keeps. A step not committed
# is deferred (its messages went: they find no run and are dropped), its fires behind the watermark.
COMMIT_GRACE = timedelta(seconds=3)
# After this many lost races on one job in one tick, leave it for the next tick (the watermark stays).
MAX_CONFLICTS_PER_JOB = 3
# A watermark held for an unplanned fire stops just before it (stored instants have millisecond precision).
_BEFORE = timedelta(milliseconds=1)


class _Tried(Enum):
    """A step's commit not yet tried (its outcome, once tried together with its round's, is None or an
    error)."""

    NOT_YET = "not yet"


NOT_YET = _Tried.NOT_YET


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    lookahead: timedelta = DEFAULT_LOOKAHEAD
    reread: timedelta = DEFAULT_REREAD
    max_runs_per_commit: int = DEFAULT_MAX_RUNS_PER_COMMIT
    # A round's messages: one SQS batch (10) per dispatch queue fills every batch it sends.
    round_messages: int = DISPATCH_BATCH
    # A round's commits run on this many threads: at a region's 10-20 ms a transaction, one after another
    # they do not fit a tick at the top of the hour (docs/design.md, "Planning throughput"). 1: in order.
    commit_threads: int = 1
    # A round's commits go to the store together (PlanStore.commit_plans), in order: the SQLite engine
    # writes them in one transaction, so a round pays one commit, not one per job.
    commit_together: bool = False
    # Shards planned side by side in a tick (plan_shards), where the caller does not say: I/O-bound on
    # DynamoDB; on one SQLite file every write waits for the one writer, so threads only contend.
    shard_threads: int = 16

    def __post_init__(self) -> None:
        if self.round_messages < 1 or self.commit_threads < 1 or self.shard_threads < 1:
            raise ValueError("round_messages, commit_threads and shard_threads must be at least 1")
        if self.commit_together and self.commit_threads > 1:
            raise ValueError("commits go together or on threads, not both")


@dataclass(slots=True)
class TickReport:
    shard: int
    now: datetime
    horizon: datetime
    buckets_read: int = 0
    jobs_seen: int = 0
    runs_planned: int = 0
    runs_catch_up: int = 0
    runs_missed: int = 0
    commits: int = 0
    conflicts: int = 0
    dispatch_failures: int = 0
    complete: bool = True  # the watermark reached the horizon
    # The tick's deadline came first: no round was started after it, and the jobs not yet planned (this
    # many) are left behind the watermark for the next tick.
    out_of_time: bool = False
    jobs_left_at_deadline: int = 0
    deferred_jobs: list[str] = field(default_factory=list)  # lost races or throttling: next tick
    failed_jobs: list[str] = field(default_factory=list)  # unexpected errors, isolated (PlanFailures)
    errors: list[str] = field(default_factory=list)
    # Runs this tick planned, by the minute they are due in (what the next minutes' bursts are).
    planned_by_minute: Counter[datetime] = field(default_factory=Counter)

    def add(self, part: TickReport) -> None:
        """Add what one commit did (on a report of its own, on another thread) to this shard's report."""
        self.runs_planned += part.runs_planned
        self.runs_catch_up += part.runs_catch_up
        self.runs_missed += part.runs_missed
        self.commits += part.commits
        self.conflicts += part.conflicts
        self.dispatch_failures += part.dispatch_failures
        self.deferred_jobs.extend(part.deferred_jobs)
        self.failed_jobs.extend(part.failed_jobs)
        self.errors.extend(part.errors)
        self.planned_by_minute.update(part.planned_by_minute)


class _JobProgress:
    """Where one job's planning stands: the first fire not yet committed."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.unplanned_from: datetime | None = job.next_fire_at

    def at(self, current: Job) -> None:
        self.unplanned_from = current.next_fire_at

    def done(self) -> None:
        self.unplanned_from = None


@dataclass(slots=True)
class TickSummary:
    """One tick over several shards: each shard's report, and the shards that could not be planned."""

    reports: list[TickReport]
    failed_shards: dict[int, str] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """The tick's metrics. PlanFailures counts isolated failures (jobs and whole shards): it alarms."""
        r = self.reports
        return {
            "RunsPlanned": sum(x.runs_planned for x in r),
            "RunsCatchUp": sum(x.runs_catch_up for x in r),
            "RunsMissed": sum(x.runs_missed for x in r),
            "PlanConflicts": sum(x.conflicts for x in r),
            "DispatchFailures": sum(x.dispatch_failures for x in r),
            "PlanFailures": sum(len(x.failed_jobs) for x in r) + len(self.failed_shards),
            "ShardsOutOfTime": sum(1 for x in r if x.out_of_time),
        }

    @property
    def incomplete_shards(self) -> list[int]:
        return sorted([x.shard for x in self.reports if not x.complete] + list(self.failed_shards))


class Planner:
    def __init__(
        self,
        store: PlanStore,
        dispatcher: Dispatcher,
        clock: Clock,
        config: PlannerConfig | None = None,
    ) -> None:
        self._store = store
        self._dispatcher = dispatcher
        self._clock = clock
        self._config = config or PlannerConfig()

    def plan(self, shard: int, now: datetime | None = None, deadline: datetime | None = None) -> TickReport:
        """Plan every fire of `shard` up to now + lookahead. The watermark moves only as far as everything
        before it committed, so a crash at any point leaves work for the next tick rather than losing it.
        No round starts after `deadline` (what the invocation can spend): the jobs not planned by then stay
        behind the watermark, which is still written, like the tick's metrics, before the invocation ends.
        One job that cannot be planned (a poison record, a store error after retries) is recorded in the
        report and skipped; every other job of the shard is still planned, and the watermark stops just
        before the job's unplanned fire, so the next tick reads its bucket again."""
        now = now or self._clock.now()
        horizon = now + self._config.lookahead
        report = TickReport(shard=shard, now=now, horizon=horizon)
        watermark = self._store.get_watermark(shard)
        start = (watermark if watermark is not None else now) - self._config.reread
        bucket = floor_minute(start)
        threads = self._config.commit_threads
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"commit-{shard}") as pool:
            planned_through = self._plan_buckets(
                shard, bucket, _Rounds(self, now, horizon, report, deadline, pool if threads > 1 else None)
            )
        report.complete = planned_through >= horizon
        if watermark is None or planned_through > watermark:
            self._store.set_watermark(shard, planned_through)
        return report

    def _plan_buckets(self, shard: int, bucket: datetime, rounds: _Rounds) -> datetime:
        """Read the shard's `due` buckets from `bucket` to the horizon and plan their jobs in rounds; returns
        how far everything is planned (the watermark to write)."""
        report = rounds.report
        horizon = report.horizon
        planned_through = horizon
        while bucket <= horizon:
            if rounds.out_of_time():
                # Nothing from this bucket on was read: the watermark stays before it.
                planned_through = min(planned_through, bucket - _BEFORE)
                break
            report.buckets_read += 1
            try:
                jobs = self._store.query_due(due_key(shard, bucket), horizon)
            except TransientStoreError as error:
                # Nothing from this bucket on was read: the watermark stays before it.
                report.errors.append(f"bucket {due_key(shard, bucket)}: {error}")
                logger.error("shard %d: could not read %s after retries: %s", shard, bucket, error)
                planned_through = min(planned_through, bucket - _BEFORE)
                break
            for job in jobs:
                report.jobs_seen += 1
                rounds.add(job)
            bucket += timedelta(minutes=1)
        for unplanned in rounds.finish():
            planned_through = min(planned_through, unplanned - _BEFORE)
        return planned_through

    def plan_shards(
        self,
        shards: Sequence[int],
        now: datetime,
        max_threads: int | None = None,
        deadline: datetime | None = None,
    ) -> TickSummary:
        """Plan several shards on up to `max_threads` threads (None: the config's `shard_threads`), each
        isolated from the others: a shard that fails (its watermark unreadable, a bug) is recorded and the
        others are still planned."""
        summary = TickSummary(reports=[])
        if max_threads is None:
            max_threads = self._config.shard_threads

        def one(shard: int) -> TickReport | None:
            try:
                return self.plan(shard, now, deadline)
            except Exception as error:
                # Isolation, not silence: logged with its traceback and counted in PlanFailures.
                summary.failed_shards[shard] = f"{type(error).__name__}: {error}"
                logger.exception("shard %d could not be planned this tick", shard)
                return None

        if not shards:
            return summary
        with ThreadPoolExecutor(max_workers=min(max_threads, len(shards)), thread_name_prefix="plan") as pool:
            summary.reports = [r for r in pool.map(one, shards) if r is not None]
        return summary

    def _next_step(
        self, progress: _JobProgress, job: Job | None, now: datetime, horizon: datetime, conflicts: int
    ) -> _Step | None:
        """The job's next commit, planned (pure) but not yet sent; None when the job has nothing left to
        plan up to the horizon (or is gone, or paused)."""
        if (
            job is None
            or job.state is not JobState.ACTIVE
            or job.next_fire_at is None
            or job.next_fire_at > horizon
        ):
            progress.done()
            return None
        progress.at(job)
        # Their messages go out before the commit: the queue, not the sweeper, carries them from here on.
        batch = plan_batch(
            job, now=now, horizon=horizon, max_runs=self._config.max_runs_per_commit, queue_carried=True
        )
        return _Step(progress, job, batch.runs, batch.next_fire_at, conflicts)

    def _send(self, steps: Sequence[_Step], report: TickReport) -> tuple[datetime, set[str]]:
        """Send the messages of every step's runs, in SQS batches of 10 across jobs. Returns the instant
        after which none of them may be committed, and the dedupe ids of the messages that did not go."""
        sent_at = max(report.now, self._clock.now())  # never before the tick's own instant
        commit_by = truncate_ms(sent_at + COMMIT_WINDOW)  # as the message carries it
        sending = [run for step in steps for run in step.to_send]
        if not sending:
            return commit_by, set()
        try:
            self._dispatcher.dispatch(sending, sent_at, commit_by=commit_by)
        except DispatchError as error:
            report.dispatch_failures += len(error.failed_run_ids)
            logger.error(
                "shard %d: some messages did not go; their jobs wait for the next tick: %s",
                report.shard,
                error,
            )
            return commit_by, set(error.failed_run_ids)
        return commit_by, set()

    def _commit_isolated(
        self,
        step: _Step,
        commit_by: datetime,
        now: datetime,
        horizon: datetime,
        report: TickReport,
        tried: Exception | _Tried | None = NOT_YET,
    ) -> _Step | None:
        """Commit one step (or carry on from `tried`, its commit's outcome with its round's); whatever goes
        wrong with it stays with its job. Returns the job's next step (None: done, or left for the next
        tick with its progress where it stopped)."""
        job = step.job
        try:
            return self._commit(step, commit_by, now, horizon, report, tried)
        except TransientStoreError as error:
            # Throttling that outlasted the retries, wherever it struck (the commit, or a read inside the
            # conflict handling): the job waits for the next tick.
            report.deferred_jobs.append(job.job_id)
            logger.warning("job %s: store still throttling after retries (%s); next tick", job.job_id, error)
        except Exception as error:
            logger.exception("job %s could not be planned; shard %d goes on", job.job_id, job.shard)
            self._isolated_failure(job, error, report)
        return None

    @staticmethod
    def _isolated_failure(job: Job, error: Exception, report: TickReport) -> None:
        """Isolation, not silence: a job that cannot be planned (a bug, a record the code cannot read, a
        write the store refuses) must not stop its shard every minute. It is logged with its traceback,
        counted (PlanFailures alarms), and its fires are kept behind the watermark. The caller logs it."""
        report.failed_jobs.append(job.job_id)
        report.errors.append(f"job {job.job_id}: {type(error).__name__}: {error}")

    def _commit(
        self,
        step: _Step,
        commit_by: datetime,
        now: datetime,
        horizon: datetime,
        report: TickReport,
        tried: Exception | _Tried | None = NOT_YET,
    ) -> _Step | None:
        """One conditional transaction (create the runs, advance the job), started only inside the
        messages' commit window. A lost race re-plans the job into the next round, whose send goes first.
        `tried`: the outcome of this commit tried with its round's (throttled: tried again, retried)."""
        job, runs = step.job, step.runs
        try:
            if tried is NOT_YET or isinstance(tried, TransientStoreError):
                if not self._in_window(step, commit_by, report):
                    return None
                self._store.commit_plan(job, runs, step.next_fire_at)
            elif tried is not None:
                raise tried
        except PlanConflictError as conflict:
            report.conflicts += 1
            conflicts = step.conflicts + 1
            if conflicts > MAX_CONFLICTS_PER_JOB:
                logger.warning("job %s kept changing during the tick; left for the next", job.job_id)
                report.deferred_jobs.append(job.job_id)
                return None
            if conflict.job_changed:
                # Another ticker planned it, or the user edited / paused / deleted it: re-read, re-plan.
                return self._next_step(
                    step.progress, self._store.get_job(job.job_id), now, horizon, conflicts
                )
            # Only runs existed: created already (e.g. by the job's own write), so advance the job past
            # them without creating them again (the messages sent for them are duplicates, fenced at claim).
            existing = self._store.existing_run_times(job.job_id, [r.scheduled_for for r in runs])
            runs = tuple(r for r in runs if r.scheduled_for not in existing)
            if not self._in_window(step, commit_by, report):
                return None
            try:
                self._store.commit_plan(job, runs, step.next_fire_at)
            except PlanConflictError:
                report.conflicts += 1
                return self._next_step(
                    step.progress, self._store.get_job(job.job_id), now, horizon, conflicts + 1
                )
        report.commits += 1
        planned = [r for r in runs if r.state is RunState.PLANNED]
        report.runs_planned += len(planned)
        # By the minute it starts: a catch-up run is due now, not in its past minute.
        report.planned_by_minute.update(
            max(r.scheduled_for, now).replace(second=0, microsecond=0) for r in planned
        )
        report.runs_catch_up += sum(1 for r in planned if r.scheduled_for < now)
        report.runs_missed += sum(1 for r in runs if r.state is RunState.MISSED)
        return self._next_step(
            step.progress, job.advanced_to(step.next_fire_at), now, horizon, step.conflicts
        )

    def _in_window(self, step: _Step, commit_by: datetime, report: TickReport) -> bool:
        if not step.to_send or self._clock.now() < commit_by:
            return True
        # Too long since its messages went: they may already have been given up on (COMMIT_SETTLE).
        logger.warning("job %s: commit window passed; next tick plans it", step.job.job_id)
        report.deferred_jobs.append(step.job.job_id)
        return False


@dataclass(frozen=True, slots=True)
class _Step:
    """One job's next commit: its runs, planned but not yet sent, and where the job's next fire moves."""

    progress: _JobProgress
    job: Job
    runs: tuple[Run, ...]
    next_fire_at: datetime | None
    conflicts: int

    @property
    def to_send(self) -> list[Run]:
        return [r for r in self.runs if r.state is RunState.PLANNED]


class _Rounds:
    """A shard's jobs, planned in rounds: the messages of a round's runs go out first, in SQS batches of 10
    across jobs (one send per job would cost up to ten times the requests), then each job's transaction.
    A crash between the two leaves messages whose run never appears (the executor drops them once their
    commit window has settled) and jobs not advanced (the next tick plans them again): nothing committed
    is ever without its message, so planned runs need no sweeper index entry."""

    def __init__(
        self,
        planner: Planner,
        now: datetime,
        horizon: datetime,
        report: TickReport,
        deadline: datetime | None = None,
        pool: ThreadPoolExecutor | None = None,
    ) -> None:
        self._planner = planner
        self._now = now
        self._horizon = horizon
        self._report = report
        self._deadline = deadline
        self._pool = pool
        self._progress: list[_JobProgress] = []
        self._ready: deque[_Step] = deque()
        self._ready_messages = 0
        self._seen: set[str] = set()

    def add(self, job: Job) -> None:
        if job.job_id in self._seen:
            # Its first commit moved it into a later bucket of this same tick: its next step is already
            # in hand (or it was left for the next tick).
            return
        self._seen.add(job.job_id)
        progress = _JobProgress(job)
        self._progress.append(progress)
        if self.out_of_time():
            self._report.jobs_left_at_deadline += 1  # its first fire holds the watermark back
            return
        try:
            step = self._planner._next_step(progress, job, self._now, self._horizon, 0)
        except Exception as error:
            # Planning this job's fires failed (a record the code cannot read): isolated like a failed commit.
            logger.exception("job %s could not be planned; shard %d goes on", job.job_id, job.shard)
            self._planner._isolated_failure(job, error, self._report)
            return
        self._queue(step)
        while self._ready_messages >= self._planner._config.round_messages and not self.out_of_time():
            self._round()

    @property
    def report(self) -> TickReport:
        return self._report

    def out_of_time(self) -> bool:
        """The tick's deadline has come: no round may start."""
        if self._deadline is None or self._planner._clock.now() < self._deadline:
            return False
        self._report.out_of_time = True
        return True

    def finish(self) -> list[datetime]:
        """Run rounds until every job is planned or left; returns each left job's first unplanned fire."""
        while self._ready:
            if self.out_of_time():
                # The steps not started stay where they are: their jobs' fires hold the watermark back.
                self._report.jobs_left_at_deadline += len({step.job.job_id for step in self._ready})
                self._ready.clear()
                break
            self._round()
        deferred = self._report.deferred_jobs
        deferred[:] = list(dict.fromkeys(deferred))  # a job left once, whatever the path
        return [p.unplanned_from for p in self._progress if p.unplanned_from is not None]

    def _queue(self, step: _Step | None) -> None:
        if step is not None:
            self._ready.append(step)
            self._ready_messages += len(step.to_send)

    def _take(self) -> list[_Step]:
        """The next round: about `round_messages` messages, and a bounded number of commits, so that every
        commit of the round starts well inside its messages' window."""
        steps: list[_Step] = []
        messages = 0
        most = self._planner._config.round_messages
        while self._ready and messages < most and len(steps) < max(MAX_COMMITS_PER_ROUND, most):
            step = self._ready.popleft()
            steps.append(step)
            messages += len(step.to_send)
        self._ready_messages -= messages
        return steps

    def _round(self) -> None:
        steps = self._take()
        commit_by, unsent = self._planner._send(steps, self._report)
        if self._deadline is not None:
            commit_by = min(commit_by, self._deadline + COMMIT_GRACE)
        sent: list[_Step] = []
        for step in steps:
            if any(RunMessage.for_run(r).dedupe_id in unsent for r in step.to_send):
                self._report.deferred_jobs.append(step.job.job_id)  # its progress stays at this step
                continue
            sent.append(step)
        for after in self._commit_all(sent, commit_by):
            self._queue(after)

    def _commit_all(self, steps: list[_Step], commit_by: datetime) -> list[_Step | None]:
        """The round's commits, in order or on the pool; each on a report of its own, added up after, so
        that no thread writes the shard's report. Returns each job's next step, in the round's order."""
        planner, report = self._planner, self._report
        if planner._config.commit_together and len(steps) >= 2:
            return self._commit_together(steps, commit_by)
        if self._pool is None or len(steps) < 2:
            return [planner._commit_isolated(s, commit_by, self._now, self._horizon, report) for s in steps]

        def commit(step: _Step) -> tuple[_Step | None, TickReport]:
            own = TickReport(shard=report.shard, now=report.now, horizon=report.horizon)
            return planner._commit_isolated(step, commit_by, self._now, self._horizon, own), own

        results = list(self._pool.map(commit, steps))
        for _, own in results:
            report.add(own)
        return [after for after, _ in results]

    def _commit_together(self, steps: list[_Step], commit_by: datetime) -> list[_Step | None]:
        """The round's commits in one call to the store; each step then goes on from its own outcome. If
        the call fails as a whole, each commits on its own (one already committed meets a conflict)."""
        planner, report = self._planner, self._report
        in_window = [planner._in_window(step, commit_by, report) for step in steps]
        ready = [step for step, inside in zip(steps, in_window, strict=True) if inside]
        if not ready:  # no transaction for nothing: a window passes when the store is slow
            return [None for _ in steps]
        outcomes: Sequence[Exception | _Tried | None]
        try:
            outcomes = planner._store.commit_plans([JobPlan(s.job, s.runs, s.next_fire_at) for s in ready])
        # Not lost: each step commits again on its own below, and a poison job among them is isolated there.
        except Exception:
            logger.exception(
                "shard %d: a round's %d commits failed together; committing them one by one",
                report.shard,
                len(ready),
            )
            outcomes = [NOT_YET] * len(ready)
        tried = iter(outcomes)
        return [
            planner._commit_isolated(step, commit_by, self._now, self._horizon, report, next(tried))
            if inside
            else None
            for step, inside in zip(steps, in_window, strict=True)
        ]
