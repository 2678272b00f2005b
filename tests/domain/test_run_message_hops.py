"""The hop counter of a run message: carried in the body, backward compatible, bounded."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tickwork.domain.dispatch import MAX_HOPS, RunMessage
from tickwork.domain.errors import ValidationError

FIRE = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)
OLD_BODY = (
    '{"job_id":"job_example","scheduled_for":"2026-12-02T12:05:00Z","attempt":0,'
    '"not_before":"2026-12-02T12:05:00.000Z"}'
)


def test_a_message_from_before_the_counter_is_hop_0() -> None:
    message = RunMessage.from_json(OLD_BODY)
    assert (message.job_id, message.attempt, message.hops) == ("job_example", 0, 0)


def test_the_counter_round_trips_and_a_resend_adds_one() -> None:
    message = RunMessage("job_example", FIRE, 2, FIRE, hops=41)
    again = RunMessage.from_json(message.resent().to_json())
    assert again.hops == 42 and json.loads(message.to_json())["hops"] == 41
    assert again == message  # the same delivery target: the counter is bookkeeping, not identity


@pytest.mark.parametrize("hops", [-1, "3", True, 1.5])
def test_a_malformed_counter_is_not_a_run_message(hops: object) -> None:
    with pytest.raises(ValidationError):
        RunMessage.from_json(json.dumps({**json.loads(OLD_BODY), "hops": hops}))


def test_runaway_starts_just_above_the_bound() -> None:
    assert not RunMessage("job_example", FIRE, 0, FIRE, hops=MAX_HOPS).runaway
    assert RunMessage("job_example", FIRE, 0, FIRE, hops=MAX_HOPS + 1).runaway
