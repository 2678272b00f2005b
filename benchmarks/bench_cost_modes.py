"""Cost per successful run for each completion mode, side by side in one run, on MiniStack: DynamoDB write
and read units, DynamoDB calls and SQS calls per run, counted from what really happened.

For each mode N jobs (bench_cost.py's jobs, with the mode's target and completion) fire at once, in tables
and a dispatch queue of their own. The ticker's Planner plans them (its message before its commit), the
executor runs every message as the executor Lambda does (batches of up to 10 on threads, each message with
the Lambda handler's own carrier, which keeps it hidden for the claimed run's lease), every attempt takes
its concurrency slot in the DynamoDB slots table (cap 10,000, its stripes already there as in a running
deployment: the hot path, a home stripe with room):

- response: an HTTP target answers 200 (bench_cost.py's hot path, with the slot);
- delivery: an SQS target queue accepts the message;
- callback: the HTTP target answers 202; then, as the API Lambda does for each run, one heartbeat and the
  completion (`tickwork.services.callbacks.Callbacks`), both within the first heartbeat interval, whose
  finish message the executor applies; the run's watching message comes back at its lease end (150 s +
  a 5 s margin here), reads the run and finds it over. A run that heartbeats past its first lease pays
  one more watching message per lease (a read of the run, its send, receive and delete), which the output
  says apart when it happens;
- tracked: a Step Functions state machine (Pass, Succeed) starts an execution, which MiniStack really runs;
  the executor's look (5 s later) asks DescribeExecution and ends the run with the execution's status.
  Measured only when the target adapters can follow an execution (TargetRegistry.track).

Everything runs until its queue is empty (nothing delayed, nothing in flight), so every message a run
causes is counted. Every run must end `succeeded`. Units come from the real items, read before and after
each write, with benchmarks/write_units.py's rules (benchmarks/_meter.py); the plan's due-index read and
the ticker's and sweeper's fixed per-minute work are spread over the load model's runs a minute exactly as
bench_cost.py does. The harness's own calls (queue depth, reading items for the units) are not counted.

    python benchmarks/bench_cost_modes.py [runs per mode] [mode ...]
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

from _common import CallCounter, client, concurrency_note, dummy_aws_env, machine, seed_jobs
from _meter import UnitMeter, Units
from bench_cost import (
    FIRE,
    MIX,
    PRICE_RRU,
    PRICE_SQS,
    PRICE_WRU,
    SHARDS,
    SQS_OPERATIONS,
    TICK_FIXED_OPERATIONS,
    TOTAL_JOBS,
    lambda_carrier,
    make_jobs,
    warm_slots,
)
from tickwork.adapters.dynamodb.items import deserialize
from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.adapters.dynamodb.slots import DynamoSlots
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.adapters.metrics import InMemoryMetrics
from tickwork.adapters.sqs import SqsDeadLetters, SqsDispatcher
from tickwork.adapters.sqs_provision import ensure_queues
from tickwork.adapters.targets.aws import AwsInvoker
from tickwork.adapters.targets.http import HttpInvoker
from tickwork.adapters.targets.registry import TargetRegistry
from tickwork.domain.callbacks import CallbackLinks
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.models import Completion, Job, RunState, Target
from tickwork.domain.slots import SlotLimits
from tickwork.domain.targets import Invocation, TargetResult
from tickwork.local.echo import EchoServer
from tickwork.local.emulator import DEFAULT_REGION, Emulator, EmulatorConfig
from tickwork.resources import SLOTS, ResourceNames
from tickwork.services.callbacks import Callbacks, Report
from tickwork.services.executing import Executor, ExecutorConfig, Outcome
from tickwork.services.planning import Planner
from tickwork.services.sweeping import Sweeper
from write_units import item_size

MODES = ("response", "delivery", "callback", "tracked")
ACCOUNT = "000000000000"  # MiniStack's
CAP = 10_000  # the production cap of the load model: the hot path (a home stripe with room)
BATCH = 10  # executor_batch_size
LEASE_MARGIN = timedelta(seconds=5)  # shorter than the deployed 30 s: a watching message returns sooner
# A callback run's lease after its 202 (and after its heartbeat): this + the margin. Long enough that every
# run's heartbeat and completion land, and its finish is applied, before its watching message comes back
# (1,000 runs take ~60 s on 2 shared cores): the scenario is one watch hop, whatever the machine's load.
HEARTBEAT_SECONDS = 150
CALLBACK_TIMEOUT_SECONDS = 3600
CALLBACK_SECRET = b"bench-callback-key"
DRAIN_LIMIT_S = 300.0  # a mode whose queue is not empty by then failed


class LiveClock:
    """The benchmark's time: the fire instant plus the real time elapsed since, so SQS's real delays and the
    services' leases agree (a message delayed to a lease end arrives when the clock says the lease ended)."""

    def __init__(self, start: datetime) -> None:
        self._start = start
        self._origin = time.monotonic()

    def now(self) -> datetime:
        return self._start + timedelta(seconds=time.monotonic() - self._origin)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class CountingTargets:
    """The executor's target registry, counting its calls (starts) and looks (tracked runs) by kind."""

    def __init__(self, registry: TargetRegistry) -> None:
        self._registry = registry
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def _count(self, name: str) -> None:
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + 1

    def invoke(self, target: Target, invocation: Invocation) -> TargetResult:
        self._count(f"{target.kind} call")
        return self._registry.invoke(target, invocation)

    def track(self, target: Target, handle: str) -> TargetResult | None:
        self._count(f"{target.kind} look")
        track: Callable[[Target, str], TargetResult | None] = getattr(self._registry, "track")  # noqa: B009
        return track(target, handle)


