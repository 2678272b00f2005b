"""One HTTP/1.1 exchange on a connected socket: the request written in one send, the answer read off the
socket as far as the invoker keeps it (its status, reason and the first `limit` bytes of its body).

Why not http.client: an executor makes one call per run, and http.client spends about as much CPU on a
call as the connection itself costs (a profile of the floor, benchmarks/bench_floor.py): it checks every
header again as it writes it, and it parses the answer's headers into an email message of which the invoker
reads two fields. This module reads only what a connection that is never reused needs (the status line,
Content-Length and Transfer-Encoding) and keeps http.client's limits and exceptions, so a server's fault
reads the same in a run's result (RemoteDisconnected, BadStatusLine, LineTooLong, IncompleteRead).
"""

from __future__ import annotations

import http.client
import re
import socket
from collections.abc import Callable, Mapping

MAX_LINE = 65536  # http.client's: a status line, a header line or a chunk size line longer than this fails
MAX_HEADERS = 100  # http.client's: an answer with more header lines fails
_RECV = 8 * 1024
_NO_BODY = (204, 304)
_UNSENDABLE = re.compile(r"[\r\n\x00]")


class UnsendableRequest(ValueError):
    """A request that cannot be written as HTTP/1.1 (a header value with a line break, a character its
    encoding cannot carry): the target as stored cannot be called, whatever the server."""


def request_bytes(
    method: str, host: str, port: int, default_port: int, path: str, headers: Mapping[str, str], body: bytes
) -> bytes:
    """The whole request: the request line, Host, Accept-Encoding and Content-Length as http.client writes
    them, then `headers` (validated names; reserved ones, such as Host, are refused when a job is written)."""
    name = host.encode("ascii") if host.isascii() else host.encode("idna")
    if ":" in host:
        name = b"[" + name + b"]"  # an IPv6 literal
    authority = name if port == default_port else name + f":{port}".encode("ascii")
    lines = [f"{name}: {value}" for name, value in headers.items()]
    if _UNSENDABLE.search("".join(lines)) or _UNSENDABLE.search(path) or " " in path:
        raise UnsendableRequest("a header or the path holds a line break, a NUL or a space")
    try:
        head = (
            f"{method} {path} HTTP/1.1\r\n".encode("ascii")
            + b"Host: "
            + authority
            + b"\r\nAccept-Encoding: identity\r\n"
            + "".join(f"{line}\r\n" for line in lines).encode("latin-1")
            + f"Content-Length: {len(body)}\r\n\r\n".encode("ascii")
        )
    except UnicodeEncodeError as error:
        raise UnsendableRequest(f"not sendable as HTTP/1.1 text: {error.reason} at {error.start}") from None
    return head + body


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
            if not 100 <= status < 200:
                break
        if status in _NO_BODY:
            return status, reason, b""
        if headers.get("transfer-encoding", "").strip().lower() == "chunked":
            return status, reason, self._chunked(limit)
        length = _length(headers.get("content-length"))
        if length is None:
            return status, reason, self._until_end(limit)
        return status, reason, self._exactly(min(length, limit), short_ok=True)

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
        version, _, rest = line.strip().partition(" ")
        code, _, reason = rest.strip().partition(" ")
        if not version.startswith("HTTP/") or len(code) != 3 or not code.isdigit() or code[0] == "0":
            raise http.client.BadStatusLine(line)
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
                fields.setdefault(name.strip().lower(), value.strip())
        raise http.client.HTTPException(f"got more than {MAX_HEADERS} headers")

    def _exactly(self, count: int, *, short_ok: bool) -> bytes:
        while len(self._buffer) < count and self._fill():
            pass
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        if len(data) < count and not short_ok:
            raise http.client.IncompleteRead(data, count - len(data))
        return data

    def _until_end(self, limit: int) -> bytes:
        while len(self._buffer) < limit and self._fill():
            pass
        return bytes(self._buffer[:limit])

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
