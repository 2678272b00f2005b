"""API Lambda: the HTTP API (API Gateway HTTP API, payload v2) as a Powertools resolver.

Routes are thin: parse (pydantic, Powertools validation) -> one service call -> a response model. Errors are
mapped to application/problem+json in one module (`tickwork.api.problems`). The caller's identity comes from
the API Gateway authorizer context and owns what it creates; another owner's job or run answers 404.

`python -m tickwork.handlers.api [PATH]` prints (or writes) the OpenAPI document generated from this module.
"""

from __future__ import annotations

import json
import queue
import re
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Request, Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.models import APIKey, HTTPBearer, Tag
from aws_lambda_powertools.event_handler.openapi.params import Header, Query
from aws_lambda_powertools.event_handler.openapi.params import Path as PathParam
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from tickwork import signing, ui
from tickwork.api import problems
from tickwork.api.bulk_models import BulkActionIn, BulkActionOut, BulkActionsOut, GroupsOut
from tickwork.api.calendar_models import CalendarIn, CalendarOut, CalendarsOut
from tickwork.api.models import (
    INSTANT_PATTERN,
    MAX_YEAR,
    MIN_YEAR,
    AlertsIn,
    AlertsOut,
    BackfillIn,
    BackfillOut,
    ChannelHealthOut,
    EventListOut,
    EventOut,
    HealthOut,
    JobCreate,
    JobListOut,
    JobOut,
    JobPatchIn,
    OperatorNoteIn,
    PreviewOut,
    ResumedJobOut,
    RevisionDiffOut,
    RevisionListOut,
    RevisionOut,
    RollbackIn,
    RunListOut,
    RunOut,
    SchedulePreviewIn,
    SigningKeyOut,
    SigningKeysOut,
    named_target_configs,
)
from tickwork.api.problems import ApiProblem
from tickwork.domain.bulk import GROUP_NAME
from tickwork.domain.calendars import CALENDAR_NAME, Calendar, check_calendar_names
from tickwork.domain.errors import TickworkError, ValidationError
from tickwork.domain.models import Job, JobState, RunState
from tickwork.domain.requests import MAX_BACKFILL_FIRES
from tickwork.domain.revisions import MAX_NOTE_CHARS
from tickwork.domain.schedule import MAX_PREVIEW_COUNT
from tickwork.handlers import callback_routes
from tickwork.handlers.runtime import components, logger, metrics, tracer
from tickwork.services.bulk import BulkService
from tickwork.services.calendars import CalendarService
from tickwork.services.jobs import Author, JobQuery, JobService, ResumeResult
from tickwork.services.requests import RunRequests
from tickwork.services.runs import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, RunQuery, RunService

API_VERSION = "1.0.0"
MAX_OWNER_CHARS = 1024  # the owner is a key of the by_owner index (DynamoDB allows 2048 bytes)
_ETAG = re.compile(r'^\s*(?:W/)?"?(\d{1,18})"?\s*$')

RUN_RULE = (
    "Runs already planned when a job is edited, paused or deleted are decided when an executor claims "
    "them: a paused or deleted job's run is recorded `cancelled`; a run whose fire time is no longer on "
    "the (edited) schedule is recorded `cancelled`; otherwise the run uses the job as it is at claim "
    "time (a changed target, timeout or retry policy applies)."
)

DESCRIPTION = f"""Tickwork schedules cron jobs that call HTTP endpoints or AWS services, at least once
per fire.

**Identity.** In AWS every request is authorized by API Gateway (IAM SigV4 by default, or a JWT authorizer);
the caller's IAM principal ARN (or the JWT `sub`) owns the jobs it creates. Locally, `Authorization: Bearer
<token>` maps to an owner. Another owner's job or run answers 404, exactly like a missing one.

**Errors** are `application/problem+json` (RFC 9457); validation problems list each offending field in
`errors`.

**Concurrency.** Every write bumps a job's `version`; responses carry `ETag: "<version>"`. Send it back in
`If-Match` to make a write conditional (412 if the job changed meanwhile).

**Planned runs.** {RUN_RULE}
"""

# Routes are declared on a Router and installed on each resolver `build_app` makes. Powertools keeps the
# request being resolved on the resolver (its context: route, path arguments, validated body) and the event
# on the BaseRouter *class*: a resolver serves one request at a time, so concurrent requests (the local
# server's threads) each lease their own (`_RESOLVERS`), and `_Resolver` keeps its event on itself.
router = Router()  # type: ignore[no-untyped-call]  # Powertools: __init__ has no annotations


