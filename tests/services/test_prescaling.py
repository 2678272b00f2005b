"""Starting warm (issue 29, part 4): the ticker raises the executor mappings' warm pollers for the bursts it
has just planned, and lowers them after; one invocation decides; a failure is the caller's to count."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tickwork.adapters.lambda_mappings import LambdaPollerControl
from tickwork.domain.errors import ScalingError
from tickwork.domain.prescale import SETTLED_TICKS, burst_ahead, pollers_for, scaled_to_all_shards
from tickwork.services.planning import TickReport, TickSummary
from tickwork.services.prescaling import PrescaleConfig, Prescaler

NOW = datetime(2026, 12, 2, 11, 58, 10, tzinfo=UTC)
TOP = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
CONFIG = PrescaleConfig(shard_count=16, queues=10, batch_size=10, min_pollers=2, max_pollers=10)


class Control:
    def __init__(self, fail: bool = False) -> None:
        self.set: list[int] = []
        self.fail = fail

    def set_min_pollers(self, pollers: int) -> None:
        if self.fail:
            raise ScalingError("injected")
        self.set.append(pollers)


def tick(planned: dict[datetime, int], shards: tuple[int, ...] = (0,)) -> TickSummary:
    reports = []
    for shard in shards:
        report = TickReport(shard=shard, now=NOW, horizon=NOW + timedelta(seconds=120))
        report.planned_by_minute = Counter(planned)
        reports.append(report)
    return TickSummary(reports=reports)


def test_the_burst_ahead_is_scaled_from_the_shards_seen_to_every_shard() -> None:
    planned = {TOP: 3_750, TOP + timedelta(minutes=1): 100, TOP - timedelta(minutes=5): 9_999}
    due = scaled_to_all_shards(planned, shards_seen=1, shard_count=16)
    assert due[TOP] == 60_000
    assert burst_ahead(due, NOW) == 60_000  # the minute 5 minutes ago is past
    assert burst_ahead(due, TOP + timedelta(minutes=1, seconds=30)) == 1_600
    assert burst_ahead({}, NOW) == 0 and scaled_to_all_shards(planned, 0, 16) == {}


@pytest.mark.parametrize(
    ("runs", "pollers"),
    [(0, 2), (2_000, 2), (2_001, 3), (60_000, 10), (10_000, 10)],  # 10 queues x 10 a batch x 10 a poller
)
def test_pollers_carry_the_burst_within_the_mappings_bounds(runs: int, pollers: int) -> None:
    assert pollers_for(runs, queues=10, batch_size=10, floor=2, ceiling=10) == pollers


def test_a_planned_burst_raises_the_pollers_until_it_has_passed_then_the_floor_comes_back() -> None:
    control = Control()
    prescaler = Prescaler(control, CONFIG)
    minute = timedelta(minutes=1)

    # A fresh process raises at once, but does not lower (or set the floor) before it has seen enough ticks.
    assert prescaler.after_tick(tick({TOP: 3_750}), NOW - minute) == 10  # 60,000 over 16 shards, planned
    # The next ticks plan nothing more of it: the burst is remembered, the pollers stay up.
    assert prescaler.after_tick(tick({}), NOW) is None
    assert prescaler.after_tick(tick({}), TOP + timedelta(seconds=10)) is None
    # It has passed: back to the floor.
    assert prescaler.after_tick(tick({}), TOP + minute + timedelta(seconds=10)) == 2
    assert prescaler.after_tick(tick({}), TOP + 2 * minute) is None

    assert control.set == [10, 2]


def test_a_fresh_process_sets_the_floor_once_it_has_seen_enough_ticks() -> None:
    control = Control()
    prescaler = Prescaler(control, CONFIG)
    results = [prescaler.after_tick(tick({}), NOW + timedelta(minutes=i)) for i in range(SETTLED_TICKS + 1)]
    assert results == [None] * (SETTLED_TICKS - 1) + [2, None] and control.set == [2]


def test_only_the_invocation_planning_shard_0_decides() -> None:
    control = Control()
    assert Prescaler(control, CONFIG).after_tick(tick({TOP: 3_750}, shards=(5, 6)), NOW) is None
    assert control.set == []


def test_a_failure_is_raised_to_the_caller_and_the_next_tick_tries_again() -> None:
    control = Control(fail=True)
    prescaler = Prescaler(control, CONFIG)
    with pytest.raises(ScalingError):
        prescaler.after_tick(tick({TOP: 3_750}), NOW)
    control.fail = False
    assert prescaler.after_tick(tick({TOP: 3_750}), NOW) == 10


M1, M2 = "11111111-2222-3333-4444-555555555555", "66666666-7777-8888-9999-000000000000"


def test_the_adapter_sets_every_mapping_and_reports_the_ones_that_failed() -> None:
    client: Any = boto3.client(
        "lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(client) as stub:
        for mapping in (M1, M2):
            stub.add_response(
                "update_event_source_mapping",
                {"UUID": mapping},
                {"UUID": mapping, "ProvisionedPollerConfig": {"MinimumPollers": 7, "MaximumPollers": 10}},
            )
        LambdaPollerControl(client, [M1, M2], max_pollers=10).set_min_pollers(7)
        stub.assert_no_pending_responses()

        stub.add_response("update_event_source_mapping", {"UUID": M1})
        stub.add_client_error("update_event_source_mapping", "TooManyRequestsException", "slow down")
        with pytest.raises(ScalingError, match=f"1 of 2 mappings: {M2}: TooManyRequestsException"):
            LambdaPollerControl(client, [M1, M2], max_pollers=10).set_min_pollers(3)
