"""The HTTP invoker against a real threaded server on 127.0.0.1 (local mode: loopback allowed)."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tickwork.adapters.targets.http import HttpInvoker, Resolver, resolve
from tickwork.adapters.targets.ssrf import IPAddress
from tickwork.domain.models import Target
from tickwork.domain.targets import MAX_DETAIL_BYTES
from tickwork.signing import SIGNATURE_HEADER, key_id, owner_key, verify

from .conftest import EPOCH, SECRET, RecordingServer, invocation

# The HTTP invoker against a real server on loopback.
pytestmark = pytest.mark.network


def local_invoker(resolver: Resolver = resolve) -> HttpInvoker:
    return HttpInvoker(SECRET, clock_epoch=lambda: float(EPOCH), allow_loopback=True, resolver=resolver)


def http_target(url: str, **config: object) -> Target:
    return Target("http", {"url": url, **config})


def test_request_carries_run_identity_and_a_valid_signature(server: RecordingServer) -> None:
    body = '{"report": "daily"}'
    target = http_target(server.url("/status/200?x=1"), method="PUT", body=body, headers={"X-Custom": "yes"})

    result = local_invoker().invoke(target, invocation(attempt=2))

    assert result.ok and result.status == "200" and not result.retryable
    assert result.detail == '{"status": 200}'
    [request] = server.requests
    assert (request.method, request.path, request.body) == ("PUT", "/status/200?x=1", body.encode())
    headers = request.headers
    assert headers["idempotency-key"] == "job-1:20261202T120500Z"
    assert headers["x-tickwork-run-id"] == "job-1:20261202T120500Z"
    assert headers["x-tickwork-job-id"] == "job-1"
    assert headers["x-tickwork-scheduled-for"] == "2026-12-02T12:05:00Z"
    assert headers["x-tickwork-attempt"] == "2"
    assert headers["x-custom"] == "yes"
    assert headers["host"] == f"127.0.0.1:{server.port}"
    signature = headers[SIGNATURE_HEADER.lower()]
    key = owner_key(SECRET, "alice")  # the run's owner's own key
    assert signature.startswith(f"t={EPOCH},n=") and f"kid={key_id(key)},v2=" in signature
    signed = {"method": "PUT", "url": server.url("/status/200?x=1"), "run_id": "job-1:20261202T120500Z"}
    assert verify({key_id(key): key}, signature, attempt=2, body=request.body, now=EPOCH + 10, **signed)
    assert not verify({key_id(key): key}, signature, attempt=2, body=request.body + b" ", now=EPOCH, **signed)
    bob = owner_key(SECRET, "bob")
    assert not verify({key_id(bob): bob}, signature, attempt=2, body=request.body, now=EPOCH, **signed)


def test_default_method_is_post_with_an_empty_signed_body(server: RecordingServer) -> None:
    result = local_invoker().invoke(http_target(server.url()), invocation())

    assert result.ok
    [request] = server.requests
    assert request.method == "POST" and request.body == b""
    assert request.headers["content-length"] == "0"
    key = owner_key(SECRET, "alice")
    assert verify(
        {key_id(key): key},
        request.headers["x-tickwork-signature"],
        method="POST",
        url=server.url(),
        run_id="job-1:20261202T120500Z",
        attempt=1,
        body=b"",
        now=EPOCH,
    )


@pytest.mark.parametrize(
    ("code", "retryable"),
    [
        pytest.param(500, True, id="500-server-error-retried"),
        pytest.param(503, True, id="503-unavailable-retried"),
        pytest.param(429, True, id="429-too-many-requests-retried"),
        pytest.param(408, True, id="408-request-timeout-retried"),
        pytest.param(404, False, id="404-not-found-final"),
        pytest.param(400, False, id="400-bad-request-final"),
        pytest.param(401, False, id="401-unauthorised-final"),
    ],
)
def test_error_statuses_are_failures_classified_by_code(
    server: RecordingServer, code: int, retryable: bool
) -> None:
    result = local_invoker().invoke(http_target(server.url(f"/status/{code}")), invocation())

    assert not result.ok
    assert result.retryable is retryable
    assert result.status == str(code)
    assert str(code) in result.detail


def test_redirect_is_not_followed(server: RecordingServer) -> None:
    result = local_invoker().invoke(http_target(server.url("/status/302")), invocation())

    assert (result.ok, result.retryable, result.status) == (False, False, "302")
    assert "redirects are not followed" in result.detail
    assert len(server.requests) == 1  # the Location (the metadata service) was never requested


def test_timeout_is_retryable(server: RecordingServer) -> None:
    result = local_invoker().invoke(http_target(server.url("/slow/1.0")), invocation(timeout=0.2))

    assert (result.ok, result.retryable, result.status) == (False, True, "TimeoutError")
    assert 150 <= result.latency_ms < 900


def test_connection_refused_is_retryable() -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    result = local_invoker().invoke(http_target(f"http://127.0.0.1:{port}/"), invocation())

    assert (result.ok, result.retryable, result.status) == (False, True, "ConnectionRefusedError")


def test_response_body_is_truncated_in_the_result(server: RecordingServer) -> None:
    result = local_invoker().invoke(http_target(server.url("/big"), method="GET"), invocation())

    assert result.ok
    assert len(result.detail.encode()) <= MAX_DETAIL_BYTES
    assert result.detail.startswith("xxxx") and result.detail.endswith("[truncated]")


def test_name_resolution_failure_is_retryable() -> None:
    def no_such_host(host: str, port: int) -> list[tuple[int, IPAddress]]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    invoker = local_invoker(resolver=no_such_host)
    result = invoker.invoke(http_target("http://no-such-host.invalid/"), invocation())

    assert (result.ok, result.retryable, result.status) == (False, True, "NameResolutionError")


def test_connects_to_the_checked_address_but_keeps_the_hostname(server: RecordingServer) -> None:
    """The socket goes to the address the guard checked; Host (and SNI for https) stay the URL's hostname."""
    resolved: list[str] = []

    def resolver(host: str, port: int) -> list[tuple[int, IPAddress]]:
        resolved.append(host)
        return [(socket.AF_INET, ipaddress.IPv4Address("127.0.0.1"))]

    result = local_invoker(resolver=resolver).invoke(
        http_target(server.url(host="scheduler-target.test")), invocation()
    )

    assert result.ok
    assert resolved == ["scheduler-target.test"]  # resolved exactly once: no second lookup to rebind
    assert server.requests[0].headers["host"] == f"scheduler-target.test:{server.port}"