class AcceptingTarget:
    """An HTTP target that takes every call for later (202) and keeps each call's callback URLs."""

    def __init__(self) -> None:
        self.links: list[tuple[str, str]] = []  # (completion URL, heartbeat URL) per call
        links, lock = self.links, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    links.append(
                        (
                            self.headers.get("X-Tickwork-Completion-Url", ""),
                            self.headers.get("X-Tickwork-Heartbeat-Url", ""),
                        )
                    )
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/work"

    def start(self) -> AcceptingTarget:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def token_of(url: str) -> str:
    """The token of a callback URL: /callbacks/<token>/complete."""
    return urlsplit(url).path.split("/")[-2]


@dataclass
class Phase:
    """One phase's counted calls and priced units."""

    calls: dict[str, int] = field(default_factory=dict)
    units: Units = field(default_factory=Units)


@dataclass
class ModeResult:
    mode: str
    runs: int
    job_size: float
    plan: Phase
    run: Phase  # everything after the plan: executor, callback API, looks
    sweep: Phase
    target_calls: dict[str, int]
    api_requests: int
    outcomes: dict[str, int]
    seconds: float
    note: str = ""


@dataclass
class Targets:
    """What the modes call: an echo (200), an accepting target (202), a target queue, a state machine."""

    echo: EchoServer
    accepting: AcceptingTarget
    queue_url: str
    state_machine_arn: str


def tracking_available() -> bool:
    return callable(getattr(TargetRegistry, "track", None))


def mode_job(job: Job, mode: str, targets: Targets) -> Job:
    """bench_cost.py's job (an HTTP POST to the echo: the response mode as it is) with the mode's target."""
    if mode == "response":
        return job
    if mode == "delivery":
        queue = {"queue_url": targets.queue_url, "message": "settlement export"}
        return replace(job, target=Target("sqs", queue), completion=Completion.DELIVERY)
    if mode == "callback":
        return replace(
            job,
            target=Target("http", {"url": targets.accepting.url, "method": "POST", "headers": {}}),
            completion=Completion.CALLBACK,
            heartbeat_seconds=HEARTBEAT_SECONDS,
            timeout_seconds=CALLBACK_TIMEOUT_SECONDS,
        )
    execution: dict[str, Any] = {
        "state_machine_arn": targets.state_machine_arn,
        "input": {"export": "settlement"},
    }
    return replace(job, target=Target("stepfunctions", execution), completion=Completion.TRACKED)


