"""The SQLite engine's records as JSON text (adapters/sqlite/base.py): written by orjson where it can, by
json where it cannot, read by json; either way what json.dumps and json.loads would make of the record."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import pytest

from tickwork.adapters.sqlite.base import load, record_text


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


@pytest.mark.parametrize(
    "huge",
    [2**64 + 1, -(2**63) - 1, 12345678901234567890123, 10**38 - 1],
    ids=["past-unsigned", "below-signed", "23-digits", "dynamodb-largest"],
)
def test_an_integer_past_64_bits_reads_back_exactly(huge: int) -> None:
    """orjson refuses to write it (json does), and would read it back as a float: records are read by json."""
    record = {"payload": {"n": huge}, "small": 1}

    text = record_text(record)

    assert text == json.dumps(record, separators=(",", ":"))
    assert load(text) == record and type(load(text)["payload"]["n"]) is int


def test_not_a_number_is_written_as_null_not_as_json_s_invalid_nan() -> None:
    """json wrote `NaN`, which is not JSON (SQLite's json functions refuse it); the API refuses it anyway."""
    text = record_text({"ratio": float("nan"), "top": float("inf")})

    assert json.loads(text) == {"ratio": None, "top": None}


@pytest.mark.parametrize("value", [datetime(2026, 12, 7, tzinfo=UTC), object()], ids=["datetime", "object"])
def test_what_json_cannot_write_is_refused_as_json_refused_it(value: object) -> None:
    with pytest.raises(TypeError):
        record_text({"at": value})


def test_text_that_is_not_json_still_fails() -> None:
    with pytest.raises(ValueError):
        load("{not json")
