"""One HTTP/1.1 exchange on a connected socket: the request written in one send, the answer read off the
socket as far as the invoker keeps it (its status, reason and the first `limit` bytes of its body).

Why not http.client: an executor makes one call per run, and in a profile of the floor's loop
(benchmarks/bench_floor.py --cprofile) http.client cost more CPU per call than the exchange on a bare socket:
it checks every header again as it writes it, and it parses the answer's headers into an email message of
which the invoker reads two fields (docs/benchmarks.md, thirteenth session, has the floor before and after).
This module reads only what a connection that is never reused needs (the status line, Content-Length and
Transfer-Encoding) and keeps http.client's limits and exceptions, so a server's fault reads the same in a
run's result (RemoteDisconnected, BadStatusLine, LineTooLong, IncompleteRead).
"""

from __future__ import annotations

import http.client
import re
import socket
from collections.abc import Callable, Mapping

from tickwork.domain.targets import HEADER_NAME, HEADER_VALUE_BREAK

MAX_LINE = 65536  # http.client's: a status line, a header line or a chunk size line longer than this fails
MAX_HEADERS = 100  # http.client's: an answer with more header lines fails
_RECV = 8 * 1024
_NO_BODY = (204, 304)
_SWITCHING = 101  # final, not interim: what follows is another protocol, never read as HTTP
_STATUS = re.compile(r"[1-9][0-9][0-9]")
_FRAMING = frozenset({"host", "content-length", "transfer-encoding", "connection"})  # ours to write
_BAD_PATH = re.compile(r"[\x00-\x20\x7f]")  # http.client's: no control character or space on the request line


class UnsendableRequest(ValueError):
    """A request that cannot be written as HTTP/1.1 (a header value with a line break, a character its
    encoding cannot carry): the target as stored cannot be called, whatever the server."""


def request_bytes(
    method: str, host: str, port: int, default_port: int, path: str, headers: Mapping[str, str], body: bytes
) -> bytes:
    """The whole request, as http.client writes it: the request line, Host, Accept-Encoding (unless the
    job gives its own) and Content-Length, then `headers`. A header that would change how the request is
    framed (Host, Content-Length, Transfer-Encoding, Connection: refused when a job is written) is refused
    here too, with any name that is not a field name."""
    lines: list[bytes] = []
    own_encoding = False
    for name, value in headers.items():
        lowered = name.lower()
        if not HEADER_NAME.fullmatch(name) or lowered in _FRAMING:
            raise UnsendableRequest(f"header {name!r} is not one a request may carry")
        if HEADER_VALUE_BREAK.search(value):
            raise UnsendableRequest(f"header {name} holds a line break or a NUL")
        try:
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))  # the name is ASCII: checked above
        except UnicodeEncodeError:
            raise UnsendableRequest(f"header {name} is not sendable as HTTP/1.1 text (latin-1)") from None
        own_encoding = own_encoding or lowered == "accept-encoding"
    if _BAD_PATH.search(path) or not path.isascii():
        raise UnsendableRequest("the URL's path holds a space, a control or a non-ASCII character")
    try:
        host_bytes = host.encode("ascii") if host.isascii() else host.encode("idna")
    except UnicodeError as error:  # a label IDNA cannot encode (too long, empty)
        raise UnsendableRequest(f"host {host!r} cannot be encoded: {error}") from None
    if ":" in host:
        host_bytes = b"[" + host_bytes + b"]"  # an IPv6 literal
    authority = host_bytes if port == default_port else host_bytes + f":{port}".encode("ascii")
    return (
        f"{method} {path} HTTP/1.1\r\nHost: ".encode("ascii")
        + authority
        + (b"" if own_encoding else b"\r\nAccept-Encoding: identity")
        + f"\r\nContent-Length: {len(body)}\r\n".encode("ascii")
        + b"".join(lines)
        + b"\r\n"
        + body
    )