def measure_mode(mode: str, count: int, endpoint: str, targets: Targets) -> ModeResult:
    started = time.monotonic()
    names = ResourceNames(prefix=f"modes-{mode}")
    raw_dynamodb, raw_sqs = client("dynamodb", endpoint), client("sqs", endpoint)
    ensure_tables(raw_dynamodb, names)
    queue_urls, dlq_url = ensure_queues(raw_sqs, names, 1)
    queue_url = queue_urls[0]
    jobs = [mode_job(job, mode, targets) for job in make_jobs(count, targets.echo.url)]
    tables = TableNames.from_resources(names)
    seed_jobs(raw_dynamodb, tables.jobs, jobs)
    warm_slots(raw_dynamodb, names.table(SLOTS), CAP)

    dynamodb, sqs = client("dynamodb", endpoint), client("sqs", endpoint)
    counter = CallCounter()
    counter.attach(dynamodb, sqs)
    meter: Any = UnitMeter(dynamodb, raw_dynamodb, names)  # a DynamoDB client to the stores
    store = DynamoStore(meter, tables)
    slots = DynamoSlots(meter, names.table(SLOTS))
    limits = SlotLimits(CAP)
    dispatcher = SqsDispatcher(sqs, queue_urls)
    clock = LiveClock(FIRE)
    metrics = InMemoryMetrics()

    # The targets' own calls (the work, not Tickwork's bookkeeping) on clients of their own, counted apart.
    target_counter = CallCounter()
    target_clients: dict[str, Any] = {}
    target_lock = threading.Lock()

    def target_client(service: str) -> Any:
        with target_lock:
            if service not in target_clients:
                target_clients[service] = client(service, endpoint)
                target_counter.attach(target_clients[service])
            return target_clients[service]

    registry = CountingTargets(
        TargetRegistry(
            http=HttpInvoker(b"bench-secret", time.time, allow_loopback=True), aws=AwsInvoker(target_client)
        )
    )
    tracked = mode == "tracked"
    executor = Executor(
        store,
        registry,
        dispatcher,
        clock,
        metrics,
        ExecutorConfig(
            "bench-executor",
            lease_margin=LEASE_MARGIN,
            callbacks=CallbackLinks("https://api.example.com", CALLBACK_SECRET),
            limits=limits,
        ),
        slots=slots,
        tracker=registry if tracked else None,
    )

    # 1. plan: the tick at the fire time (every shard), as the ticker does.
    planner = Planner(store, dispatcher, clock)
    runs = sum(planner.plan(shard, FIRE).runs_planned for shard in range(SHARDS))
    plan = Phase(dict(counter.calls), meter.reset())
    counter.reset()
    assert runs == count, f"{mode}: {runs} runs planned of {count}"

    # 2. run: every message until the queue is empty, as the executor Lambda receives them.
    outcomes: dict[str, int] = {}
    lock = threading.Lock()
    accepted_before = len(targets.accepting.links)

    def execute(message: dict[str, Any]) -> None:
        carrier = lambda_carrier(message, sqs, queue_url, clock)
        body = RunMessage.from_json(message["Body"])
        sent = message.get("Attributes", {}).get("SentTimestamp")
        outcome = executor.execute(body.with_sent_at_ms(sent), carrier)
        with lock:
            outcomes[str(outcome)] = outcomes.get(str(outcome), 0) + 1

    def depth() -> tuple[int, int]:
        """Visible messages, and all of them (visible, delayed, in flight): the harness's, not counted."""
        attributes = raw_sqs.get_queue_attributes(
            QueueUrl=queue_url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesDelayed",
                "ApproximateNumberOfMessagesNotVisible",
            ],
        )["Attributes"]
        visible = int(attributes["ApproximateNumberOfMessages"])
        return visible, visible + sum(
            int(attributes[name])
            for name in ("ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessagesNotVisible")
        )

    def drain(done: Callable[[], bool] | None = None) -> None:
        """Receive and run batches of up to 10 while messages are visible, until `done()`, or without it
        until the queue holds nothing at all (nothing visible, delayed or in flight). A receive is made
        only when a message is visible: an idle poll is the event source mapping's fixed cost, not a
        run's."""
        deadline = time.monotonic() + DRAIN_LIMIT_S
        with ThreadPoolExecutor(max_workers=BATCH) as pool:
            while True:
                if done is not None and done():
                    return
                visible, total = depth()
                if done is None and total == 0:
                    return
                if time.monotonic() > deadline:
                    raise SystemExit(f"{mode}: the queue still holds {total} messages; outcomes {outcomes}")
                if visible == 0:
                    time.sleep(0.25)
                    continue
                messages = sqs.receive_message(
                    QueueUrl=queue_url,
                    MaxNumberOfMessages=BATCH,
                    WaitTimeSeconds=0,
                    AttributeNames=["SentTimestamp"],
                ).get("Messages", [])
                if not messages:
                    continue
                list(pool.map(execute, messages))  # a handler error stops the benchmark
                entries = [
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
                ]
                sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)

    api_requests = 0
    if mode == "callback":
        drain(lambda: outcomes.get(str(Outcome.ACCEPTED), 0) >= runs)
        links = targets.accepting.links[accepted_before:]
        assert len(links) == runs, f"callback: {len(links)} calls for {runs} runs"
        # The API Lambda's part: one heartbeat, then the completion, for every run.
        callbacks = Callbacks(
            store,
            dispatcher,
            clock,
            CALLBACK_SECRET,
            lease_margin=LEASE_MARGIN,
            slots=(slots, limits),
        )

        def report(link: tuple[str, str]) -> None:
            complete, heartbeat = link
            callbacks.heartbeat(token_of(heartbeat))
            callbacks.complete(token_of(complete), Report(ok=True, status="0", detail="exported"))

        with ThreadPoolExecutor(max_workers=BATCH) as pool:
            list(pool.map(report, links))
        api_requests = 2 * len(links)
    drain()
    run_phase = Phase(dict(counter.calls), meter.reset())
    note = ""
    if mode == "callback" and outcomes.get(str(Outcome.WATCHING_LEASE)):
        note = (
            f"{outcomes[str(Outcome.WATCHING_LEASE)]} watching messages came back before their run's "
            "completion was applied (each one more watch hop): the machine was slower than the lease"
        )
    if tracked and registry.counts.get("stepfunctions look", 0) < runs:
        note = (
            f"NOT FOLLOWED: {registry.counts.get('stepfunctions look', 0)} looks for {runs} runs: the starts "
            "ended delivered (the executor did not ask the adapter to track: Invocation.track unset)"
        )
    counter.reset()

    # 3. one sweep (every minute): its fixed reads, spread over the load model like bench_cost.py's.
    sweeper = Sweeper(store, dispatcher, SqsDeadLetters(sqs, dlq_url), clock, metrics, SHARDS)
    sweeper.sweep()
    sweep = Phase(dict(counter.calls), meter.reset())
    counter.detach(dynamodb, sqs)

    # Every run must have succeeded, and the job items' real size (the due read) is read back.
    states: dict[str, int] = {}
    job_sizes: list[int] = []
    for table, into in ((tables.runs, None), (tables.jobs, job_sizes)):
        request: dict[str, Any] = {"TableName": table}
        while True:
            page = raw_dynamodb.scan(**request)
            for item in page.get("Items", []):
                plain = deserialize(item)
                if into is None:
                    states[str(plain["state"])] = states.get(str(plain["state"]), 0) + 1
                else:
                    into.append(item_size(plain))
            if not page.get("LastEvaluatedKey"):
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    if states != {str(RunState.SUCCEEDED): runs}:
        raise SystemExit(f"{mode}: runs ended {states}, outcomes {outcomes}: not every run succeeded")
    # The executor's starts and looks, and the AWS API calls they made (DescribeExecution per look).
    target_calls = {**registry.counts, **{f"{k} (AWS API)": v for k, v in target_counter.calls.items()}}
    return ModeResult(
        mode,
        runs,
        statistics.mean(job_sizes),
        plan,
        run_phase,
        sweep,
        target_calls,
        api_requests,
        outcomes,
        time.monotonic() - started,
        note,
    )


