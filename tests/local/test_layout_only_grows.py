"""`tickwork local` refuses fewer shards or queues than its state directory has run with (issue 30): their
jobs would never be planned again, their messages would be dropped. Refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tickwork.cli import run_local_command
from tickwork.local.runtime import LAYOUT_FILE


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--shards", "2"], "--shards 2 is below the deployed 4"),
        (["--queues", "1"], "--queues 1 is below the deployed 2"),
    ],
)
def test_fewer_shards_or_queues_than_the_state_ran_with_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], said: str
) -> None:
    (tmp_path / LAYOUT_FILE).write_text(json.dumps({"shard_count": 4, "queue_count": 2}))

    code = run_local_command(["--state-dir", str(tmp_path), "--port", "0", *flags])

    err = capsys.readouterr().err
    assert code == 2 and said in err and "only be added" in err
    assert json.loads((tmp_path / LAYOUT_FILE).read_text()) == {"shard_count": 4, "queue_count": 2}
    assert not (tmp_path / "tickwork.db").exists()  # nothing started


def test_the_quota_and_grant_flags_reach_every_role(tmp_path: Path) -> None:
    from tickwork.local.runtime import LocalConfig, LocalRuntime
    from tickwork.settings import Settings

    config = LocalConfig(
        state_dir=tmp_path,
        grants={"local-user": ["lambda:tickwork-target-*"]},
        quotas={
            "TICKWORK_OWNER_MAX_JOBS": "3",
            "TICKWORK_OWNER_MAX_BACKFILL_RATE": "2.5",
            "TICKWORK_OWNER_CONCURRENCY_CAP": "7",
        },
    )
    runtime = LocalRuntime(config)
    try:
        settings = Settings.from_env(runtime._environment())
    finally:
        runtime.stop()

    assert settings.owner_quotas.max_jobs == 3 and settings.owner_quotas.max_backfill_rate == 2.5
    assert settings.owner_quotas.min_interval_seconds is None
    assert settings.owner_concurrency_cap == 7  # each owner's share of the bound
    assert settings.target_grants is not None and settings.target_grants.grants == {
        "local-user": ("lambda:tickwork-target-*",)
    }
