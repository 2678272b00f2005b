"""Starting warm (issue 29, part 4): the tick that plans a burst raises the executor mappings' warm pollers
for it; a raised minimum comes down once its last change is older than HOLD. Nothing is remembered between
ticks: what the mappings say is the state. A failure is the caller's to count, and the next tick catches
up (a mapping a partial failure left behind included)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tickwork.adapters.lambda_mappings import LambdaPollerControl
from tickwork.domain.errors import ScalingError
from tickwork.domain.prescale import HOLD, MappingState, burst_ahead, changes, pollers_for
from tickwork.services.planning import TickReport, TickSummary
from tickwork.services.prescaling import PrescaleConfig, Prescaler

NOW = datetime(2026, 12, 2, 11, 58, 10, tzinfo=UTC)
TOP = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
CONFIG = PrescaleConfig(shard_count=16, queues=3, batch_size=10, min_pollers=2, max_pollers=40)
IDS = ("a", "b", "c")


class Mappings:
    """The mappings as AWS keeps them: a minimum and when it last changed; `failing` refuses updates."""

    def __init__(self, clock: list[datetime]) -> None:
        self.clock = clock
        self.state = {m: MappingState(2, NOW - timedelta(days=1)) for m in IDS}
        self.failing: set[str] = set()

    def states(self) -> dict[str, MappingState]:
        return dict(self.state)

    def set_min_pollers(self, changes: dict[str, int]) -> None:
        for mapping_id, pollers in changes.items():
            if mapping_id not in self.failing:
                self.state[mapping_id] = MappingState(pollers, self.clock[0])
        if self.failing & set(changes):
            raise ScalingError("injected")


def tick(planned: dict[datetime, int], shards: tuple[int, ...] = (0,)) -> TickSummary:
    reports = []
    for shard in shards:
        report = TickReport(shard=shard, now=NOW, horizon=NOW + timedelta(seconds=120))
        report.planned_by_minute = Counter(planned)
        reports.append(report)
    return TickSummary(reports=reports)


def test_a_ticks_burst_is_scaled_from_the_shards_it_saw_to_every_shard() -> None:
    assert burst_ahead({TOP: 3_750, TOP + timedelta(minutes=1): 100}, shards_seen=1, shard_count=16) == 60_000
    assert burst_ahead({}, 1, 16) == 0 and burst_ahead({TOP: 5}, 0, 16) == 0


@pytest.mark.parametrize(
    ("runs", "pollers"),
    [(0, 2), (2_000, 2), (2_001, 3), (60_000, 10), (10_000, 10), (10_000_000, 200)],
)
def test_pollers_carry_the_burst_within_the_mappings_bounds_and_awss_200(runs: int, pollers: int) -> None:
    assert (
        pollers_for(runs, queues=10, batch_size=10, floor=2, ceiling=2_000 if runs > 60_000 else 10)
        == pollers
    )


def test_raised_at_once_lowered_only_after_the_hold_never_below_the_floor() -> None:
    raised = {"a": MappingState(10, NOW)}
    assert changes({"a": MappingState(2, NOW)}, 10, 2, NOW) == {"a": 10}
    assert changes(raised, 2, 2, NOW + HOLD - timedelta(seconds=1)) == {}
    assert changes(raised, 2, 2, NOW + HOLD) == {"a": 2}
    assert changes(raised, 6, 2, NOW + HOLD) == {"a": 6}
    assert changes({"a": MappingState(2, NOW)}, 1, 2, NOW + HOLD) == {}


def test_the_tick_that_plans_a_burst_raises_and_later_ticks_anywhere_lower_after_it() -> None:
    clock = [NOW - timedelta(seconds=50)]
    mappings = Mappings(clock)
    # Any environment may run any tick: a fresh Prescaler each time. 60,000 runs want 200 pollers a queue;
    # the mappings' maximum (40) caps it.
    assert Prescaler(mappings, CONFIG).after_tick(tick({TOP: 3_750}), clock[0]) == dict.fromkeys(IDS, 40)
    for seconds in (10, 70, 130):  # the next ticks plan nothing of it: the minimum stays up
        clock[0] = TOP + timedelta(seconds=seconds) - timedelta(minutes=1)
        assert Prescaler(mappings, CONFIG).after_tick(tick({}), clock[0]) == {}
    clock[0] = NOW - timedelta(seconds=50) + HOLD
    assert Prescaler(mappings, CONFIG).after_tick(tick({}), clock[0]) == dict.fromkeys(IDS, 2)


def test_a_mapping_a_failed_call_left_behind_is_caught_up_by_the_next_tick() -> None:
    clock = [NOW]
    mappings = Mappings(clock)
    mappings.failing = {"b"}
    with pytest.raises(ScalingError):
        Prescaler(mappings, CONFIG).after_tick(tick({TOP: 3_750}), NOW)
    mappings.failing = set()
    assert Prescaler(mappings, CONFIG).after_tick(tick({TOP: 3_750}), NOW) == {"b": 40}


M1, M2 = "11111111-2222-3333-4444-555555555555", "66666666-7777-8888-9999-000000000000"


def test_the_adapter_reads_and_sets_every_mapping_and_names_the_ones_that_failed() -> None:
    client: Any = boto3.client(
        "lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    control = LambdaPollerControl(client, [M1, M2], max_pollers=10)
    with Stubber(client) as stub:
        for mapping in (M1, M2):
            stub.add_response(
                "get_event_source_mapping",
                {"UUID": mapping, "LastModified": NOW, "ProvisionedPollerConfig": {"MinimumPollers": 2}},
                {"UUID": mapping},
            )
        assert control.states() == {M1: MappingState(2, NOW), M2: MappingState(2, NOW)}
        for mapping in (M1, M2):
            stub.add_response(
                "update_event_source_mapping",
                {"UUID": mapping},
                {"UUID": mapping, "ProvisionedPollerConfig": {"MinimumPollers": 7, "MaximumPollers": 10}},
            )
        control.set_min_pollers({M1: 7, M2: 7})
        stub.add_response("update_event_source_mapping", {"UUID": M1})
        stub.add_client_error("update_event_source_mapping", "TooManyRequestsException", "slow down")
        with pytest.raises(ScalingError, match=f"1 of 2 mappings: {M2}: TooManyRequestsException"):
            control.set_min_pollers({M1: 3, M2: 3})
        stub.add_client_error("get_event_source_mapping", "ResourceNotFoundException", "gone")
        with pytest.raises(ScalingError, match=f"{M1}: ResourceNotFoundException"):
            control.states()
        stub.assert_no_pending_responses()
