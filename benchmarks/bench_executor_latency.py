"""The executor's side of a run at AWS-like latencies (issue 29, part 2): how long after its invocation
starts a run's target is called (the claim delay), and how long after the target answers the run's
delivery is done (the finish), measured on the real code path instead of assumed. The simulation
`bench_top_of_hour.py` takes these figures as its claim and finish.

What runs: the executor Lambda's own handler (`handlers/executor.py`: Powertools' batch processing, the
batch's records on one thread each, the invocation carrier that keeps a claimed message hidden), over the
composition root's own `Components.executor()` (the real `Executor`, its slots and its store retries), with
the in-memory store and slots (`adapters/memory`) and a fake SQS client in place of AWS. The real
`SqsDispatcher` sends any message the executor sends back. Every call that would cross the network on AWS
sleeps first, one draw from a uniform range, as many times as the DynamoDB adapter makes that call:

- a conditional write (UpdateItem of a run or a slot stripe; TransactWriteItems of a run and its job):
  uniform 10-20 ms; a single-item read (GetItem): uniform 5-10 ms; an SQS call (ChangeMessageVisibility,
  SendMessage, SendMessageBatch, DeleteMessage): uniform 5-15 ms. These are the in-region ranges the issue
  states as its assumption (the same as `bench_plan_latency.py`); they are not measured here (no AWS
  account). Pass other ranges with --write-ms, --read-ms, --sqs-ms.
- the slots take one conditional write per pool to acquire and one to release
  (`adapters/dynamodb/slots.py`, the common case: the hold's home stripe has room); the in-memory slots do
  a pool set in one call, so the wrapper sleeps once per pool.

The target answers at once (in-process, like the tests' scripted invoker): the figures are the executor's
own overhead around a call, not a call's. Each batch is planned first by the real planner (outside the
timing), its runs due a moment before the invocation starts (so nothing holds for its fire time), and the
SQS records are built as the event source mapping delivers them. Not modelled: Lambda's own invoke overhead,
cold starts (the first --warmup invocations are run and left out), the mapping's DeleteMessageBatch after
the invocation (the mapping's, not the function's time), and AWS throttling.

What it reports, over --batches invocations of --batch-size messages: per run, the claim delay (the
invocation's start to the target call) and the finish (the target's answer to the end of the run's
delivery: its end write and the slot's release), the invocation's total, p50 / p99 / max of each; the AWS
calls per run by kind; and the `bench_top_of_hour.py` options with the measured p50s.

    python benchmarks/bench_executor_latency.py
    python benchmarks/bench_executor_latency.py --batches 50 --batch-size 10 --write-ms 10-20
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import concurrency_note, machine, make_job
from tickwork.adapters.memory.slots import MemorySlots
from tickwork.adapters.memory.store import MemoryStore
from tickwork.adapters.metrics import PowertoolsMetrics
from tickwork.adapters.sqs import SqsDispatcher
from tickwork.composition import Components
from tickwork.domain.clock import FakeClock, SystemClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.models import RunState, Target
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.targets import Invocation, TargetResult
from tickwork.handlers import executor as executor_handler
from tickwork.handlers import runtime
from tickwork.services.executing import Executor, Outcome
from tickwork.services.planning import Planner
from tickwork.services.ports import Carrier
from tickwork.services.retrying import retrying
from tickwork.settings import Settings

EXECUTOR_TIMEOUT_S = 900  # infra/constructs/executor.py (EXECUTOR_TIMEOUT_SECONDS)
ACCOUNT = "123456789012"
QUEUE_URLS = tuple(f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/tickwork-dispatch-{i}" for i in range(10))
# A schedule that does not fire again for months: each batch plans exactly its own runs.
YEARLY = parse_schedule("0 0 1 1 *")


class Latency:
    """A uniform range in milliseconds; `wait` sleeps one draw from it. One seeded generator under a lock:
    the draws are reproducible as a set, whichever thread takes which."""

    def __init__(self, spec: str, rng: random.Random, lock: threading.Lock) -> None:
        low, _, high = spec.partition("-")
        self.spec = spec
        self.low, self.high = float(low), float(high or low)
        self._rng, self._lock = rng, lock

    def wait(self) -> float:
        with self._lock:
            seconds = self._rng.uniform(self.low, self.high) / 1000
        time.sleep(seconds)
        return seconds


@dataclass
class RunTrace:
    """One run's delivery, in perf_counter seconds, and the AWS calls it made."""

    began: float = math.nan  # its record handler entered the executor
    called: float = math.nan  # the target was called
    answered: float = math.nan  # the target answered
    ended: float = math.nan  # the executor returned
    calls: Counter[str] = field(default_factory=Counter)  # "AWS call (port method)" -> count
    slept_before: float = 0.0  # injected latency before the target call
    slept_after: float = 0.0  # and after its answer