class _Resolver(APIGatewayHttpResolver):
    """A resolver whose current event and Lambda context are its own, not the BaseRouter class's (Powertools
    assigns `BaseRouter.current_event` on every resolve, shared by every resolver in the process)."""

    def _to_proxy_event(self, event: dict[str, Any]) -> Any:
        proxy = super()._to_proxy_event(event)
        self.current_event = cast(Any, proxy)  # an instance attribute: shadows the class-wide one
        return proxy

    def resolve(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        self.lambda_context = context
        return super().resolve(event, context)


def build_app() -> APIGatewayHttpResolver:
    """One resolver with every route, the error mapping and the OpenAPI description."""
    app = _Resolver(enable_validation=True)
    problems.register(app)
    app.configure_openapi(
        title="Tickwork API",
        version=API_VERSION,
        description=DESCRIPTION,
        tags=[
            Tag(name="jobs", description="Create, list, edit, pause, resume and delete jobs."),
            Tag(name="runs", description="Run history: one record per scheduled fire."),
            Tag(name="schedules", description="Preview fire times of an expression."),
            Tag(name="calendars", description="Exclusion calendars: dates and windows jobs do not fire in."),
            Tag(name="service", description="Health and documentation."),
            Tag(name="callbacks", description="What a callback run's target calls: its outcome, heartbeats."),
        ],
        # Declared so that Swagger UI at /docs has an Authorize button: a bearer token locally (or a JWT when
        # the stack uses a JWT authorizer), SigV4-signed requests with IAM auth in AWS (sign them with the AWS
        # SDK or `awscurl`; Swagger UI cannot).
        security_schemes={
            "bearer": HTTPBearer(
                description="Locally: a token from `tickwork local --token TOKEN=OWNER` (default "
                "`local-dev-token`). In AWS with a JWT authorizer: an access token from the configured "
                "issuer."
            ),
            "sigv4": APIKey.model_validate(
                {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "In AWS with IAM auth (the default): an AWS Signature Version 4 "
                    "`Authorization` header for the service `execute-api`.",
                    "x-amazon-apigateway-authtype": "awsSigv4",
                }
            ),
        },
        security=[{"bearer": []}, {"sigv4": []}],
    )
    app.enable_swagger(path="/docs")
    app.include_router(router)
    app.include_router(callback_routes.router)
    return app


class _Pool:
    """Resolvers, each lent to one request at a time; a new one is built when all are busy (so the pool is
    as large as the most requests ever served at once: one in Lambda, the server's threads locally)."""

    def __init__(self) -> None:
        self._free: queue.SimpleQueue[APIGatewayHttpResolver] = queue.SimpleQueue()
        self.built = 0

    @contextmanager
    def lease(self) -> Iterator[APIGatewayHttpResolver]:
        try:
            resolver = self._free.get_nowait()
        except queue.Empty:
            resolver = build_app()
            self.built += 1  # only ever grows from a request thread; a count, not a decision
        try:
            yield resolver
        finally:
            self._free.put(resolver)


_RESOLVERS = _Pool()


# --- request context -------------------------------------------------------------------------------------


def owner_of(event: Mapping[str, Any], tenant_claim: str = "sub") -> str | None:
    """The caller's identity from the API Gateway (payload v2) authorizer context: the IAM principal ARN, or
    a JWT's tenant claim (`sub` by default, so each user is a tenant; `TICKWORK_TENANT_CLAIM`, e.g. an
    organisation claim, makes every user of one organisation one tenant). A token without the claim has no
    owner (401): it never falls back to another claim.

    An assumed role's ARN names its session (`arn:<partition>:sts::<account>:assumed-role/<role>/<session>`),
    a new one per login or cold start; the owner is the role, `arn:<partition>:iam::<account>:role/<role>`,
    so every session of one role sees the same jobs. That ARN carries no role path (the assumed-role ARN has
    none), so a role with a path owns as `role/<name>`. IAM users and other principals keep their ARN."""
    arn, claimed = _authorized(event, tenant_claim)
    if arn is not None:
        session = re.fullmatch(r"arn:([\w-]+):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/[\w+=,.@-]+", arn)
        if session is not None:
            partition, account, role = session.groups()
            return f"arn:{partition}:iam::{account}:role/{role}"
        return arn
    return claimed


def actor_of(event: Mapping[str, Any]) -> str | None:
    """Who is calling, as a revision records it: the IAM principal as signed (an assumed role's session
    included: who logged in, where the owner is the role), or a JWT's `sub` (the user, where the owner may
    be their organisation). None: no more than the owner is known."""
    arn, sub = _authorized(event, "sub")
    return arn if arn is not None else sub


def _authorized(event: Mapping[str, Any], claim: str) -> tuple[str | None, str | None]:
    """What the API Gateway (payload v2) authorizer context says of the caller, as given: the IAM principal
    ARN it signed as, and the JWT's `claim` (each None when absent or empty)."""
    context = event.get("requestContext")
    authorizer = context.get("authorizer") if isinstance(context, Mapping) else None
    if not isinstance(authorizer, Mapping):
        return None, None
    iam = authorizer.get("iam")
    arn = iam.get("userArn") if isinstance(iam, Mapping) else None
    jwt = authorizer.get("jwt")
    claims = jwt.get("claims") if isinstance(jwt, Mapping) else None
    value = claims.get(claim) if isinstance(claims, Mapping) else None
    return (
        arn if isinstance(arn, str) and arn else None,
        value if isinstance(value, str) and value else None,
    )


def author(request: Request, owner: str, note: str | None) -> Author:
    """The write's author: the caller (or the owner, when no more is known), and the note it gave."""
    actor = actor_of(request.resolved_event.raw_event) or owner
    return Author(actor[:MAX_OWNER_CHARS], note)


def current_owner(request: Request) -> str:
    """The owner of the request being served. Every route takes its `Request` (Powertools passes the one
    it is resolving) and asks it: the identity never comes from state shared between requests."""
    owner = owner_of(request.resolved_event.raw_event, components().settings.tenant_claim)
    if owner is None:
        raise ApiProblem(HTTPStatus.UNAUTHORIZED, "no caller identity in the request")
    if len(owner) > MAX_OWNER_CHARS:
        raise ApiProblem(HTTPStatus.UNAUTHORIZED, "the caller identity is longer than 1024 characters")
    return owner


Cursor = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="`next_cursor` of the previous page, as given. Cursors carry a check: one this API did "
        "not issue for this listing (edited, invented, or another listing's) is a 400.",
    ),
]
Note = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_NOTE_CHARS,
        description="Why: recorded with the write's revision, who made it and when (GET "
        "/jobs/{job_id}/revisions, GET /audit).",
    ),
]
RequiredNote = Annotated[
    str,
    Query(
        min_length=1,
        max_length=MAX_NOTE_CHARS,
        description="Why: required for a pause or a delete, recorded with the write's revision, who made it "
        "and when (GET /jobs/{job_id}/revisions, GET /audit).",
    ),
]
IfMatch = Annotated[
    str | None,
    Header(
        alias="if-match",
        max_length=200,
        description='The job\'s ETag ("<version>") from an earlier response; 412 if the job changed.',
    ),
]


def expected_version(if_match: str | None, owner: str, job_id: str) -> int | None:
    """The version an If-Match header names (None: no condition; `*` matches any existing job). A header
    that names no version fails the precondition, but only for a job that exists: a missing job is 404
    whatever the header says."""
    if if_match is None or if_match.strip() == "*":
        return None
    match = _ETAG.match(if_match)
    if match is None:
        jobs().get(owner, job_id)  # NotFoundError (404) first
        raise ApiProblem(
            HTTPStatus.PRECONDITION_FAILED, f"If-Match {if_match!r} matches no version of the job"
        )
    return int(match.group(1))


def _check_query_instant(name: str, value: datetime | None) -> None:
    """Query bounds take the range the bodies take: a year outside it cannot be a stored key (keys are
    written without zero padding below year 1000), so it would be a 500 or a silently wrong page."""
    if value is not None and not MIN_YEAR <= value.year <= MAX_YEAR:
        raise ValidationError(name, f"year must be {MIN_YEAR}-{MAX_YEAR}")


def jobs() -> JobService:
    return components().job_service()


def runs() -> RunService:
    return RunService(components().store)


def requests() -> RunRequests:
    parts = components()
    return RunRequests(parts.store, parts.dispatcher, parts.clock, parts.settings.owner_quotas)


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="idempotency-key",
        min_length=1,
        max_length=255,
        pattern=r"^[!-~]+$",
        description="Any unique visible-ASCII string (a UUID): a retried request with the same key is "
        "answered as the first was, without doing it again; the same key with another request is a 409.",
    ),
]
_REPLAYED = {"Idempotent-Replayed": "true"}


def etag(job: Job) -> str:
    return f'"{job.version}"'


