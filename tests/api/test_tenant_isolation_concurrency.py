"""Two owners hammering the real local HTTP server at once: nobody ever sees the other's jobs, no request gets
another's path or body, and nothing answers 5xx (issue 12). The handler is shared by the server's threads, as
it is in `tickwork local`.

The job reads (`get_job`, `owner_job_ids`, `get_jobs`) are answered from a snapshot of the real store taken
after the jobs are created: moto takes ~40 ms a call, and what is under test is the resolver, not DynamoDB.
The service's own owner checks run unchanged. Without per-request resolvers (one shared resolver, as before),
2,000 requests showed leaks and 500s (`KeyError: '_route'`).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.api.conftest import ALICE, BOB, Api, job_body
from tickwork.domain.models import Job
from tickwork.handlers import api
from tickwork.local.http_api import HttpApiApp, make_api_server, serve_until

TOKENS = {"alice-token": ALICE, "bob-token": BOB}
REQUESTS = 21_000
THREADS = 6


class SnapshotReads:
    """The real store, with the reads of GET /jobs and GET /jobs/{id} answered from memory."""

    def __init__(self, store: Any, jobs: Sequence[Job]) -> None:
        self._store = store
        self._jobs = {job.job_id: job for job in jobs}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def get_job(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def owner_job_ids(
        self, owner: str, *, limit: int, after_job_id: str | None = None
    ) -> tuple[list[str], bool]:
        ids = sorted(
            job_id
            for job_id, job in self._jobs.items()
            if job.owner == owner and (after_job_id is None or job_id > after_job_id)
        )
        return ids[:limit], len(ids) > limit

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        return {job_id: self._jobs[job_id] for job_id in job_ids if job_id in self._jobs}


@pytest.fixture
def port(call: Api) -> Iterator[int]:
    server = make_api_server(HttpApiApp(api.handler, TOKENS), port=0)
    stop = threading.Event()
    thread = threading.Thread(target=serve_until, args=(server, stop), daemon=True)
    thread.start()
    yield int(server.server_address[1])
    stop.set()
    thread.join(timeout=10)


def test_two_owners_at_once_never_see_each_others_data(call: Api, port: int) -> None:
    own: dict[str, str] = {}
    for token, owner in (("alice-token", ALICE), ("bob-token", BOB)):
        own[token] = call("POST", "/jobs", body=job_body(name=f"{owner}-job"), owner=owner).body["id"]
    store = call.parts.store
    call.parts.__dict__["store"] = SnapshotReads(store, [store.get_job(job_id) for job_id in own.values()])

    leaks: list[str] = []
    errors: list[str] = []
    counted = [0]
    lock = threading.Lock()

    def send(token: str, method: str, path: str, body: str = "") -> tuple[int, bytes]:
        """One request on its own connection (the server speaks HTTP/1.0 and closes it after the answer):
        a plain socket, so the client spends little of the test's CPU."""
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        if body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
            connection.sendall(f"{head}Connection: close\r\n\r\n{body}".encode())
            chunks = []
            while chunk := connection.recv(65536):
                chunks.append(chunk)
        status_line, _, rest = b"".join(chunks).partition(b"\r\n")
        return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]

    def check(token: str, i: int, n: int) -> str | None:
        """One request of three kinds in turn; what is wrong with its answer, or None."""
        kind = i % 3
        if kind == 0:  # the identity: the owner's jobs and only those
            status, raw = send(token, "GET", "/jobs")
        elif kind == 1:  # the path: the job asked for
            status, raw = send(token, "GET", f"/jobs/{own[token]}")
        else:  # the body: the expression and count sent
            minute, count = (n * 7 + i) % 60, 1 + i % 4
            body = json.dumps({"expression": f"{minute} 3 * * *", "count": count})
            status, raw = send(token, "POST", "/schedules/preview", body)
        if status != 200:
            with lock:
                errors.append(f"{status} {raw[:300]!r}")
            return None
        answer = json.loads(raw)
        if kind == 0:
            seen = [job["id"] for job in answer["items"]]
            return None if seen == [own[token]] else f"{token} listed {seen}"
        if kind == 1:
            return None if answer["id"] == own[token] else f"{token} got job {answer['id']}"
        got = (answer["expression"], len(answer["fires"]))
        return None if got == (f"{minute} 3 * * *", count) else f"{token} sent {minute}/{count}, got {got}"

    def worker(n: int) -> None:
        token = "alice-token" if n % 2 == 0 else "bob-token"
        done = 0
        try:
            for i in range(REQUESTS // THREADS):
                wrong = check(token, i, n)
                done += 1
                if wrong is not None:
                    with lock:
                        leaks.append(wrong)
        finally:
            with lock:
                counted[0] += done

    started = time.monotonic()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(worker, range(THREADS)))
    seconds = time.monotonic() - started

    print(f"{counted[0]} requests in {seconds:.1f} s: {len(leaks)} leaks, {len(errors)} errors")
    assert counted[0] >= 20_000
    assert leaks == [] and errors == [], (leaks[:5], errors[:5])


def test_the_lambda_path_reuses_one_resolver_and_nothing_of_the_previous_request(call: Api) -> None:
    """Lambda sends an environment one request at a time: one resolver serves them all, and each request
    reads its own owner even though the previous one (another owner's) left its event behind."""
    jobs = {owner: call("POST", "/jobs", body=job_body(), owner=owner).body["id"] for owner in (ALICE, BOB)}
    before = api._RESOLVERS.built
    for n in range(40):
        owner = (ALICE, BOB)[n % 2]
        listed = call("GET", "/jobs", owner=owner).body["items"]
        assert [job["id"] for job in listed] == [jobs[owner]]
        assert call("GET", "/jobs", owner=None).status == 401  # no identity is not the last one's
    assert api._RESOLVERS.built - before <= 1
