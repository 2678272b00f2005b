"""HTTP(S) targets over the standard library's sockets, with an SSRF guard on the address actually connected
to.

The call resolves the host once, checks every resolved address, and connects the socket to a checked address
itself; the request is written and the answer read over that socket (http_wire.py). So a DNS answer that
changes between check and connect (rebinding) cannot redirect the call. TLS verifies the certificate against
the URL's hostname (SNI too), not the IP. Redirects are never followed.
"""

from __future__ import annotations

import contextlib
import heapq
import http.client
import ipaddress
import json
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from tickwork import signing
from tickwork.adapters.targets._common import Stopwatch, checked_target, invalid_target
from tickwork.adapters.targets.http_wire import AnswerReader, UnsendableRequest, request_bytes
from tickwork.adapters.targets.ssrf import IPAddress, blocked_reason, parse_networks
from tickwork.domain.models import Target
from tickwork.domain.secrets import (
    REDACTED,
    SECRET_HEADERS,
    SECRET_REFS,
    HeaderSecretStore,
    SecretUnavailableError,
)
from tickwork.domain.targets import Invocation, TargetResult, http_status_retryable, invocation_headers

MAX_RESPONSE_BYTES = 64 * 1024  # read at most this much of a response; the result keeps 1 KiB of it
_DEFAULT_PORTS = {"http": 80, "https": 443}  # the Host header names a port only when it is not these
USER_AGENT = "Tickwork/1 (+https://github.com/tickwork)"
SSRF_BLOCKED = "SSRFBlocked"
NAME_RESOLUTION_ERROR = "NameResolutionError"
TIMEOUT_ERROR = "TimeoutError"
SECRET_UNAVAILABLE = "SecretUnavailable"

Resolver = Callable[[str, int], Sequence[tuple[int, IPAddress]]]


@dataclass(frozen=True, slots=True)
class _Destination:
    scheme: str
    host: str  # hostname as in the URL, brackets stripped: used for Host, SNI and certificate checks
    port: int
    path: str  # path + query, what goes on the request line


class _Blocked(Exception):
    """Raised inside the call when the guard refuses an address; becomes an SSRFBlocked result."""