def json_response(
    model: BaseModel, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response[Any]:
    return Response(
        status_code=status,
        content_type="application/json",
        body=model.model_dump(mode="json"),
        headers=dict(headers or {}),
    )


def job_response(body: JobOut, job: Job, status: int = 200, **headers: str) -> Response[Any]:
    return json_response(body, status, {"ETag": etag(job), **headers})


# --- OpenAPI response declarations -------------------------------------------------------------------------

_ETAG_HEADER: dict[str, Any] = {
    "ETag": {"description": 'The job\'s version, quoted: "3"', "schema": {"type": "string"}}
}


def ok(
    model: type[BaseModel],
    description: str,
    status: int = 200,
    etag_header: bool = False,
    links: Mapping[str, Any] | None = None,
) -> dict[int, OpenAPIResponse]:
    response: OpenAPIResponse = {
        "description": description,
        "content": {"application/json": {"model": model}},
    }
    if etag_header:
        response["headers"] = _ETAG_HEADER
    if links:
        response["links"] = dict(links)
    return {status: response}


def _links(
    parameters: Mapping[str, str], *targets: tuple[str, str], fenced: Sequence[str] = ()
) -> dict[str, Any]:
    """OpenAPI links: how a value in this answer feeds the next call (clients and stateful testers follow
    them). `fenced` operations also take the answer's ETag as If-Match."""
    links: dict[str, Any] = {}
    for name, operation_id in targets:
        linked = dict(parameters)
        if operation_id in fenced:
            linked["header.if-match"] = "$response.header.ETag"
        links[name] = {"operationId": operation_id, "parameters": linked}
    return links


# A job in the answer -> every operation on that job.
JOB_LINKS = _links(
    {"job_id": "$response.body#/id"},
    ("GetJob", "getJob"),
    ("UpdateJob", "updateJob"),
    ("PauseJob", "pauseJob"),
    ("ResumeJob", "resumeJob"),
    ("PreviewJob", "previewJob"),
    ("ListRuns", "listRuns"),
    ("ListRevisions", "listRevisions"),
    ("DeleteJob", "deleteJob"),
    fenced=("updateJob", "pauseJob", "resumeJob", "deleteJob"),
)
# A page of runs -> the first run on it, and the next page.
RUN_PAGE_LINKS = {
    **_links(
        {"job_id": "$response.body#/items/0/job_id", "run_id": "$response.body#/items/0/id"},
        ("GetFirstRun", "getRun"),
    ),
    **_links(
        {"job_id": "$request.path.job_id", "cursor": "$response.body#/next_cursor"}, ("NextPage", "listRuns")
    ),
}
# A run in the answer (run now, retry, a run read) -> the run again (to follow it to its end) and the job's
# run list it is on.
RUN_LINKS = _links(
    {"job_id": "$response.body#/job_id", "run_id": "$response.body#/id"}, ("GetRun", "getRun")
) | _links({"job_id": "$response.body#/job_id"}, ("ListRuns", "listRuns"))
JOB_PAGE_LINKS = {
    **_links(
        {"job_id": "$response.body#/items/0/id"}, ("GetFirstJob", "getJob"), ("ListFirstJobRuns", "listRuns")
    ),
    **_links({"cursor": "$response.body#/next_cursor"}, ("NextPage", "listJobs")),
}


# --- routes ------------------------------------------------------------------------------------------------


@router.post(
    "/jobs",
    operation_id="createJob",
    summary="Create a job",
    description="With an `Idempotency-Key`, a retried create returns the job the first attempt created (200, "
    "`Idempotent-Replayed: true`) instead of a second job; the same key with a different body is a 409. "
    "Fires that fall within the ticker's lookahead are planned in the same transaction.",
    tags=["jobs"],
    responses={
        **ok(JobOut, "Created.", 201, etag_header=True, links=JOB_LINKS),
        **ok(
            JobOut,
            "Replayed: the job an earlier request with this Idempotency-Key created.",
            200,
            etag_header=True,
            links=JOB_LINKS,
        ),
        **problems.problem_responses(400, 403, 409, 413, 415),
    },
)
def create_job(
    body: JobCreate,
    request: Request,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="idempotency-key",
            min_length=1,
            max_length=255,
            pattern=r"^[!-~]+$",
            description="Any unique visible-ASCII string (a UUID); the same key always names the same job.",
        ),
    ] = None,
    note: Note = None,
) -> Response[JobOut]:
    owner = current_owner(request)
    spec = body.to_spec()
    by = author(request, owner, note)
    if idempotency_key is None:
        job = jobs().create(owner, spec, by)
        return job_response(JobOut.of(job), job, 201)
    result = jobs().create_idempotent(owner, spec, idempotency_key, body.fingerprint, by)
    if result.replayed:
        return job_response(JobOut.of(result.job), result.job, 200, **{"Idempotent-Replayed": "true"})
    return job_response(JobOut.of(result.job), result.job, 201)


@router.get(
    "/jobs",
    operation_id="listJobs",
    summary="List jobs",
    description="The caller's jobs in id order, a page at a time. A page may hold fewer than `limit` jobs "
    "when filters apply (`state`, `tag`, `name`); continue while `next_cursor` is not null.",
    tags=["jobs"],
    responses={**ok(JobListOut, "A page of jobs.", links=JOB_PAGE_LINKS), **problems.problem_responses(400)},
)
def list_jobs(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Cursor = None,
    state: Annotated[JobState | None, Query()] = None,
    tag: Annotated[
        str | None, Query(pattern=r"^[^=]+=.*$", max_length=400, description="`key=value`.")
    ] = None,
    name: Annotated[
        str | None,
        Query(min_length=1, max_length=200, description="Only jobs whose name contains this (any case)."),
    ] = None,
    group: Annotated[
        str | None,
        Query(min_length=1, max_length=64, pattern=GROUP_NAME.pattern, description="Only this group's."),
    ] = None,
) -> Response[JobListOut]:
    owner = current_owner(request)
    wanted_tag = None if tag is None else tuple(tag.split("=", 1))
    query = JobQuery(limit=limit, cursor=cursor, state=state, tag=wanted_tag, name=name, group=group)  # type: ignore[arg-type]
    page = jobs().list(owner, query)
    return json_response(JobListOut(items=[JobOut.of(j) for j in page.jobs], next_cursor=page.next_cursor))


@router.get(
    "/jobs/<job_id>",
    operation_id="getJob",
    summary="Get a job",
    tags=["jobs"],
    responses={
        **ok(JobOut, "The job.", etag_header=True, links=JOB_LINKS),
        **problems.problem_responses(404),
    },
)
def get_job(job_id: str, request: Request) -> Response[JobOut]:
    owner = current_owner(request)
    job = jobs().get(owner, job_id)
    return job_response(JobOut.of(job), job)


