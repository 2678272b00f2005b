"""The OpenAPI document honoured by the API (schemathesis: generated requests, every response checked against
the document, no 5xx), on moto worlds of its own. The document itself: tests/api/test_openapi_document.py.
(schemathesis generates its coverage cases when this module is collected: 20-40 s on 2 cores.)"""

from __future__ import annotations

import copy
import itertools
import json
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import FlakyStrategyDefinition
from moto import mock_aws
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import ALICE, Api, job_body, request
from tests.conftest import ANCHOR, NAMES, build_components, moto_clients
from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.domain.clock import FakeClock
from tickwork.handlers import api, runtime
from tickwork.local.http_api import HttpApiApp
from tickwork.services import jobs as job_service

TOKENS = {"alice-token": ALICE}
AUTH = {"Authorization": "Bearer alice-token"}
SEED_KEY = "schemathesis-seed"
STATEFUL_SCENARIOS = 60
SEEDED_MINUTELY_JOBS = 3
# Rounds of a few examples each, up to the same bound as 6 rounds of 60: the run stops at the end of the
# first round by which it has run STATEFUL_SCENARIOS scenarios and left nothing unreached, so a round too
# many costs little (a round of 20 examples is some 40-50 scenarios, 8-10 s here).
ROUND_EXAMPLES = 20
MAX_STATEFUL_ROUNDS = 18
# What the stateful run must have done at least once: operations on real ids, reached through links.
REACH = (
    ("POST /jobs", 201),
    ("GET /jobs/{job_id}", 200),
    ("PATCH /jobs/{job_id}", 200),
    ("POST /jobs/{job_id}/pause", 200),
    ("POST /jobs/{job_id}/resume", 200),
    ("DELETE /jobs/{job_id}", 204),
    ("GET /jobs/{job_id}/runs", 200),
)
# A page of a real job's runs with runs on it: the run ids the state machine can then follow (it picks
# among many links at random, so how often it then reads one run varies: reported, not required).
MIN_RUN_PAGES_WITH_RUNS = 1

app = HttpApiApp(api.handler, TOKENS)
schema = schemathesis.openapi.from_wsgi("/openapi.json", app)
# The stateful run follows the links the document states, not links schemathesis infers from field and schema
# names (over 200 of them here, which starve the stated ones: a client reads only the stated ones).
schema.config.phases.stateful.inference.algorithms = []
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@contextmanager
def offline_aws() -> Iterator[Any]:
    """moto with test credentials, whatever the environment points boto3 at."""
    with pytest.MonkeyPatch.context() as patch:
        for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
            patch.delenv(key, raising=False)
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        with mock_aws() as world:
            yield world


@pytest.fixture(scope="module")
def deployed() -> Iterator[str]:
    """One moto world for the whole run; a seeded job gives generated ids a real target now and then."""
    with offline_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        ensure_tables(dynamodb, NAMES)
        runtime.reset_for_tests(build_components(dynamodb, FakeClock(ANCHOR)))
        _seeded.clear()
        try:
            yield seed()
        finally:
            runtime.reset_for_tests(None)


_seeded: list[str] = []  # the seeded job's id, while it lives


def seed() -> str:
    """The seeded job: created again after a generated DELETE removed it, under a new Idempotency-Key (a
    deleted job's key never creates again: its id keeps the deleted job's history)."""
    api = Api(runtime.components(), FakeClock(ANCHOR))
    if _seeded and api.send(request("GET", f"/jobs/{_seeded[-1]}")).status == 200:
        return _seeded[-1]
    reply = api.send(
        request(
            "POST",
            "/jobs",
            body=job_body(schedule={"expression": "0 0 1 1 *"}),
            headers={"Idempotency-Key": f"{SEED_KEY}-{len(_seeded)}"},
        )
    )
    assert reply.status in (200, 201), reply.body
    _seeded.append(str(reply.body["id"]))
    return _seeded[-1]


def aim_at_the_seed(case: Any, seed_id: str) -> None:
    """Half of the generated job ids (chosen by their hash, so shrinking is stable) name the seeded job."""
    params = case.path_parameters or {}
    job_id = params.get("job_id")
    if isinstance(job_id, str) and zlib.crc32(job_id.encode()) % 2 == 0:
        params["job_id"] = seed_id
        if "run_id" in params:
            params["run_id"] = f"{seed_id}:20270101T000000Z"


@schema.parametrize()
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_generated_requests_get_documented_answers_and_never_a_5xx(case: Any, deployed: str) -> None:
    aim_at_the_seed(case, seed())
    case.call_and_validate(headers=AUTH, checks=CHECKS)


