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
from tickwork.local.runtime import executor_index, process_names, role_of


def test_the_executors_are_named_and_share_the_cap() -> None:
    assert process_names("executor", 1) == ["executor"]
    assert process_names("executor", 3) == ["executor", "executor-2", "executor-3"]
    assert process_names("ticker", 3) == ["ticker"]
    assert [role_of(name) for name in process_names("executor", 3)] == ["executor"] * 3
    assert [executor_share(200, 2, i) for i in range(2)] == [100, 100]
    assert [executor_share(5, 2, i) for i in range(2)] == [3, 2]  # the shares add up to the cap
    assert [executor_share(7, 3, i) for i in range(3)] == [3, 2, 2]
    assert [executor_index(name) for name in process_names("executor", 3)] == [0, 1, 2]


@pytest.fixture
def target() -> Iterator[Target]:
    with Target() as t:
        yield t


def test_executor_processes_share_the_cap_and_run_at_once(tmp_path: Path, target: Target) -> None:
    # Four asked for, three started: no more processes than the cap has runs (one thread each here).
    names = ["executor", "executor-2", "executor-3"]
    with Supervisor(tmp_path, "--engine", "sqlite", "--executors", "4", "--cap", "3") as local:
        pids = local.pids()
        assert set(names) <= set(pids) and "executor-4" not in pids, pids
        jobs = [local.create(f"slow {i}", f"{target.url}/slow?sleep=1.5") for i in range(6)]
        # The six jobs' calls from their first shared fire on (an earlier fire may be the create's own): 1.5 s
        # each, three at a time: one in each process (their one thread each), the slots counted across them.
        fire = math.ceil((time.time() + 6) / 10) * 10
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(fire))
        wanted = {f"{job}:{stamp}" for job in jobs}
        wait_until("the six runs of one fire", lambda: wanted <= {c["run_id"] for c in target.calls}, 60)
        wait_until("the last call to end", lambda: time.time() > max(c["at"] for c in target.calls) + 1.6, 10)
        calls = sorted((c["at"], c["at"] + 1.5) for c in target.calls if c["run_id"] in wanted)
        overlapping = max(sum(1 for s, e in calls if s <= at < e) for at, _ in calls)
        assert overlapping == 3, calls  # the cap, reached by the three processes together, never passed
        # Each process's own count of the runs it finished (its metrics snapshot, written every second).

        def finished(name: str) -> float:
            path = tmp_path / "run" / f"metrics-{name}.json"
            return float(json.loads(path.read_text()).get("counts", {}).get("RunsSucceeded", 0))

        wait_until("the snapshots", lambda: sum(finished(name) for name in names) >= 6, 10)
        assert all(finished(name) >= 1 for name in names)
