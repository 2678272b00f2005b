"""Which pools a run must hold a slot in (`pools_for`), the slot values' validation, and how leases are
kept (whole milliseconds; a hold is free from its lease end on), table-driven at a fixed time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tickwork.domain.errors import ValidationError
from tickwork.domain.slots import (
    Pool,
    SlotHold,
    SlotLimits,
    holder_key,
    is_live,
    lease_ms,
    pools_for,
)

AT = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("owner", "key", "limits", "key_limit", "expected"),
    [
        pytest.param("alice", None, SlotLimits(100), None, (Pool("all", 100),), id="only_the_total"),
        pytest.param(
            "alice",
            None,
            SlotLimits(100, per_owner=10),
            None,
            (Pool("owner:alice", 10), Pool("all", 100)),
            id="a_limit_per_owner_adds_the_owners_pool_first",
        ),
        pytest.param(
            "alice",
            "api.example.com",
            SlotLimits(100),
            2,
            (Pool("key:api.example.com@2/alice", 2), Pool("all", 100)),
            id="a_key_with_a_limit_adds_the_owners_pool_of_that_key_first",
        ),
        pytest.param(
            "alice",
            "api.example.com",
            SlotLimits(100),
            None,
            (Pool("all", 100),),
            id="a_key_without_a_limit_is_no_bound",
        ),
        pytest.param(
            "alice",
            None,
            SlotLimits(100),
            2,
            (Pool("all", 100),),
            id="a_limit_without_a_key_is_no_bound",
        ),
        pytest.param(
            "arn:aws:iam::123456789012:role/batch",
            "db",
            SlotLimits(10_000, per_owner=500),
            1,
            (
                Pool("key:db@1/arn:aws:iam::123456789012:role/batch", 1),
                Pool("owner:arn:aws:iam::123456789012:role/batch", 500),
                Pool("all", 10_000),
            ),
            id="all_three_narrowest_first",
        ),
        pytest.param(
            "bob",
            "api.example.com",
            SlotLimits(100),
            2,
            (Pool("key:api.example.com@2/bob", 2), Pool("all", 100)),
            id="another_owners_key_of_the_same_name_is_another_pool",
        ),
        pytest.param(
            "alice",
            "api.example.com",
            SlotLimits(100),
            5,
            (Pool("key:api.example.com@5/alice", 5), Pool("all", 100)),
            id="the_same_key_with_another_limit_is_another_pool",
        ),
    ],
)
def test_pools_for(
    owner: str, key: str | None, limits: SlotLimits, key_limit: int | None, expected: tuple[Pool, ...]
) -> None:
    assert pools_for(owner, key, limits, key_limit) == expected


@pytest.mark.parametrize(
    ("build", "field"),
    [
        pytest.param(lambda: Pool("all", 0), "pool.all.size", id="pool_of_zero"),
        pytest.param(lambda: Pool("all", -3), "pool.all.size", id="negative_pool"),
        pytest.param(lambda: Pool("", 1), "pool.name", id="pool_without_a_name"),
        pytest.param(lambda: SlotLimits(0), "limits.total", id="total_of_zero"),
        pytest.param(lambda: SlotLimits(10, per_owner=0), "limits.per_owner", id="per_owner_of_zero"),
        pytest.param(lambda: pools_for("alice", "db", SlotLimits(9), 0), "concurrency_limit", id="limit_0"),
        pytest.param(lambda: pools_for("alice", "", SlotLimits(10), 1), "concurrency_key", id="empty_key"),
        pytest.param(lambda: pools_for("", None, SlotLimits(10)), "owner", id="no_owner"),
        pytest.param(lambda: SlotHold("", 1, AT), "hold.run_id", id="hold_without_a_run"),
        pytest.param(lambda: SlotHold("job_a:20261202T120500Z", 0, AT), "hold.attempt", id="attempt_0"),
        pytest.param(
            lambda: SlotHold("job_a:20261202T120500Z", 1, AT.replace(tzinfo=None)),
            "hold.lease_expires_at",
            id="naive_lease",
        ),
    ],
)
def test_invalid_slot_values_name_their_field(build: Callable[[], object], field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        build()
    assert raised.value.field == field


def test_a_pool_of_one_is_valid() -> None:
    assert Pool("all", 1).size == 1


@pytest.mark.parametrize(
    ("instant", "expected"),
    [
        pytest.param(AT, 1_796_213_100_000, id="whole_second"),
        pytest.param(AT + timedelta(microseconds=999), 1_796_213_100_000, id="below_a_millisecond_floors"),
        pytest.param(AT + timedelta(milliseconds=1), 1_796_213_100_001, id="one_millisecond"),
        pytest.param(AT - timedelta(microseconds=1), 1_796_213_099_999, id="just_before_floors_down"),
        pytest.param(
            datetime(2026, 12, 2, 13, 5, tzinfo=ZoneInfo("Europe/Berlin")),
            1_796_213_100_000,
            id="any_time_zone_is_the_same_instant",
        ),
    ],
)
def test_leases_are_whole_milliseconds_since_the_epoch(instant: datetime, expected: int) -> None:
    assert lease_ms(instant) == expected


@pytest.mark.parametrize(
    ("lease", "now", "live"),
    [
        pytest.param(1_000, 999, True, id="before_its_lease_end_it_holds"),
        pytest.param(1_000, 1_000, False, id="at_its_lease_end_it_is_free"),
        pytest.param(1_000, 1_001, False, id="after_its_lease_end_it_is_free"),
    ],
)
def test_a_hold_is_live_until_its_lease_end(lease: int, now: int, live: bool) -> None:
    assert is_live(lease, now) is live


def test_the_attempt_is_part_of_a_holds_name() -> None:
    assert holder_key("job_a:20261202T120500Z", 2) == "job_a:20261202T120500Z/2"
    assert holder_key("job_a:20261202T120500Z", 1) != holder_key("job_a:20261202T120500Z", 2)
