"""The supervisor's status line is read again only when the database or a role's snapshot changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tickwork.local.runtime import LocalConfig, LocalRuntime
from tickwork.local.status import SnapshotMetrics


@pytest.fixture
def runtime(tmp_path: Path) -> Any:
    runtime = LocalRuntime(LocalConfig(state_dir=tmp_path / "state", roles=()))
    runtime.start()  # no role process: the database, the run dir and the environment only
    yield runtime
    runtime.stop()


def test_the_status_is_read_again_only_after_a_commit_or_a_new_snapshot(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = 0
    read_status = runtime._read_status

    def counted() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return read_status()

    monkeypatch.setattr(runtime, "_read_status", counted)
    assert runtime.status()["queue_depth"] == 0
    assert runtime.status()["queue_depth"] == 0
    assert reads == 1

    queue = runtime.env["TICKWORK_DISPATCH_QUEUE_URLS"].split(",")[0]
    runtime._queues().send_message(QueueUrl=queue, MessageBody="{}")  # a commit: data_version moves
    assert runtime.status()["queue_depth"] == 1
    assert reads == 2

    metrics = SnapshotMetrics(runtime.run_dir / "metrics-executor.json")
    metrics.count("RunsSucceeded", 3)
    metrics.write()  # a role's new snapshot
    assert runtime.status()["succeeded"] == 3
    assert runtime.status()["succeeded"] == 3
    assert reads == 3