class _Deadline:
    """One time budget for the whole call (resolve, connect, send, read), not per socket operation: a server
    that trickles a byte every few seconds must not keep the call alive past its timeout."""

    def __init__(self, seconds: float, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._end = monotonic() + seconds

    def remaining(self) -> float:
        left = self._end - self._monotonic()
        if left <= 0:
            raise TimeoutError("the target's timeout elapsed")
        return left


class _Alarms:
    """One thread that fires every call's watchdog at its deadline (a heap of deadlines), instead of a timer
    thread per call: at 10,000 calls in flight that is 10,000 threads fewer, and no thread start per run."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Watchdog]] = []
        self._order = 0
        self._thread: threading.Thread | None = None

    def add(self, at: float, watchdog: _Watchdog) -> None:
        with self._cond:
            self._order += 1
            heapq.heappush(self._heap, (at, self._order, watchdog))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tickwork-http-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is watchdog:
                self._cond.notify()  # the new deadline is the earliest: wake the thread to wait for it

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)  # cancelled: the call ended before its deadline
                if not self._heap:
                    self._cond.wait()
                    continue
                at, _, watchdog = self._heap[0]
                wait = at - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
            watchdog.fire()


_ALARMS = _Alarms()


class _Watchdog:
    """Shuts the connection down when the call's timeout passes, whatever the call is blocked in.

    Socket timeouts bound one socket operation, and a TLS handshake or a send takes as many operations as
    the server cares to trickle bytes: a server taking a byte every few seconds would hold the call for
    minutes under any socket timeout. At the deadline the shared alarm thread shuts the socket down, the
    blocked operation returns, and the call reports a timeout (`fired`). (Each read of the answer is also
    bounded by the time left.)
    """

    def __init__(self, seconds: float) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.fired = False
        self.done = False
        _ALARMS.add(time.monotonic() + max(0.0, seconds), self)

    def guard(self, sock: socket.socket) -> None:
        """Watch this socket from now on (the TCP socket, then the TLS socket that wraps it)."""
        with self._lock:
            self._sock = sock
            fired = self.fired
        if fired:
            _shut_down(sock)

    def cancel(self) -> None:
        with self._lock:
            self.done = True

    def fire(self) -> None:
        with self._lock:
            if self.done:
                return
            self.fired = True
            sock = self._sock
        if sock is not None:
            _shut_down(sock)


def _shut_down(sock: socket.socket) -> None:
    # The plain socket's shutdown, also for a TLS socket: it only wakes the blocked read with an end of file
    # and leaves the TLS object alone for the thread that is using it.
    with contextlib.suppress(OSError):  # already closed: nothing to wake
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def resolve(host: str, port: int) -> list[tuple[int, IPAddress]]:
    """Every (address family, address) the host resolves to; an IP literal resolves to itself without DNS."""
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        pass  # not an IP literal: ask DNS below
    else:
        return [(socket.AF_INET6 if literal.version == 6 else socket.AF_INET, literal)]
    found: list[tuple[int, IPAddress]] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        # Drop an IPv6 zone id ("fe80::1%eth0"); link-local is refused anyway.
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if (family, address) not in found:
            found.append((family, address))
    return found


def _connect(family: int, address: IPAddress, port: int, timeout: float) -> socket.socket:
    """Open a TCP connection to exactly this address (no DNS). A module function so tests can assert that no
    connection is attempted when the guard refuses."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect((str(address), port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        sock.close()
        raise
    return sock


_MIN_REDACTED = 6  # shorter values ("30", "true") would redact ordinary words of every answer


def _without(text: str, secrets: Iterable[str]) -> str:
    """`text` with each secret value replaced: whole, its credential after an auth scheme ("Bearer abc" ->
    "abc"), and as JSON and URL encoding write it."""
    forms: set[str] = set()
    for value in secrets:
        credential = value.split(" ", 1)[1] if " " in value.strip() else value
        for form in (value, credential):
            forms.update((form, json.dumps(form)[1:-1], quote(form, safe="")))
    for form in sorted((f for f in forms if len(f) >= _MIN_REDACTED), key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return text


class HttpInvoker:
    """Calls `http` targets. Every request carries the run identity headers and an HMAC signature with the
    run owner's own key over the whole request (tickwork/signing.py)."""

    def __init__(
        self,
        signing_secret: bytes,
        clock_epoch: Callable[[], float],
        allow_loopback: bool,
        allowed_networks: Sequence[str] = (),
        *,
        previous_secrets: Sequence[bytes] = (),
        secrets: Callable[[], Sequence[bytes]] | None = None,
        resolver: Resolver = resolve,
        tls_context: ssl.SSLContext | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        nonce: Callable[[], str] = lambda: secrets.token_hex(12),
        header_secrets: HeaderSecretStore | None = None,
    ) -> None:
        if not signing_secret:
            raise ValueError("HttpInvoker needs a non-empty signing secret")
        # The current secret first; a previous one (a rotation's overlap) signs too, so receivers that still
        # hold the owner's old key keep verifying until they fetch the new one.
        static = (signing_secret, *(p for p in previous_secrets if p))
        # `secrets`, when given, is asked on every call (the deployment's, re-read as they rotate).
        self._secrets = secrets or (lambda: static)
        self._nonce = nonce
        self._header_secrets = header_secrets
        self._clock_epoch = clock_epoch
        self._allow_loopback = allow_loopback
        # Parsed here so a bad CIDR fails at start-up, not on every call.
        self._allowed_networks = parse_networks(allowed_networks)
        self._resolver = resolver
        self._tls = tls_context or ssl.create_default_context()
        self._monotonic = monotonic

    def invoke(self, target: Target, invocation: Invocation) -> TargetResult:
        checked = checked_target(target, frozenset({"http"}))
        if isinstance(checked, TargetResult):
            return checked
        config = checked.config
        method: str = config["method"]
        body: bytes = config["body"].encode("utf-8")
        destination = _destination(config["url"])
        try:
            secret_headers = self._secret_headers(config, invocation.owner)
        except SecretUnavailableError as error:
            return TargetResult(False, error.retryable, SECRET_UNAVAILABLE, 0, str(error))
        headers = {
            "User-Agent": USER_AGENT,
            **config["headers"],
            **secret_headers,
            **invocation_headers(invocation),
            signing.SIGNATURE_HEADER: signing.sign(
                [signing.owner_key(secret, invocation.owner) for secret in self._secrets()],
                timestamp=int(self._clock_epoch()),
                nonce=self._nonce(),
                method=method,
                url=config["url"],
                run_id=invocation.run_id,
                attempt=invocation.attempt,
                body=body,
            ),
        }
        try:
            request = request_bytes(
                method, destination.host, destination.port, _DEFAULT_PORTS[destination.scheme],
                destination.path, headers, body,
            )  # fmt: skip
        except UnsendableRequest as error:
            return invalid_target(str(error))
        watch = Stopwatch(self._monotonic)
        deadline = _Deadline(invocation.timeout_seconds, self._monotonic)
        watchdog = _Watchdog(invocation.timeout_seconds)
        try:
            code, reason, response_body = self._exchange(destination, request, deadline, watchdog)
        except _Blocked as blocked:
            return TargetResult(False, False, SSRF_BLOCKED, watch.elapsed_ms(), str(blocked))
        except socket.gaierror as error:
            # DNS failures are often transient (resolver hiccup, record being re-created): worth a retry.
            return TargetResult(
                False, True, NAME_RESOLUTION_ERROR, watch.elapsed_ms(), f"{destination.host}: {error}"
            )
        except ssl.SSLCertVerificationError as error:
            # A certificate that does not verify will not verify on the next attempt either.
            return TargetResult(False, False, type(error).__name__, watch.elapsed_ms(), str(error))
        except TimeoutError as error:
            return TargetResult(False, True, TIMEOUT_ERROR, watch.elapsed_ms(), str(error) or "timed out")
        except (OSError, http.client.HTTPException) as error:
            # Refused, reset, unreachable, TLS failure, malformed response: the network or the server is at
            # fault, not the job's config.
            return TargetResult(
                False, True, type(error).__name__, watch.elapsed_ms(), str(error) or repr(error)
            )
        finally:
            watchdog.cancel()
        # A target that echoes a credential (a 401 quoting the token) must not get it stored on the run.
        text = _without(response_body.decode("utf-8", errors="replace"), secret_headers.values())
        if 200 <= code < 300:
            # 202 to a call that carried completion URLs: the target took the work and reports later.
            accepted = code == 202 and invocation.callback is not None
            return TargetResult(True, False, str(code), watch.elapsed_ms(), text, accepted=accepted)
        if 300 <= code < 400:
            text = f"{reason}; redirects are not followed (update the job's URL)" + (
                f": {text}" if text else ""
            )
        return TargetResult(False, http_status_retryable(code), str(code), watch.elapsed_ms(), text)

    def _secret_headers(self, config: Mapping[str, Any], owner: str) -> dict[str, str]:
        """The secret headers' values: resolved from their references now, for this call only (they are
        never written anywhere). A target never stored has its values still in `secret_headers`."""
        values: dict[str, str] = dict(config.get(SECRET_HEADERS) or {})
        refs: dict[str, str] = config.get(SECRET_REFS) or {}
        if not refs:
            return values
        store = self._header_secrets
        if store is None:
            raise SecretUnavailableError("this executor has no secret store to resolve them", retryable=False)
        return {**values, **{name: store.get(owner, reference) for name, reference in refs.items()}}

    def _exchange(
        self, destination: _Destination, request: bytes, deadline: _Deadline, watchdog: _Watchdog
    ) -> tuple[int, str, bytes]:
        try:
            answer = self._talk(destination, request, deadline, watchdog)
        except (OSError, http.client.HTTPException) as error:
            if watchdog.fired:  # the read ended because the watchdog cut the connection
                raise TimeoutError("the target's timeout elapsed") from error
            raise
        if watchdog.fired:  # a body read until the connection closed: the cut looked like its end
            raise TimeoutError("the target's timeout elapsed")
        return answer

    def _talk(
        self, destination: _Destination, request: bytes, deadline: _Deadline, watchdog: _Watchdog
    ) -> tuple[int, str, bytes]:
        sock = self._open(destination, deadline, watchdog)
        try:
            sock.settimeout(deadline.remaining())
            sock.sendall(request)
            return AnswerReader(sock, deadline.remaining).read(limit=MAX_RESPONSE_BYTES)
        finally:
            # Closing without draining an oversized body is deliberate: connections are never reused.
            sock.close()

    def _open(self, destination: _Destination, deadline: _Deadline, watchdog: _Watchdog) -> socket.socket:
        # getaddrinfo cannot be given a timeout; the system resolver's own (a few seconds) bounds it.
        addresses = self._resolver(destination.host, destination.port)
        if not addresses:
            raise socket.gaierror(f"{destination.host} resolved to no IPv4/IPv6 address")
        # Every address must pass, not just the first: otherwise a name resolving to one public and one
        # private address would be allowed and the connection attempt could land on the private one.
        for _, address in addresses:
            reason = blocked_reason(
                address, allow_loopback=self._allow_loopback, allowed_networks=self._allowed_networks
            )
            if reason is not None:
                raise _Blocked(f"{destination.host} -> {reason}; refused before connecting")
        last_error = OSError(f"could not connect to {destination.host}")
        for family, address in addresses:
            try:
                sock = _connect(family, address, destination.port, deadline.remaining())
                break
            except TimeoutError:
                raise
            except OSError as error:
                last_error = error  # try the next checked address (e.g. ::1 refused, 127.0.0.1 listening)
        else:
            raise last_error
        watchdog.guard(sock)
        if destination.scheme == "https":
            try:
                sock.settimeout(deadline.remaining())
                # Wrapping moves the file descriptor to the TLS socket: watch that before the handshake.
                tls = self._tls.wrap_socket(
                    sock, server_hostname=destination.host, do_handshake_on_connect=False
                )
            except BaseException:
                sock.close()
                raise
            watchdog.guard(tls)
            try:
                tls.do_handshake()
            except BaseException:
                tls.close()
                raise
            return tls
        return sock


def _destination(url: str) -> _Destination:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""  # validate_target guarantees a host; urlsplit strips IPv6 brackets
    port = parts.port or _DEFAULT_PORTS[scheme]
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return _Destination(scheme=scheme, host=host, port=port, path=path)