@dataclass(frozen=True)
class PerRun:
    wcu: float
    rcu: float
    dynamodb_calls: float
    sqs_calls: float
    wcu_rows: dict[str, float]
    rcu_rows: dict[str, float]

    @property
    def dollars(self) -> float:
        return (self.wcu * PRICE_WRU + self.rcu * PRICE_RRU + self.sqs_calls * PRICE_SQS) * 1e6


def runs_per_minute() -> float:
    return sum(share * TOTAL_JOBS * per_day for share, _, per_day in MIX) / 1440


def per_run(result: ModeResult) -> PerRun:
    """bench_cost.py's accounting: per-run work over the runs; the ticker's per-tick work (watermark, due
    queries) and the sweeper's per-minute reads over the load model's runs a minute; the due read as the
    job items it returns (0.5 RCU per 4 KB, the rounding amortised over large buckets)."""
    n, per_minute = result.runs, runs_per_minute()
    wcu_rows: dict[str, float] = {}
    for label, value in result.plan.units.wcu.items():
        fixed = label.split(" ")[0] in TICK_FIXED_OPERATIONS
        wcu_rows[f"plan: {label}"] = value / (per_minute if fixed else n)
    for label, value in result.run.units.wcu.items():
        wcu_rows[label] = value / n
    rcu_rows: dict[str, float] = {"plan: due-index read (job items)": 0.5 * result.job_size / 4096}
    # bench_cost.py's ticker reads: the watermark GetItem and 0.5 per due-index query (its minimum).
    watermark = sum(v for k, v in result.plan.units.rcu.items() if k.startswith("GetItem"))
    tick_reads = watermark + 0.5 * result.plan.calls.get("Query", 0)
    rcu_rows["ticker: watermark + due queries (amortised)"] = tick_reads / per_minute
    for label, value in result.run.units.rcu.items():
        rcu_rows[label] = value / n
    rcu_rows["sweeper (amortised)"] = result.sweep.units.total_rcu / per_minute
    plan_dynamo = sum(
        v for k, v in result.plan.calls.items() if k not in SQS_OPERATIONS | TICK_FIXED_OPERATIONS
    )
    tick_fixed = sum(result.plan.calls.get(op, 0) for op in TICK_FIXED_OPERATIONS)
    run_dynamo = sum(v for k, v in result.run.calls.items() if k not in SQS_OPERATIONS)
    sqs_calls = sum(
        v for k, v in {**_merge(result.plan.calls, result.run.calls)}.items() if k in SQS_OPERATIONS
    )
    return PerRun(
        wcu=sum(wcu_rows.values()),
        rcu=sum(rcu_rows.values()),
        dynamodb_calls=(plan_dynamo + run_dynamo) / n + tick_fixed / per_minute,
        sqs_calls=sqs_calls / n,
        wcu_rows=wcu_rows,
        rcu_rows=rcu_rows,
    )


