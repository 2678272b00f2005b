"""The SQLite engine's records as JSON text (adapters/sqlite/base.py): orjson where it can, json where it
cannot, and either way what json.dumps and json.loads would make of the record."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import pytest

from tickwork.adapters.sqlite.base import load, read_json, record_text


class Colour(StrEnum):
    RED = "red"


RECORD: dict[str, Any] = {
    "job_id": "job_é✓",  # not ASCII: json escapes it, orjson writes UTF-8; both read back the same
    "state": Colour.RED,
    "attempt": 3,
    "backoff": 10.0,
    "tiny": 1e-07,
    "big": 2**63 - 1,
    "negative": -(2**63),
    "flags": [True, False, None],
    "attempts": ({"ok": True, "status": "204"},),  # a tuple is written as a list
    "nested": {"headers": {"X-A": "v"}, "counts": {1: "one"}},  # a non-string key, as json converts it
}


def test_a_record_reads_back_as_json_would_write_and_read_it() -> None:
    text = record_text(RECORD)

    assert json.loads(text) == json.loads(json.dumps(RECORD))
    assert load(text) == json.loads(json.dumps(RECORD))
    assert " " not in text.replace("job_é✓", "")  # compact, as json with its separators wrote it


def test_an_integer_past_64_bits_is_written_and_read_by_json() -> None:
    record = {"huge": 2**70, "small": 1}

    text = record_text(record)

    assert text == json.dumps(record, separators=(",", ":"))
    assert load(text) == record


@pytest.mark.parametrize("value", [datetime(2026, 12, 7, tzinfo=UTC), object()], ids=["datetime", "object"])
def test_what_json_cannot_write_is_refused_as_json_refused_it(value: object) -> None:
    with pytest.raises(TypeError):
        record_text({"at": value})


def test_text_json_wrote_that_orjson_does_not_read_is_read_by_json() -> None:
    written = json.dumps({"ratio": float("nan"), "huge": -(2**80)})

    read = read_json(written)

    assert math.isnan(read["ratio"]) and read["huge"] == -(2**80)


def test_text_that_is_not_json_still_fails() -> None:
    with pytest.raises(ValueError):
        load("{not json")