def test_falls_back_to_the_next_checked_address(server: RecordingServer) -> None:
    """localhost may resolve to ::1 first while the server listens on 127.0.0.1 only."""
    result = local_invoker().invoke(http_target(server.url(host="localhost")), invocation())

    assert result.ok, result


def test_invalid_stored_target_fails_without_a_call(server: RecordingServer) -> None:
    result = local_invoker().invoke(http_target("ftp://127.0.0.1/"), invocation())

    assert (result.ok, result.retryable, result.status) == (False, False, "InvalidTarget")
    assert "target.config.url" in result.detail
    assert server.connections == 0


def test_a_header_no_http_byte_can_carry_fails_for_good_without_a_call(server: RecordingServer) -> None:
    # Valid as a job's header (no CR, LF or NUL), but outside latin-1: before, the call raised instead.
    target = http_target(server.url(), headers={"X-Price": "10 \u20ac"})

    result = local_invoker().invoke(target, invocation())

    assert (result.ok, result.retryable, result.status) == (False, False, "InvalidTarget")
    assert "not sendable" in result.detail
    assert server.connections == 0


def test_a_host_idna_cannot_encode_fails_for_good_without_a_call(server: RecordingServer) -> None:
    resolved: list[str] = []

    def resolver(host: str, port: int) -> list[tuple[int, IPAddress]]:
        resolved.append(host)
        return [(socket.AF_INET, ipaddress.IPv4Address("127.0.0.1"))]

    host = "\u00e9" * 70 + ".example"  # a label longer than IDNA's 63
    result = local_invoker(resolver).invoke(http_target(f"http://{host}:{server.port}/x"), invocation())

    assert (result.ok, result.retryable, result.status) == (False, False, "InvalidTarget")
    assert (resolved, server.connections) == ([], 0)


def test_empty_signing_secret_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="secret"):
        HttpInvoker(b"", clock_epoch=lambda: 0.0, allow_loopback=True)


class _RecordingTls(ssl.SSLContext):
    """Records the SNI name the invoker asks for, then fails the handshake (no certificate here)."""

    server_hostnames: list[str | None]

    def wrap_socket(self, sock: socket.socket, *args: Any, **kwargs: Any) -> Any:
        self.server_hostnames.append(kwargs.get("server_hostname"))
        raise ssl.SSLError("handshake refused by the test")


def test_https_verifies_the_hostname_not_the_connected_ip(server: RecordingServer) -> None:
    tls = _RecordingTls(ssl.PROTOCOL_TLS_CLIENT)
    tls.server_hostnames = []

    def resolver(host: str, port: int) -> list[tuple[int, IPAddress]]:
        return [(socket.AF_INET, ipaddress.IPv4Address("127.0.0.1"))]

    invoker = HttpInvoker(
        SECRET, clock_epoch=lambda: float(EPOCH), allow_loopback=True, resolver=resolver, tls_context=tls
    )
    result = invoker.invoke(http_target(f"https://hooks.example.com:{server.port}/x"), invocation())

    assert tls.server_hostnames == ["hooks.example.com"]
    assert (result.ok, result.retryable, result.status) == (False, True, "SSLError")
    assert server.requests == []  # nothing was sent in clear text