class Traces:
    """The runs of the invocation under way, each known on its own record's thread."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self.runs: dict[str, RunTrace] = {}
        self.unattributed: Counter[str] = Counter()  # calls made off a run's thread (none expected)

    def begin(self, key: str) -> RunTrace:
        trace = RunTrace(began=time.perf_counter())
        with self._lock:
            self.runs[key] = trace
        self._local.run = trace
        return trace

    def leave(self) -> None:
        self._local.run = None

    def current(self) -> RunTrace | None:
        run: RunTrace | None = getattr(self._local, "run", None)
        return run

    def note(self, call: str, slept: float) -> None:
        trace = self.current()
        if trace is None:
            with self._lock:
                self.unattributed[call] += 1
            return
        trace.calls[call] += 1
        if math.isnan(trace.answered):
            trace.slept_before += slept
        else:
            trace.slept_after += slept

    def reset(self) -> None:
        with self._lock:
            self.runs = {}


@dataclass(frozen=True, slots=True)
class Network:
    """What each method of an adapter costs on AWS: (AWS call, latency), in the order the DynamoDB adapter
    makes them; `per_pool`: once per slot pool (the method's first argument)."""

    calls: Mapping[str, Sequence[tuple[str, Latency]]]
    per_pool: bool = False


class Slow:
    """An adapter behind a network: a method the table names sleeps its calls' latencies first; any other
    method is counted as unmodelled (printed, so that a path this benchmark does not price is seen)."""

    def __init__(self, inner: Any, name: str, network: Network, traces: Traces) -> None:
        self._inner, self._name, self._network, self._traces = inner, name, network, traces

    def __getattr__(self, method: str) -> Any:
        attribute = getattr(self._inner, method)
        if not callable(attribute) or method.startswith("_"):
            return attribute
        costs = self._network.calls.get(method)
        per_pool = self._network.per_pool

        def call(*args: Any, **kwargs: Any) -> Any:
            if costs is None:
                self._traces.note(f"unmodelled ({self._name}.{method})", 0.0)
            else:
                times = len(args[0]) if per_pool else 1
                for _ in range(times):
                    for aws_call, latency in costs:
                        self._traces.note(f"{aws_call} ({self._name}.{method})", latency.wait())
            return attribute(*args, **kwargs)

        return call


class FakeSqs:
    """The SQS API the executor's handler and dispatcher use, answering success (the wrapper around it
    adds the latency)."""

    def change_message_visibility(self, **_: Any) -> dict[str, Any]:
        return {}

    def delete_message(self, **_: Any) -> dict[str, Any]:
        return {}

    def send_message(self, **_: Any) -> dict[str, Any]:
        return {"MessageId": "m"}

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        return {"Successful": [{"Id": entry["Id"]} for entry in Entries], "Failed": []}


class CapturingSqs:
    """The planner's sends in the setup (no latency): kept, to be delivered as the mapping would."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []  # (queue URL, body)

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.sent.extend((QueueUrl, str(entry["MessageBody"])) for entry in Entries)
        return {"Successful": [{"Id": entry["Id"]} for entry in Entries], "Failed": []}


class InstantTarget:
    """A target that answers at once (TargetInvoker and TargetTracker), stamping the run's trace."""

    def __init__(self, traces: Traces) -> None:
        self._traces = traces

    def invoke(self, target: Target, invocation: Invocation) -> TargetResult:
        trace = self._traces.current()
        if trace is not None:
            trace.called = time.perf_counter()
        result = TargetResult(ok=True, retryable=False, status="200", latency_ms=0, detail="ok")
        if trace is not None:
            trace.answered = time.perf_counter()
        return result

    def track(self, target: Target, handle: str) -> TargetResult | None:
        return None


class TimedExecutor:
    """The composition's Executor, its `execute` bracketed by the run's trace (the handler calls only it)."""

    def __init__(self, inner: Executor, traces: Traces) -> None:
        self._inner, self._traces = inner, traces

    def execute(self, message: RunMessage, carrier: Carrier | None = None) -> Outcome:
        trace = self._traces.begin(message.job_id)
        try:
            return self._inner.execute(message, carrier)
        finally:
            trace.ended = time.perf_counter()
            self._traces.leave()


class BenchComponents(Components):
    """The composition root with its AWS-facing parts replaced by the in-memory adapters behind latencies
    (set where its cached properties keep them: `executor()`, `dispatcher` and the handler use them as
    built). `executor()` is the root's own, its result timed."""

    def __init__(self, settings: Settings, store: MemoryStore, latencies: Latencies, traces: Traces) -> None:
        super().__init__(settings, SystemClock(), self._no_client, PowertoolsMetrics(runtime.metrics))
        write, read, sqs = latencies.write, latencies.read, latencies.sqs
        store_network = Network(
            {
                "get_run": [("GetItem", read)],
                "get_job": [("GetItem", read)],
                "claim": [("UpdateItem", write)],
                "transition_run": [("UpdateItem", write)],
                "claim_exclusive": [("TransactWriteItems", write)],
                "enqueue_behind": [("TransactWriteItems", write)],
                "finish_exclusive": [("TransactWriteItems", write), ("GetItem", read)],
            }
        )
        slots_network = Network(
            {
                "acquire": [("UpdateItem", write)],
                "extend": [("UpdateItem", write)],
                "release": [("UpdateItem", write)],
            },
            per_pool=True,
        )
        sqs_network = Network(
            {
                "change_message_visibility": [("ChangeMessageVisibility", sqs)],
                "delete_message": [("DeleteMessage", sqs)],
                "send_message": [("SendMessage", sqs)],
                "send_message_batch": [("SendMessageBatch", sqs)],
            }
        )
        rng = random.Random(0)
        # As the root builds them: the store and the slots retried on throttling.
        self.__dict__["store"] = retrying(Slow(store, "store", store_network, traces), self.clock, rng)
        self.__dict__["slots"] = retrying(
            Slow(MemorySlots(), "slots", slots_network, traces), self.clock, rng
        )
        self.__dict__["queues"] = Slow(FakeSqs(), "sqs", sqs_network, traces)
        self.__dict__["targets"] = InstantTarget(traces)
        self.traces = traces

    @staticmethod
    def _no_client(service: str) -> Any:
        raise RuntimeError(f"the benchmark reaches no AWS service ({service})")

    def executor(self, worker_id: str | None = None) -> Executor:
        return cast(Executor, TimedExecutor(super().executor(worker_id), self.traces))


@dataclass(frozen=True, slots=True)
class Latencies:
    write: Latency
    read: Latency
    sqs: Latency


class Context:
    """The Lambda context the handler reads: its request id and the time it has left."""

    function_name = "tickwork-executor"
    memory_limit_in_mb = 512
    invoked_function_arn = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:tickwork-executor"

    def __init__(self, request_id: str) -> None:
        self.aws_request_id = request_id
        self._ends = time.monotonic() + EXECUTOR_TIMEOUT_S

    def get_remaining_time_in_millis(self) -> int:
        return int((self._ends - time.monotonic()) * 1000)


def planned_batch(store: MemoryStore, first: int, size: int) -> tuple[list[dict[str, Any]], datetime]:
    """`size` jobs due a moment ago, planned by the real planner (90 s ahead, as a tick plans them), and
    their messages as the event source mapping delivers them: SQS records."""
    fire = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    jobs = [make_job(first + n, 1, YEARLY, fire) for n in range(size)]
    for job in jobs:
        store.create_job(job, [])
    capture = CapturingSqs()
    tick = fire - timedelta(seconds=90)
    Planner(store, SqsDispatcher(capture, QUEUE_URLS), FakeClock(tick)).plan(0, tick)  # type: ignore[arg-type]
    wanted = {job.job_id for job in jobs}
    sent_ms = str(int(time.time() * 1000))
    records: list[dict[str, Any]] = []
    for url, body in capture.sent:
        message = RunMessage.from_json(body)
        if message.job_id not in wanted or message.scheduled_for != fire:
            continue
        index = len(records)
        records.append(
            {
                "messageId": f"m-{first + index}",
                "receiptHandle": f"r-{first + index}",
                "body": body,
                "attributes": {"SentTimestamp": sent_ms, "ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:us-east-1:{ACCOUNT}:{url.rsplit('/', 1)[-1]}",
                "awsRegion": "us-east-1",
            }
        )
    if len(records) != size:
        raise RuntimeError(f"planned {len(records)} messages for {size} jobs")
    return records, fire


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank, as bench_top_of_hour.py computes it."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class Measured:
    claim_ms: list[float] = field(default_factory=list)
    finish_ms: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    slept_before_ms: list[float] = field(default_factory=list)
    slept_after_ms: list[float] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)
    runs: int = 0


def one_invocation(
    parts: BenchComponents, store: MemoryStore, number: int, size: int
) -> tuple[float, list[RunTrace]]:
    records, fire = planned_batch(store, number * size, size)
    parts.traces.reset()
    emitted = io.StringIO()  # Powertools prints the invocation's metrics (EMF) to stdout as it ends
    started = time.perf_counter()
    with contextlib.redirect_stdout(emitted):
        response = executor_handler.handler({"Records": records}, Context(f"req-{number}"))
    ended = time.perf_counter()
    if response != {"batchItemFailures": []}:
        raise RuntimeError(f"invocation {number} reported failures: {response}")
    traces = list(parts.traces.runs.values())
    for n in range(size):
        job_id = make_job(number * size + n, 1, YEARLY, fire).job_id
        run = store.get_run(job_id, fire)
        if run is None or run.state is not RunState.SUCCEEDED:
            raise RuntimeError(f"run of {job_id} is {None if run is None else run.state}, not succeeded")
    if len(traces) != size or any(math.isnan(t.called) for t in traces):
        raise RuntimeError(f"invocation {number}: {len(traces)} runs traced, not every target called")
    for trace in traces:
        trace.began -= started
        trace.called -= started
        trace.answered -= started
        trace.ended -= started
    return ended - started, traces


def measure(args: argparse.Namespace) -> tuple[Measured, Traces]:
    lock = threading.Lock()
    rng = random.Random(args.seed)
    latencies = Latencies(
        Latency(args.write_ms, rng, lock), Latency(args.read_ms, rng, lock), Latency(args.sqs_ms, rng, lock)
    )
    store = MemoryStore()
    traces = Traces()
    settings = Settings(dispatch_queue_urls=QUEUE_URLS, concurrency_cap=args.cap)
    parts = BenchComponents(settings, store, latencies, traces)
    runtime.install(parts)
    measured = Measured()
    try:
        for number in range(args.warmup + args.batches):
            total, runs = one_invocation(parts, store, number, args.batch_size)
            if number < args.warmup:
                continue
            measured.total_ms.append(total * 1000)
            for run in runs:
                measured.claim_ms.append(run.called * 1000)
                measured.finish_ms.append((run.ended - run.answered) * 1000)
                measured.slept_before_ms.append(run.slept_before * 1000)
                measured.slept_after_ms.append(run.slept_after * 1000)
                measured.calls.update(run.calls)
                measured.runs += 1
    finally:
        runtime.install(None)
    return measured, traces


def row(name: str, values: Sequence[float]) -> str:
    return (
        f"  {name:<34} {percentile(values, 0.50):8.1f} {percentile(values, 0.99):8.1f} "
        f"{max(values):8.1f} {sum(values) / len(values):8.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=50, help="invocations measured")
    parser.add_argument("--batch-size", type=int, default=10, help="messages an invocation receives")
    parser.add_argument("--warmup", type=int, default=2, help="invocations run first and not counted")
    parser.add_argument("--cap", type=int, default=10_000, help="the concurrency bound (the slots' pool)")
    parser.add_argument("--write-ms", default="10-20", help="conditional write / TransactWriteItems, ms")
    parser.add_argument("--read-ms", default="5-10", help="single-item read (GetItem), ms")
    parser.add_argument("--sqs-ms", default="5-15", help="an SQS call, ms")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    print(machine())
    print(concurrency_note())
    print(
        f"{args.batches} invocations of {args.batch_size} messages (+{args.warmup} warm-up), "
        f"cap {args.cap:,}; "
        f"latencies: write {args.write_ms} ms, read {args.read_ms} ms, SQS {args.sqs_ms} ms "
        "(the issue's assumption, not measured on AWS)"
    )
    measured, traces = measure(args)
    print(f"\n  {'ms':<34} {'p50':>8} {'p99':>8} {'max':>8} {'mean':>8}")
    print(row("claim delay (invocation -> call)", measured.claim_ms))
    print(row("  of it, injected latency", measured.slept_before_ms))
    print(row("finish (answer -> delivery done)", measured.finish_ms))
    print(row("  of it, injected latency", measured.slept_after_ms))
    print(row(f"invocation total ({args.batch_size} runs)", measured.total_ms))
    print(f"\n  AWS calls per run ({measured.runs} runs):")
    for call, count in sorted(measured.calls.items()):
        print(f"    {count / measured.runs:5.2f}  {call}")
    if traces.unattributed:
        print(f"  calls off a run's thread: {dict(traces.unattributed)}")
    if any(call.startswith("unmodelled") for call in measured.calls):
        print("  WARNING: some calls carry no latency (unmodelled): the figures above miss them")
    claim = percentile(measured.claim_ms, 0.50)
    finish = percentile(measured.finish_ms, 0.50)
    print(f"\nbench_top_of_hour.py --claim-ms {claim:.0f} --finish-ms {finish:.0f}  (its defaults: 42, 31)")


if __name__ == "__main__":
    main()
