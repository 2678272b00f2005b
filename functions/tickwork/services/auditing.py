"""The reconciliation audit's use case (minutely, one segment of the jobs a minute): finds what was lost
around the code (a purged queue, a restored runs table, a job filed where no tick reads) and puts it back
(domain/audit.py has the rules)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial

from tickwork.domain.audit import (
    AUDIT_GRACE,
    AUDIT_LOOKBACK,
    AUDIT_SEGMENTS,
    AuditedJob,
    RecordedRuns,
    fires_owed_records,
    lost,
    recovered_runs,
    refiled,
    segment_at,
    stranded,
    stuck_window_start,
)
from tickwork.domain.clock import Clock
from tickwork.domain.errors import (
    ConflictError,
    DispatchError,
    NotFoundError,
    StoreError,
    TransientStoreError,
)
from tickwork.domain.models import Job, Run, RunState
from tickwork.services.planning import DEFAULT_REREAD
from tickwork.services.ports import AuditStore, Dispatcher, Metrics
from tickwork.services.sweeping import Sweeper

logger = logging.getLogger(__name__)

AUDIT_PAGE = 200  # jobs read a page
AUDIT_THREADS = 8  # jobs audited side by side (each is a few store calls; DynamoDB: 5-20 ms each)


@dataclass(frozen=True, slots=True)
class AuditConfig:
    segments: int = AUDIT_SEGMENTS
    lookback: timedelta = AUDIT_LOOKBACK
    grace: timedelta = AUDIT_GRACE
    reread: timedelta = DEFAULT_REREAD  # the ticker's re-read window (PlannerConfig.reread)
    page: int = AUDIT_PAGE
    threads: int = AUDIT_THREADS
    # A page's runs in one read (recorded_runs_of_jobs) rather than a read a job: the SQLite engine, where one
    # query is cheaper than many; DynamoDB reads job by job on the threads.
    read_together: bool = False


@dataclass(slots=True)
class AuditReport:
    segment: int = 0
    jobs: int = 0
    runs_resent: int = 0  # queue-carried runs whose message was gone: sent again
    attempts_ended: int = 0  # running past their lease with nothing to bring them back: ended by policy
    runs_recovered: int = 0  # fires whose run record was gone: recorded again (and sent, if to run)
    jobs_refiled: int = 0  # active jobs filed where no tick reads: filed again
    lost_races: int = 0  # something else moved the run or job meanwhile
    skipped: int = 0  # jobs of the segment left for the next pass: the budget ran out
    cut_short: bool = False  # the budget ran out before the segment's end: the rest next pass
    failures: int = 0  # unexpected errors, isolated per job (AuditFailures)
    errors: list[str] = field(default_factory=list)

    def add(self, other: AuditReport) -> None:
        """Fold one job's findings into the segment's (once a job: spelled out, not looked up by name)."""
        self.jobs += other.jobs
        self.runs_resent += other.runs_resent
        self.attempts_ended += other.attempts_ended
        self.runs_recovered += other.runs_recovered
        self.jobs_refiled += other.jobs_refiled
        self.lost_races += other.lost_races
        self.skipped += other.skipped
        self.failures += other.failures
        self.errors.extend(other.errors)

    @property
    def repairs(self) -> int:
        return self.runs_resent + self.attempts_ended + self.runs_recovered + self.jobs_refiled


class Auditor:
    def __init__(
        self,
        store: AuditStore,
        sweeper: Sweeper,
        dispatcher: Dispatcher,
        clock: Clock,
        metrics: Metrics,
        config: AuditConfig | None = None,
    ) -> None:
        self._store = store
        self._sweeper = sweeper
        self._dispatcher = dispatcher
        self._clock = clock
        self._metrics = metrics
        self._config = config or AuditConfig()

    def audit(self, now: datetime, budget: timedelta, segment: int | None = None) -> AuditReport:
        """Audit one segment of the jobs (by default the one whose turn `now` is), within `budget`. Jobs
        are audited side by side on `threads` (I/O bound); each job's trouble is its own."""
        config = self._config
        report = AuditReport(segment=segment_at(now, config.segments) if segment is None else segment)
        deadline = self._clock.now() + budget
        watermarks: dict[int, datetime | None] = {}
        after: str | None = None
        with ThreadPoolExecutor(max_workers=config.threads) as pool:
            # One thread (the SQLite engine) audits in this one: a pool of one would hand every job to its
            # worker and back, two thread switches a job.
            each = pool.map if config.threads > 1 else map
            while True:
                if self._clock.now() >= deadline:
                    report.cut_short = True
                    break
                try:
                    page, after = self._store.audit_jobs(
                        report.segment, config.segments, after=after, limit=config.page
                    )
                    for audited in page:
                        if audited.shard not in watermarks:
                            watermarks[audited.shard] = self._store.get_watermark(audited.shard)
                except (StoreError, TransientStoreError) as error:
                    # The rest of the segment waits for the next pass; the sweep that ran first stands.
                    report.errors.append(f"segment {report.segment}: {error}")
                    logger.error("audit could not read segment %d (next pass): %s", report.segment, error)
                    report.cut_short = True
                    break
                except Exception as error:  # an item the code cannot read, say: counted, and alarmed on
                    logger.exception("audit of segment %d failed; the next pass retries", report.segment)
                    report.failures += 1
                    report.errors.append(f"segment {report.segment}: {type(error).__name__}: {error}")
                    report.cut_short = True
                    break
                runs = self._page_runs(page, now) if config.read_together else {}
                audit_one = partial(
                    self._audit_job, now=now, watermarks=watermarks, deadline=deadline, page_runs=runs
                )
                for found in each(audit_one, page):
                    report.add(found)
                if after is None:
                    break
        report.cut_short = report.cut_short or report.skipped > 0
        for name, value in (
            ("AuditJobs", report.jobs),
            ("AuditRunsResent", report.runs_resent),
            ("AuditAttemptsEnded", report.attempts_ended),
            ("AuditRunsRecovered", report.runs_recovered),
            ("AuditJobsRefiled", report.jobs_refiled),
            ("AuditRepairs", report.repairs),
            ("AuditCutShort", int(report.cut_short)),
            ("AuditFailures", report.failures),
        ):
            self._metrics.count(name, value)
        return report

    def _page_runs(self, page: list[AuditedJob], now: datetime) -> dict[str, RecordedRuns]:
        """Every job's runs in its audit window (as _audit_job reads them), in one read for the page."""
        firsts = {audited.job_id: self._runs_from(audited, now) for audited in page}
        try:
            return self._store.recorded_runs_of_jobs(firsts, now)
        except Exception:  # a busy store, or one run the code cannot read: each job reads its own instead
            # (logged with its traceback), so the trouble stays with its job, as when read job by job.
            logger.exception("audit could not read the page's runs together; reading them job by job")
            return {}

    def _runs_from(self, job: AuditedJob, now: datetime) -> datetime:
        """Where a job's audited runs start (up to now): the stuck runs' window, holding the owed fires'."""
        return stuck_window_start(job, now, self._config.grace, self._config.segments)

    def _audit_job(
        self,
        audited: AuditedJob,
        now: datetime,
        watermarks: dict[int, datetime | None],
        deadline: datetime,
        page_runs: Mapping[str, RecordedRuns],
    ) -> AuditReport:
        """One job's audit, isolated: an error is logged and counted, and the other jobs go on. `page_runs`:
        the page's runs by job, when they were read together (the job's are read here otherwise)."""
        found = AuditReport()
        if self._clock.now() >= deadline:
            found.skipped = 1
            return found
        found.jobs = 1
        try:
            watermark = watermarks.get(audited.shard)
            if stranded(audited, watermark, self._config.reread):
                self._refile(audited, watermark, now, found)
            # One strongly consistent read of the job's runs serves both checks: the stuck runs' window
            # (the job's timeout plus grace plus two passes, at least the lookback) holds the owed fires'.
            recorded = page_runs.get(audited.job_id)
            if recorded is None:
                recorded = RecordedRuns.of(
                    self._store.runs_between(audited.job_id, self._runs_from(audited, now), now)
                )
            self._recover_records(audited, now, recorded.fires, found)
            stuck = [run for run in recorded.unfinished if lost(run, now, self._config.grace)]
            self._repair_stuck(stuck, now, found)
        except (StoreError, TransientStoreError, DispatchError) as error:
            found.errors.append(f"{audited.job_id}: {error}")
            logger.error("audit could not check job %s (the next pass retries): %s", audited.job_id, error)
        except Exception as error:
            logger.exception("audit of job %s failed; the others go on", audited.job_id)
            found.failures += 1
            found.errors.append(f"{audited.job_id}: {type(error).__name__}: {error}")
        return found

    def _recover_records(
        self, audited: AuditedJob, now: datetime, recorded: AbstractSet[datetime], found: AuditReport
    ) -> None:
        """Fires before the job's next fire whose run record is gone: recorded again, and sent if to run."""
        if not self._missing(audited, now, recorded):
            return
        # The whole job the records are made from. Read again (an engine that read it in part), it may
        # have moved meanwhile, a tick most likely (its next fire, not its version): its owed fires are
        # taken from it as it is now. A fire recorded meanwhile is created by no one twice: restore_runs
        # creates only what does not exist.
        job = self._whole(audited)
        if job is None:
            return  # deleted meanwhile: nothing is owed
        missing = self._missing(AuditedJob.of(job, audited.filed_under), now, recorded)
        if not missing:
            return
        created = self._store.restore_runs(recovered_runs(job, missing, now))
        found.runs_recovered += len(created)
        planned = [run for run in created if run.state is RunState.PLANNED]
        if planned:
            self._dispatcher.dispatch(planned, now)
        for run in created:
            logger.warning("audit recorded lost run %s again as %s", run.run_id, run.state)

    def _whole(self, audited: AuditedJob) -> Job | None:
        """The whole job a repair is written from: as the engine read it, or read now (None: gone)."""
        return audited.whole if audited.whole is not None else self._store.get_job(audited.job_id)

    def _missing(self, audited: AuditedJob, now: datetime, recorded: AbstractSet[datetime]) -> list[datetime]:
        return [
            fire for fire in fires_owed_records(audited, now, self._config.lookback) if fire not in recorded
        ]

    def _repair_stuck(self, stuck: list[Run], now: datetime, found: AuditReport) -> None:
        """Queue-carried runs unmoved past their grace (their message gone): the sweeper's repair."""
        if not stuck:
            return
        repaired = self._sweeper.repair(stuck, now)
        found.runs_resent += repaired.redispatched
        found.attempts_ended += repaired.expired_leases
        found.lost_races += repaired.lost_races
        found.failures += repaired.failures
        found.errors.extend(repaired.errors)
        for run in stuck:
            logger.warning("audit repaired %s, %s with no progress since its grace", run.run_id, run.state)

    def _refile(
        self, audited: AuditedJob, watermark: datetime | None, now: datetime, report: AuditReport
    ) -> None:
        job = self._whole(audited)
        # Read again, it must be the job found stranded (its version, run requests and next fire), as a
        # write conditional on the job as read would have required: otherwise what filed it meanwhile
        # stands, and the next pass checks it as it is.
        if job is None or not audited.read_from(job):
            report.lost_races += 1
            return
        try:
            self._store.replace_job(job, refiled(job, watermark, now), ())
        except (ConflictError, NotFoundError):
            report.lost_races += 1  # written meanwhile: that write filed it afresh
            return
        report.jobs_refiled += 1
        logger.warning("audit filed stranded job %s again (next fire %s)", job.job_id, job.next_fire_at)
