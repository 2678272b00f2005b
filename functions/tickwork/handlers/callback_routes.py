"""The callback routes a callback run's target calls: POST /callbacks/{token}/complete and
/callbacks/{token}/heartbeat. The signed token is the credential (it names one attempt of one run), so
these routes take no caller identity: in AWS they are open routes of the HTTP API, throttled on their own."""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path
from pydantic import BaseModel, ConfigDict, Field

from tickwork.api.problems import PROBLEM_DESCRIPTIONS, PROBLEM_JSON, ApiProblem, Problem
from tickwork.domain.errors import ValidationError
from tickwork.domain.models import Run
from tickwork.domain.timekeys import format_instant_ms
from tickwork.handlers.runtime import components
from tickwork.services.callbacks import Callbacks, Report

router = Router()  # type: ignore[no-untyped-call]  # Powertools: __init__ has no annotations

Token = Annotated[
    str,
    Path(
        min_length=10,
        max_length=2048,
        pattern=r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$",
        description="The token of the URL the call carried (X-Tickwork-Completion-Url or -Heartbeat-Url).",
    ),
]


class CompletionIn(BaseModel):
    """The outcome of the work the target accepted with a 202."""

    model_config = ConfigDict(extra="forbid")
    outcome: Literal["succeeded", "failed"]
    status: str = Field(
        default="callback", min_length=1, max_length=64, description="Short, e.g. an exit code"
    )
    detail: str = Field(default="", max_length=1024)
    retryable: bool = Field(default=True, description="A failure worth another attempt (ignored on success)")


class CallbackOut(BaseModel):
    run_id: str
    attempt: int
    state: str
    lease_expires_at: str | None
    heartbeat_at: str | None

    @classmethod
    def of(cls, run: Run, state: str | None = None) -> CallbackOut:
        def instant(value: Any) -> str | None:
            return None if value is None else format_instant_ms(value)

        return cls(
            run_id=run.run_id,
            attempt=run.attempt,
            state=state or run.state.value,
            lease_expires_at=instant(run.lease_expires_at),
            heartbeat_at=instant(run.heartbeat_at),
        )


def _problems(*codes: int | dict[int, str]) -> dict[int, Any]:
    """Error answers of a callback route: the shared ones, 403 for a token this deployment did not sign, and
    the route's own 409 (no 401: the token is the credential)."""
    described: dict[int, str] = {403: "Not a callback token of this deployment."}
    for code in codes:
        described.update(code if isinstance(code, dict) else {code: PROBLEM_DESCRIPTIONS[code]})
    return {
        code: {"description": text, "content": {PROBLEM_JSON: {"model": Problem}}}
        for code, text in sorted(described.items())
    }


def callbacks() -> Callbacks:
    parts = components()
    return parts.callbacks()


def _json(body: BaseModel, status: HTTPStatus) -> Response[Any]:
    return Response(status_code=status, content_type="application/json", body=body.model_dump(mode="json"))


@router.post(
    "/callbacks/<token>/complete",
    operation_id="completeRun",
    summary="Report a callback run's outcome",
    tags=["callbacks"],
    security=[],
    responses={
        202: {
            "description": "Taken: an executor records the outcome within seconds.",
            "content": {"application/json": {"model": CallbackOut}},
        },
        **_problems(
            400, 404, 413, 415, 422, 503, {409: "That attempt is over: a newer one, or the run ended."}
        ),
    },
)
def complete(token: Token, body: CompletionIn) -> Response[Any]:
    report = Report(
        ok=body.outcome == "succeeded", status=body.status, detail=body.detail, retryable=body.retryable
    )
    try:
        run = callbacks().complete(token, report)
    except ValidationError as error:
        raise ApiProblem(HTTPStatus.FORBIDDEN, str(error)) from None
    return _json(CallbackOut.of(run, state="completing"), HTTPStatus.ACCEPTED)


@router.post(
    "/callbacks/<token>/heartbeat",
    operation_id="heartbeatRun",
    summary="Tell Tickwork a callback run is still at work",
    tags=["callbacks"],
    security=[],
    responses={
        200: {
            "description": "The attempt's lease, moved.",
            "content": {"application/json": {"model": CallbackOut}},
        },
        **_problems(400, 404, 422, 503, {409: "That attempt is over, or its timeout has passed."}),
    },
)
def heartbeat(token: Token) -> Response[Any]:
    try:
        run = callbacks().heartbeat(token)
    except ValidationError as error:
        raise ApiProblem(HTTPStatus.FORBIDDEN, str(error)) from None
    return _json(CallbackOut.of(run), HTTPStatus.OK)
