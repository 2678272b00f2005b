"""Several executor processes (`tickwork local --executors N`) share one cap: each runs its share of it, and
the bound in the store holds the total to the cap whichever process takes a slot."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.local.harness import Supervisor, Target, wait_until
from tickwork.local.roles import executor_share
from tickwork.local.runtime import process_names, role_of


def test_the_executors_are_named_and_share_the_cap() -> None:
    assert process_names("executor", 1) == ["executor"]
    assert process_names("executor", 3) == ["executor", "executor-2", "executor-3"]
    assert process_names("ticker", 3) == ["ticker"]
    assert [role_of(name) for name in process_names("executor", 3)] == ["executor"] * 3
    assert executor_share(200, 2) == 100
    assert executor_share(5, 2) == 3  # rounded up: the bound, not the threads, holds the total
    assert executor_share(1, 4) == 1


@pytest.fixture
def target() -> Iterator[Target]:
    with Target() as t:
        yield t


def test_two_executor_processes_run_a_burst_without_passing_the_cap(tmp_path: Path, target: Target) -> None:
    with Supervisor(tmp_path, "--engine", "sqlite", "--executors", "2", "--cap", "3") as local:
        pids = local.pids()
        assert {"executor", "executor-2"} <= set(pids), pids
        jobs = [local.create(f"slow {i}", f"{target.url}/slow?sleep=1.5") for i in range(6)]
        # The six jobs' calls from their first shared fire on (an earlier fire may be the create's own): 1.5 s
        # each, three at a time at most. The two processes have two threads each (their shares of 3, rounded
        # up), so only the shared bound keeps a fourth from starting.
        fire = math.ceil((time.time() + 6) / 10) * 10
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(fire))
        wanted = {f"{job}:{stamp}" for job in jobs}
        wait_until("the six runs of one fire", lambda: wanted <= {c["run_id"] for c in target.calls}, 60)
        wait_until("the last call to end", lambda: time.time() > max(c["at"] for c in target.calls) + 1.6, 10)
        calls = sorted((c["at"], c["at"] + 1.5) for c in target.calls if c["run_id"] in wanted)
        overlapping = max(sum(1 for s, e in calls if s <= at < e) for at, _ in calls)
        assert overlapping == 3, calls  # the cap, reached by the two processes together, never passed
        # Each process's own count of the runs it finished (its metrics snapshot, written every second).

        def finished(name: str) -> float:
            path = tmp_path / "run" / f"metrics-{name}.json"
            return float(json.loads(path.read_text()).get("counts", {}).get("RunsSucceeded", 0))

        wait_until("both snapshots", lambda: finished("executor") + finished("executor-2") >= 6, 10)
        assert finished("executor") >= 1 and finished("executor-2") >= 1
