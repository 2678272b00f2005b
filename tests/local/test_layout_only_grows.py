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