@router.patch(
    "/jobs/<job_id>",
    operation_id="updateJob",
    summary="Update a job",
    description="Partial update: omitted fields keep their value; `target`, `tags` and `alerts` are replaced "
    "whole. A "
    "schedule change computes the next fire from now and plans fires within the lookahead at once. "
    f"{RUN_RULE}",
    tags=["jobs"],
    responses={
        **ok(JobOut, "The updated job.", etag_header=True, links=JOB_LINKS),
        **problems.problem_responses(400, 403, 404, 412, 413, 415),
    },
)
def update_job(
    job_id: str, body: JobPatchIn, request: Request, if_match: IfMatch = None, note: Note = None
) -> Response[JobOut]:
    owner = current_owner(request)
    version = expected_version(if_match, owner, job_id)
    job = jobs().update(owner, job_id, body.to_patch(), version, author(request, owner, note))
    return job_response(JobOut.of(job), job)


@router.delete(
    "/jobs/<job_id>",
    operation_id="deleteJob",
    summary="Delete a job",
    description=f"Run history stays until its retention expires. {RUN_RULE}",
    tags=["jobs"],
    responses={204: {"description": "Deleted.", "content": {}}, **problems.problem_responses(404, 412)},
)
def delete_job(job_id: str, request: Request, note: RequiredNote, if_match: IfMatch = None) -> Response[None]:
    owner = current_owner(request)
    jobs().delete(owner, job_id, expected_version(if_match, owner, job_id), author(request, owner, note))
    return Response(status_code=204, body=None)


@router.post(
    "/jobs/<job_id>/pause",
    operation_id="pauseJob",
    summary="Pause a job",
    description=f"No new runs are planned while paused. {RUN_RULE} Pausing a paused job changes nothing.",
    tags=["jobs"],
    responses={
        **ok(JobOut, "The paused job.", etag_header=True, links=JOB_LINKS),
        **problems.problem_responses(404, 412),
    },
)
def pause_job(
    job_id: str, request: Request, note: RequiredNote, if_match: IfMatch = None
) -> Response[JobOut]:
    owner = current_owner(request)
    version = expected_version(if_match, owner, job_id)
    job = jobs().pause(owner, job_id, version, by=author(request, owner, note))
    return job_response(JobOut.of(job), job)


@router.post(
    "/jobs/<job_id>/resume",
    operation_id="resumeJob",
    summary="Resume a job",
    description="The fires that fell inside the pause follow the job's `missed_fire` policy, exactly as "
    "after an outage: `run_all` runs every one of them late (catch-up runs), `coalesce` runs only the "
    "latest and records the others `missed`, `skip` records all of them `missed`. `paused_fires` says how "
    "many there were and what happens to them. Resuming an active job changes nothing.",
    tags=["jobs"],
    responses={
        **ok(ResumedJobOut, "The resumed job.", etag_header=True, links=JOB_LINKS),
        **problems.problem_responses(404, 412),
    },
)
def resume_job(
    job_id: str, request: Request, if_match: IfMatch = None, note: Note = None
) -> Response[ResumedJobOut]:
    owner = current_owner(request)
    version = expected_version(if_match, owner, job_id)
    result = jobs().resume(owner, job_id, version, author(request, owner, note))
    _tell_resumed(result)
    resumed = ResumedJobOut.of_resume(result.job, result.paused_fires, result.cleared_auto_pause)
    return job_response(resumed, result.job)


def _tell_resumed(result: ResumeResult) -> None:
    """A resume that cleared Tickwork's own pause is an event (and a message to the job's channels). The
    resume is done whatever happens here: an event that cannot be recorded is logged and counted."""
    if result.cleared_auto_pause is None:
        return
    try:
        components().event_recorder().note_resumed(result.job, result.cleared_auto_pause)
    except TickworkError as error:  # throttled past retries, a window moved past retries, a store fault
        logger.error("resumed event not recorded", extra={"job_id": result.job.job_id, "error": str(error)})
        metrics.add_metric(name="EventsNotRecorded", unit=MetricUnit.Count, value=1)


@router.get(
    "/jobs/<job_id>/preview",
    operation_id="previewJob",
    summary="Preview a job's next fires",
    description="The next `count` fires after now, in UTC and in the schedule's time zone, with DST marks.",
    tags=["schedules"],
    responses={**ok(PreviewOut, "The next fires."), **problems.problem_responses(404)},
)
def preview_job(
    job_id: str,
    request: Request,
    count: Annotated[int, Query(ge=1, le=MAX_PREVIEW_COUNT)] = 10,
    after: Annotated[
        datetime | None,
        Query(
            description="List fires after this instant (RFC 3339, year 1970-9000; default: now).",
            json_schema_extra={"pattern": INSTANT_PATTERN},
        ),
    ] = None,
) -> Response[PreviewOut]:
    owner = current_owner(request)
    _check_query_instant("after", after)
    return json_response(PreviewOut.of(jobs().preview(owner, job_id, count, after)))


@router.post(
    "/schedules/preview",
    operation_id="previewSchedule",
    summary="Preview an unsaved schedule",
    description="Validates a schedule exactly as a create would, and lists its next `count` fires after "
    "`after` (default now): UTC and local times, DST marks, and the expression in words.",
    tags=["schedules"],
    responses={**ok(PreviewOut, "The next fires."), **problems.problem_responses(400, 413, 415)},
)
def preview_schedule(body: SchedulePreviewIn, request: Request) -> Response[PreviewOut]:
    owner = current_owner(request)  # no identity, no preview (401)
    service = jobs()
    marking = service.calendars_of(owner, check_calendar_names(body.calendars), strict=True)
    result = service.preview_schedule(body.to_schedule(), body.count, body.after, marking)
    return json_response(PreviewOut.of(result))


@router.get(
    "/jobs/<job_id>/runs",
    operation_id="listRuns",
    summary="List a job's runs",
    description="Newest first (by scheduled fire time), a page at a time. `from`/`to` bound the scheduled "
    "fire time (inclusive). A page may hold fewer than `limit` runs when `state` filters; continue while "
    "`next_cursor` is not null.",
    tags=["runs"],
    responses={
        **ok(RunListOut, "A page of runs.", links=RUN_PAGE_LINKS),
        **problems.problem_responses(400, 404, 422),
    },
)
def list_runs(
    job_id: str,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Cursor = None,
    state: Annotated[RunState | None, Query()] = None,
    start: Annotated[
        datetime | None,
        Query(
            alias="from",
            description="Earliest scheduled fire time (RFC 3339, year 1970-9000).",
            json_schema_extra={"pattern": INSTANT_PATTERN},
        ),
    ] = None,
    end: Annotated[
        datetime | None,
        Query(
            alias="to",
            description="Latest scheduled fire time (RFC 3339, year 1970-9000); before `from` is a 422.",
            json_schema_extra={"pattern": INSTANT_PATTERN},
        ),
    ] = None,
) -> Response[RunListOut]:
    owner = current_owner(request)
    for name, bound in (("from", start), ("to", end)):
        _check_query_instant(name, bound)
    query = RunQuery(limit=limit, cursor=cursor, state=state, start=start, end=end)
    page = runs().list(owner, job_id, query)
    return json_response(RunListOut(items=[RunOut.of(r) for r in page.runs], next_cursor=page.next_cursor))


