"""The HTTP API on localhost: a WSGI app that turns each request into the API Gateway HTTP API (payload v2)
event the Lambda handler receives in AWS, calls that handler, and writes its answer back.

Identity: `Authorization: Bearer <token>` is looked up in the tokens -> owner mapping given to the app, and
the owner is put where API Gateway's IAM authorizer puts the caller (`requestContext.authorizer.iam.userArn`).
No token (or an unknown one) means no identity: the handler answers 401. Swagger UI is served by the handler
itself at /docs.
"""

from __future__ import annotations

import base64
import json
import os
import selectors
import socketserver
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from tickwork.api.problems import PROBLEM_JSON, Problem
from tickwork.domain.clock import Clock, SystemClock

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

Handler = Callable[[dict[str, Any], Any], Mapping[str, Any]]

# Read at most this much of a body: one byte past the API's 64 KiB cap is enough for it to answer 413.
MAX_READ_BYTES = 64 * 1024 + 1
_ACCOUNT = "000000000000"
_PATH_SAFE = "/:@!$&'()*+,;=-._~"


@dataclass(frozen=True, slots=True)
class LocalContext:
    """The parts of a Lambda context that Powertools reads."""

    aws_request_id: str
    function_name: str = "tickwork-api-local"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = f"arn:aws:lambda:local:{_ACCOUNT}:function:tickwork-api-local"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


HEALTH_PATH = "/ui/health.json"


