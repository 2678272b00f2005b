"""`tickwork local` on its default engine (SQLite) survives the crash the emulator does not: every process
SIGKILLed at once, then a restart on the same state dir. Every job and every committed run is still there,
scheduling goes on, no fire is skipped, and a run killed mid-claim is retried through its lease."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.local.harness import Supervisor, Target, alive, wait_until

EVERY = timedelta(seconds=10)  # the API's fastest schedule


@pytest.fixture
def target() -> Iterator[Target]:
    with Target() as t:
        yield t


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def all_runs(local: Supervisor, job_id: str) -> dict[str, dict[str, Any]]:
    status, page = local.call("GET", f"/jobs/{job_id}/runs?limit=100")
    assert status == 200, page
    return {run["id"]: run for run in page["items"]}


def test_sigkill_of_every_process_at_once_loses_no_job_no_run_and_no_fire(
    tmp_path: Path, target: Target
) -> None:
    first = Supervisor(tmp_path, "--engine", "sqlite")
    second = Supervisor(tmp_path, "--engine", "sqlite")
    try:
        first.start()
        # A slow target (3 s calls): some runs are mid-call (claimed, running) when everything dies.
        jobs = [
            # Staggered a second apart, so some run is starting or running at any moment.
            first.create(f"durable {i}", f"{target.url}/slow?sleep=3", f"{i}/10 * * * * *", timeout_seconds=5)
            for i in range(8)
        ]
        wait_until(
            "every job to have succeeded runs",
            lambda: all(
                sum(r["state"] == "succeeded" for r in all_runs(first, job).values()) >= 2 for job in jobs
            ),
            timeout=60,
            step=0.5,
        )
        before = {job: all_runs(first, job) for job in jobs}
        children = first.pids()
        assert first.process is not None

        # Every process at once: the supervisor's session, then each child by pid (none gets to clean up).
        os.killpg(first.process.pid, signal.SIGKILL)
        for pid in children.values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        killed_epoch = time.time()
        killed_at = datetime.fromtimestamp(killed_epoch, UTC)
        wait_until("every process to be gone", lambda: not [p for p in children.values() if alive(p)], 10)

        second.start()
        status, listed = second.call("GET", "/jobs?limit=100")
        assert status == 200, listed
        assert {job["id"] for job in listed["items"]} == set(jobs)
        for job in jobs:
            after = all_runs(second, job)
            assert set(before[job]) <= set(after), f"runs lost for {job}"
            for run_id, run in before[job].items():
                if run["state"] == "succeeded":
                    assert after[run_id]["state"] == "succeeded", after[run_id]

        # Scheduling continues: fires after the restart run, and every run planned before the kill ends
        # succeeded (one killed mid-call is retried once its 5 s + 2 s lease has expired).
        horizon = killed_at + 2 * EVERY

        def settled() -> bool:
            for job in jobs:
                runs = all_runs(second, job).values()
                if not any(instant(r["timings"]["scheduled_for"]) >= horizon and r["state"] == "succeeded"
                           for r in runs):  # fmt: skip
                    return False
                old = [r for r in runs if instant(r["timings"]["scheduled_for"]) <= killed_at]
                if any(r["state"] != "succeeded" for r in old):
                    return False
            return True

        wait_until("runs before the kill to finish and new fires to run", settled, timeout=90, step=1.0)

        # Calls that arrived less than 2.5 s before the kill were still held (3 s) when it came: their
        # runs died mid-call and must have been run again, through their lease.
        cut = {c["run_id"] for c in target.calls if killed_epoch - 2.5 < c["at"] < killed_epoch}
        assert cut, "no run was mid-call at the kill: the test proved nothing about a killed claim"
        for run_id in cut:
            retried = all_runs(second, run_id.split(":")[0])[run_id]
            assert retried["state"] == "succeeded" and retried["attempt"] >= 2, retried
        lost_attempts = 0
        for job in jobs:
            runs = sorted(all_runs(second, job).values(), key=lambda r: r["timings"]["scheduled_for"])
            fires = [instant(r["timings"]["scheduled_for"]) for r in runs]
            gaps = [(a, b) for a, b in pairwise(fires) if b - a != EVERY]
            assert not gaps, f"fires skipped for {job}: {gaps}"
            lost_attempts += sum(r["attempt"] > 1 for r in runs)
        print(f"{sum(len(b) for b in before.values())} runs before the kill, all kept; "
              f"{lost_attempts} run(s) retried after their claim died with the process")  # fmt: skip
    finally:
        first.cleanup()
        second.cleanup()
        assert not first.children_alive() and not second.children_alive(), "processes left behind"