@router.get(
    "/jobs/<job_id>/runs/<run_id>",
    operation_id="getRun",
    summary="Get a run",
    description="One run with its attempts, timings and outcome. The run id is `<job_id>:<YYYYMMDDTHHMMSSZ>` "
    "(the scheduled fire time).",
    tags=["runs"],
    responses={**ok(RunOut, "The run.", links=RUN_LINKS), **problems.problem_responses(404)},
)
def get_run(job_id: str, run_id: str, request: Request) -> Response[RunOut]:
    owner = current_owner(request)
    return json_response(RunOut.of(runs().get(owner, job_id, run_id)))


@router.post(
    "/jobs/<job_id>/runs",
    operation_id="runJobNow",
    summary="Run a job now",
    description="Starts a run now (trigger `manual`), besides the schedule: the next fire does not move. It "
    "goes through the same claim as any run, so the overlap policy and the concurrency cap apply, and it is "
    "in the history like any run. Its id can never be a scheduled slot's (`<job_id>:<YYYYMMDDTHHMMSSZ>~"
    "<microseconds>`). A paused job answers 409 unless `even_if_paused=true`.",
    tags=["runs"],
    responses={
        **ok(RunOut, "Created: the run, planned to start at once.", 201, links=RUN_LINKS),
        **ok(
            RunOut,
            "Replayed: the run an earlier request with this Idempotency-Key created.",
            200,
            links=RUN_LINKS,
        ),
        **problems.problem_responses(404, 409),
    },
)
def run_job_now(
    job_id: str,
    request: Request,
    even_if_paused: Annotated[bool, Query(description="Run a paused job anyway.")] = False,
    idempotency_key: IdempotencyKey = None,
) -> Response[RunOut]:
    owner = current_owner(request)
    result = requests().run_now(owner, job_id, even_if_paused=even_if_paused, idempotency_key=idempotency_key)
    run = result.runs[0]
    location = {"Location": f"/jobs/{job_id}/runs/{run.run_id}"}
    if result.replayed:
        return json_response(RunOut.of(run), 200, {**location, **_REPLAYED})
    return json_response(RunOut.of(run), 201, location)


@router.post(
    "/jobs/<job_id>/runs/<run_id>/retry",
    operation_id="retryRun",
    summary="Retry a failed run",
    description="Starts the next attempt of a `failed` or `cancelled` run, fenced like any attempt; its "
    "earlier attempts stay in its record. A run in any other state answers 409, as does a paused job (for "
    "a scheduled slot) or a slot no longer on the schedule: use run now for those.",
    tags=["runs"],
    responses={
        **ok(RunOut, "The run, waiting for its next attempt.", 202, links=RUN_LINKS),
        **ok(
            RunOut,
            "Replayed: the run an earlier request with this Idempotency-Key retried.",
            200,
            links=RUN_LINKS,
        ),
        **problems.problem_responses(404, 409),
    },
)
def retry_run(
    job_id: str, run_id: str, request: Request, idempotency_key: IdempotencyKey = None
) -> Response[RunOut]:
    owner = current_owner(request)
    result = requests().retry(owner, job_id, run_id, idempotency_key=idempotency_key)
    if result.replayed:
        return json_response(RunOut.of(result.runs[0]), 200, _REPLAYED)
    return json_response(RunOut.of(result.runs[0]), 202)


@router.post(
    "/jobs/<job_id>/backfill",
    operation_id="backfillJob",
    summary="Backfill a past window",
    description="Creates a run (trigger `backfill`) of every fire of the job's schedule from `from` to `to` "
    f"(at most {MAX_BACKFILL_FIRES}: a larger window is a 422), started gradually at `rate_per_second`. "
    "A slot that already has a run is left alone unless `rerun` is set. Without `rerun` a repeated request "
    "creates nothing twice; with it, send an Idempotency-Key. A paused job answers 409.",
    tags=["runs"],
    responses={
        **ok(BackfillOut, "What the backfill created and skipped.", 202),
        **ok(BackfillOut, "Replayed: what an earlier request with this Idempotency-Key did.", 200),
        **problems.problem_responses(400, 403, 404, 409, 415, 422),
    },
)
def backfill_job(
    job_id: str, body: BackfillIn, request: Request, idempotency_key: IdempotencyKey = None
) -> Response[BackfillOut]:
    owner = current_owner(request)
    result = requests().backfill(owner, job_id, body.to_window(), idempotency_key=idempotency_key)
    if result.replayed:
        return json_response(BackfillOut.of(result), 200, _REPLAYED)
    return json_response(BackfillOut.of(result), 202)


@router.get(
    "/runs",
    operation_id="listFailedRuns",
    summary="List failed runs across jobs",
    description="The caller's failed runs across all their jobs, newest first by when they failed, from a "
    "sparse index that holds only failed runs. `from` bounds when they failed. `state` must be `failed` "
    "(the only cross-job listing).",
    tags=["runs"],
    responses={
        **ok(RunListOut, "A page of failed runs."),
        **problems.problem_responses(400, 422),
    },
)
def list_failed_runs(
    request: Request,
    state: Annotated[Literal["failed"], Query(description="Must be `failed`.")],
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Cursor = None,
    start: Annotated[
        datetime | None,
        Query(
            alias="from",
            description="Earliest failure time (RFC 3339, year 1970-9000).",
            json_schema_extra={"pattern": INSTANT_PATTERN},
        ),
    ] = None,
) -> Response[RunListOut]:
    owner = current_owner(request)
    _check_query_instant("from", start)
    page = runs().failed(owner, since=start, limit=limit, cursor=cursor)
    return json_response(RunListOut(items=[RunOut.of(r) for r in page.runs], next_cursor=page.next_cursor))


@router.get(
    "/alert-defaults",
    operation_id="getAlertDefaults",
    summary="Your default alert rules",
    description="The rules and channels a job you create without `alerts` gets (docs/alerts.md); the "
    "defaults (failures and dead letters, no channel) until you set your own.",
    tags=["jobs"],
    responses={**ok(AlertsOut, "Your default rules."), **problems.problem_responses(422)},
)
def get_alert_defaults(request: Request) -> Response[AlertsOut]:
    return json_response(AlertsOut.of(jobs().alert_defaults(current_owner(request))))


