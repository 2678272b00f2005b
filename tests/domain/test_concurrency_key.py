"""A job's concurrency key (issue 28, part 2): `policies.concurrency = {key, limit}` checked in the domain,
copied onto its runs' views and their messages, and turned into the pool `key:<key>@<limit>/<owner>`:
scoped per owner, sized by its limit. Table-driven at a fixed time."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.domain.delivery import slot_pools
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.errors import ValidationError
from tickwork.domain.jobs import UNSET, JobPatch, PoliciesPatch, apply_patch
from tickwork.domain.models import (
    MAX_CONCURRENCY_LIMIT,
    Concurrency,
    Job,
    JobView,
    Policies,
    Run,
    RunState,
    Target,
    Trigger,
)
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.slots import ALL, Pool, SlotLimits, key_pool

FIRE = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)
HOST = Concurrency("api.example.com", 2)
OLD_BODY = (
    '{"job_id":"job_example","scheduled_for":"2026-12-02T12:05:00Z","attempt":0,'
    '"not_before":"2026-12-02T12:05:00.000Z","owner":"alice"}'
)


def a_job(concurrency: Concurrency | None = HOST, owner: str = "alice") -> Job:
    return Job(
        job_id="job_a",
        owner=owner,
        name="a",
        schedule=parse_schedule("*/5 * * * *"),
        target=Target("http", {"url": "https://api.example.com/hook"}),
        shard=3,
        created_at=FIRE - timedelta(days=1),
        updated_at=FIRE - timedelta(days=1),
        next_fire_at=FIRE,
        policies=Policies(concurrency=concurrency),
    )


def a_run(job: Job) -> Run:
    return Run.for_fire(
        job, FIRE, now=FIRE - timedelta(minutes=1), trigger=Trigger.SCHEDULE, state=RunState.PLANNED
    )


@pytest.mark.parametrize(
    ("key", "limit"),
    [
        pytest.param("a", 1, id="one_character_and_a_limit_of_1"),
        pytest.param("x" * 128, MAX_CONCURRENCY_LIMIT, id="128_characters_and_the_largest_limit"),
        pytest.param("db-primary.eu-west-1:5432/orders_v2", 3, id="every_allowed_punctuation"),
    ],
)
def test_the_bounds_themselves_are_accepted(key: str, limit: int) -> None:
    assert Concurrency(key, limit) == Concurrency(key, limit)


@pytest.mark.parametrize(
    ("build", "field", "words"),
    [
        pytest.param(lambda: Concurrency("", 1), "policies.concurrency.key", "1-128", id="empty_key"),
        pytest.param(lambda: Concurrency("x" * 129, 1), "policies.concurrency.key", "1-128", id="key_of_129"),
        pytest.param(
            lambda: Concurrency("api example", 1), "policies.concurrency.key", "A-Z a-z", id="space_in_key"
        ),
        pytest.param(lambda: Concurrency("a@b", 1), "policies.concurrency.key", "A-Z a-z", id="at_in_key"),
        pytest.param(lambda: Concurrency("host\n", 1), "policies.concurrency.key", "1-128", id="line_break"),
        pytest.param(lambda: Concurrency("hôst", 1), "policies.concurrency.key", "1-128", id="non_ascii"),
        pytest.param(lambda: Concurrency("db", 0), "policies.concurrency.limit", "1-10,000", id="limit_0"),
        pytest.param(
            lambda: Concurrency("db", MAX_CONCURRENCY_LIMIT + 1),
            "policies.concurrency.limit",
            "1-10,000",
            id="limit_over_10000",
        ),
        pytest.param(
            lambda: Concurrency("db", True), "policies.concurrency.limit", "1-10,000", id="bool_limit"
        ),
    ],
)
def test_a_bad_key_or_limit_is_refused_naming_the_field(
    build: Callable[[], Concurrency], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        build()
    assert raised.value.field == field and words in raised.value.message


def test_the_pool_is_the_owners_and_its_size_is_in_its_name() -> None:
    assert key_pool("alice", "api.example.com", 2) == Pool("key:api.example.com@2/alice", 2)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        pytest.param(("alice", "db", 1), ("bob", "db", 1), id="two_owners_one_key"),
        pytest.param(("alice", "db", 1), ("alice", "db", 2), id="one_key_two_limits"),
        # Were the owner first (`<owner>/<key>`), a role at a path and a key with a slash would share a name.
        pytest.param(
            ("arn:aws:iam::1:role/team", "app/db", 1),
            ("arn:aws:iam::1:role/team/app", "db", 1),
            id="slashes_in_owner_and_key",
        ),
        pytest.param(("a@1/b", "k", 1), ("b", "k", 1), id="an_owner_that_looks_like_a_name"),
    ],
)
def test_pools_of_different_owners_keys_or_limits_never_share_a_name(
    one: tuple[str, str, int], other: tuple[str, str, int]
) -> None:
    assert key_pool(*one).name != key_pool(*other).name


@pytest.mark.parametrize(
    ("owner", "limits", "concurrency", "expected"),
    [
        pytest.param("alice", None, HOST, (), id="no_bound_no_pools_not_even_the_keys"),
        pytest.param("alice", SlotLimits(10), None, (Pool(ALL, 10),), id="no_key"),
        pytest.param(
            "alice",
            SlotLimits(10),
            HOST,
            (Pool("key:api.example.com@2/alice", 2), Pool(ALL, 10)),
            id="the_keys_pool_first",
        ),
        pytest.param(None, SlotLimits(10), HOST, (Pool(ALL, 10),), id="no_owner_no_key_to_scope"),
    ],
)
def test_the_pools_a_message_takes_before_its_claim(
    owner: str | None, limits: SlotLimits | None, concurrency: Concurrency | None, expected: tuple[Pool, ...]
) -> None:
    assert slot_pools(owner, limits, concurrency) == expected


def test_the_job_view_and_the_runs_message_carry_the_jobs_key() -> None:
    run = a_run(a_job())
    assert JobView.planned(a_job()).concurrency == HOST
    message = RunMessage.for_run(run)
    assert message.concurrency == HOST and message.owner == "alice"
    body = json.loads(message.to_json())
    assert (body["concurrency_key"], body["concurrency_limit"]) == ("api.example.com", 2)
    assert RunMessage.from_json(message.to_json()).concurrency == HOST


def test_a_message_without_a_key_leaves_the_fields_out_and_an_old_message_has_none() -> None:
    body = json.loads(RunMessage.for_run(a_run(a_job(None))).to_json())
    assert "concurrency_key" not in body and "concurrency_limit" not in body
    assert RunMessage.from_json(OLD_BODY).concurrency is None


def test_a_runs_message_without_a_view_has_no_key() -> None:
    run = replace(a_run(a_job()), job_view=None)
    assert RunMessage.for_run(run).concurrency is None


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({"concurrency_key": "db"}, id="key_without_limit"),
        pytest.param({"concurrency_limit": 2}, id="limit_without_key"),
        pytest.param({"concurrency_key": "db", "concurrency_limit": 0}, id="limit_0"),
        pytest.param({"concurrency_key": "db", "concurrency_limit": "2"}, id="limit_as_text"),
        pytest.param({"concurrency_key": "a b", "concurrency_limit": 2}, id="bad_key"),
    ],
)
def test_a_malformed_key_is_not_a_run_message(extra: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as raised:
        RunMessage.from_json(json.dumps({**json.loads(OLD_BODY), **extra}))
    assert raised.value.field == "message"


@pytest.mark.parametrize(
    ("before", "patch", "after"),
    [
        pytest.param(None, PoliciesPatch(concurrency=HOST), HOST, id="set"),
        pytest.param(
            HOST, PoliciesPatch(concurrency=Concurrency("db", 1)), Concurrency("db", 1), id="replaced"
        ),
        pytest.param(HOST, PoliciesPatch(concurrency=None), None, id="removed"),
        pytest.param(HOST, PoliciesPatch(concurrency=UNSET), HOST, id="not_mentioned_stays"),
        pytest.param(HOST, None, HOST, id="no_policies_in_the_patch"),
    ],
)
def test_an_edit_sets_replaces_or_removes_the_key(
    before: Concurrency | None, patch: PoliciesPatch | None, after: Concurrency | None
) -> None:
    edited = apply_patch(a_job(before), JobPatch(policies=patch), FIRE)
    assert edited.policies.concurrency == after
