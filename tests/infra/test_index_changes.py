"""Index changes ship without a planning outage (issue 30). CloudFormation makes one global secondary index
change per table per update and rebuilds a changed index from nothing: while `due` rebuilds, no tick finds
a due job. So `tickwork/resources.py` may, against the indexes recorded in `indexes.json` (what is
deployed), add one index to a table or drop one, per step, and never change one in place or rename it (add
and drop together). docs/deploy.md, "Changing an index", has the procedure; after a step ships,
`python -m tests.infra.test_index_changes --write` records it (refusing what the test refuses)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tickwork.resources import TABLES

RECORD = Path(__file__).with_name("indexes.json")
Indexes = dict[str, dict[str, dict[str, Any]]]


def current() -> Indexes:
    """Each table's indexes as resources.py defines them: keys and projection by index name."""
    return {
        table.logical_name: {
            index.name: {
                "partition": [index.partition.name, index.partition.type],
                "sort": None if index.sort is None else [index.sort.name, index.sort.type],
                "projection": index.projection,
            }
            for index in table.indexes
        }
        for table in TABLES
    }


def refusals(deployed: Indexes, wanted: Indexes) -> list[str]:
    """Why `wanted` cannot replace `deployed` in one deploy (none: it can)."""
    problems: list[str] = []
    for table in sorted(set(deployed) | set(wanted)):
        before, after = deployed.get(table, {}), wanted.get(table, {})
        if not before and table not in deployed:
            continue  # a new table: its indexes are created with it
        added = sorted(set(after) - set(before))
        dropped = sorted(set(before) - set(after))
        changed = sorted(name for name in set(before) & set(after) if before[name] != after[name])
        for name in changed:
            problems.append(
                f"{table}.{name} changes in place: it would be rebuilt from nothing; add a new index instead"
            )
        if added and dropped:
            problems.append(
                f"{table}: adds {added} and drops {dropped} in one step (a rename): add first, drop later"
            )
        elif len(added) + len(dropped) > 1:
            problems.append(f"{table}: {len(added) + len(dropped)} index changes in one step: one per deploy")
    return problems


def test_resources_changes_at_most_one_index_a_table_and_none_in_place() -> None:
    deployed = json.loads(RECORD.read_text())
    assert refusals(deployed, current()) == []


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ("add due_v2", []),
        ("drop by_owner", []),
        ("rename due", ["a rename"]),
        ("re-key due", ["changes in place"]),
        ("project due keys only", ["changes in place"]),
        ("add two", ["2 index changes"]),
    ],
)
def test_the_rule_refuses_what_would_stop_planning(change: str, refused: list[str]) -> None:
    deployed = current()
    jobs = dict(deployed["jobs"])
    due = jobs["due"]
    if change == "add due_v2":
        jobs["due_v2"] = {**due, "sort": ["next_fire_ms", "N"]}
    elif change == "drop by_owner":
        jobs.pop("by_owner")
    elif change == "rename due":
        jobs["due_by_minute"] = jobs.pop("due")
    elif change == "re-key due":
        jobs["due"] = {**due, "partition": ["due_bucket", "S"]}
    elif change == "project due keys only":
        jobs["due"] = {**due, "projection": "KEYS_ONLY"}
    elif change == "add two":
        jobs["a"], jobs["b"] = due, due
    problems = refusals(deployed, {**deployed, "jobs": jobs})
    assert len(problems) == len(refused)
    for problem, words in zip(problems, refused, strict=True):
        assert words in problem


def write() -> int:
    deployed = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    problems = refusals(deployed, current()) if deployed else []
    for problem in problems:
        print(f"refused: {problem}", file=sys.stderr)
    if problems:
        return 2
    RECORD.write_text(json.dumps(current(), indent=2, sort_keys=True) + "\n")
    print(f"recorded {RECORD}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.infra.test_index_changes --write")
    raise SystemExit(write())