@router.put(
    "/alert-defaults",
    operation_id="setAlertDefaults",
    summary="Set your default alert rules",
    description="What a job you create from now on without `alerts` gets; jobs already created keep their "
    "own. Checked as a job's rules are (a channel's address, a topic against your grants).",
    tags=["jobs"],
    responses={**ok(AlertsOut, "Your default rules."), **problems.problem_responses(400, 403, 415, 422)},
)
def set_alert_defaults(body: AlertsIn, request: Request) -> Response[AlertsOut]:
    rules = jobs().set_alert_defaults(current_owner(request), body.to_rules())
    return json_response(AlertsOut.of(rules))


@router.delete(
    "/alert-defaults",
    operation_id="deleteAlertDefaults",
    summary="Forget your default alert rules",
    description="Jobs you create without `alerts` get the built-in defaults again.",
    tags=["jobs"],
    responses={204: {"description": "Forgotten.", "content": {}}, **problems.problem_responses(422)},
)
def delete_alert_defaults(request: Request) -> Response[None]:
    jobs().set_alert_defaults(current_owner(request), None)
    return Response(status_code=204, body=None)


# A bulk action's first slice of work, in the request that starts it: a small one is done when it answers;
# the rest goes on in the watcher's passes (the answer's progress says how far it got).
BULK_SLICE_SECONDS = 2.0


def bulk() -> BulkService:
    return components().bulk_service()


@router.get(
    "/groups",
    operation_id="listGroups",
    summary="Your groups, with their jobs counted by state",
    description="Every group your jobs are in (a job is in `default` unless it names one). Counted from your "
    'jobs in one pass (docs/api.md, "Groups and bulk actions").',
    tags=["jobs"],
    responses={**ok(GroupsOut, "Your groups."), **problems.problem_responses(422)},
)
def list_groups(request: Request) -> Response[GroupsOut]:
    return json_response(GroupsOut.of(jobs().groups(current_owner(request))))


@router.post(
    "/bulk-actions",
    operation_id="startBulkAction",
    summary="Pause, resume, or retry the failed runs of many jobs at once",
    description="One request for every job of yours a group and/or tags select: each job is written as a "
    "single write would be (its revision carries the note). Answers 202 with the action's progress (done "
    "when small); GET /bulk-actions/{action_id} follows it. With an Idempotency-Key, the same request "
    "answers the same action (200); another request under that key is a 409. A job already as wanted is "
    "counted unchanged. `resume_at` on a pause is a maintenance window: its jobs are resumed then.",
    tags=["jobs"],
    responses={
        **ok(BulkActionOut, "Started (its progress so far).", status=202),
        **ok(BulkActionOut, "The action this Idempotency-Key started."),
        **problems.problem_responses(400, 409, 415, 422),
    },
)
def start_bulk_action(
    body: BulkActionIn, request: Request, idempotency_key: IdempotencyKey = None
) -> Response[BulkActionOut]:
    owner = current_owner(request)
    actor = author(request, owner, body.note).actor
    service = bulk()
    started = service.start(owner, actor, body.to_request(), idempotency_key, lambda: uuid.uuid4().hex[:20])
    if started.replayed:
        return json_response(BulkActionOut.of(started.action), 200, _REPLAYED)
    service.work(started.action, f"api-{uuid.uuid4().hex[:8]}", BULK_SLICE_SECONDS)
    action = service.get(owner, started.action.action_id)
    location = {"Location": f"/bulk-actions/{action.action_id}"}
    return json_response(BulkActionOut.of(action), 202, location)


@router.get(
    "/bulk-actions",
    operation_id="listBulkActions",
    summary="Your bulk actions, newest first",
    tags=["jobs"],
    responses={**ok(BulkActionsOut, "Your bulk actions."), **problems.problem_responses(422)},
)
def list_bulk_actions(request: Request) -> Response[BulkActionsOut]:
    found = bulk().list(current_owner(request))
    return json_response(BulkActionsOut(items=[BulkActionOut.of(a) for a in found]))


@router.get(
    "/bulk-actions/<action_id>",
    operation_id="getBulkAction",
    summary="One bulk action and its progress",
    tags=["jobs"],
    responses={**ok(BulkActionOut, "The action."), **problems.problem_responses(404, 422)},
)
def get_bulk_action(action_id: str, request: Request) -> Response[BulkActionOut]:
    return json_response(BulkActionOut.of(bulk().get(current_owner(request), action_id)))


CalendarPath = Annotated[
    str,
    PathParam(min_length=1, max_length=64, pattern=CALENDAR_NAME.pattern, description="The calendar's name."),
]
CalendarIfMatch = Annotated[
    str | None,
    Header(
        alias="if-match",
        max_length=200,
        description='The calendar\'s ETag ("<version>"; "0": only if it does not exist yet); 412 otherwise.',
    ),
]


def calendars() -> CalendarService:
    return CalendarService(components().calendars, components().clock)


def calendar_response(calendar: Calendar, status: int = 200) -> Response[Any]:
    return json_response(CalendarOut.of(calendar), status, {"ETag": f'"{calendar.version}"'})


@router.get(
    "/calendars",
    operation_id="listCalendars",
    summary="Your exclusion calendars",
    description='Every calendar you have, by name (docs/api.md, "Exclusion calendars").',
    tags=["calendars"],
    responses={**ok(CalendarsOut, "Your calendars."), **problems.problem_responses(422)},
)
def list_calendars(request: Request) -> Response[CalendarsOut]:
    found = calendars().list(current_owner(request))
    return json_response(CalendarsOut(items=[CalendarOut.of(c) for c in found]))


@router.get(
    "/calendars/<name>",
    operation_id="getCalendar",
    summary="One exclusion calendar",
    tags=["calendars"],
    responses={**ok(CalendarOut, "The calendar.", etag_header=True), **problems.problem_responses(404, 422)},
)
def get_calendar(name: CalendarPath, request: Request) -> Response[CalendarOut]:
    return calendar_response(calendars().get(current_owner(request), name))


