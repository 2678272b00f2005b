"""Run context in a target's payload (issue 33, part 4): which placeholders a templated target may hold,
how each kind's payload is filled, and the slots either side of a run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tickwork.domain.errors import ValidationError
from tickwork.domain.models import Job, Run, RunState, Target, Trigger
from tickwork.domain.schedule import next_fire_after, parse_schedule, previous_fire_before
from tickwork.domain.targets import (
    Invocation,
    invocation_context,
    invocation_headers,
    rendered,
    validate_target,
)

SLOT = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)
EVERY_NAME = (
    "{{scheduled_for}} {{ scheduled_for.date }} {{ scheduled_for.epoch }} {{ previous_slot }} "
    "{{ next_slot }} {{ attempt }} {{ run_id }} {{ job_id }} {{ revision }} {{ trigger }}"
)
FILLED = (
    "2026-12-02T12:05:00Z 2026-12-02 1796213100 2026-12-02T12:00:00Z 2026-12-02T12:10:00Z "
    "2 job-1:20261202T120500Z job-1 7 catch-up"
)


def invocation(**changes: Any) -> Invocation:
    values: dict[str, Any] = {
        "run_id": "job-1:20261202T120500Z",
        "job_id": "job-1",
        "scheduled_for": SLOT,
        "attempt": 2,
        "timeout_seconds": 10.0,
        "trigger": "catch-up",
        "revision": 7,
        "previous_slot": datetime(2026, 12, 2, 12, 0, tzinfo=UTC),
        "next_slot": datetime(2026, 12, 2, 12, 10, tzinfo=UTC),
    }
    return Invocation(**{**values, **changes})


KINDS: dict[str, tuple[dict[str, Any], str]] = {
    # kind: (a config with every name in each templated field, the field a bad placeholder is named by)
    "http": (
        {"url": "https://example.com/hook", "method": "POST", "body": EVERY_NAME,
         "headers": {"X-For": EVERY_NAME}},
        "target.config.body",
    ),
    "sqs": ({"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "message": EVERY_NAME},
            "target.config.message"),
    "sns": (
        {"topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "message": EVERY_NAME,
         "subject": "{{ trigger }}"},
        "target.config.message",
    ),
    "eventbridge": ({"source": "a", "detail_type": "b", "detail": {"deep": {"all": EVERY_NAME}}},
                    "target.config.detail.deep.all"),
    "lambda": ({"function_name": "f", "payload": {"all": EVERY_NAME, "n": 3}}, "target.config.payload.all"),
    "stepfunctions": (
        {"state_machine_arn": "arn:aws:states:eu-west-1:123456789012:stateMachine:etl",
         "input": {"l": [EVERY_NAME]}},
        "target.config.input.l[0]",
    ),
    "ecs": (
        {"cluster": "c", "task_definition": "t", "container": "main", "subnets": ["subnet-0123abcd"],
         "command": ["run", EVERY_NAME], "environment": {"FOR": EVERY_NAME}},
        "target.config.command[1]",
    ),
}  # fmt: skip


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_fills_every_name_in_each_of_its_templated_fields(kind: str) -> None:
    config, _ = KINDS[kind]
    target = validate_target(kind, {**config, "templated": True})

    called = rendered(target, invocation())

    texts = [text for text in _strings(called.config) if text.startswith("2026") or text == "catch-up"]
    assert texts and all(text in (FILLED, "catch-up") for text in texts), called.config
    assert not any("{{" in text for text in _strings(called.config))
    # a stored templated target validates again as it is (the executor checks it before each call)
    assert called.config["templated"] is True and validate_target(kind, dict(target.config)) == target


@pytest.mark.parametrize("kind", KINDS)
def test_a_placeholder_that_is_not_one_is_refused_naming_its_field(kind: str) -> None:
    config, field = KINDS[kind]
    broken = _replace_strings(config, EVERY_NAME, "at {{ scheduled_at }}")

    with pytest.raises(ValidationError) as refused:
        validate_target(kind, {**broken, "templated": True})

    assert (
        refused.value.field == field and "unknown placeholder '{{ scheduled_at }}'" in refused.value.message
    )


def _replace_strings(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return new if value == old else value
    if isinstance(value, dict):
        return {key: _replace_strings(item, old, new) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_strings(item, old, new) for item in value]
    return value


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("{{ attempt.epoch }}", "unknown format in '{{ attempt.epoch }}'"),
        ("{{ scheduled_for.year }}", "unknown format in '{{ scheduled_for.year }}'"),
        ("{{ run_id", "is not a placeholder"),
        ('{"a": {{"b": 1}}}', "is not a placeholder"),
        ("{{ Run_Id }}", "is not a placeholder"),
    ],
)
def test_bad_templates_are_refused_when_the_job_is_written(body: str, words: str) -> None:
    with pytest.raises(ValidationError) as refused:
        validate_target(
            "http", {"url": "https://example.com", "method": "POST", "body": body, "templated": True}
        )
    assert refused.value.field == "target.config.body" and words in refused.value.message


def test_an_untemplated_target_sends_its_braces_as_written() -> None:
    body = "Hello {{ name }} and {{ scheduled_for }}"
    target = validate_target("http", {"url": "https://example.com", "method": "POST", "body": body})

    assert rendered(target, invocation()) is target and "templated" not in target.config
    with pytest.raises(ValidationError, match="must be true or false"):
        validate_target("http", {"url": "https://example.com", "templated": "yes"})


def test_a_slot_that_does_not_exist_fills_in_empty() -> None:
    target = Target("sqs", {"queue_url": "q", "message": "[{{ previous_slot }}|{{ next_slot.date }}]",
                            "templated": True})  # fmt: skip

    called = rendered(target, invocation(previous_slot=None, next_slot=None))

    assert called.config["message"] == "[|]"


def test_the_slots_either_side_follow_the_schedule_through_a_dst_change() -> None:
    # 02:30 Berlin does not exist on 29 March 2026 (02:00 -> 03:00): the shift policy fires at 03:00 CEST.
    berlin = parse_schedule("30 2 * * *", "Europe/Berlin")
    that_day = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert next_fire_after(berlin, that_day.replace(hour=0)) == that_day
    assert previous_fire_before(berlin, that_day) == datetime(2026, 3, 28, 1, 30, tzinfo=UTC)  # 02:30 CET
    assert next_fire_after(berlin, that_day) == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)  # 02:30 CEST
    # a leap day's schedule: the slot before is four years back
    assert previous_fire_before(parse_schedule("0 0 29 2 *"), SLOT) == datetime(2024, 2, 29, tzinfo=UTC)
    # none before the schedule's start
    started = parse_schedule("*/5 * * * *", start_at=SLOT)
    assert previous_fire_before(started, SLOT) is None
    assert previous_fire_before(started, datetime(2026, 12, 2, 12, 7, tzinfo=UTC)) == SLOT


@pytest.mark.parametrize(
    ("kind", "config", "field", "words"),
    [
        # 68 characters as written, over SNS's 100 once filled in
        ("sns", {"topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "message": "m",
                 "subject": "Nightly export {{ job_id }} run {{ run_id }} for {{ scheduled_for }}"},
         "target.config.subject", "at their longest"),
        # empty on the first run after start_at: SQS refuses an empty message
        ("sqs", {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
                 "message": "{{ previous_slot }}"},
         "target.config.message", "with no previous or next slot"),
        # within 64 KiB as written, over it once filled in
        ("http", {"url": "https://example.com", "method": "POST", "body": "{{run_id}}" * 3000},
         "target.config.body", "at their longest"),
        # a credential-like header is a secret one: sent as stored, so never filled in
        ("http", {"url": "https://example.com", "headers": {"Authorization": "Bearer {{ run_id }}"}},
         "target.config.headers.Authorization", "cannot hold a placeholder"),
    ],
)  # fmt: skip
def test_a_template_that_would_break_its_kinds_rules_once_filled_in_is_refused_when_written(
    kind: str, config: dict[str, Any], field: str, words: str
) -> None:
    validate_target(kind, config)  # fine as a payload sent as written
    with pytest.raises(ValidationError) as refused:
        validate_target(kind, {**config, "templated": True})
    assert refused.value.field == field and words in refused.value.message


def test_a_stored_template_no_longer_valid_is_not_filled_in_and_the_call_refuses_it() -> None:
    config = {"url": "https://example.com", "method": "POST", "body": "{{ value }}", "headers": {}}
    stored = Target("http", {**config, "templated": True})
    assert rendered(stored, invocation()) is stored
    with pytest.raises(ValidationError, match="unknown placeholder"):
        validate_target("http", dict(stored.config), stored=True)  # what the adapter checks before calling


def test_null_templated_is_unset_and_a_call_that_is_not_a_runs_carries_no_run_context() -> None:
    assert (
        "templated" not in validate_target("http", {"url": "https://example.com", "templated": None}).config
    )
    notification = Invocation(
        run_id="event-1", job_id="job-1", scheduled_for=SLOT, attempt=1, timeout_seconds=5
    )
    headers = invocation_headers(notification)
    assert not [name for name in headers if name.startswith(("X-Tickwork-Revision", "X-Tickwork-Trigger"))]
    assert invocation_context(notification) == {
        "run_id": "event-1", "job_id": "job-1", "scheduled_for": "2026-12-02T12:05:00Z", "attempt": 1,
    }  # fmt: skip
    assert invocation_headers(invocation())["X-Tickwork-Previous-Slot"] == "2026-12-02T12:00:00Z"


def test_a_run_on_request_renders_its_whole_second_and_a_rerun_is_not_its_own_previous_slot() -> None:
    asked = SLOT + timedelta(minutes=2, seconds=13, microseconds=723560)
    queue = "https://sqs.us-east-1.amazonaws.com/123456789012/q"
    target = validate_target("sqs", {"queue_url": queue, "message": "{{ scheduled_for }}", "templated": True})
    assert rendered(target, invocation(scheduled_for=asked)).config["message"] == "2026-12-02T12:07:13Z"

    job = Job(
        job_id="job-1", owner="alice", name="j", schedule=parse_schedule("*/5 * * * *"), target=target,
        shard=0, created_at=SLOT - timedelta(days=1), updated_at=SLOT - timedelta(days=1),
    )  # fmt: skip
    rerun = Run.for_fire(
        job, SLOT + timedelta(microseconds=1), now=SLOT, trigger=Trigger.BACKFILL, state=RunState.PLANNED
    )
    assert (rerun.previous_slot, rerun.next_slot) == (
        SLOT - timedelta(minutes=5),
        SLOT + timedelta(minutes=5),
    )
    manual = Run.for_fire(job, asked, now=asked, trigger=Trigger.MANUAL, state=RunState.PLANNED, due_at=asked)
    assert (manual.previous_slot, manual.next_slot) == (SLOT, SLOT + timedelta(minutes=5))


def test_a_schedule_that_fires_once_in_28_years_has_a_previous_slot() -> None:
    fifth_monday_of_february = parse_schedule("0 0 * 2 MON#5")
    assert previous_fire_before(fifth_monday_of_february, SLOT) == datetime(2016, 2, 29, tzinfo=UTC)
    # a window holding many fires is bisected, not walked: the answer is still the last one
    assert previous_fire_before(
        parse_schedule("*/10 * * * 1-10 *"), datetime(2027, 1, 1, tzinfo=UTC)
    ) == datetime(2026, 10, 31, 23, 59, 50, tzinfo=UTC)
