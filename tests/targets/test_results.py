"""Pure helpers: results, retry classification, run identity, execution names."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.domain.targets import (
    MAX_DETAIL_BYTES,
    TargetResult,
    fifo_id,
    http_status_retryable,
    invocation_context,
    invocation_headers,
    sfn_execution_name,
    truncate_detail,
)

from .conftest import CONTEXT_REST, invocation


def test_detail_is_truncated_to_one_kib_without_splitting_characters() -> None:
    result = TargetResult(ok=False, retryable=True, status="500", latency_ms=3, detail="é" * 2000)

    assert len(result.detail.encode()) <= MAX_DETAIL_BYTES
    assert result.detail.endswith("[truncated]")
    assert result.detail.startswith("éé")


def test_short_detail_is_kept() -> None:
    assert TargetResult(True, False, "200", 1, "fine").detail == "fine"


def test_success_cannot_be_retryable() -> None:
    with pytest.raises(ValueError):
        TargetResult(ok=True, retryable=True, status="200", latency_ms=0)


@given(st.text(max_size=3000))
def test_truncate_detail_bounds(text: str) -> None:
    cut = truncate_detail(text)
    assert len(cut.encode("utf-8", errors="replace")) <= MAX_DETAIL_BYTES
    if len(text.encode("utf-8", errors="replace")) <= MAX_DETAIL_BYTES:
        assert cut == text


@pytest.mark.parametrize(
    ("code", "retryable"),
    [
        (500, True),
        (502, True),
        (599, True),
        (408, True),
        (429, True),
        (400, False),
        (403, False),
        (404, False),
        (409, False),
        (422, False),
        (301, False),
    ],
)
def test_http_status_retryable(code: int, retryable: bool) -> None:
    assert http_status_retryable(code) is retryable


def test_context_and_headers_carry_the_same_identity() -> None:
    inv = invocation(attempt=3)

    assert invocation_context(inv) == {
        "run_id": "job-1:20261202T120500Z",
        "job_id": "job-1",
        "scheduled_for": "2026-12-02T12:05:00Z",
        "attempt": 3,
        **CONTEXT_REST,
    }
    assert invocation_headers(inv)["Idempotency-Key"] == inv.run_id


_SFN_SAFE = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


@given(st.text(min_size=1, max_size=300))
def test_execution_names_fit_sfn_rules(run_id: str) -> None:
    name = sfn_execution_name(run_id)

    assert _SFN_SAFE.match(name)
    assert name == sfn_execution_name(run_id)  # deterministic: the name is the lock


def test_execution_names_differ_per_run_not_per_attempt() -> None:
    base = sfn_execution_name("job.a:20261202T120500Z")

    assert base.startswith("job-a-20261202T120500Z-")
    assert base != sfn_execution_name("job_a:20261202T120500Z")  # sanitise alike, differ by hash
    long_a = sfn_execution_name("j" * 200 + ":20261202T120500Z")
    long_b = sfn_execution_name("j" * 200 + ":20261202T120600Z")
    assert long_a != long_b and len(long_a) == 80


def test_fifo_id_keeps_short_ids_and_hashes_long_ones() -> None:
    assert fifo_id("job-1:20261202T120500Z") == "job-1:20261202T120500Z"
    long = fifo_id("x" * 200)
    assert len(long) == 64 and long == fifo_id("x" * 200)
    assert fifo_id("with space") != "with space"
