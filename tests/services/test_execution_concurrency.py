"""Concurrent execution against MiniStack and SQLite: duplicate deliveries racing, and the concurrency cap."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.conftest import RacingEngine
from tests.fakes import RecordingDispatcher, RecordingMetrics, ScriptedInvoker
from tickwork.adapters.sqlite.queue import queue_configs
from tickwork.adapters.sqs import SqsDispatcher
from tickwork.adapters.sqs_provision import ensure_queues
from tickwork.adapters.targets.aws import AwsInvoker
from tickwork.adapters.targets.http import HttpInvoker
from tickwork.adapters.targets.registry import TargetRegistry
from tickwork.domain.clock import FakeClock, SystemClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Run, RunState, Target
from tickwork.domain.schedule import parse_schedule
from tickwork.local.executor_pool import ExecutorPool
from tickwork.services.executing import Executor, ExecutorConfig, Outcome
from tickwork.services.jobs import JobService, JobServiceConfig


def plan_runs(store: Any, target: Target, jobs: int) -> list[Run]:
    """`jobs` jobs firing every 30 s, created 5 minutes ago: each has 4 planned runs, all due now."""
    clock = FakeClock(SystemClock().now() - timedelta(minutes=5))
    recorder = RecordingDispatcher()
    service = JobService(store, recorder, clock, JobServiceConfig(shard_count=2))
    for _ in range(jobs):
        service.create(
            "alice", JobSpec(name="burst", schedule=parse_schedule("*/30 * * * * *"), target=target)
        )
    return recorder.sent


def test_racing_duplicate_deliveries_start_the_target_once(racing_engine: RacingEngine) -> None:
    store = racing_engine.store()
    [run, *_] = plan_runs(store, Target("http", {"url": "http://127.0.0.1:9/"}), jobs=1)
    invoker = ScriptedInvoker()
    message = RunMessage.for_run(run)
    barrier = threading.Barrier(8)

    def deliver(worker: int) -> Outcome:
        executor = Executor(
            racing_engine.store(),
            invoker,
            RecordingDispatcher(),
            SystemClock(),
            RecordingMetrics(),
            ExecutorConfig(worker_id=f"worker-{worker}"),
        )
        barrier.wait()
        return executor.execute(message)

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(deliver, range(8)))

    assert sorted(outcomes) == sorted([Outcome.SUCCEEDED] + [Outcome.DUPLICATE] * 7)
    assert len(invoker.calls) == 1
    stored = store.get_run(run.job_id, run.scheduled_for)
    assert stored is not None and (stored.state, stored.attempt) == (RunState.SUCCEEDED, 1)


class SlowTarget:
    """A loopback HTTP target that takes `delay` seconds and records how many calls overlap."""

    def __init__(self, delay: float) -> None:
        self.in_flight = 0
        self.peak = 0
        self.calls = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    outer.in_flight += 1
                    outer.calls += 1
                    outer.peak = max(outer.peak, outer.in_flight)
                time.sleep(delay)
                with lock:
                    outer.in_flight -= 1
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/slow"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slow_target() -> Iterator[SlowTarget]:
    target = SlowTarget(delay=0.3)
    yield target
    target.close()


@pytest.mark.network  # the slow target is a real HTTP server on loopback
def test_a_burst_larger_than_the_cap_never_exceeds_it(
    racing_engine: RacingEngine, slow_target: SlowTarget
) -> None:
    cap = 5
    store, sqs = racing_engine.store(), racing_engine.queues()
    if racing_engine.name == "sqlite":
        queue_urls, _, _ = queue_configs(racing_engine.names, 2)
    else:
        queue_urls, _ = ensure_queues(sqs, racing_engine.names, dispatch_queues=2)
    runs = plan_runs(store, Target("http", {"url": slow_target.url}), jobs=6)  # 24 runs due at once
    SqsDispatcher(sqs, queue_urls).dispatch(runs, SystemClock().now())
    http = HttpInvoker(b"secret", lambda: time.time(), allow_loopback=True)
    registry = TargetRegistry(http=http, aws=AwsInvoker(lambda service: None))

    def executor() -> Executor:
        return Executor(
            store,
            registry,
            SqsDispatcher(sqs, queue_urls),
            SystemClock(),
            RecordingMetrics(),
            ExecutorConfig(worker_id="local-pool"),
        )

    pool = ExecutorPool(sqs, queue_urls, executor, cap=cap)
    stop = threading.Event()
    worker = threading.Thread(target=pool.run, args=(stop,))
    worker.start()
    deadline = time.monotonic() + 30
    while slow_target.calls < len(runs) and time.monotonic() < deadline:
        time.sleep(0.1)
    while pool.stats.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    worker.join(timeout=10)

    assert slow_target.calls == len(runs) == 24
    assert slow_target.peak == cap  # the cap was reached ...
    assert pool.stats.peak_in_flight <= cap  # ... and never exceeded
    stored = [s for r in runs if (s := store.get_run(r.job_id, r.scheduled_for)) is not None]
    assert [s.state for s in stored] == [RunState.SUCCEEDED] * len(runs)
    assert all(
        s.dispatched_at is not None and s.dispatched_at <= (s.started_at or s.dispatched_at) for s in stored
    )
