"""The Temporal worker of the Temporal peer (see peer_temporal.py): one workflow, `BenchFire`, that executes
ONE activity, `post_target`: an HTTP POST to the loopback target with `X-Bench-Job: <key>` (the same call
as every other peer makes, `_e2e.call_target`).

Started by peer_temporal.py as a service of its own (its CPU and RSS are measured as the "worker" group):

    python benchmarks/_temporal_worker.py --address 127.0.0.1:PORT --task-queue Q --concurrency 200

It runs until SIGTERM or SIGINT, then shuts the worker down (polls cancelled, running activities finish).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import PollerBehaviorSimpleMaximum, UnsandboxedWorkflowRunner, Worker

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _e2e import call_target

WORKFLOW = "BenchFire"
ACTIVITY = "post_target"


@activity.defn(name=ACTIVITY)
def post_target(url: str, key: str) -> None:
    """One POST to the target; an HTTP error or a refused connection raises, so Temporal retries it."""
    call_target(url, key)


@workflow.defn(name=WORKFLOW)
class BenchFire:
    """What a schedule starts: the one call, with the run's own timeout and attempts (passed as arguments so
    every run carries its settings, like a Tickwork job does)."""

    @workflow.run
    async def run(self, url: str, key: str, timeout_s: int, max_attempts: int) -> None:
        await workflow.execute_activity(
            ACTIVITY,
            args=[url, key],
            start_to_close_timeout=timedelta(seconds=timeout_s),
            retry_policy=RetryPolicy(maximum_attempts=max_attempts),
        )


async def serve(address: str, namespace: str, task_queue: str, concurrency: int) -> None:
    client = await Client.connect(address, namespace=namespace)
    # The activity is a blocking urllib call, so it runs in threads: one thread per run executing at once.
    executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="post")
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[BenchFire],
        activities=[post_target],
        activity_executor=executor,
        # Runs executing at once = the settings' concurrency (Tickwork's cap, every peer's concurrency).
        max_concurrent_activities=concurrency,
        # A workflow task here is tiny (schedule the activity, then complete): 100 slots (the SDK's default)
        # keep up with a burst; more would only queue more work for the same 2 cores.
        max_concurrent_workflow_tasks=100,
        # Pollers: the SDK's default 5 for each kind. One poll returns one task, and a burst hands out at most
        # a few dozen tasks a second here (the scheduler's start rate), so 5 outstanding polls keep up; the
        # workflow task's completion also hands the activity back eagerly (no extra poll) when a slot is free.
        workflow_task_poller_behavior=PollerBehaviorSimpleMaximum(maximum=5),
        activity_task_poller_behavior=PollerBehaviorSimpleMaximum(maximum=5),
        # The workflow is deterministic by construction (one activity, no time, no randomness, no I/O), so it
        # runs without the Python SDK's sandbox, which re-imports the workflow's modules for every run: CPU
        # that is the SDK's safety net, not scheduling. This favours Temporal.
        workflow_runner=UnsandboxedWorkflowRunner(),
        # A stop waits up to 5 s for calls in flight (the benchmark stops the worker after the burst only).
        graceful_shutdown_timeout=timedelta(seconds=5),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print(f"worker polling {task_queue} with concurrency {concurrency}", flush=True)
        await stop.wait()
    executor.shutdown(wait=False, cancel_futures=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", required=True, help="the dev server's frontend, host:port")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.address, args.namespace, args.task_queue, args.concurrency))


if __name__ == "__main__":
    main()
