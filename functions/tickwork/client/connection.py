"""How the `tickwork` CLI reaches an API: a local instance (its URL and token from the state dir), or a
deployed stack (its `ApiUrl` output; SigV4 from the standard credential chain, or a JWT as a bearer token).
Plain HTTP over keep-alive connections, one per thread; every answer that is not 2xx is an ApiError carrying
the problem the API sent."""

from __future__ import annotations

import http.client
import json
import os
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tickwork.settings import LOCAL_API_FILE

DEFAULT_STATE_DIR = Path(".tickwork")
TIMEOUT_SECONDS = 30.0


class ConnectionSetupError(Exception):
    """No API to talk to: nothing running at the state dir, no stack output, a bad URL (exit 2)."""


class ApiError(Exception):
    """The API answered with a problem (exit 1 with its detail), or could not be reached."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
        super().__init__(f"{status} {problem.get('title', '')}: {detail}".strip())

    @property
    def field_errors(self) -> list[dict[str, Any]]:
        return list(self.problem.get("errors") or [])


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True, slots=True)
class Endpoint:
    url: str  # base URL, without a trailing slash
    token: str | None = None  # bearer: a local token or a JWT
    sigv4_region: str | None = None  # sign with SigV4 for execute-api in this region (IAM auth)

    def describe(self) -> str:
        auth = "SigV4" if self.sigv4_region else ("bearer token" if self.token else "no credentials")
        return f"{self.url} ({auth})"


def local_endpoint(state_dir: Path) -> Endpoint:
    """The instance `tickwork local --state-dir state_dir` is running (it writes run/api.json at start)."""
    path = state_dir / LOCAL_API_FILE
    try:
        found = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConnectionSetupError(
            f"no running `tickwork local` found in {state_dir} ({path} is missing): start one with "
            "`make run`, or pass --url and --token"
        ) from None
    except (OSError, ValueError) as error:
        raise ConnectionSetupError(f"cannot read {path}: {error}") from None
    return Endpoint(url=str(found["url"]).rstrip("/"), token=found.get("token"))


def stack_endpoint(stack: str, region: str | None) -> str:
    """The deployed stack's `ApiUrl` output (CloudFormation, the standard credential chain)."""
    import boto3  # only for deployed stacks: a local instance needs no AWS client
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client = boto3.client("cloudformation", region_name=region)
        stacks = client.describe_stacks(StackName=stack)["Stacks"]
    except (BotoCoreError, ClientError) as error:
        raise ConnectionSetupError(f"cannot read stack {stack!r}: {error}") from error
    for output in stacks[0].get("Outputs", []) if stacks else []:
        if output.get("OutputKey") == "ApiUrl":
            return str(output["OutputValue"]).rstrip("/")
    raise ConnectionSetupError(f"stack {stack!r} has no ApiUrl output")


def resolve_endpoint(
    *,
    url: str | None,
    token: str | None,
    state_dir: Path | None,
    stack: str | None,
    region: str | None,
    sigv4: bool,
) -> Endpoint:
    """Flags first, then the environment (TICKWORK_URL, TICKWORK_TOKEN), then a local instance."""
    url = url or os.environ.get("TICKWORK_URL")
    token = token or os.environ.get("TICKWORK_TOKEN")
    if stack:
        url = stack_endpoint(stack, region)
    if url:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConnectionSetupError(f"--url {url!r} is not an http(s) URL")
        if sigv4 or (stack and not token):
            region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            if not region:
                raise ConnectionSetupError("SigV4 needs a region: --region or AWS_REGION")
            return Endpoint(url=url.rstrip("/"), sigv4_region=region)
        return Endpoint(url=url.rstrip("/"), token=token)
    local = local_endpoint(state_dir or DEFAULT_STATE_DIR)
    return Endpoint(url=local.url, token=token or local.token)


@dataclass
class ApiClient:
    """JSON over HTTP to one API; safe to share between threads (each keeps its own connection)."""

    endpoint: Endpoint
    timeout: float = TIMEOUT_SECONDS
    _local: threading.local = field(default_factory=threading.local, repr=False)

    def _connection(self) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            parsed = urllib.parse.urlsplit(self.endpoint.url)
            kind = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
            connection = kind(parsed.netloc, timeout=self.timeout)
            self._local.connection = connection
        return connection

    def _base_path(self) -> str:
        return urllib.parse.urlsplit(self.endpoint.url).path.rstrip("/")

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """One call; ApiError for any answer that is not 2xx (or when the API cannot be reached)."""
        wanted = {k: v for k, v in (query or {}).items() if v is not None}
        target = self._base_path() + path + (f"?{urllib.parse.urlencode(wanted)}" if wanted else "")
        payload = None if body is None else json.dumps(body).encode()
        sent = {"Accept": "application/json", **(headers or {})}
        if payload is not None:
            sent["Content-Type"] = "application/json"
        sent.update(self._auth(method, target, payload, sent))
        for attempt in range(2):
            connection = self._connection()
            try:
                connection.request(method, target, body=payload, headers=sent)
                response = connection.getresponse()
                raw = response.read()
                break
            except (http.client.HTTPException, OSError) as error:
                connection.close()
                self._local.connection = None
                # A kept-alive connection the server closed meanwhile fails at once: one fresh try.
                if attempt == 1:
                    raise ApiError(
                        0, {"title": "unreachable", "detail": f"{self.endpoint.url}: {error}"}
                    ) from error
        answer_headers = {k: v for k, v in response.getheaders()}
        content = raw.decode() if raw else ""
        parsed: Any = content
        if content and "json" in answer_headers.get("Content-Type", ""):
            parsed = json.loads(content)
        if not 200 <= response.status < 300:
            problem = (
                parsed if isinstance(parsed, dict) else {"title": response.reason, "detail": content[:500]}
            )
            raise ApiError(response.status, problem)
        return Answer(response.status, answer_headers, parsed)

    def _auth(
        self, method: str, target: str, payload: bytes | None, headers: dict[str, str]
    ) -> dict[str, str]:
        if self.endpoint.sigv4_region:
            return _sigv4_headers(self.endpoint, method, target, payload, headers)
        if self.endpoint.token:
            return {"Authorization": f"Bearer {self.endpoint.token}"}
        return {}

    def pages(self, path: str, query: dict[str, Any] | None = None, *, limit: int = 100) -> Any:
        """Every item of a paginated listing, a page at a time."""
        cursor = None
        while True:
            page = self.request("GET", path, query={**(query or {}), "limit": limit, "cursor": cursor}).body
            yield from page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return


def _sigv4_headers(
    endpoint: Endpoint, method: str, target: str, payload: bytes | None, headers: dict[str, str]
) -> dict[str, str]:
    import boto3
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    credentials = boto3.Session().get_credentials()
    region = endpoint.sigv4_region
    if region is None:
        raise ConnectionSetupError("SigV4 needs a region: --region or AWS_REGION")
    if credentials is None:
        raise ConnectionSetupError("SigV4: no AWS credentials found (the standard credential chain is empty)")
    parsed = urllib.parse.urlsplit(endpoint.url)
    request = AWSRequest(
        method=method, url=f"{parsed.scheme}://{parsed.netloc}{target}", data=payload or b"", headers=headers
    )
    SigV4Auth(credentials.get_frozen_credentials(), "execute-api", region).add_auth(request)
    return {k: v for k, v in request.headers.items() if k.lower().startswith(("authorization", "x-amz"))}