class _Tally:
    """What the stateful run did: calls per operation and status, and every check that failed (collected, not
    raised inside the machine, so Hypothesis never replays a scenario to shrink it: schemathesis picks link
    values with a true random source, so a replay can draw differently)."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, int]] = Counter()
        self.refused: list[str] = []  # which stated rule refused each valid-looking request
        self.violations: list[str] = []
        self.scenarios = 0
        self.run_pages_with_runs = 0

    def record(self, case: Any, status: int) -> None:
        self.calls[(case.operation.label, status)] += 1

    def unreached(self) -> list[str]:
        missing = [f"{label} -> {status}" for label, status in REACH if not self.calls[(label, status)]]
        if self.run_pages_with_runs < MIN_RUN_PAGES_WITH_RUNS:
            missing.append("a page of runs with runs on it")
        return missing

    def total(self) -> int:
        return sum(self.calls.values())

    def status_of(self, label: str, status: int) -> int:
        return self.calls[(label, status)]

    def table(self) -> str:
        return f"{self.scenarios} scenarios, {self.run_pages_with_runs} run pages with runs\n" + "\n".join(
            f"  {label} -> {status}: {count}" for (label, status), count in sorted(self.calls.items())
        )


# What the document states in words because JSON Schema cannot: a request that satisfies every schema may
# still be refused for exactly these (field, message) reasons, and for no other.
RULES_IN_WORDS = (
    ("cursor", "is not a cursor returned by this API"),  # a check over the position: cannot be generated
    ("schedule.timezone", "unknown time zone"),  # the list is the tz database's; the schema has the shape
    ("to", "is before from"),  # one parameter against another
    ("schedule.end_at", "is before start_at"),
    ("policies.retry.backoff_max_seconds", "is below backoff_base_seconds"),
    # An expression that can never fire (the description says so): 31 in February, or days of the month and
    # of the week that must both match and never fall on one day ('31W,LW * */8,2#3').
    ("schedule.expression", "never occurs in month field"),
    ("schedule.expression", "never match the same day"),
    ("to", "is in the future"),  # backfill: against the clock
    ("to", "the window holds more than"),  # backfill: fires of the job's own schedule, counted
    ("heartbeat_seconds", "longer than timeout_seconds"),  # one field against another
    # An edit against the job it edits: the completion the (kept) target allows, a heartbeat for a callback
    # job, a timeout over 840 s for one. (A create states these as its schema's allOf rules.)
    ("completion", "is for http targets only"),
    ("completion", "is not how"),
    ("heartbeat_seconds", "applies to completion callback only"),
    ("timeout_seconds", "seconds for completion"),
    # An HTTP target's headers: a name once across `headers` and `secret_headers` in any case, and at most
    # 50 of them together (their descriptions say so; a schema cannot compare two objects' keys).
    ("target.config.headers.*", "appears twice (header names are case-insensitive)"),
    ("target.config.secret_headers.*", "appears twice (header names are case-insensitive)"),
    ("target.config.headers", "secret ones included"),
    # "<redacted>" keeps the value the job stores: a create has none to keep (the descriptions say so)
    ("target.config.headers.*", "keeps a stored secret value"),
    ("target.config.url", "moves kept secret headers"),
    # A templated target's placeholders: the names and formats are a closed list its description gives (a
    # pattern over every string of a JSON payload is more than a schema can say).
    ("target.config.*", "is not a placeholder"),
    ("target.config.*", "unknown placeholder"),
    ("target.config.*", "unknown format in"),
    ("target.config.*", "once its placeholders are filled in"),
    # Alert rules: one bound against another, and a duration the job store cannot hold (below 1e-130 s,
    # above the schema's exclusive minimum of 0).
    ("alerts.duration_min_seconds", "must be below duration_max_seconds"),
    ("alerts.*", "is a number outside"),
    # An e-mail channel against the deployment (its description says so): none in `tickwork local`, an
    # address another owner holds, or one SNS refuses.
    ("alerts.*", "this deployment sends no e-mail"),
    ("alerts.*", "another owner's e-mail channel"),
    ("alerts.*", "SNS refuses it"),
    # Exclusion calendars a job names must be its owner's (state, not shape: created by PUT /calendars).
    ("calendars*", "create it first"),
)


def _field_matches(field: str, rule: str) -> bool:
    """`rule` names one field, or every field it begins (`prefix.*`, `calendars*`: each item of a list)."""
    return field.startswith(rule[:-1]) if rule.endswith("*") else field == rule


def refusal_the_document_states(case: Any, response: Any) -> str | None:
    """The rule in words that refused a schema-valid request, or None when the refusal names a rule the
    document should state and does not."""
    body = response.json()
    errors = body.get("errors") or [{"field": None, "message": body.get("detail", "")}]
    for error in errors:
        stated = [
            field
            for field, words in RULES_IN_WORDS
            if _field_matches(str(error.get("field")), field) and words in str(error.get("message", ""))
        ]
        if not stated:
            return None
    return str(errors[0].get("field"))


def seeded_tables() -> dict[str, Any]:
    """moto's DynamoDB tables in this world's account and region, by name (moto's own objects)."""
    tables = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].tables
    assert isinstance(tables, dict), f"moto keeps its tables as {type(tables)}"
    return tables


