"""In-memory records of the runs aggregate: the same claims, transitions and overlap slot as
adapters/sqlite/runs.py and adapters/dynamodb/runs.py, each one step under the lock."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from tickwork.adapters.conditions import apply_changes, claimable, claimed_item, run_still_at, stored_run
from tickwork.adapters.memory.base import MemoryBase, Record, copied
from tickwork.adapters.records import open_keys, run_from_item, run_to_item, run_update_base
from tickwork.domain.audit import RecordedRuns
from tickwork.domain.errors import StaleRunError
from tickwork.domain.execution import Claim, waiting_slot_is_stale
from tickwork.domain.models import Run, RunState, split_run_id
from tickwork.domain.timekeys import format_instant, format_instant_ms, parse_instant

# A job record's overlap slot, and what each slot operation asks of it and does to it.
SlotRule = Callable[[dict[str, Any]], bool]
SlotChange = Callable[[dict[str, Any]], None]


class MemoryRunRecords(MemoryBase):
    """Run records and the open-runs index; claims, transitions and the overlap slot (on the job record,
    written in the run's own step)."""

    def existing_run_times(self, job_id: str, scheduled_fors: Sequence[datetime]) -> set[datetime]:
        if not scheduled_fors:
            return set()
        found = self.run_times_between(job_id, min(scheduled_fors), max(scheduled_fors))
        return found & set(scheduled_fors)

    def claimable_runs(self, job_id: str, since: datetime) -> list[Run]:
        start = format_instant(since)
        with self.tables.lock:
            items = [
                copied(item)
                for item in self._job_runs(job_id)
                if str(item["scheduled_for"]) >= start and claimable(item, int(item.get("attempt", 0)))
            ]
        return [run_from_item(item) for item in items]

    def get_run(self, job_id: str, scheduled_for: datetime) -> Run | None:
        with self.tables.lock:
            return stored_run(self._run_item(job_id, format_instant(scheduled_for)))

    def list_runs(self, job_id: str, *, newest_first: bool = True, limit: int = 1000) -> list[Run]:
        with self.tables.lock:
            items = [copied(item) for item in self._job_runs(job_id, newest_first=newest_first)][:limit]
        return [run_from_item(item) for item in items]

    def query_runs(
        self,
        job_id: str,
        *,
        start: datetime | None,
        end: datetime | None,
        states: Sequence[RunState] = (),
        limit: int,
        after: datetime | None = None,
        newest_first: bool = True,
    ) -> tuple[list[Run], datetime | None]:
        """As DynamoDB's Query: `limit` bounds the runs read, the state filter applies after, and the
        position to continue after is returned when the read stopped at the limit."""
        low = None if start is None else format_instant(start)
        high = None if end is None else format_instant(end)
        position = None if after is None else format_instant(after)

        def in_page(fire: str) -> bool:
            if (low is not None and fire < low) or (high is not None and fire > high):
                return False
            return position is None or (fire < position if newest_first else fire > position)

        with self.tables.lock:
            items = [
                copied(item)
                for item in self._job_runs(job_id, newest_first=newest_first)
                if in_page(str(item["scheduled_for"]))
            ][:limit]
        wanted = {str(state) for state in states}
        runs = [run_from_item(item) for item in items if not wanted or item.get("state") in wanted]
        last = parse_instant(str(items[-1]["scheduled_for"])) if len(items) == limit and items else None
        return runs, last

    def run_times_between(self, job_id: str, first: datetime, last: datetime) -> set[datetime]:
        return set(self.run_states_between(job_id, first, last))

    def runs_between(self, job_id: str, first: datetime, last: datetime) -> list[Run]:
        low, high = format_instant(first), format_instant(last)
        with self.tables.lock:
            items = [
                copied(item)
                for item in self._job_runs(job_id, newest_first=False)
                if low <= str(item["scheduled_for"]) <= high
            ]
        return [run_from_item(item) for item in items]

    def recorded_runs_of_jobs(
        self, firsts: Mapping[str, datetime], last: datetime
    ) -> dict[str, RecordedRuns]:
        """runs_between a job."""
        return RecordedRuns.job_by_job(firsts, last, self.runs_between)

    def restore_runs(self, runs: Sequence[Run]) -> list[Run]:
        created: list[Run] = []
        with self.tables.lock:
            for run in runs:
                if not self._run_exists(run):
                    self._put_run(run_to_item(run))
                    created.append(run)
        return created

    def run_states_between(self, job_id: str, first: datetime, last: datetime) -> dict[datetime, RunState]:
        low, high = format_instant(first), format_instant(last)
        with self.tables.lock:
            found = [
                (str(item["scheduled_for"]), str(item["state"]))
                for item in self._job_runs(job_id)
                if low <= str(item["scheduled_for"]) <= high
            ]
        return {parse_instant(fire): RunState(state) for fire, state in found}

    def transition_run(self, expected: Run, updated: Run) -> None:
        with self.tables.lock:
            self._transition(expected, updated)

    def _transition(self, expected: Run, updated: Run) -> None:
        stored = self._run_item(expected.job_id, format_instant(expected.scheduled_for))
        if stored is None or not run_still_at(stored, expected):
            raise StaleRunError(
                f"run {expected.run_id} moved on from {expected.state}/{expected.attempt}",
                current=stored_run(stored),
            )
        self._put_run(apply_changes(stored, run_update_base(expected), run_to_item(updated)))

    def claim(self, claim: Claim) -> Run:
        """The executor's claim (adapters/conditions.claimed_item), one write."""
        with self.tables.lock:
            stored = claimed_item(self._run_item(claim.job_id, format_instant(claim.scheduled_for)), claim)
            self._put_run(stored)
        return run_from_item(stored)

    def claim_exclusive(self, expected: Run, updated: Run, now: datetime) -> bool:
        me, moment = expected.run_id, format_instant_ms(now)
        lease = format_instant_ms(updated.lease_expires_at or now)

        def slot_free(job: dict[str, Any]) -> bool:
            holder = job.get("active_run")
            return holder is None or holder == me or str(job.get("active_lease_expires_at", "")) < moment

        def take(job: dict[str, Any]) -> None:
            job.update(active_run=me, active_lease_expires_at=lease)
            if expected.state is RunState.QUEUED:
                job.pop("queued_run", None)

        with self.tables.lock:
            return self._slot_write(expected, updated, slot_free, take)

    def enqueue_behind(self, expected: Run, updated: Run) -> bool:
        me = expected.run_id

        def take(job: dict[str, Any]) -> None:
            job["queued_run"] = me

        with self.tables.lock:
            job = self._job_item(expected.job_id)
            holder = None if job is None else job.get("queued_run")
            if holder is not None and holder != me:
                # The slot names another run: taken over only if that run left the queue some other way.
                holder_job, holder_fire = split_run_id(str(holder))
                holder_item = self._run_item(holder_job, format_instant(holder_fire))
                if not waiting_slot_is_stale(stored_run(holder_item)):
                    return False
            return self._slot_write(expected, updated, lambda _: True, take)

    def finish_exclusive(self, expected: Run, updated: Run) -> str | None:
        me = expected.run_id

        def release(job: dict[str, Any]) -> None:
            job.pop("active_run", None)
            job.pop("active_lease_expires_at", None)

        with self.tables.lock:
            if not self._slot_write(expected, updated, lambda job: job.get("active_run") == me, release):
                # The slot was lost (job deleted, or taken after our lease expired): the run alone, fenced.
                self._transition(expected, updated)
            job = self._job_item(expected.job_id)
        return None if job is None else job.get("queued_run")

    def open_runs(self, shard: int, through: datetime) -> Iterator[Run]:
        keys, until = set(open_keys(shard)), format_instant_ms(through)
        with self.tables.lock:
            items = [
                copied(item)
                for item in self._every_run()
                if item.get("open_key") in keys and str(item["check_at"]) <= until
            ]
        items.sort(key=_check_order)
        return iter([run_from_item(item) for item in items])

    def _slot_write(self, expected: Run, updated: Run, rule: SlotRule, change: SlotChange) -> bool:
        """Move the run and the job's overlap slot together; False when only the slot's rule failed (or
        the job is gone). StaleRunError when the run moved."""
        stored = self._run_item(expected.job_id, format_instant(expected.scheduled_for))
        if stored is None or not run_still_at(stored, expected):
            raise StaleRunError(f"run {expected.run_id} moved on", current=stored_run(stored))
        job = self._job_item(expected.job_id)
        if job is None or not rule(job):
            return False
        change(job)
        self._put_job(job)
        self._put_run(apply_changes(stored, run_update_base(expected), run_to_item(updated)))
        return True


def _check_order(item: Record) -> tuple[str, str, str]:
    """The sweeper's order: oldest check first, then the run's key (as the DynamoDB adapter sorts)."""
    return str(item["check_at"]), str(item["job_id"]), str(item["scheduled_for"])
