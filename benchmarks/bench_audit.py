"""Losses around the code, on the SQLite engine, and what the reconciliation audit puts back (issue 30).

The real services and adapters of `tickwork local`'s SQLite engine (store, queues, dispatcher, planner,
executor, sweeper, audit: `tickwork.composition.Components` with `engine=sqlite`), driven in one process
on a fake clock that moves in 5 s steps: each minute a tick and a sweep (which audits one segment of the
jobs), each step the executor drains what is visible. Targets are a real loopback HTTP server that
counts each run's calls by its Idempotency-Key; a run counts as executed when its target was called and it
succeeded. The audit's own settings are the defaults (grace 10 minutes, 10 segments: a pass every 10
minutes), so a lost run is promised within grace + pass + a minute of its due time: 21 minutes.

Three losses, each on its own database:

- purge: 1,000 hourly jobs due at 12:00; every dispatch queue purged after the executor took the first 400
  messages of the burst;
- stranded: 60 jobs every 5 minutes whose `due` entry is removed (30) or moved to a minute behind the
  ticker's re-read window (30) at 12:02;
- restore: 100 jobs every minute; at 12:10 the runs table is restored from a backup taken at 12:00 (the
  jobs table, the queues and the watermarks are not: as a DynamoDB point-in-time restore of the runs table).

For each: the fires due in the window, how many executed, how many are recorded without running (the
job's missed-fire policy), how many have no record at all (must be 0), the target calls beyond one a run
(at least once allows them: a restore forgets runs that already ran), and when the last lost run started.

    python benchmarks/bench_audit.py
    python benchmarks/bench_audit.py --scenario purge
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

from tickwork.adapters.metrics import InMemoryMetrics
from tickwork.adapters.sqlite.queue import queue_configs
from tickwork.composition import Components
from tickwork.domain.audit import AUDIT_GRACE, AUDIT_SEGMENTS
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Job, RunState, Target
from tickwork.domain.schedule import next_fire_after, parse_schedule
from tickwork.resources import ResourceNames
from tickwork.settings import Settings

START = datetime(2026, 12, 2, 11, 50, tzinfo=UTC)
STEP = timedelta(seconds=5)
SHARDS = 4
QUEUES = 2
PROMISE = AUDIT_GRACE + timedelta(minutes=AUDIT_SEGMENTS + 1)


class CountingTarget:
    """A loopback HTTP target that answers 200 and counts the calls of each run (its Idempotency-Key)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        calls, lock = self.calls, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
                with lock:
                    calls[self.headers.get("Idempotency-Key", "")] += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class Instance:
    parts: Components
    clock: FakeClock
    echo: CountingTarget
    path: Path

    @property
    def urls(self) -> tuple[str, ...]:
        return self.parts.settings.dispatch_queue_urls

    def sql(self, statement: str, parameters: tuple[Any, ...] = ()) -> None:
        with sqlite3.connect(self.path) as connection:
            connection.execute(statement, parameters)


def instance(directory: Path) -> Instance:
    names = ResourceNames()
    urls, dlq, _ = queue_configs(names, QUEUES)
    path = directory / "tickwork.db"
    settings = Settings(
        engine="sqlite",
        database_path=str(path),
        shard_count=SHARDS,
        mode="local",
        dispatch_queue_urls=tuple(urls),
        dead_letter_queue_url=dlq,
        signing_secret="bench",
        concurrency_cap=10_000,
    )
    clock = FakeClock(START)
    parts = Components(settings, clock, lambda service: None, InMemoryMetrics())
    return Instance(parts, clock, CountingTarget(), path)


class Loop:
    """Time in steps: a tick and a sweep (with its audit segment) each minute, the executor every step."""

    def __init__(self, box: Instance) -> None:
        self.box = box
        self.planner = box.parts.planner()
        self.sweeper = box.parts.sweeper()
        self.auditor = box.parts.auditor()
        self.executor = box.parts.executor(worker_id="bench")
        self.repairs: list[tuple[datetime, int]] = []

    def run_until(self, end: datetime, *, take: int | None = None) -> int:
        """Advance to `end`; returns how many messages the executor handled (at most `take` at the last
        step, when given: the burst is cut there)."""
        handled = 0
        while self.box.clock.now() < end:
            now = self.box.clock.now() + STEP
            self.box.clock.set(now)
            if now.second == 0:
                self.planner.plan_shards(list(range(SHARDS)), now, max_threads=1)
                self.sweeper.sweep(now=now)
                report = self.auditor.audit(now, budget=timedelta(seconds=30))
                if report.repairs:
                    self.repairs.append((now, report.repairs))
            handled += self.drain(None if now < end else take)
        return handled

    def drain(self, take: int | None = None) -> int:
        queues = self.box.parts.queues
        handled = 0
        for url in self.box.urls:
            while take is None or handled < take:
                wanted = 10 if take is None else max(1, min(10, take - handled))
                answer = queues.receive_message(QueueUrl=url, MaxNumberOfMessages=wanted, WaitTimeSeconds=0)
                messages = answer.get("Messages", [])
                if not messages:
                    break
                for message in messages:
                    self.executor.execute(RunMessage.from_json(message["Body"]))
                    queues.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
                    handled += 1
        return handled


def jobs(box: Instance, count: int, expression: str) -> list[Job]:
    service = box.parts.job_service()
    target = Target("http", {"url": f"{box.echo.url}/echo", "method": "POST"})
    return [
        service.create(
            "bench", JobSpec(name=f"{expression}-{i}", schedule=parse_schedule(expression), target=target)
        )
        for i in range(count)
    ]