def _per(calls: dict[str, int], runs: int) -> str:
    return ", ".join(f"{name} {count / runs:.2f}" for name, count in sorted(calls.items()))


def _merge(*books: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for book in books:
        for key, value in book.items():
            out[key] = out.get(key, 0) + value
    return out


def start_targets(endpoint: str, with_tracked: bool) -> Targets:
    sqs = client("sqs", endpoint)
    queue = sqs.create_queue(QueueName="modes-target-delivery")["QueueUrl"]
    queue_url = f"https://sqs.{DEFAULT_REGION}.amazonaws.com/{ACCOUNT}/modes-target-delivery"
    assert queue.endswith("/modes-target-delivery"), queue
    arn = f"arn:aws:states:{DEFAULT_REGION}:{ACCOUNT}:stateMachine:modes-target-ok"
    if with_tracked:
        definition = {
            "StartAt": "Export",
            "States": {"Export": {"Type": "Pass", "Next": "Done"}, "Done": {"Type": "Succeed"}},
        }
        arn = client("stepfunctions", endpoint).create_state_machine(
            name="modes-target-ok",
            definition=json.dumps(definition),
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/modes-target-role",
        )["stateMachineArn"]
    return Targets(EchoServer().start(), AcceptingTarget().start(), queue_url, arn)


def main(count: int, modes: Sequence[str]) -> None:
    dummy_aws_env()
    print(f"machine: {machine()}")
    print(f"other benchmarks running at start: {concurrency_note()}")
    if "tracked" in modes and not tracking_available():
        print("tracked: not measured: this checkout's target adapters cannot follow an execution (no track)")
        modes = [m for m in modes if m != "tracked"]
    results: list[ModeResult] = []
    with Emulator(EmulatorConfig()) as emulator:
        targets = start_targets(emulator.endpoint_url, "tracked" in modes)
        try:
            for mode in modes:
                result = measure_mode(mode, count, emulator.endpoint_url, targets)
                results.append(result)
                print(f"{mode}: {result.runs} runs succeeded in {result.seconds:.0f} s, {result.outcomes}")
        finally:
            targets.echo.stop()
            targets.accepting.stop()

    per = {r.mode: per_run(r) for r in results}
    print(f"\nper successful run, {count} runs a mode on MiniStack (cap {CAP:,}: every attempt takes a slot)")
    for r in results:
        p = per[r.mode]
        print(f"\n{r.mode}: write units by step (per run)")
        for label, value in sorted(p.wcu_rows.items(), key=lambda kv: -kv[1]):
            if value >= 0.0005:
                print(f"  {label:<52} {value:>7.3f} WCU")
        print("  read units by step (per run)")
        for label, value in sorted(p.rcu_rows.items(), key=lambda kv: -kv[1]):
            if value >= 0.0005:
                print(f"  {label:<52} {value:>7.3f} RCU")
        refused = _merge(r.plan.units.refused, r.run.units.refused)
        print(f"  refused conditional writes: {refused or 'none'}")
        print(f"  calls per run: {_per(_merge(r.plan.calls, r.run.calls), r.runs)}")
        print(f"  target calls per run: {_per(r.target_calls, r.runs)}")
        if r.note:
            print(f"  note: {r.note}")

    print(
        f"\n{'mode':<10}{'WCU':>7}{'RCU':>7}{'DynamoDB calls':>16}{'SQS calls':>11}{'API requests':>14}"
        f"{'$/M runs':>10}  target calls per run"
    )
    for r in results:
        p = per[r.mode]
        label = r.mode + ("*" if r.note else "")
        print(
            f"{label:<10}{p.wcu:>7.2f}{p.rcu:>7.2f}{p.dynamodb_calls:>16.2f}{p.sqs_calls:>11.2f}"
            f"{r.api_requests / r.runs:>14.2f}{'$' + format(p.dollars, '.2f'):>10}  "
            f"{_per(r.target_calls, r.runs)}"
        )
    print(
        "$/M runs: DynamoDB writes and reads and SQS requests, us-east-1 on-demand (bench_cost.py's prices)\n"
        "API requests: the callback routes' API Gateway + Lambda requests, priced apart."
    )
    for r in results:
        if r.note:
            print(f"* {r.mode}: {r.note}")
    print(f"other benchmarks running at the end: {concurrency_note()}")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    jobs = int(arguments.pop(0)) if arguments and arguments[0].isdigit() else 200
    chosen = arguments or list(MODES)
    unknown = [m for m in chosen if m not in MODES]
    if unknown:
        raise SystemExit(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    main(jobs, chosen)
