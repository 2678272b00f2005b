"""A storm of failures (issue 32): N jobs, each with a signed webhook and a Slack-compatible channel on one
loopback receiver, fail at the same second. On the embedded engine (SQLite, the runs' change feed) with the
real watcher and the real HTTP invoker (signed calls), side by side in one run:

- windowed: the job's default window (300 s): the first failure goes out at once, the rest are counted into
  one digest per channel when the window ends (the clock is moved past it; the send itself is timed);
- unwindowed: what the storm would be without windows, every event its own message (a window of 1 s, each
  event past the last window): the number of messages and the time to send them.

Prints messages per channel and seconds to deliver for each.

    python benchmarks/bench_alert_storm.py [N]     # default 1000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine
from tickwork.adapters.metrics import InMemoryMetrics
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.events import SqliteEventLog, SqliteRunChangeFeed
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.adapters.targets.http import HttpInvoker
from tickwork.adapters.targets.registry import TargetRegistry
from tickwork.domain.alert_rules import AlertRules, Channel, ChannelKind
from tickwork.domain.clock import FakeClock
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Run, RunState, Target, Trigger
from tickwork.domain.schedule import parse_schedule
from tickwork.services.jobs import JobService, JobServiceConfig
from tickwork.services.watching import Watcher

START = datetime(2026, 12, 2, 12, 0, 30, tzinfo=UTC)


class _NoDispatch:
    def dispatch(self, runs: Any, now: Any, *, commit_by: Any = None) -> None:
        return None


def _receiver() -> tuple[ThreadingHTTPServer, Counter[str]]:
    counts: Counter[str] = Counter()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            counts[self.path] += 1
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, counts


def storm(n: int, window_seconds: int, base: str, counts: Counter[str], directory: Path) -> dict[str, Any]:
    db = Database(directory / "tickwork.db").open()
    clock = FakeClock(START)
    store, log, feed = SqliteStore(db), SqliteEventLog(db), SqliteRunChangeFeed(db)
    jobs = JobService(store, _NoDispatch(), clock, JobServiceConfig(shard_count=4))  # type: ignore[arg-type]
    http = HttpInvoker(b"bench-secret", lambda: clock.now().timestamp(), allow_loopback=True)
    invoker = TargetRegistry(http=http, aws=None)  # type: ignore[arg-type]
    watcher = Watcher(store, log, invoker, lambda *a: True, clock, InMemoryMetrics(), InMemoryMetrics())
    rules = AlertRules(
        channels=(Channel(ChannelKind.WEBHOOK, f"{base}/hook"), Channel(ChannelKind.SLACK, f"{base}/slack")),
        window_seconds=max(60, window_seconds),
    )
    target = Target("http", {"url": "https://example.com/x", "method": "POST", "body": ""})
    fire = START.replace(second=0) + timedelta(minutes=1)
    spread = timedelta(seconds=window_seconds) if window_seconds < 60 else timedelta(0)
    for i in range(n):
        job = jobs.create(
            "alice", JobSpec(f"job-{i}", parse_schedule("0 3 * * *", "UTC"), target, alerts=rules)
        )
        run = Run.for_fire(job, fire, now=START, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
        store.restore_runs([run])
        # Unwindowed: each failure lands after the last one's window (windows are at least 60 s long).
        started = fire + spread * i * 61
        running = replace(run, state=RunState.RUNNING, attempt=1, started_at=started, start_delay_ms=0)
        store.transition_run(run, running)
        store.transition_run(
            running, replace(running, state=RunState.FAILED, finished_at=started, reason="upstream down")
        )
    clock.set(fire + spread * n * 61 + timedelta(seconds=1))
    counts.clear()
    began = time.perf_counter()
    changes = feed.take_changes(10 * n)
    observed = watcher.observe([c for _, c in changes])
    feed.forget_changes(changes[-1][0])
    first = watcher.deliver(limit=10 * n)
    first_s = time.perf_counter() - began
    clock.advance(rules.window_seconds + 1)
    began = time.perf_counter()
    digests = watcher.deliver(limit=10 * n)
    digest_s = time.perf_counter() - began
    db.close()
    return {
        "events": observed.events,
        "hook": counts["/hook"],
        "slack": counts["/slack"],
        "first_s": first_s,
        "first_sent": first.sent,
        "digest_s": digest_s,
        "digests": digests.digests,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("n", type=int, nargs="?", default=1000)
    n = parser.parse_args().n
    server, counts = _receiver()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        print(f"machine: {machine()}")
        print(f"{n} jobs fail at once; each has a webhook and a Slack channel on one loopback receiver")
        print("| | events | to the webhook | to Slack | events recorded + first sends | digests sent |")
        print("|---|---|---|---|---|---|")
        for name, window in (("windowed (300 s)", 300), ("unwindowed", 1)):
            with tempfile.TemporaryDirectory() as directory:
                r = storm(n, window, base, counts, Path(directory))
            print(
                f"| {name} | {r['events']} | {r['hook']} | {r['slack']} | {r['first_s']:.2f} s "
                f"({r['first_sent']} sent) | {r['digest_s']:.2f} s ({r['digests']} digests) |"
            )
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
