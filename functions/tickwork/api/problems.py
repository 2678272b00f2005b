"""The one place where errors become HTTP answers: every error is application/problem+json (RFC 9457).

Routes never build error bodies; they raise domain errors (or ApiProblem for HTTP-only conditions) and the
handlers registered here answer. `precheck` refuses bodies the resolver should never parse (too large, not
UTF-8, nested beyond the JSON parser's recursion limit) before routing.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from typing import Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError as RouteNotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import BaseModel, Field

from tickwork.domain.errors import (
    ConflictError,
    NotFoundError,
    QuotaExceededError,
    TargetNotGrantedError,
    TransientStoreError,
    ValidationError,
    VersionMismatchError,
)
from tickwork.services.runs import InvalidCursorError

logger = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
MAX_BODY_BYTES = 64 * 1024
_PARAM_SOURCES = frozenset({"body", "query", "path", "header", "cookie"})


class FieldError(BaseModel):
    field: str = Field(description="The offending input, e.g. `schedule.expression` or `limit`.")
    message: str


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str = Field(default="about:blank", description="about:blank: the title is the HTTP status phrase.")
    title: str
    status: int
    detail: str | None = None
    instance: str | None = Field(default=None, description="The request path.")
    errors: list[FieldError] | None = Field(
        default=None, description="Validation problems only: one per field."
    )


class ApiProblem(Exception):
    """An HTTP condition with no domain meaning (no identity, a malformed header)."""

    def __init__(self, status: HTTPStatus, detail: str, errors: Sequence[FieldError] = ()) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = list(errors)


def problem(
    status: HTTPStatus,
    detail: str | None,
    *,
    instance: str | None,
    errors: Sequence[FieldError] = (),
    headers: Mapping[str, str] | None = None,
) -> Response[Any]:
    body = Problem(
        title=status.phrase,
        status=status.value,
        detail=detail,
        instance=instance,
        errors=list(errors) or None,
    ).model_dump(mode="json", exclude_none=True)
    return Response(
        status_code=status.value,
        content_type=PROBLEM_JSON,
        body=json.dumps(body),
        headers=dict(headers or {}),
    )


def _field_name(loc: Sequence[Any]) -> str:
    parts = [str(part) for part in loc]
    if parts and parts[0] in _PARAM_SOURCES:
        parts = parts[1:]
    return ".".join(parts) or "body"


def _validation_errors(errors: Sequence[Mapping[str, Any]]) -> list[FieldError]:
    found: list[FieldError] = []
    for error in errors:
        loc = error.get("loc") or ()
        message = str(error.get("msg") or error.get("type") or "is invalid")
        if error.get("type") == "missing":
            message = "is required"
        found.append(FieldError(field=_field_name(loc), message=message))
    return found


E = TypeVar("E", bound=Exception)


def _on(app: APIGatewayHttpResolver, error_class: type[E], answer: Callable[[E], Response[Any]]) -> None:
    app.exception_handler(error_class)(answer)


def register(app: APIGatewayHttpResolver) -> None:
    """Install the error mapping on the resolver (most specific class wins: handlers are looked up by MRO)."""

    def instance() -> str | None:
        try:
            return str(app.current_event.path)
        except (AttributeError, KeyError):  # outside a request
            return None

    def api_problem(error: ApiProblem) -> Response[Any]:
        return problem(error.status, error.detail, instance=instance(), errors=error.errors)

    def bad_cursor(error: InvalidCursorError) -> Response[Any]:
        detail = f"{error.field}: {error.message}"
        errors = [FieldError(field=error.field, message=error.message)]
        return problem(HTTPStatus.BAD_REQUEST, detail, instance=instance(), errors=errors)

    def invalid(error: ValidationError) -> Response[Any]:
        detail = f"{error.field}: {error.message}"
        errors = [FieldError(field=error.field, message=error.message)]
        return problem(HTTPStatus.UNPROCESSABLE_ENTITY, detail, instance=instance(), errors=errors)

    def invalid_request(error: RequestValidationError) -> Response[Any]:
        raw = list(error.errors())
        if any(e.get("type") == "json_invalid" for e in raw):
            return problem(HTTPStatus.BAD_REQUEST, "the body is not valid JSON", instance=instance())
        errors = _validation_errors(raw)
        detail = "; ".join(f"{e.field}: {e.message}" for e in errors[:5])
        return problem(HTTPStatus.UNPROCESSABLE_ENTITY, detail, instance=instance(), errors=errors)

    def unsupported_type(error: RequestUnsupportedContentType) -> Response[Any]:
        return problem(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send the body as application/json", instance=instance()
        )

    def not_found(error: NotFoundError) -> Response[Any]:
        return problem(HTTPStatus.NOT_FOUND, str(error), instance=instance())

    def not_granted(error: TargetNotGrantedError) -> Response[Any]:
        return problem(HTTPStatus.FORBIDDEN, str(error), instance=instance())

    def over_quota(error: QuotaExceededError) -> Response[Any]:
        return problem(HTTPStatus.FORBIDDEN, str(error), instance=instance())

    def no_route(error: RouteNotFoundError) -> Response[Any]:
        return problem(HTTPStatus.NOT_FOUND, "no such resource or method", instance=instance())

    def precondition_failed(error: VersionMismatchError) -> Response[Any]:
        return problem(HTTPStatus.PRECONDITION_FAILED, str(error), instance=instance())

    def conflict(error: ConflictError) -> Response[Any]:
        return problem(HTTPStatus.CONFLICT, str(error), instance=instance())

    def busy(error: TransientStoreError) -> Response[Any]:
        logger.warning("store throttled: %s", error)
        return problem(
            HTTPStatus.SERVICE_UNAVAILABLE,
            "storage is busy; retry shortly",
            instance=instance(),
            headers={"Retry-After": "1"},
        )

    def unexpected(error: Exception) -> Response[Any]:
        logger.exception("unhandled error")
        return problem(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error", instance=instance())

    _on(app, ApiProblem, api_problem)
    _on(app, InvalidCursorError, bad_cursor)
    _on(app, ValidationError, invalid)
    _on(app, RequestValidationError, invalid_request)
    _on(app, RequestUnsupportedContentType, unsupported_type)
    _on(app, NotFoundError, not_found)
    _on(app, TargetNotGrantedError, not_granted)
    _on(app, QuotaExceededError, over_quota)
    _on(app, RouteNotFoundError, no_route)
    _on(app, VersionMismatchError, precondition_failed)
    _on(app, ConflictError, conflict)
    _on(app, TransientStoreError, busy)
    _on(app, Exception, unexpected)


# The methods the API answers; anything else (TRACE, CONNECT, made-up verbs) is 405, never a 404.
ALLOWED_METHODS = ("GET", "HEAD", "POST", "PATCH", "PUT", "DELETE", "OPTIONS")


def precheck(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """An API Gateway response refusing the request (its method or its body) before routing, or None to
    proceed."""
    context = event.get("requestContext")
    http = context.get("http") if isinstance(context, Mapping) else None
    method = str(http.get("method", "")).upper() if isinstance(http, Mapping) else ""
    if method and method not in ALLOWED_METHODS:
        refused = _gateway(
            problem(
                HTTPStatus.METHOD_NOT_ALLOWED,
                f"{method} is not supported",
                instance=str(event.get("rawPath") or ""),
            )
        )
        refused["headers"]["Allow"] = ", ".join(ALLOWED_METHODS)
        return refused
    body = event.get("body")
    if not body:
        return None
    path = str(event.get("rawPath") or "")
    headers = event.get("headers") or {}
    content_type = next((str(v) for k, v in headers.items() if str(k).lower() == "content-type"), "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type and media_type != "application/json" and not media_type.endswith("+json"):
        return _gateway(
            problem(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send the body as application/json", instance=path)
        )
    if not isinstance(body, str):
        return _gateway(problem(HTTPStatus.BAD_REQUEST, "the body must be text", instance=path))
    if len(body) > MAX_BODY_BYTES * 2:
        return _too_large(path)
    if event.get("isBase64Encoded"):
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            return _gateway(problem(HTTPStatus.BAD_REQUEST, "the body is not valid base64", instance=path))
    else:
        try:
            raw = body.encode("utf-8")
        except UnicodeEncodeError:
            raw = b"\xff"  # a lone surrogate: not text
    if len(raw) > MAX_BODY_BYTES:
        return _too_large(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _gateway(problem(HTTPStatus.BAD_REQUEST, "the body is not UTF-8 text", instance=path))
    try:
        parsed = json.loads(text)
    except RecursionError:
        return _gateway(problem(HTTPStatus.BAD_REQUEST, "the body is nested too deeply", instance=path))
    except json.JSONDecodeError:
        return None  # not JSON: the resolver answers (400, or 415 for another content type)
    except ValueError as error:
        # JSON, but Python refuses to read it: an integer of more than 4,300 digits (int_max_str_digits).
        return _gateway(
            problem(
                HTTPStatus.BAD_REQUEST, f"the body holds a number that cannot be read: {error}", instance=path
            )
        )
    try:
        json.dumps(parsed).encode("utf-8")
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, RecursionError):
        return _gateway(
            problem(
                HTTPStatus.BAD_REQUEST, "the body contains invalid Unicode (lone surrogates)", instance=path
            )
        )
    return None


def _too_large(path: str) -> dict[str, Any]:
    return _gateway(
        problem(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            f"the body is larger than {MAX_BODY_BYTES} bytes (64 KiB)",
            instance=path,
        )
    )


def _gateway(response: Response[Any]) -> dict[str, Any]:
    headers = {"Content-Type": PROBLEM_JSON, **response.headers}
    return {
        "statusCode": response.status_code,
        "headers": {k: str(v) for k, v in headers.items()},
        "body": response.body,
        "isBase64Encoded": False,
    }


PROBLEM_DESCRIPTIONS: Mapping[int, str] = {
    400: "Malformed request: bad JSON, a cursor this API did not issue.",
    401: "No caller identity (API Gateway authorizer context, or a local bearer token).",
    403: "Forbidden: the job's target is not granted to its owner, a quota of the owner's would be exceeded "
    "(the detail names it), or the caller lacks the operator scope.",
    404: "No such job or run, or it belongs to another owner.",
    409: "Conflict: the Idempotency-Key was used for a different request.",
    412: "If-Match names a version the job is no longer at.",
    413: "Body larger than 64 KiB.",
    415: "Body is not application/json.",
    422: "Validation failed; `errors` names each field.",
    503: "Storage throttled; retry after the Retry-After delay.",
}


def problem_responses(*codes: int) -> dict[int, OpenAPIResponse]:
    """OpenAPI entries for error answers (always with 401, 422 and 503)."""
    return {
        code: {
            "description": PROBLEM_DESCRIPTIONS[code],
            "content": {PROBLEM_JSON: {"model": Problem}},
        }
        for code in sorted({401, 422, 503, *codes})
    }
