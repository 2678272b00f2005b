"""SQLite records of the runs aggregate: the same claims, transitions and overlap slot as
adapters/dynamodb/runs.py, each one immediate transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from tickwork.adapters.conditions import apply_changes, claimable, claimed_item, run_still_at, stored_run
from tickwork.adapters.records import open_keys, run_from_item, run_to_item, run_update_base
from tickwork.adapters.sqlite.base import SqliteBase, load, put, rewrite, stored_columns
from tickwork.domain.audit import RecordedRuns
from tickwork.domain.errors import StaleRunError
from tickwork.domain.execution import Claim, waiting_slot_is_stale
from tickwork.domain.models import Run, RunState, split_run_id
from tickwork.domain.timekeys import format_instant, format_instant_ms, parse_instant
from tickwork.resources import JOBS, RUNS

# A job record's overlap slot, and what each slot operation asks of it and does to it.
SlotRule = Callable[[dict[str, Any]], bool]
SlotChange = Callable[[dict[str, Any]], None]

# Jobs a recorded_runs_of_jobs query reads at once: two bound values each, far below SQLite's limit of 32,766.
RUNS_OF_JOBS_CHUNK = 500
# The states of a finished run, as stored: such a run is never lost (domain/audit.lost).
_FINISHED = tuple(str(state) for state in RunState if state.is_terminal)


class SqliteRunRecords(SqliteBase):
    """Run records and the open-runs index; claims, transitions and the overlap slot (on the job record,
    written in the run's own transaction)."""

    def existing_run_times(self, job_id: str, scheduled_fors: Sequence[datetime]) -> set[datetime]:
        if not scheduled_fors:
            return set()
        found = self.run_times_between(job_id, min(scheduled_fors), max(scheduled_fors))
        return found & set(scheduled_fors)

    def claimable_runs(self, job_id: str, since: datetime) -> list[Run]:
        items = self._select_items(
            "SELECT item FROM runs WHERE job_id = ? AND scheduled_for >= ? ORDER BY scheduled_for",
            (job_id, format_instant(since)),
        )
        return [run_from_item(item) for item in items if claimable(item, int(item.get("attempt", 0)))]

    def get_run(self, job_id: str, scheduled_for: datetime) -> Run | None:
        with self.db.read() as connection:
            return stored_run(self._run_item(connection, job_id, format_instant(scheduled_for)))

    def list_runs(self, job_id: str, *, newest_first: bool = True, limit: int = 1000) -> list[Run]:
        order = "DESC" if newest_first else "ASC"
        items = self._select_items(
            f"SELECT item FROM runs WHERE job_id = ? ORDER BY scheduled_for {order} LIMIT ?", (job_id, limit)
        )
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
        conditions = ["job_id = ?"]
        parameters: list[Any] = [job_id]
        if start is not None:
            conditions.append("scheduled_for >= ?")
            parameters.append(format_instant(start))
        if end is not None:
            conditions.append("scheduled_for <= ?")
            parameters.append(format_instant(end))
        if after is not None:
            conditions.append("scheduled_for < ?" if newest_first else "scheduled_for > ?")
            parameters.append(format_instant(after))
        order = "DESC" if newest_first else "ASC"
        items = self._select_items(
            f"SELECT item FROM runs WHERE {' AND '.join(conditions)} ORDER BY scheduled_for {order} LIMIT ?",
            [*parameters, limit],
        )
        wanted = {str(state) for state in states}
        runs = [run_from_item(item) for item in items if not wanted or item.get("state") in wanted]
        last = parse_instant(str(items[-1]["scheduled_for"])) if len(items) == limit and items else None
        return runs, last

    def run_times_between(self, job_id: str, first: datetime, last: datetime) -> set[datetime]:
        with self.db.read() as connection:
            rows = connection.execute(
                "SELECT scheduled_for FROM runs WHERE job_id = ? AND scheduled_for BETWEEN ? AND ?",
                (job_id, format_instant(first), format_instant(last)),
            ).fetchall()
        return {parse_instant(str(row[0])) for row in rows}

    def runs_between(self, job_id: str, first: datetime, last: datetime) -> list[Run]:
        items = self._select_items(
            "SELECT item FROM runs WHERE job_id = ? AND scheduled_for BETWEEN ? AND ? ORDER BY scheduled_for",
            (job_id, format_instant(first), format_instant(last)),
        )
        return [run_from_item(item) for item in items]

    def recorded_runs_of_jobs(
        self, firsts: Mapping[str, datetime], last: datetime
    ) -> dict[str, RecordedRuns]:
        """One query a chunk of jobs (each job's window joined in from a VALUES list), one read. A finished
        run comes as its key alone: only the others' records are decoded (after a burst, most are done)."""
        fires: dict[str, set[datetime]] = {job_id: set() for job_id in firsts}
        unfinished: dict[str, list[Run]] = {job_id: [] for job_id in firsts}
        windows = [(job_id, format_instant(first)) for job_id, first in firsts.items()]
        for start in range(0, len(windows), RUNS_OF_JOBS_CHUNK):
            chunk = windows[start : start + RUNS_OF_JOBS_CHUNK]
            with self.db.read() as connection:
                rows = connection.execute(
                    f"WITH windows(job_id, first) AS (VALUES {', '.join('(?, ?)' for _ in chunk)}) "
                    f"SELECT runs.job_id, runs.scheduled_for, CASE WHEN json_extract(runs.item, '$.state') "
                    f"IN ({', '.join('?' for _ in _FINISHED)}) THEN NULL ELSE runs.item END "
                    "FROM windows JOIN runs ON runs.job_id = windows.job_id "
                    "AND runs.scheduled_for BETWEEN windows.first AND ? "
                    "ORDER BY runs.job_id, runs.scheduled_for",
                    [*(value for window in chunk for value in window), *_FINISHED, format_instant(last)],
                ).fetchall()
            for job_id, fire, item in rows:
                fires[job_id].add(parse_instant(fire))
                if item is not None:
                    unfinished[job_id].append(run_from_item(load(item)))
        return {
            job_id: RecordedRuns(frozenset(fires[job_id]), tuple(unfinished[job_id])) for job_id in firsts
        }

    def restore_runs(self, runs: Sequence[Run]) -> list[Run]:
        created: list[Run] = []
        with self.db.write() as connection:
            for run in runs:
                if self._run_item(connection, run.job_id, format_instant(run.scheduled_for)) is None:
                    put(connection, RUNS, run_to_item(run))
                    created.append(run)
        return created

    def run_states_between(self, job_id: str, first: datetime, last: datetime) -> dict[datetime, RunState]:
        items = self._select_items(
            "SELECT item FROM runs WHERE job_id = ? AND scheduled_for BETWEEN ? AND ?",
            (job_id, format_instant(first), format_instant(last)),
        )
        return {parse_instant(str(item["scheduled_for"])): RunState(str(item["state"])) for item in items}

    def transition_run(self, expected: Run, updated: Run) -> None:
        with self.db.write(savepoint=False) as connection:  # the check comes before the one write
            self._transition(connection, expected, updated)

    def _transition(self, connection: sqlite3.Connection, expected: Run, updated: Run) -> None:
        fire = format_instant(expected.scheduled_for)
        stored = self._run_item(connection, expected.job_id, fire)
        if stored is None or not run_still_at(stored, expected):
            raise StaleRunError(
                f"run {expected.run_id} moved on from {expected.state}/{expected.attempt}",
                current=stored_run(stored),
            )
        _write_over(connection, stored, expected, updated)

    def claim(self, claim: Claim) -> Run:
        """The executor's claim (adapters/conditions.claimed_item), one write."""
        with self.db.write(savepoint=False) as connection:  # the check comes before the one write
            found = self._run_item(connection, claim.job_id, format_instant(claim.scheduled_for))
            columns = stored_columns(RUNS, found or {})  # before the claim changes the record in place
            stored = claimed_item(found, claim)  # StaleRunError when there is none to claim
            rewrite(connection, RUNS, columns, stored)
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

        return self._with_job_slot(expected, updated, slot_free, take)

    def enqueue_behind(self, expected: Run, updated: Run) -> bool:
        me = expected.run_id
        with self.db.write() as connection:
            job = self._job_item(connection, expected.job_id)
            holder = None if job is None else job.get("queued_run")
            if holder is not None and holder != me:
                # The slot names another run: taken over only if that run left the queue some other way.
                holder_job, holder_fire = split_run_id(str(holder))
                holder_item = self._run_item(connection, holder_job, format_instant(holder_fire))
                if not waiting_slot_is_stale(stored_run(holder_item)):
                    return False
            return self._slot_write(connection, expected, updated, lambda _: True, _set("queued_run", me))

    def finish_exclusive(self, expected: Run, updated: Run) -> str | None:
        me = expected.run_id

        def release(job: dict[str, Any]) -> None:
            job.pop("active_run", None)
            job.pop("active_lease_expires_at", None)

        with self.db.write() as connection:
            if not self._slot_write(
                connection, expected, updated, lambda job: job.get("active_run") == me, release
            ):
                # The slot was lost (job deleted, or taken after our lease expired): the run alone, fenced.
                self._transition(connection, expected, updated)
            job = self._job_item(connection, expected.job_id)
        return None if job is None else job.get("queued_run")

    def open_runs(self, shard: int, through: datetime) -> Iterator[Run]:
        keys = open_keys(shard)
        items = self._select_items(
            f"SELECT item FROM runs WHERE open_key IN ({', '.join('?' for _ in keys)}) AND check_at <= ? "
            "ORDER BY check_at",
            [*keys, format_instant_ms(through)],
        )
        return iter([run_from_item(item) for item in items])

    def delete_expired(self, now: datetime) -> int:
        """Run TTL (DynamoDB deletes expired items on its own): delete runs whose `expires_at` passed."""
        with self.db.write() as connection:
            cursor = connection.execute(
                "DELETE FROM runs WHERE expires_at IS NOT NULL AND expires_at < ?", (int(now.timestamp()),)
            )
            return int(cursor.rowcount)

    def _with_job_slot(self, expected: Run, updated: Run, rule: SlotRule, change: SlotChange) -> bool:
        with self.db.write() as connection:
            return self._slot_write(connection, expected, updated, rule, change)

    def _slot_write(
        self,
        connection: sqlite3.Connection,
        expected: Run,
        updated: Run,
        rule: SlotRule,
        change: SlotChange,
    ) -> bool:
        """Move the run and the job's overlap slot together; False when only the slot's rule failed (or
        the job is gone). StaleRunError when the run moved."""
        fire = format_instant(expected.scheduled_for)
        stored = self._run_item(connection, expected.job_id, fire)
        if stored is None or not run_still_at(stored, expected):
            raise StaleRunError(f"run {expected.run_id} moved on", current=stored_run(stored))
        job = self._job_item(connection, expected.job_id)
        if job is None or not rule(job):
            return False
        change(job)
        put(connection, JOBS, job)
        _write_over(connection, stored, expected, updated)
        return True


def _write_over(connection: sqlite3.Connection, stored: dict[str, Any], expected: Run, updated: Run) -> None:
    """The run moved from `expected` to `updated`, written over its stored record (read in this transaction
    and found still at `expected`): what the move changed, the rest of the record as stored."""
    rewrite(
        connection,
        RUNS,
        stored_columns(RUNS, stored),
        apply_changes(stored, run_update_base(expected), run_to_item(updated)),
    )


def _set(name: str, value: str) -> SlotChange:
    def change(job: dict[str, Any]) -> None:
        job[name] = value

    return change
