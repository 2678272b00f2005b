"""The Celery app of the Celery + RedBeat peer (benchmarks/peer_celery.py): one task that makes one HTTP POST
to the benchmark's loopback target, and the configuration the worker, beat and the benchmark process share.

The worker and beat load it with `celery -A _celery_app ...` (benchmarks/ on PYTHONPATH) and read their
settings from the environment (`BENCH_CELERY_*`, set by peer_celery.py); the benchmark process builds its own
instance with `make_app(...)` to register the jobs through RedBeat's API and to read the results.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.request import Request, urlopen

from celery import Celery  # type: ignore[import-untyped]

TASK_NAME = "bench.call_target"

ENV_REDIS_URL = "BENCH_CELERY_REDIS_URL"
ENV_TIMEOUT = "BENCH_CELERY_TIMEOUT_S"
ENV_MAX_ATTEMPTS = "BENCH_CELERY_MAX_ATTEMPTS"

# How long beat may sleep between two reads of its schedule. Beat sleeps until the next entry it knows of,
# so this does not make a burst late: at every tick RedBeat reads the due entries and peeks at the next one
# within this interval (a sorted set by next due time), then sleeps exactly until it. It is how soon
# entries added or changed at run time are seen, and how often an idle beat wakes up. Celery's default
# (300 s) is for its static file scheduler; 5 s is what schedulers whose entries change at run time use
# (django-celery-beat's default, the value RedBeat users commonly set), and the jobs here are added while
# beat runs.
BEAT_MAX_LOOP_INTERVAL_S = 5.0

# RedBeat's lock (one active beat): taken at start, extended to this TTL at every tick. RedBeat's default
# is 5 x the loop interval (25 s here), but the lock is extended only at the start of a tick, and the tick
# that sends a burst loads and sends every due entry one after the other: at 10,000 entries that tick can
# last longer than 25 s, the next extend then fails ("Cannot extend a lock that's no longer owned") and
# beat stops. So the lock outlasts the longest tick; the cost is only how long a standby beat would wait to
# take over after the active one died, and there is no standby here.
REDBEAT_LOCK_TIMEOUT_S = 600


def post(url: str, key: str, timeout: float) -> None:
    """One POST to the target, as `_e2e.call_target` makes it (new connection, `X-Bench-Job: key`), with the
    peer's call timeout (call_target's own is fixed at 60 s)."""
    request = Request(url, data=b"{}", method="POST", headers={"X-Bench-Job": key})
    with urlopen(request, timeout=timeout) as response:
        response.read()


def make_app(redis_url: str, timeout_s: float, max_attempts: int) -> Celery:
    app = Celery("bench_peer_celery")
    app.conf.update(
        # One Redis for everything: broker, result backend and RedBeat's schedule (one service to run, like
        # Tickwork's one store).
        broker_url=redis_url,
        result_backend=redis_url,
        redbeat_redis_url=redis_url,
        broker_connection_retry_on_startup=True,  # Celery 5's default behaviour, set to silence its warning
        # Cron in UTC, like every other scheduler in the comparison.
        timezone="UTC",
        enable_utc=True,
        # At-least-once like Tickwork: the message is acknowledged after the task ran, not when the worker
        # took it, and a task whose worker died is given back to the queue (Redis redelivers unacknowledged
        # messages after the broker's visibility timeout).
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # With late acks Celery's documentation recommends a multiplier of 1: the worker reserves only as many
        # messages as it has free slots (concurrency x 1), so a busy worker does not sit on messages another
        # could run, as Tickwork's executor claims a run only when it has a free slot. (The default, 4, would
        # reserve 4 x concurrency messages.)
        worker_prefetch_multiplier=1,
        # A record of each run in the result backend, as Tickwork keeps a run history: state, finish time,
        # and (extended) the task's name and args, which name the job the run belongs to. Results expire after
        # Celery's default day.
        result_extended=True,
        # Plain JSON both ways (Celery's default serializer, named so the result records are readable).
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        beat_max_loop_interval=BEAT_MAX_LOOP_INTERVAL_S,
        redbeat_lock_timeout=REDBEAT_LOCK_TIMEOUT_S,
    )

    @app.task(  # type: ignore[untyped-decorator]
        name=TASK_NAME,
        # A failed call (connection refused or reset, timeout, HTTP error: all OSError, URLError included) is
        # tried again, up to max_attempts attempts in all, with Tickwork's default backoff: exponential from
        # 10 s, capped at 600 s, full jitter.
        autoretry_for=(OSError,),
        max_retries=max_attempts - 1,
        retry_backoff=10,
        retry_backoff_max=600,
        retry_jitter=True,
    )
    def call_target(url: str, key: str) -> None:
        post(url, key, timeout_s)

    return app


# The app the worker and beat load (`-A _celery_app`); the benchmark process, which imports this module for
# `make_app`, has no such environment and builds its own.
app: Celery | None = (
    make_app(os.environ[ENV_REDIS_URL], float(os.environ[ENV_TIMEOUT]), int(os.environ[ENV_MAX_ATTEMPTS]))
    if ENV_REDIS_URL in os.environ
    else None
)


def environment(redis_url: str, timeout_s: float, max_attempts: int) -> Mapping[str, str]:
    """What the worker and beat need in their environment to build the same app."""
    return {ENV_REDIS_URL: redis_url, ENV_TIMEOUT: str(timeout_s), ENV_MAX_ATTEMPTS: str(max_attempts)}