def test_https_to_a_plain_http_server_fails_retryably(server: RecordingServer) -> None:
    result = local_invoker().invoke(http_target(server.url().replace("http://", "https://")), invocation())

    assert (result.ok, result.retryable) == (False, True)
    assert server.requests == []


def test_an_http_1_0_server_with_content_length_answers_ok() -> None:
    """Regression: BaseHTTPRequestHandler speaks HTTP/1.0 and closes after a sized body; reading it must not
    touch the closed socket (it failed with EBADF and every call was retried)."""
    from datetime import UTC, datetime

    from tickwork.domain.targets import Invocation, validate_target
    from tickwork.local.echo import EchoServer

    echo = EchoServer().start()
    try:
        invoker = HttpInvoker(b"secret", lambda: 1_800_000_000.0, allow_loopback=True)
        target = validate_target("http", {"url": f"{echo.url}/echo", "method": "POST", "body": '{"a": 1}'})
        result = invoker.invoke(
            target, Invocation("job:20261202T120000Z", "job", datetime(2026, 12, 2, tzinfo=UTC), 1, 5.0)
        )
    finally:
        echo.stop()
    assert (result.ok, result.status, result.detail) == (True, "200", '{"ok": true}')


# A server that answers one byte every 50 ms never lets a socket timeout fire: each read gets a byte in time.
_TRICKLES = {
    "status-line": (b"", b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 200),
    "body-of-known-length": (b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n", b"x" * 200),
    "body-until-close": (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", b"x" * 200),
    "tls-handshake": (b"\x16\x03\x03\x40\x00", b"\x00" * 200),  # a handshake record, its body trickled
}


@pytest.mark.parametrize("stage", list(_TRICKLES))
def test_a_trickling_server_cannot_hold_the_call_past_its_timeout(stage: str) -> None:
    import threading
    import time

    head, trickle = _TRICKLES[stage]
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            if stage != "tls-handshake":
                conn.recv(65536)  # the request
            try:
                conn.sendall(head)
                for byte in trickle:
                    if done.wait(0.05):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return  # the client cut the connection: what the test wants

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    scheme = "https" if stage == "tls-handshake" else "http"
    url = f"{scheme}://127.0.0.1:{listener.getsockname()[1]}/"
    try:
        started = time.monotonic()
        result = local_invoker().invoke(http_target(url), invocation(timeout=0.5))
        elapsed = time.monotonic() - started
    finally:
        done.set()
        thread.join(timeout=2)
        listener.close()

    assert (result.ok, result.retryable, result.status) == (False, True, "TimeoutError")
    assert elapsed < 1.0, f"{stage}: {elapsed:.2f} s for a 0.5 s timeout"


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for "localhost" and its key, signed by itself (the client is told to trust it)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nover tls!", "over tls!"),
        (b"HTTP/1.0 200 OK\r\n\r\nuntil the close", "until the close"),  # its end: TLS close_notify
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nok, \r\n6\r\nchunks\r\n0\r\n\r\n",
            "ok, chunks",
        ),
    ],
    ids=["length", "until-close", "chunked"],
)
def test_an_https_exchange_reads_the_answer_over_tls(tmp_path: Path, answer: bytes, body: str) -> None:
    import threading

    cert, key = _self_signed(tmp_path)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    received: list[bytes] = []

    def serve() -> None:
        connection, _ = listener.accept()
        with server_tls.wrap_socket(connection, server_side=True) as tls:
            request = b""
            while b"\r\n\r\n" not in request:
                request += tls.recv(4096)
            received.append(request)
            tls.sendall(answer)
            # close_notify first (the end of a body read until the close); the client may be gone already
            # (it closes without a close_notify of its own once its answer is read): a reset, not a failure.
            with contextlib.suppress(OSError):
                tls.unwrap()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    client_tls = ssl.create_default_context(cafile=str(cert))
    invoker = HttpInvoker(
        SECRET,
        clock_epoch=lambda: float(EPOCH),
        allow_loopback=True,
        resolver=lambda host, port: [(socket.AF_INET, ipaddress.IPv4Address("127.0.0.1"))],
        tls_context=client_tls,
    )
    try:
        result = invoker.invoke(http_target(f"https://localhost:{port}/hook"), invocation())
    finally:
        server.join(timeout=5)
        listener.close()

    assert (result.ok, result.status, result.detail) == (True, "200", body)
    assert received[0].startswith(f"POST /hook HTTP/1.1\r\nHost: localhost:{port}\r\n".encode())