class AnswerReader:
    """Reads one answer off `sock`. Every receive is bounded by `remaining()` (the call's deadline, which
    raises TimeoutError once it passed)."""

    def __init__(self, sock: socket.socket, remaining: Callable[[], float]) -> None:
        self._sock = sock
        self._remaining = remaining
        self._buffer = bytearray()
        self._ended = False

    def read(self, *, limit: int) -> tuple[int, str, bytes]:
        """(status, reason, the body's first `limit` bytes). Interim answers (1xx) are skipped. A body
        shorter than its Content-Length, or cut by the connection's end, is what arrived (as http.client
        reads it in parts)."""
        while True:
            status, reason = self._status_line()
            headers = self._headers()
            if status == _SWITCHING or not 100 <= status < 200:
                break
        if status in _NO_BODY or status == _SWITCHING:
            return status, reason, b""
        if headers.get("transfer-encoding", "").strip().lower() == "chunked":
            return status, reason, self._chunked(limit)
        length = _length(headers.get("content-length"))
        # No length: the body runs to the connection's end; either way, what arrived of it.
        return status, reason, self._exactly(limit if length is None else min(length, limit), short_ok=True)

    def _fill(self) -> bool:
        """Receive more into the buffer; False once the server closed its side."""
        if self._ended:
            return False
        self._sock.settimeout(self._remaining())
        chunk = self._sock.recv(_RECV)
        if not chunk:
            self._ended = True
            return False
        self._buffer += chunk
        return True

    def _line(self, what: str) -> bytes:
        """The next line with its end (b"": the connection ended first; its last bytes without an end)."""
        start = 0
        while True:
            end = self._buffer.find(b"\n", start)
            if end >= 0:
                if end >= MAX_LINE:
                    raise http.client.LineTooLong(what)
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line
            start = len(self._buffer)
            if start > MAX_LINE:
                raise http.client.LineTooLong(what)
            if not self._fill():
                line = bytes(self._buffer)
                self._buffer.clear()
                return line

    def _status_line(self) -> tuple[int, str]:
        raw = self._line("status line")
        if not raw:
            raise http.client.RemoteDisconnected("Remote end closed connection without response")
        line = raw.decode("iso-8859-1")
        version, code, reason = [*line.split(None, 2), "", "", ""][:3]
        if not version.startswith("HTTP/") or not _STATUS.fullmatch(code):
            raise http.client.BadStatusLine(line)
        if not version.startswith("HTTP/1.") and version != "HTTP/0.9":
            raise http.client.UnknownProtocol(version)
        return int(code), reason.strip()

    def _headers(self) -> dict[str, str]:
        """The answer's header fields, lower-cased names, the first of each name (as http.client's get)."""
        fields: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = self._line("header line")
            if line in (b"\r\n", b"\n", b""):
                return fields
            name, colon, value = line.decode("iso-8859-1").partition(":")
            if colon and name and not name[0].isspace():  # a folded line continues the one before it
                fields.setdefault(name.lower(), value.strip())
        raise http.client.HTTPException(f"got more than {MAX_HEADERS} headers")

    def _exactly(self, count: int, *, short_ok: bool) -> bytes:
        while len(self._buffer) < count and self._fill():
            pass
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        if len(data) < count and not short_ok:
            raise http.client.IncompleteRead(data, count - len(data))
        return data

    def _chunked(self, limit: int) -> bytes:
        body = bytearray()
        while len(body) < limit:
            size_line = self._line("chunk size")
            try:
                size = int(size_line.split(b";", 1)[0], 16)
            except ValueError:
                raise http.client.IncompleteRead(bytes(body)) from None
            if size < 0:
                raise http.client.IncompleteRead(bytes(body))
            if size == 0:
                break  # the trailer is not read: the connection is closed after the answer anyway
            body += self._exactly(min(size, limit - len(body)), short_ok=False)
            if len(body) >= limit:
                break
            if self._exactly(2, short_ok=False) != b"\r\n":  # each chunk's data ends its line
                raise http.client.IncompleteRead(bytes(body))
        return bytes(body)


def _length(value: str | None) -> int | None:
    """Content-Length as http.client reads it: None (read to the end) when absent, not a number or below 0."""
    if not value:
        return None
    try:
        length = int(value)
    except ValueError:
        return None
    return length if length >= 0 else None