@router.put(
    "/calendars/<name>",
    operation_id="putCalendar",
    summary="Create or replace an exclusion calendar",
    description="Dates (whole local days) and windows (wall-clock times) in one IANA zone. A scheduled fire "
    "of a job naming the calendar that falls inside one is recorded `excluded` with the entry's label, not "
    "run. Jobs read it at each run's claim: an edit counts from the next claim. 201 when created.",
    tags=["calendars"],
    responses={
        **ok(CalendarOut, "Replaced.", etag_header=True),
        **ok(CalendarOut, "Created.", status=201, etag_header=True),
        **problems.problem_responses(400, 403, 412, 415, 422),
    },
)
def put_calendar(
    name: CalendarPath, body: CalendarIn, request: Request, if_match: CalendarIfMatch = None
) -> Response[CalendarOut]:
    expected = None
    if if_match is not None and if_match.strip() != "*":
        match = _ETAG.match(if_match)
        if match is None:
            raise ApiProblem(HTTPStatus.PRECONDITION_FAILED, f"If-Match {if_match!r} names no version")
        expected = int(match.group(1))
    written = calendars().put(body.to_calendar(current_owner(request), name), expected)
    return calendar_response(written.calendar, 201 if written.created else 200)


@router.delete(
    "/calendars/<name>",
    operation_id="deleteCalendar",
    summary="Delete an exclusion calendar",
    description="Jobs that name it run every fire from then on (a missing calendar excludes nothing).",
    tags=["calendars"],
    responses={204: {"description": "Deleted.", "content": {}}, **problems.problem_responses(404, 422)},
)
def delete_calendar(name: CalendarPath, request: Request) -> Response[None]:
    calendars().delete(current_owner(request), name)
    return Response(status_code=204, body=None)