@dataclass
class Outcome:
    name: str
    fires: int
    executed: int
    recorded_not_run: int
    unrecorded: int
    extra_calls: int
    last_repaired_start: timedelta | None
    handled_before_loss: int

    def line(self) -> str:
        last = (
            "-"
            if self.last_repaired_start is None
            else f"{self.last_repaired_start.total_seconds() / 60:.1f} min"
        )
        return (
            f"| {self.name} | {self.fires:,} | {self.executed:,} | {self.recorded_not_run} "
            f"| {self.unrecorded} | {self.extra_calls} | {last} |"
        )


def outcome(
    name: str, box: Instance, made: list[Job], first: datetime, last: datetime, handled: int
) -> Outcome:
    """Every fire of `made` in [first, last): executed, recorded without running, or unrecorded."""
    store = box.parts.store
    fires = executed = recorded = unrecorded = 0
    latest: timedelta | None = None
    for job in made:
        fire = next_fire_after(job.schedule, first - timedelta(microseconds=1))
        while fire is not None and fire < last:
            fires += 1
            run = store.get_run(job.job_id, fire)
            if run is None:
                unrecorded += 1
            elif run.state is RunState.SUCCEEDED:
                executed += 1
                if run.started_at is not None and run.started_at - fire > timedelta(minutes=2):
                    late = run.started_at - fire
                    latest = late if latest is None else max(latest, late)
            elif run.state.is_terminal:
                recorded += 1
            fire = next_fire_after(job.schedule, fire)
    extra = sum(n - 1 for n in box.echo.calls.values() if n > 1)
    return Outcome(name, fires, executed, recorded, unrecorded, extra, latest, handled)


def purge(directory: Path) -> Outcome:
    box = instance(directory)
    made = jobs(box, 1_000, "0 * * * *")
    loop = Loop(box)
    handled = loop.run_until(datetime(2026, 12, 2, 12, 0, tzinfo=UTC), take=400)
    for url in box.urls:  # every dispatch queue purged in the middle of the burst
        box.sql("DELETE FROM messages WHERE queue = ?", (url,))
    loop.run_until(datetime(2026, 12, 2, 12, 0, tzinfo=UTC) + PROMISE + timedelta(minutes=1))
    box.echo.stop()
    return outcome(
        "every dispatch queue purged after 400 of a 1,000-fire burst",
        box,
        made,
        datetime(2026, 12, 2, 12, 0, tzinfo=UTC),
        datetime(2026, 12, 2, 12, 1, tzinfo=UTC),
        handled,
    )


def stranded(directory: Path) -> Outcome:
    box = instance(directory)
    made = jobs(box, 60, "*/5 * * * *")
    loop = Loop(box)
    loop.run_until(datetime(2026, 12, 2, 12, 2, tzinfo=UTC))
    for index, job in enumerate(made):
        if index % 2:
            box.sql("UPDATE jobs SET due_key = NULL WHERE job_id = ?", (job.job_id,))
        else:
            box.sql(
                "UPDATE jobs SET due_key = ? WHERE job_id = ?", (f"{job.shard}#2026-12-02T11:00", job.job_id)
            )
    end = datetime(2026, 12, 2, 12, 40, tzinfo=UTC)
    loop.run_until(end)
    box.echo.stop()
    return outcome(
        "60 jobs' due entries removed (30) or moved behind the re-read window (30)",
        box,
        made,
        datetime(2026, 12, 2, 12, 5, tzinfo=UTC),
        end - PROMISE,
        0,
    )


def restore(directory: Path) -> Outcome:
    box = instance(directory)
    made = jobs(box, 100, "* * * * *")
    loop = Loop(box)
    loop.run_until(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
    backup = directory / "backup.db"
    with sqlite3.connect(box.path) as live, sqlite3.connect(backup) as copy:
        live.backup(copy)  # the backup taken at 12:00
    loop.run_until(datetime(2026, 12, 2, 12, 10, tzinfo=UTC))
    with sqlite3.connect(box.path) as live:  # the runs table restored to 12:00; nothing else
        live.execute("ATTACH DATABASE ? AS backup", (str(backup),))
        live.execute("DELETE FROM runs")
        live.execute("INSERT INTO runs SELECT * FROM backup.runs")
        live.commit()
        live.execute("DETACH DATABASE backup")
    end = datetime(2026, 12, 2, 12, 10, tzinfo=UTC) + PROMISE + timedelta(minutes=1)
    loop.run_until(end)
    box.echo.stop()
    return outcome(
        "the runs table restored to a backup 10 minutes old",
        box,
        made,
        datetime(2026, 12, 2, 12, 0, tzinfo=UTC),
        datetime(2026, 12, 2, 12, 20, tzinfo=UTC),
        0,
    )


SCENARIOS: dict[str, Callable[[Path], Outcome]] = {"purge": purge, "stranded": stranded, "restore": restore}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), action="append")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.ERROR
    )  # each repair logs a warning; the table says what they added up to
    print(f"audit grace {AUDIT_GRACE}, {AUDIT_SEGMENTS} segments: a lost run is promised within {PROMISE}")
    print(
        "| loss | fires | executed | recorded, not run | no record | extra target calls | last late start |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.scenario or list(SCENARIOS):
        with tempfile.TemporaryDirectory(prefix=f"tickwork-audit-{name}-") as directory:
            print(SCENARIOS[name](Path(directory)).line(), flush=True)


if __name__ == "__main__":
    main()
