"""The HTTP/1.1 exchange the invoker writes and reads (adapters/targets/http_wire.py): answers fed through a
socket pair, byte for byte, including the ones a faulty server sends."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tickwork.adapters.targets.http_wire import (
    MAX_HEADERS,
    MAX_LINE,
    AnswerReader,
    UnsendableRequest,
    request_bytes,
)


@contextmanager
def connected() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    try:
        yield ours, theirs
    finally:
        ours.close()
        theirs.close()


def answer(*parts: bytes, limit: int = 1024) -> tuple[int, str, bytes]:
    """Read what a server sends as `parts` (in that many sends) before it closes its side."""
    with connected() as (ours, theirs):

        def serve() -> None:
            for part in parts:
                theirs.sendall(part)
            theirs.shutdown(socket.SHUT_WR)

        server = threading.Thread(target=serve)
        server.start()
        try:
            return AnswerReader(ours, lambda: 5.0).read(limit=limit)
        finally:
            server.join()


def test_a_body_of_known_length_is_read_and_cut_at_the_limit() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\n"
    assert answer(head, b"0123", b"456789", limit=6) == (200, "OK", b"012345")


def test_the_body_after_its_length_is_not_read() -> None:
    assert answer(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nokEXTRA") == (201, "Created", b"ok")


def test_a_body_cut_short_is_what_arrived() -> None:
    assert answer(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc") == (200, "OK", b"abc")


def test_without_a_length_the_body_runs_to_the_end() -> None:
    assert answer(b"HTTP/1.0 500 Oops\r\n\r\nline one\n", b"line two") == (500, "Oops", b"line one\nline two")
    assert answer(b"HTTP/1.1 200 OK\r\n\r\nabcdef", limit=4) == (200, "OK", b"abcd")


def test_chunks_are_joined_their_extensions_ignored_and_the_limit_kept() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nContent-Length: 3\r\n\r\n"
    chunks = b"4;name=value\r\nWiki\r\n5\r\npedia\r\n0\r\nTrailer: x\r\n\r\n"
    assert answer(head, chunks[:7], chunks[7:]) == (200, "OK", b"Wikipedia")
    assert answer(head, chunks, limit=6) == (200, "OK", b"Wikipe")


@pytest.mark.parametrize(
    "chunks",
    [b"zz\r\nabc\r\n0\r\n\r\n", b"5\r\nab", b"3\r\nabcXY0\r\n\r\n", b"3\r\nabc\r\n", b"-3\r\nabc\r\n"],
    ids=["size not hex", "cut inside a chunk", "no line end after the data", "no last chunk", "negative"],
)
def test_a_broken_chunked_body_is_an_incomplete_read(chunks: bytes) -> None:
    with pytest.raises(http.client.IncompleteRead):
        answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", chunks)


def test_interim_answers_are_skipped() -> None:
    sent = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    assert answer(sent, b"HTTP/1.1 202 Accepted\r\nContent-Length: 1\r\n\r\nx") == (202, "Accepted", b"x")


@pytest.mark.parametrize("code", [204, 304])
def test_no_body_follows_204_or_304(code: int) -> None:
    assert answer(f"HTTP/1.1 {code} X\r\nContent-Length: 5\r\n\r\nhello".encode()) == (code, "X", b"")


def test_a_status_line_without_a_reason_and_a_folded_header() -> None:
    sent = b"HTTP/1.1 404\nX-Long: a\n  continued\nContent-Length: 2\n\nno"
    assert answer(sent) == (404, "", b"no")


def test_a_tab_separated_status_line_reads_and_http_2_is_an_unknown_protocol() -> None:
    assert answer(b"HTTP/1.1\t200\tFine\r\nContent-Length: 0\r\n\r\n") == (200, "Fine", b"")
    with pytest.raises(http.client.UnknownProtocol):
        answer(b"HTTP/2.0 200 OK\r\n\r\n")


def test_switching_protocols_is_final_and_nothing_after_it_is_read() -> None:
    assert answer(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n\x00\x01binary") == (
        101,
        "Switching Protocols",
        b"",
    )


def test_a_server_that_closes_without_answering() -> None:
    with pytest.raises(http.client.RemoteDisconnected):
        answer()


@pytest.mark.parametrize(
    "status",
    [b"SMTP 220 ready\r\n", b"HTTP/1.1 20 OK\r\n", b"HTTP/1.1 OK\r\n", b"HTTP/1.1 099 x\r\n", b"\r\n"],
)
def test_a_malformed_status_line_is_a_bad_status_line(status: bytes) -> None:
    with pytest.raises(http.client.BadStatusLine):
        answer(status + b"\r\n")


def test_lines_and_headers_beyond_http_clients_limits_fail() -> None:
    with pytest.raises(http.client.LineTooLong, match="status line"):
        answer(b"HTTP/1.1 200 " + b"x" * MAX_LINE + b"\r\n\r\n")
    for sent, error in [
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * MAX_LINE + b"\r\n\r\n", http.client.LineTooLong),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * (MAX_HEADERS + 1) + b"\r\n", http.client.HTTPException),
    ]:
        with pytest.raises(error):
            answer(sent)


def test_http_clients_limits_themselves_pass() -> None:
    longest = b"X: " + b"y" * (MAX_LINE - 5) + b"\r\n"  # MAX_LINE bytes with its end
    headers = b"X: y\r\n" * (MAX_HEADERS - 2)  # with the longest and Content-Length: MAX_HEADERS
    assert answer(b"HTTP/1.1 200 OK\r\n", longest, headers, b"Content-Length: 1\r\n\r\nz") == (
        200,
        "OK",
        b"z",
    )


@pytest.mark.parametrize(
    "sent",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n",
        b"HTTP/1.1 204 No Content\r\n\r\n",
    ],
    ids=["length", "chunked", "no body"],
)
def test_a_delimited_answer_is_read_without_waiting_for_the_close(sent: bytes) -> None:
    # The server keeps its side open: one more receive would wait, and the deadline would end it.
    with connected() as (ours, theirs):
        theirs.sendall(sent)
        status, _, body = AnswerReader(ours, lambda: 0.5).read(limit=100)
    assert (status, body) == ((204, b"") if status == 204 else (200, b"ok"))


def test_interim_answers_without_end_are_cut_by_the_deadline() -> None:
    with connected() as (ours, theirs):
        theirs.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 200)
        left = iter([0.5] * 50)

        def remaining() -> float:
            for seconds in left:
                return seconds
            raise TimeoutError("the target's timeout elapsed")

        with pytest.raises(TimeoutError):
            AnswerReader(ours, remaining).read(limit=100)


def test_every_receive_is_bounded_by_the_deadline() -> None:
    def elapsed() -> float:
        raise TimeoutError("the target's timeout elapsed")

    with connected() as (ours, _), pytest.raises(TimeoutError):
        AnswerReader(ours, elapsed).read(limit=10)


def test_the_request_as_http_client_wrote_it() -> None:
    sent = request_bytes(
        "POST", "example.com", 8080, 80, "/hook?a=1", {"X-One": "1", "User-Agent": "t"}, b"{}"
    )
    assert sent == (
        b"POST /hook?a=1 HTTP/1.1\r\nHost: example.com:8080\r\nAccept-Encoding: identity\r\n"
        b"Content-Length: 2\r\nX-One: 1\r\nUser-Agent: t\r\n\r\n{}"
    )
    assert request_bytes("GET", "::1", 443, 443, "/", {}, b"").startswith(
        b"GET / HTTP/1.1\r\nHost: [::1]\r\n"
    )
    assert b"Host: xn--bcher-kva.example\r\n" in request_bytes(
        "GET", "b\u00fccher.example", 80, 80, "/", {}, b""
    )
    assert b"X-Name: caf\xe9\r\n" in request_bytes("PUT", "h", 80, 80, "/", {"X-Name": "caf\u00e9"}, b"")


def test_a_jobs_own_accept_encoding_replaces_the_default() -> None:
    sent = request_bytes("GET", "h", 80, 80, "/", {"accept-encoding": "gzip"}, b"")
    assert sent.lower().count(b"accept-encoding") == 1 and b"accept-encoding: gzip\r\n" in sent


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/", {"X-A": "one\r\nX-Injected: two"}),
        ("/", {"X-A": "nul\x00"}),
        ("/", {"X-A": "euro \u20ac"}),  # not latin-1: no byte on the wire means it
        ("/a b", {}),
        ("/a\tb", {}),
        ("/caf\u00e9", {}),  # a request line is ASCII
        ("/", {"Transfer-Encoding": "chunked"}),  # framing is ours: refused when written, and here too
        ("/", {"content-length": "0"}),
        ("/", {"Host": "elsewhere"}),
        ("/", {"X-A\n": "1"}),
        ("/", {"X A": "1"}),
    ],
)
def test_a_request_that_cannot_be_written_is_refused(path: str, headers: dict[str, str]) -> None:
    with pytest.raises(UnsendableRequest):
        request_bytes("POST", "example.com", 80, 80, path, headers, b"")


def test_a_host_idna_cannot_encode_is_refused() -> None:
    with pytest.raises(UnsendableRequest, match="cannot be encoded"):
        request_bytes("GET", "\u00e9" * 70 + ".example", 80, 80, "/", {}, b"")