@router.get(
    "/events",
    operation_id="listEvents",
    summary="List what happened to a job, or to all the caller's jobs",
    description="Events (a run failed, started late, missed its deadline, a slot skipped, the job paused "
    "itself...), newest first, kept as long as the job's runs. With `job_id`, that job's (404 for another "
    "owner's); without, the caller's across their jobs. docs/alerts.md lists the kinds.",
    tags=["runs"],
    responses={
        **ok(EventListOut, "A page of events."),
        **problems.problem_responses(400, 404, 422),
    },
)
def list_events(
    request: Request,
    job_id: Annotated[str | None, Query(min_length=1, max_length=200, description="Only this job's.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Cursor = None,
) -> Response[EventListOut]:
    owner = current_owner(request)
    reader = components().event_reader()
    page = reader.page(owner, job_id, limit, cursor)
    health = [] if job_id is None else reader.channel_health(owner, job_id)
    return json_response(
        EventListOut(
            items=[EventOut.of(e) for e in page.events],
            next_cursor=page.next_cursor,
            channel_health=[ChannelHealthOut.of(h) for h in health],
        )
    )


# --- revisions and the audit log ---------------------------------------------------------------------


@router.get(
    "/jobs/<job_id>/revisions",
    operation_id="listRevisions",
    summary="A job's revisions",
    description="Every write of the job's definition, newest first: who, when, what changed, the note, and "
    "the job as written. A deleted job's history stays (its delete is its last revision). Kept 400 days, "
    "longer than any run history, so every run's `job_version` names a revision that can be read.",
    tags=["revisions"],
    responses={**ok(RevisionListOut, "A page of revisions."), **problems.problem_responses(400, 404, 422)},
)
def list_revisions(
    job_id: str,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Cursor = None,
) -> Response[RevisionListOut]:
    page = components().revision_service().history(current_owner(request), job_id, limit, cursor)
    return json_response(
        RevisionListOut(items=[RevisionOut.of(r) for r in page.revisions], next_cursor=page.next_cursor)
    )


@router.get(
    "/jobs/<job_id>/revisions/<revision>",
    operation_id="getRevision",
    summary="One revision of a job",
    tags=["revisions"],
    responses={**ok(RevisionOut, "The revision."), **problems.problem_responses(404, 422)},
)
def get_revision(job_id: str, revision: int, request: Request) -> Response[RevisionOut]:
    found = components().revision_service().revision(current_owner(request), job_id, revision)
    return json_response(RevisionOut.of(found))


@router.get(
    "/jobs/<job_id>/diff",
    operation_id="diffRevisions",
    summary="What changed between two revisions of a job",
    description="Field by field (`schedule.expression`, `target.config`, ...), from revision `from` to `to`.",
    tags=["revisions"],
    responses={**ok(RevisionDiffOut, "The changes."), **problems.problem_responses(404, 422)},
)
def diff_revisions(
    job_id: str,
    request: Request,
    from_revision: Annotated[int, Query(alias="from", ge=1, description="The earlier revision.")],
    to_revision: Annotated[int, Query(alias="to", ge=1, description="The later revision.")],
) -> Response[RevisionDiffOut]:
    service = components().revision_service()
    old, new, changes = service.diff(current_owner(request), job_id, from_revision, to_revision)
    return json_response(RevisionDiffOut.of(old, new, changes))


@router.post(
    "/jobs/<job_id>/rollback",
    operation_id="rollbackJob",
    summary="Write a job's definition at an earlier revision back",
    description="A new revision (action `rollback`, its note required) with every field a person sets as "
    "that revision had it: schedule, target, policies, alerts, name, tags... The job's state stays (pause "
    f"and resume say whether it runs). Checked as any edit is. {RUN_RULE}",
    tags=["revisions"],
    responses={
        **ok(JobOut, "The job, rolled back.", etag_header=True, links=JOB_LINKS),
        **problems.problem_responses(400, 403, 404, 412, 413, 415),
    },
)
def rollback_job(
    job_id: str, body: RollbackIn, request: Request, if_match: IfMatch = None
) -> Response[JobOut]:
    owner = current_owner(request)
    version = expected_version(if_match, owner, job_id)
    job = jobs().rollback(
        owner, job_id, body.revision, components().revision_reader, version, author(request, owner, body.note)
    )
    return job_response(JobOut.of(job), job)


@router.get(
    "/audit",
    operation_id="listAudit",
    summary="The caller's audit log",
    description="Every write of the caller's jobs (deleted ones too), newest first: who, what, when, which "
    "fields, why. Operator actions on them are there, named by the operator. Kept 400 days.",
    tags=["revisions"],
    responses={**ok(RevisionListOut, "A page of the audit log."), **problems.problem_responses(400, 422)},
)
def list_audit(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Cursor = None,
) -> Response[RevisionListOut]:
    page = components().revision_service().audit(current_owner(request), limit, cursor)
    items = [RevisionOut.of(r, with_definition=False) for r in page.revisions]
    return json_response(RevisionListOut(items=items, next_cursor=page.next_cursor))


@router.get(
    "/health", operation_id="health", summary="Health", tags=["service"], responses=ok(HealthOut, "Serving.")
)
def health() -> Response[HealthOut]:
    return json_response(HealthOut())


# --- the operator scope ----------------------------------------------------------------------------------


def _operator(request: Request) -> str:
    """The caller, if it holds the operator scope (context `operators`): 403 otherwise."""
    who = current_owner(request)
    if who not in components().settings.operators:
        raise ApiProblem(HTTPStatus.FORBIDDEN, f"{who} does not hold the operator scope")
    return who


def _record(
    operator: str, action: str, owner: str, job_id: str | None = None, note: str | None = None
) -> None:
    """Every use of the operator scope, recorded: who, what, whose, why (the API's log, `operator action`,
    and the OperatorActions metric)."""
    logger.info(
        "operator action",
        extra={"operator": operator, "action": action, "owner": owner, "job_id": job_id, "note": note},
    )
    metrics.add_metric(name="OperatorActions", unit=MetricUnit.Count, value=1)


@router.get(
    "/operator/jobs",
    operation_id="operatorListJobs",
    summary="List any owner's jobs (operator)",
    description="The jobs of `owner`, for a caller with the operator scope; each use is recorded.",
    tags=["operator"],
    responses={**ok(JobListOut, "A page of the owner's jobs."), **problems.problem_responses(400, 403, 422)},
)
def operator_list_jobs(
    request: Request,
    owner: Annotated[str, Query(min_length=1, max_length=MAX_OWNER_CHARS, description="Whose jobs.")],
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Cursor = None,
) -> Response[JobListOut]:
    operator = _operator(request)
    page = jobs().list(owner, JobQuery(limit=limit, cursor=cursor))
    _record(operator, "list", owner)
    return json_response(JobListOut(items=[JobOut.of(j) for j in page.jobs], next_cursor=page.next_cursor))


@router.post(
    "/operator/jobs/<job_id>/pause",
    operation_id="operatorPauseJob",
    summary="Pause any owner's job (operator)",
    description=f"As the owner's own pause, for a caller with the operator scope; the note is recorded with "
    f"who paused it. {RUN_RULE}",
    tags=["operator"],
    responses={**ok(JobOut, "The paused job."), **problems.problem_responses(400, 403, 404, 413, 415, 422)},
)
def operator_pause_job(job_id: str, body: OperatorNoteIn, request: Request) -> Response[JobOut]:
    operator = _operator(request)
    owner = jobs().owner_of_job(job_id)
    job = jobs().pause(owner, job_id, by=Author(operator, body.note))
    _record(operator, "pause", owner, job_id, body.note)
    return job_response(JobOut.of(job), job)


@router.post(
    "/operator/jobs/<job_id>/resume",
    operation_id="operatorResumeJob",
    summary="Resume any owner's job (operator)",
    description="As the owner's own resume, for a caller with the operator scope; the note is recorded.",
    tags=["operator"],
    responses={**ok(JobOut, "The resumed job."), **problems.problem_responses(400, 403, 404, 413, 415, 422)},
)
def operator_resume_job(job_id: str, body: OperatorNoteIn, request: Request) -> Response[JobOut]:
    operator = _operator(request)
    owner = jobs().owner_of_job(job_id)
    result = jobs().resume(owner, job_id, by=Author(operator, body.note))
    _tell_resumed(result)
    job = result.job
    _record(operator, "resume", owner, job_id, body.note)
    return job_response(JobOut.of(job), job)


@router.get(
    "/signing-keys",
    operation_id="listSigningKeys",
    summary="Your signing keys",
    description="The keys that sign the caller's HTTP target calls (`X-Tickwork-Signature`, scheme v2), "
    "the current one first; during a rotation's overlap the previous one too. Each owner has its own: a "
    "receiver that verifies with them rejects calls made for any other owner.",
    tags=["service"],
    responses={**ok(SigningKeysOut, "The caller's keys."), **problems.problem_responses(422)},
)
def list_signing_keys(request: Request) -> Response[SigningKeysOut]:
    owner = current_owner(request)
    keys = [signing.owner_key(secret, owner) for secret in components().signing_secrets()]
    items = [
        SigningKeyOut(key_id=signing.key_id(key), key=key.hex(), current=index == 0)
        for index, key in enumerate(keys)
    ]
    return json_response(SigningKeysOut(items=items))


@router.get("/ui", include_in_schema=False)
def console_page() -> Response[str]:
    """The web console: one page that calls this API from the browser with the caller's token."""
    return _console_file("index.html")


@router.get("/ui/<name>", include_in_schema=False)
def console_file(name: str) -> Response[Any]:
    if name == "config.json":
        settings = components().settings
        dashboard = None
        if settings.dashboard_name:
            dashboard = (
                f"https://{settings.region}.console.aws.amazon.com/cloudwatch/home?region={settings.region}"
                f"#dashboards:name={settings.dashboard_name}"
            )
        body = {"auth": settings.caller_auth, "local": settings.mode == "local", "dashboard_url": dashboard}
        return Response(200, "application/json", body=json.dumps(body), headers=dict(ui.SECURITY_HEADERS))
    return _console_file(name)


def _console_file(name: str) -> Response[Any]:
    text = ui.asset(name)
    if text is None:
        raise ApiProblem(HTTPStatus.NOT_FOUND, f"/ui/{name} is not part of the console")
    return Response(200, ui.ASSETS[name], body=text, headers=dict(ui.SECURITY_HEADERS))


@router.get("/openapi.json", include_in_schema=False)
def openapi_document() -> Response[Any]:
    return Response(status_code=200, content_type="application/json", body=openapi_json())


def openapi_json() -> str:
    """The OpenAPI document of this API, as committed in docs/openapi.json."""
    document = named_target_configs(json.loads(build_app().get_openapi_json_schema()))
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


# --- the Lambda entry point --------------------------------------------------------------------------------


@metrics.log_metrics
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler(capture_response=False)  # responses carry owners' job data
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    refused = problems.precheck(event)
    if refused is not None:
        return refused
    head = _method(event) == "HEAD"
    if head:  # HEAD is GET without the body (HTTP semantics); the routes declare GET only
        event = {
            **event,
            "requestContext": {
                **event["requestContext"],
                "http": {**event["requestContext"]["http"], "method": "GET"},
            },
        }
    with _RESOLVERS.lease() as resolver:  # this request's own: see `build_app`
        response = resolver.resolve(event, context)
    if head:
        response["body"] = ""
    if response.get("body") is None:
        # A 204 has no body. API Gateway takes `null` or "", but MiniStack's gateway fails on `null`.
        response["body"] = ""
    return response


def _method(event: Mapping[str, Any]) -> str:
    context = event.get("requestContext")
    http = context.get("http") if isinstance(context, Mapping) else None
    return str(http.get("method", "")).upper() if isinstance(http, Mapping) else ""


def main(argv: list[str]) -> int:
    document = openapi_json()
    if argv:
        Path(argv[0]).write_text(document)
    else:
        sys.stdout.write(document)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