class HttpApiApp:
    """WSGI app: request -> API Gateway v2 event -> handler -> response."""

    def __init__(
        self,
        handler: Handler,
        tokens: Mapping[str, str],
        clock: Clock | None = None,
        health_file: Path | None = None,
    ) -> None:
        self._handler = handler
        self._tokens = dict(tokens)
        self._clock = clock or SystemClock()  # only for the event's request time, as API Gateway stamps it
        # The runtime's status for the console's health page (no Lambda has it: in AWS the page links to
        # the CloudWatch dashboard instead). It counts every owner's jobs and runs, so only the instance's
        # operator reads it: the owner of its first token (the one `tickwork local` gives the CLI).
        self._health_file = health_file
        self._operator = next(iter(self._tokens.values()), None)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == HEALTH_PATH and self._health_file is not None:
            return self._health(environ, start_response)
        response = self._handler(self.event_for(environ), LocalContext(aws_request_id=str(uuid.uuid4())))
        status = int(response.get("statusCode", 200))
        headers = [(str(k), str(v)) for k, v in (response.get("headers") or {}).items()]
        headers.extend(("Set-Cookie", str(cookie)) for cookie in response.get("cookies") or ())
        raw = response.get("body") or ""
        body = base64.b64decode(raw) if response.get("isBase64Encoded") else str(raw).encode("utf-8")
        if not any(name.lower() == "content-length" for name, _ in headers):
            headers.append(("Content-Length", str(len(body))))
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Unknown"
        start_response(f"{status} {phrase}", headers)
        return [body]

    def _health(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """The whole instance's counters, for its operator only (they add up every owner's jobs and runs)."""
        owner = self.owner_for(environ.get("HTTP_AUTHORIZATION"))
        if owner is None:
            status, kind, body = _problem(HTTPStatus.UNAUTHORIZED)
        elif owner != self._operator:
            status, kind, body = _problem(
                HTTPStatus.FORBIDDEN,
                "The instance's health counts every owner's jobs and runs: only its operator (the owner of "
                "its first --token) sees it.",
            )
        else:
            assert self._health_file is not None
            try:
                health = json.loads(self._health_file.read_text())
                status, kind, body = HTTPStatus.OK, "application/json", health
            except (OSError, ValueError):
                status, kind, body = _problem(
                    HTTPStatus.SERVICE_UNAVAILABLE, "the runtime has not written its status yet"
                )
        raw = json.dumps(body).encode()
        headers = [("Content-Type", kind), ("Content-Length", str(len(raw)))]
        headers += [("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-store")]
        start_response(f"{status.value} {status.phrase}", headers)
        return [raw]

    def owner_for(self, authorization: str | None) -> str | None:
        if not authorization:
            return None
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self._tokens.get(token.strip())

    def event_for(self, environ: WSGIEnvironment) -> dict[str, Any]:
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        # WSGI hands the path percent-decoded as latin-1; API Gateway's rawPath is the path as sent.
        path = str(environ.get("PATH_INFO", "/")).encode("latin-1").decode("utf-8", errors="replace")
        raw_path = quote(path or "/", safe=_PATH_SAFE)
        query = str(environ.get("QUERY_STRING", ""))
        headers: dict[str, str] = {}
        for key, value in environ.items():
            if key.startswith("HTTP_"):
                headers[key[5:].replace("_", "-").lower()] = str(value)
        for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            if environ.get(key):
                headers[key.replace("_", "-").lower()] = str(environ[key])
        owner = self.owner_for(headers.pop("authorization", None))
        body, is_base64 = self._body(environ)
        now = self._clock.now()
        request_context: dict[str, Any] = {
            "accountId": _ACCOUNT,
            "apiId": "local",
            "domainName": str(environ.get("HTTP_HOST", "127.0.0.1")),
            "domainPrefix": "local",
            "http": {
                "method": method,
                "path": path,
                "protocol": str(environ.get("SERVER_PROTOCOL", "HTTP/1.1")),
                "sourceIp": str(environ.get("REMOTE_ADDR", "127.0.0.1")),
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        }
        if owner is not None:
            request_context["authorizer"] = {
                "iam": {"accountId": _ACCOUNT, "userArn": owner, "userId": owner}
            }
        event: dict[str, Any] = {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": raw_path,
            "rawQueryString": query,
            "headers": headers,
            "requestContext": request_context,
            "isBase64Encoded": is_base64,
        }
        if query:
            params: dict[str, str] = {}
            for name, value in parse_qsl(query, keep_blank_values=True):
                # API Gateway v2 joins repeated parameters with commas.
                params[name] = f"{params[name]},{value}" if name in params else value
            event["queryStringParameters"] = params
        if body is not None:
            event["body"] = body
        return event

    @staticmethod
    def _body(environ: WSGIEnvironment) -> tuple[str | None, bool]:
        if "chunked" in str(environ.get("HTTP_TRANSFER_ENCODING", "")).lower():
            raw = _read_chunked(environ["wsgi.input"], MAX_READ_BYTES)
            if not raw:
                return None, False
        else:
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length <= 0:
                return None, False
            raw = environ["wsgi.input"].read(min(length, MAX_READ_BYTES))
        try:
            return raw.decode("utf-8"), False
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii"), True


def _read_chunked(stream: Any, limit: int) -> bytes:
    """A `Transfer-Encoding: chunked` body (wsgiref hands it over still chunked), at most `limit` bytes
    (one past the API's cap is enough for it to answer 413). A malformed chunk size ends the body."""
    body = bytearray()
    while len(body) < limit:
        line = stream.readline(1024)
        try:
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        except ValueError:
            break
        if size <= 0:
            break
        body += stream.read(min(size, limit - len(body)))
        stream.readline(8)  # the CRLF after the chunk
    return bytes(body)


def _problem(status: HTTPStatus, detail: str | None = None) -> tuple[HTTPStatus, str, dict[str, Any]]:
    """An answer the local server gives itself, in the API's problem+json shape."""
    body = Problem(title=status.phrase, status=status.value, detail=detail).model_dump(exclude_none=True)
    return status, PROBLEM_JSON, body


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The server's own refusals (414 URI too long, 431 headers too large, 400 bad request line) in
        problem+json like every answer of the API, not http.server's HTML page."""
        try:
            status = HTTPStatus(code)
            title, detail = status.phrase, explain or status.description
        except ValueError:
            title, detail = "Error", explain or ""
        body = json.dumps(
            {"type": "about:blank", "title": title, "status": code, "detail": message or detail}
        ).encode("utf-8")
        self.send_response(code, message)
        self.send_header("Content-Type", "application/problem+json")
        self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and code >= 200 and code not in (204, 304):
            self.wfile.write(body)


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    # socketserver's default backlog is 5: a burst of parallel clients got connection resets.
    request_queue_size = 256


def make_api_server(app: HttpApiApp, host: str = "127.0.0.1", port: int = 8080) -> WSGIServer:
    """A threaded wsgiref server for the app (loopback by default); port 0 picks a free port."""
    return make_server(host, port, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)


def serve_until(server: WSGIServer, stop: threading.Event) -> None:
    """Serve until `stop` is set, then close the socket. The accepting thread sleeps until a connection
    comes or the stop wakes it: socketserver's `serve_forever` wakes every poll interval to look for a
    shutdown, and twice a second was most of an idle API process's CPU."""
    wake_read, wake_write = os.pipe()
    thread = threading.Thread(target=_accept_until_woken, args=(server, wake_read), daemon=True)
    thread.start()
    stop.wait()
    os.write(wake_write, b"x")
    thread.join(timeout=5)
    server.server_close()
    os.close(wake_write)
    if not thread.is_alive():  # a thread still in `select` keeps its end: closing it under it is undefined
        os.close(wake_read)


def _accept_until_woken(server: WSGIServer, wake_read: int) -> None:
    # handle_request never waits on its own (a connection reset before its accept leaves nothing to take).
    server.timeout = 0
    with selectors.DefaultSelector() as selector:
        selector.register(server, selectors.EVENT_READ)
        selector.register(wake_read, selectors.EVENT_READ)
        while True:
            ready = [key.fileobj for key, _ in selector.select()]
            if wake_read in ready:
                return
            server.handle_request()  # the connection waiting: accepted at once, served on its own thread