@pytest.fixture
def fresh_world() -> Iterator[Callable[[], None]]:
    """A moto world that each stateful scenario empties first: a scenario's answers must depend on its own
    steps only, or Hypothesis cannot replay (and shrink) it.

    The seeded world is made once, through the API, and its tables kept: each scenario starts from a copy
    of them in an emptied world (its queues empty), in some 15 ms where making it again took some 350
    (creating the tables, the clients and the jobs), for a few hundred scenarios a run. The copy is of moto's
    own table objects: should moto store them elsewhere one day, `seeded_tables` fails loudly."""
    with offline_aws() as world:
        clients = moto_clients()
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        ensure_tables(dynamodb, NAMES)
        runtime.reset_for_tests(build_components(dynamodb, FakeClock(ANCHOR), clients))
        # Jobs due every minute: their planned runs are there for `GET /jobs` -> runs -> run to reach. Their
        # ids sort before any random one (job_0000...1, 2, 3), so a listing's first jobs are theirs: it
        # took a few hundred scenarios more to reach a page with runs when they were random.
        numbers = itertools.count(1)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(
                job_service, "uuid", SimpleNamespace(uuid4=lambda: uuid.UUID(int=next(numbers) << 48))
            )
            for _ in range(SEEDED_MINUTELY_JOBS):
                created = Api(runtime.components(), FakeClock(ANCHOR)).send(
                    request("POST", "/jobs", body=job_body(schedule={"expression": "* * * * *"}))
                )
                assert created.status == 201, created.body
                assert created.body["id"] < "job_1", created.body
        seeded = copy.deepcopy(seeded_tables())

        def reset() -> None:
            world.reset()
            seeded_tables().update(copy.deepcopy(seeded))
            runtime.reset_for_tests(build_components(dynamodb, FakeClock(ANCHOR), clients))

        reset()
        try:
            yield reset
        finally:
            runtime.reset_for_tests(None)


def test_stateful_runs_follow_links_from_create_to_real_jobs_and_runs(
    fresh_world: Callable[[], None], capsys: pytest.CaptureFixture[str]
) -> None:
    """Schemathesis' state machine: create a job, then follow the document's links (get, update with the
    ETag, pause, resume, preview, list runs, get a run, next pages, delete) with generated data. Every
    answer passes the checks: no 5xx, documented status, content type, headers and body schema."""
    tally = _Tally()

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            fresh_world()
            tally.scenarios += 1

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": AUTH}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            tally.record(case, response.status_code)
            if case.operation.label == "GET /jobs/{job_id}/runs" and response.status_code == 200:
                tally.run_pages_with_runs += bool(response.json()["items"])
            try:
                case.validate_response(response, checks=CHECKS)
            except (AssertionError, FailureGroup) as failed:
                tally.violations.append(f"{case.operation.label} -> {response.status_code}: {failed}")
            if case.meta.generation.mode.is_positive and response.status_code in (400, 422):
                rule = refusal_the_document_states(case, response)
                if rule is None:
                    tally.violations.append(
                        f"{case.operation.label}: a request the document allows was refused "
                        f"({response.status_code}) for a rule it does not state: {response.text[:500]}\n"
                        f"{json.dumps(case.body, default=str)[:2000]}"
                    )
                else:
                    tally.refused.append(rule)

    # Schemathesis' own runner does the same on a data-tree inconsistency: the scenarios so far stand (every
    # response was checked), and a new seed carries on. Scenarios go on, up to a bound, until the run has
    # also reached a real job, its run list and one of its runs through the links (link values are picked at
    # random, so how many scenarios that takes varies).
    for seed_value in range(MAX_STATEFUL_ROUNDS):
        if tally.scenarios >= STATEFUL_SCENARIOS and not tally.unreached():
            break
        try:
            hypothesis_seed(seed_value)(Workflow)  # the seed a state machine runs with is set on its class
            Workflow.run(
                settings=settings(
                    max_examples=ROUND_EXAMPLES,
                    stateful_step_count=10,
                    deadline=None,
                    suppress_health_check=list(HealthCheck),
                    database=None,
                    phases=[Phase.generate],
                )
            )
        except FlakyStrategyDefinition:
            continue
    assert not tally.violations, "\n\n".join(tally.violations[:10])
    assert tally.scenarios >= STATEFUL_SCENARIOS, f"only {tally.scenarios} scenarios ran\n{tally.table()}"
    assert not [key for key in tally.calls if key[1] >= 500], tally.table()
    with capsys.disabled():  # the report belongs in CI's output
        print(
            f"\nschemathesis stateful: {tally.total()} calls in {tally.scenarios} scenarios, 0 5xx, "
            f"0 schema violations; valid-looking requests refused by a rule stated in words: "
            f"{dict(Counter(tally.refused))}\n{tally.table()}"
        )
    # The run reached real ids: jobs it created were read, and their runs listed and read, through the links.
    assert not tally.unreached(), f"never reached: {tally.unreached()}\n{tally.table()}"
