"""Cost per successful run: DynamoDB write and read units by operation, SQS requests, Lambda GB-seconds, and
dollars per million runs; plus 30 days of run history at 100,000 jobs.

Measured, not assumed, where the emulator allows it: N jobs are planned (Planner + SqsDispatcher), executed
(Executor against a local HTTP target, batches of 10 on threads as the executor Lambda does) and swept on
MiniStack, with every DynamoDB and SQS call counted and every item written recorded. As the deployed
executor does, each message has the Lambda handler's carrier (a claim keeps the message hidden for the
run's lease: one ChangeMessageVisibility) and each attempt takes its concurrency slot in the slots table
and gives it back (a cap of 10,000 whose stripes exist already, as in a running deployment). Capacity
units are then computed from those real items with DynamoDB's rules (benchmarks/write_units.py; the slot
writes through benchmarks/_meter.py, which reads each stripe before and after): MiniStack, like moto,
does not report real ConsumedCapacity.

Prices: us-east-1 on-demand, from the AWS pricing pages as of the toolchain's date (2026-12); verify before
relying. DynamoDB $0.625 per million write request units and $0.125 per million read request units (the
2024-11 price cut), $0.25 per GB-month; SQS $0.40 per million requests; Lambda arm64 $0.0000133334 per
GB-second + $0.20 per million requests.

    python benchmarks/bench_cost.py [jobs]
"""

from __future__ import annotations

import math
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from _common import NOW, CallCounter, client, concurrency_note, dummy_aws_env, machine, next_fire, seed_jobs
from _meter import UnitMeter
from load_model import mix_rows
from tickwork.adapters.dynamodb.items import deserialize, serialize
from tickwork.adapters.dynamodb.provision import ensure_tables
from tickwork.adapters.dynamodb.slots import DynamoSlots, stripe_key, stripe_sizes
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.adapters.metrics import InMemoryMetrics
from tickwork.adapters.records import job_to_item, run_to_item
from tickwork.adapters.sqs import SqsDeadLetters, SqsDispatcher
from tickwork.adapters.sqs_provision import ensure_queues
from tickwork.adapters.targets.aws import AwsInvoker
from tickwork.adapters.targets.http import HttpInvoker
from tickwork.adapters.targets.registry import TargetRegistry
from tickwork.domain.clock import Clock, FakeClock
from tickwork.domain.dispatch import RunMessage
from tickwork.domain.execution import Claim
from tickwork.domain.models import VIEW_TARGET_MAX_BYTES, Job, Run, RunState, Target, Trigger, shard_of
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.slots import ALL, SlotLimits
from tickwork.handlers.executor import InvocationCarrier
from tickwork.local.echo import EchoServer
from tickwork.local.emulator import DEFAULT_REGION, Emulator, EmulatorConfig
from tickwork.resources import JOBS, RUNS, SLOTS, ResourceNames
from tickwork.services.executing import Executor, ExecutorConfig, Outcome
from tickwork.services.planning import Planner
from tickwork.services.sweeping import Sweeper
from write_units import item_size, units, write

SHARDS = 16  # the deployment default (infra/config.py)
BATCH = 10  # executor_batch_size: SQS messages per executor invocation
SINGLE_RUNS = 50  # runs executed alone first (batches of one)
TICKER_SHARDS_PER_INVOCATION = 1  # infra/config.py
EXECUTOR_GB = 0.5  # executor memory 512 MB
TICKER_GB = 1.0  # ticker memory 1024 MB
SWEEPER_GB = 0.5
TARGET_LATENCY_S = 0.100  # assumed: a target answering in 100 ms (the local echo answers in ~1 ms)
QUEUES = 10  # dispatch queues for a 10,000 cap
CAP = 10_000  # the load model's concurrency cap: every attempt takes a slot on the hot path (room at home)
LAMBDA_SECONDS = 900  # what an executor invocation has left when it starts (its timeout)
ESM_POLLERS_PER_QUEUE = 5  # an idle SQS event source mapping long-polls with ~5 pollers, 20 s per poll

PRICE_WRU = 0.625 / 1e6
PRICE_RRU = 0.125 / 1e6
PRICE_GB_MONTH = 0.25
PRICE_SQS = 0.40 / 1e6
PRICE_GB_S = 0.0000133334
PRICE_LAMBDA_REQ = 0.20 / 1e6
PER_ITEM_OVERHEAD = 100  # bytes DynamoDB adds to every stored item for billing

# The load model's mix (benchmarks/load_model.py, the one mix every rough number comes from): (share of the
# jobs, what they are, runs a day per job).
MIX: tuple[tuple[float, str, float], ...] = tuple(mix_rows())
TOTAL_JOBS = 100_000

# In the planning phase these are per shard and tick (watermark read and write, due-index queries).
TICK_FIXED_OPERATIONS = frozenset({"GetItem", "PutItem", "Query"})
SQS_OPERATIONS = frozenset(
    {
        "SendMessage",
        "SendMessageBatch",
        "ReceiveMessage",
        "DeleteMessage",
        "DeleteMessageBatch",
        "ChangeMessageVisibility",
        "ChangeMessageVisibilityBatch",
    }
)
LARGE_BODY = 8 * 1024  # a large target config, reported on its own line

SCHEDULE = parse_schedule("*/5 * * * *", "Europe/Berlin")
FIRE = next_fire(SCHEDULE, NOW)


class RecordingStore(DynamoStore):
    """DynamoStore recording the items of every successful write, so units come from real items."""

    def __init__(self, dynamodb: Any, tables: TableNames) -> None:
        super().__init__(dynamodb, tables)
        self.commits: list[tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]] = []
        self.transitions: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self._planned: dict[str, dict[str, Any]] = {}  # run id -> item as planned (what a claim updates)
        self._lock = threading.Lock()

    def commit_plan(self, job: Job, runs: Sequence[Run], next_fire_at: datetime | None) -> None:
        super().commit_plan(job, runs, next_fire_at)
        record = (
            job_to_item(job),
            job_to_item(job.advanced_to(next_fire_at)),
            [run_to_item(r) for r in runs],
        )
        with self._lock:
            self.commits.append(record)
            self._planned.update({r.run_id: run_to_item(r) for r in runs})

    def claim(self, claim: Claim) -> Run:
        run = super().claim(claim)
        with self._lock:
            self.transitions.append((self._planned[run.run_id], run_to_item(run)))
        return run

    def transition_run(self, expected: Run, updated: Run) -> None:
        super().transition_run(expected, updated)
        with self._lock:
            self.transitions.append((run_to_item(expected), run_to_item(updated)))


class LambdaContext:
    """What the carrier asks of a Lambda context: the time the invocation has left."""

    def __init__(self, seconds: float = LAMBDA_SECONDS) -> None:
        self._ends = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self._ends - time.monotonic()) * 1000)


def lambda_carrier(message: dict[str, Any], sqs: Any, queue_url: str, clock: Clock) -> InvocationCarrier:
    """The executor Lambda handler's carrier for one received message (handlers/executor.py): its deadline
    is what the invocation has left, and a claim keeps the message hidden until the run's lease ends."""
    name = queue_url.rsplit("/", 1)[-1]
    record = SQSRecord(
        {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message.get("Attributes", {}),
            "eventSourceARN": f"arn:aws:sqs:{DEFAULT_REGION}:000000000000:{name}",
        }
    )
    return InvocationCarrier(record, LambdaContext(), sqs, [queue_url], clock)


def warm_slots(dynamodb: Any, table: str, cap: int = CAP) -> int:
    """Every stripe of the `all` pool, empty, as releases leave them: a stripe's first take ever costs a
    refused update and a put (once per stripe: 834 at a cap of 10,000), not a run's steady cost."""
    keys = [stripe_key(ALL, index) for index in range(len(stripe_sizes(cap)))]
    for start in range(0, len(keys), 25):
        requests = [
            {"PutRequest": {"Item": serialize({"slot_key": key, "h": {}, "m": {}})}}
            for key in keys[start : start + 25]
        ]
        dynamodb.batch_write_item(RequestItems={table: requests})
    return len(keys)


class NullDispatcher:
    def dispatch(self, runs: Sequence[Run], now: datetime, *, commit_by: datetime | None = None) -> None:
        raise AssertionError("the benchmark's runs succeed: nothing is re-sent")

    def redispatch(self, message: RunMessage, shard: int, now: datetime) -> None:
        raise AssertionError("the benchmark's runs succeed: nothing is re-sent")

    def redispatch_many(self, messages: Sequence[RunMessage], now: datetime) -> None:
        raise AssertionError("the benchmark's runs succeed: nothing is re-sent")


@dataclass
class Measured:
    runs: int = 0
    plan_seconds: float = 0.0
    plan_calls: dict[str, int] = field(default_factory=dict)
    exec_calls: dict[str, int] = field(default_factory=dict)
    sweep_calls: dict[str, int] = field(default_factory=dict)
    batch_seconds: list[float] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    run_seconds: list[float] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    job_sizes: list[int] = field(default_factory=list)
    finished_sizes: list[int] = field(default_factory=list)
    due_query_items: int = 0
    batched_runs: int = 0
    run_base_wcu: float = 0.0  # claim + finish, the run item alone (no index writes), per run
    wcu: dict[str, float] = field(default_factory=dict)
    slot_refusals: int = 0  # refused conditional writes on the slots table (a home stripe full)


def make_jobs(count: int, url: str) -> list[Job]:
    """Jobs shaped like real ones (an owner ARN, a name, a tag, a POST target), due at the same fire."""
    jobs = []
    for n in range(count):
        job_id = f"job_{n:020x}"
        jobs.append(
            Job(
                job_id=job_id,
                owner="arn:aws:iam::123456789012:role/payments-batch",
                name=f"settlement export {n}",
                schedule=SCHEDULE,
                target=Target("http", {"url": f"{url}/echo", "method": "POST", "headers": {}}),
                shard=shard_of(job_id, SHARDS),
                created_at=NOW,
                updated_at=NOW,
                next_fire_at=FIRE,
                tags={"team": "payments"},
            )
        )
    return jobs


def measure(jobs_count: int) -> Measured:
    m = Measured()
    echo = EchoServer().start()
    try:
        with Emulator(EmulatorConfig()) as emulator:
            dynamodb = client("dynamodb", emulator.endpoint_url)
            sqs = client("sqs", emulator.endpoint_url)
            names = ResourceNames(prefix="cost")
            ensure_tables(dynamodb, names)
            tables = TableNames.from_resources(names)
            queue_urls, dlq_url = ensure_queues(sqs, names, 1)
            seed_jobs(dynamodb, tables.jobs, make_jobs(jobs_count, echo.url))
            store = RecordingStore(dynamodb, tables)
            # The slots' writes priced from the stripes as stored (read before and after by another client).
            meter: Any = UnitMeter(dynamodb, client("dynamodb", emulator.endpoint_url), names)
            slots = DynamoSlots(meter, names.table(SLOTS))
            warm_slots(dynamodb, names.table(SLOTS))
            dispatcher = SqsDispatcher(sqs, queue_urls)
            counter = CallCounter()
            counter.attach(dynamodb, sqs)

            # 1. plan: the tick at the fire time (SQS delay 0, so the executor can start at once).
            planner = Planner(store, dispatcher, FakeClock(FIRE))
            started = time.perf_counter()
            reports = [planner.plan(shard, FIRE) for shard in range(SHARDS)]
            m.plan_seconds = time.perf_counter() - started
            m.runs = sum(r.runs_planned for r in reports)
            m.due_query_items = sum(r.jobs_seen for r in reports)
            m.plan_calls = dict(counter.calls)

            # 2. execute: receive up to 10, run them on threads (the executor Lambda), delete them as a batch.
            counter.reset()
            clock = FakeClock(FIRE + timedelta(milliseconds=200))
            invoker = TargetRegistry(
                http=HttpInvoker(b"bench-secret", time.time, allow_loopback=True),
                aws=AwsInvoker(lambda service: client(service, emulator.endpoint_url)),
            )
            executor = Executor(
                store,
                invoker,
                NullDispatcher(),
                clock,
                InMemoryMetrics(),
                ExecutorConfig("bench-executor", limits=SlotLimits(CAP)),
                slots=slots,
            )

            def execute(message: dict[str, Any]) -> tuple[Outcome, float]:
                t0 = time.perf_counter()
                carrier = lambda_carrier(message, sqs, queue_urls[0], clock)
                outcome = executor.execute(RunMessage.from_json(message["Body"]), carrier)
                return outcome, time.perf_counter() - t0

            def drain(max_messages: int, limit: int, seconds: list[float], sizes: list[int]) -> int:
                done = empty = 0
                while done < limit and empty < 5:
                    response = sqs.receive_message(
                        QueueUrl=queue_urls[0], MaxNumberOfMessages=max_messages, WaitTimeSeconds=1
                    )
                    messages = response.get("Messages", [])
                    if not messages:
                        empty += 1
                        continue
                    t0 = time.perf_counter()
                    with ThreadPoolExecutor(max_workers=len(messages)) as pool:
                        results = list(pool.map(execute, messages))
                    seconds.append(time.perf_counter() - t0)
                    sizes.append(len(messages))
                    for outcome, _ in results:
                        m.outcomes[str(outcome)] = m.outcomes.get(str(outcome), 0) + 1
                    entries = [
                        {"Id": str(i), "ReceiptHandle": msg["ReceiptHandle"]}
                        for i, msg in enumerate(messages)
                    ]
                    sqs.delete_message_batch(QueueUrl=queue_urls[0], Entries=entries)
                    done += len(messages)
                return done

            # First some runs one at a time (a trickle: batches of one), then the rest in batches of 10.
            singles = min(SINGLE_RUNS, m.runs // 2)
            drain(1, singles, m.run_seconds, [])
            counter.reset()
            m.batched_runs = drain(BATCH, m.runs - singles, m.batch_seconds, m.batch_sizes)
            m.exec_calls = dict(counter.calls)

            # 3. sweep once (the sweeper runs every minute): nothing is stalled, so it only looks.
            counter.reset()
            sweeper = Sweeper(
                store,
                NullDispatcher(),
                SqsDeadLetters(sqs, dlq_url),
                FakeClock(FIRE + timedelta(seconds=30)),
                InMemoryMetrics(),
                SHARDS,
            )
            sweeper.sweep()
            m.sweep_calls = dict(counter.calls)
            counter.detach(dynamodb, sqs)

            # Real stored item sizes, read back.
            for table, sizes in ((tables.jobs, m.job_sizes), (tables.runs, m.finished_sizes)):
                request: dict[str, Any] = {"TableName": table}
                while True:
                    page = dynamodb.scan(**request)
                    sizes.extend(item_size(deserialize(item)) for item in page.get("Items", []))
                    if not page.get("LastEvaluatedKey"):
                        break
                    request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

            # Write units of every recorded write, from its real before/after items.
            wcu = {"plan: put run (txn)": 0.0, "plan: advance job (txn)": 0.0, "claim": 0.0, "finish": 0.0}
            for job_before, job_after, runs in store.commits:
                wcu["plan: put run (txn)"] += sum(write(RUNS, None, r, True) for r in runs)
                wcu["plan: advance job (txn)"] += write(JOBS, job_before, job_after, True)
            for before, after in store.transitions:
                key = "claim" if after["state"] == str(RunState.RUNNING) else "finish"
                wcu[key] += write(RUNS, before, after, False)
            wcu["concurrency slot: take + give back"] = meter.units.total_wcu
            m.slot_refusals = sum(meter.units.refused.values())
            m.wcu = {k: v / m.runs for k, v in wcu.items()}
            base = sum(units(max(item_size(b), item_size(a))) for b, a in store.transitions)
            m.run_base_wcu = base / m.runs
    finally:
        echo.stop()
    return m


def large_item_units() -> tuple[int, float]:
    """Planned run item size and write units per run for a job whose target config holds a large body."""
    job = make_jobs(1, "http://127.0.0.1:1")[0]
    config = {**job.target.config, "body": "x" * LARGE_BODY}
    job = replace(job, target=Target(job.target.kind, config))
    planned = Run.for_fire(job, FIRE, now=NOW, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
    running = replace(planned, state=RunState.RUNNING, attempt=1, started_at=FIRE, lease_owner="w#1")
    done = replace(running, state=RunState.SUCCEEDED, finished_at=FIRE, lease_owner=None)
    after_job = job.advanced_to(FIRE + timedelta(minutes=5))
    units_per_run = (
        write(RUNS, None, run_to_item(planned), True)
        + write(JOBS, job_to_item(job), job_to_item(after_job), True)
        + write(RUNS, run_to_item(planned), run_to_item(running), False)
        + write(RUNS, run_to_item(running), run_to_item(done), False)
    )
    return item_size(run_to_item(planned)), units_per_run


def per_run(calls: dict[str, int], runs: int) -> str:
    return ", ".join(f"{op} {n / runs:.2f}" for op, n in sorted(calls.items()))


def main(jobs_count: int) -> None:
    dummy_aws_env()
    print(f"machine: {machine()}")
    print(f"other benchmarks running at start: {concurrency_note()}")
    m = measure(jobs_count)
    n = m.runs
    ok = m.outcomes.get(str(Outcome.SUCCEEDED), 0)
    print(f"\nmeasured on MiniStack: {jobs_count} jobs, {n} runs planned, outcomes {m.outcomes}")
    print(f"  API calls per run, plan:    {per_run(m.plan_calls, n)}")
    print(f"  API calls per run, execute (batches of 10): {per_run(m.exec_calls, m.batched_runs)}")
    print(f"  one sweep (all {SHARDS} shards, nothing stalled): {per_run(m.sweep_calls, 1)}")
    job_size = statistics.mean(m.job_sizes)
    run_size = statistics.mean(m.finished_sizes)
    print(f"  item sizes: job {job_size:.0f} B, finished run {run_size:.0f} B (mean of the stored items)")
    assert ok == n, "every run must succeed for a per-successful-run cost"

    # --- realistic load: runs per minute, to amortise the per-minute work of ticker and sweeper ----------
    runs_per_day = sum(share * TOTAL_JOBS * per_day for share, _, per_day in MIX)
    runs_per_min = runs_per_day / 1440
    buckets_per_tick = m.plan_calls.get("Query", 0) / SHARDS  # due-index queries per shard per tick
    print(
        f"\nload model: {TOTAL_JOBS:,} jobs -> {runs_per_day:,.0f} runs/day, {runs_per_min:,.0f} runs/min avg"
    )
    for share, label, per_day in MIX:
        print(f"  {share:>4.0%} {label:<42} {share * TOTAL_JOBS * per_day:>12,.0f} runs/day")

    # --- DynamoDB -----------------------------------------------------------------------------------------
    tick_fixed_wcu = SHARDS * 1  # watermark PutItem per shard per minute (a ~60 B item)
    wcu_rows = [(k, v) for k, v in m.wcu.items()]
    wcu_rows.append(("ticker watermarks (per min, amortised)", tick_fixed_wcu / runs_per_min))
    # Reads. GetItem consistent: 1 RCU per 4 KB. Query on a GSI (eventually consistent): 0.5 RCU per 4 KB of
    # the items it returns, summed per query and rounded up; an empty query still costs 0.5. The executor's
    # reads are the measured calls (every item read is under 4 KB); a claim's ReturnValues reads nothing.
    due_read = 0.5 * job_size / 4096  # large top-of-minute buckets: the rounding is amortised
    job_get = 1.0 * math.ceil(job_size / 4096)  # consistent GetItem of the job (where a run needs one)
    exec_gets = m.exec_calls.get("GetItem", 0) / m.batched_runs
    exec_queries = (m.exec_calls.get("Query", 0) + m.exec_calls.get("BatchGetItem", 0)) / m.batched_runs
    tick_fixed_rcu = SHARDS * (1 + 0.5 * buckets_per_tick)  # watermark GetItem + due queries
    sweep_fixed_rcu = 0.5 * m.sweep_calls.get("Query", 0)  # open_runs queries, empty when nothing stalled
    rcu_rows = [
        ("plan: due-index query (job item, eventual)", due_read),
        ("execute: GetItem (consistent), measured", exec_gets * 1.0),
        ("execute: Query / BatchGetItem, measured", exec_queries * 0.5),
        ("ticker: watermark + bucket queries (amortised)", tick_fixed_rcu / runs_per_min),
        ("sweeper: open_runs queries (amortised)", sweep_fixed_rcu / runs_per_min),
    ]
    wcu_total = sum(v for _, v in wcu_rows)
    rcu_total = sum(v for _, v in rcu_rows)
    # write_units.py: txn put run 2, txn update job 2, claim 1, finish 1, due-index move 2; the slot 1 + 1
    wcu_min = 10.0
    rcu_min = due_read  # the due read: the claim needs no read (the run carries its job view)
    print("\nDynamoDB write units per successful run (from the recorded items):")
    for name, value in wcu_rows:
        print(f"  {name:<48} {value:>7.3f} WCU")
    print(
        f"  {'total':<48} {wcu_total:>7.3f} WCU   design minimum {wcu_min:.0f} (8 + 2 for the slot), "
        f"ratio {wcu_total / wcu_min:.2f}; slot writes refused: {m.slot_refusals}"
    )
    print("DynamoDB read units per successful run:")
    for name, value in rcu_rows:
        print(f"  {name:<48} {value:>7.3f} RCU")
    print(
        f"  {'total':<48} {rcu_total:>7.3f} RCU   design minimum {rcu_min:.2f} "
        f"(the due read), "
        f"ratio {rcu_total / rcu_min:.2f}"
    )
    # overlap=skip|queue: claim and finish become transactions with the job's overlap slot.
    job_item = job_to_item(make_jobs(1, "http://127.0.0.1:1")[0])
    slot = {**job_item, "active_run": "x" * 43, "active_lease_expires_at": "2026-12-02T13:06:30.200Z"}
    # The job's slot is taken and released (transactional, and the `due` index projects ALL, so it moves
    # too); the run's own item writes (not its index writes) double inside the transactions.
    # Plus the claim on the view, refused by its overlap condition (a refused write costs 1 unit).
    exclusive_extra = (
        write(JOBS, job_item, slot, True) + write(JOBS, slot, job_item, True) + m.run_base_wcu + 1
    )
    print(
        f"  overlap=skip/queue instead of allow: +{exclusive_extra:.1f} WCU (the refused claim on the view, "
        f"then claim and finish as transactions with the job's slot) and +{job_get:.0f} RCU (finish reads "
        "the job)"
    )
    large = large_item_units()
    print(
        f"  a job whose target carries a {LARGE_BODY // 1024} KiB body: run item {large[0]} B planned, "
        f"{large[1]:.0f} WCU per run (a target over {VIEW_TARGET_MAX_BYTES} B stays on the job, whose own\n"
        "    advance and due-index move pay its size every fire; the claim reads the target from the job)"
    )

    # --- SQS --------------------------------------------------------------------------------------------
    sends = m.plan_calls.get("SendMessageBatch", 0) / n
    recv_full = m.exec_calls.get("ReceiveMessage", 0) / m.batched_runs
    dele_full = m.exec_calls.get("DeleteMessageBatch", 0) / m.batched_runs
    hide = m.exec_calls.get("ChangeMessageVisibility", 0) / m.batched_runs  # one per claim, any batch size
    idle_polls = QUEUES * ESM_POLLERS_PER_QUEUE * 3 + 1  # long polls per minute, + the sweeper's DLQ read
    sqs_rows = [
        ("send (as built: measured SendMessageBatch per run)", sends, sends),
        ("send (design: batches of 10)", 0.1, 0.1),
        ("receive (ESM; batches of 10 .. of 1)", recv_full, 1.0),
        ("delete (ESM DeleteMessageBatch; 10 .. 1)", dele_full, 1.0),
        ("keep hidden for the lease (ChangeMessageVisibility)", hide, hide),
        ("idle long polls + DLQ read (amortised)", idle_polls / runs_per_min, idle_polls / runs_per_min),
    ]
    print("\nSQS requests per successful run (full batches .. batches of one):")
    for name, full, single in sqs_rows:
        print(f"  {name:<52} {full:>6.3f} .. {single:.3f}")
    sqs_as_built = (
        sends + recv_full + dele_full + hide + idle_polls / runs_per_min,
        sends + 2 + hide + idle_polls / runs_per_min,
    )
    sqs_design = (
        0.1 + recv_full + dele_full + hide + idle_polls / runs_per_min,
        0.1 + 2 + hide + idle_polls / runs_per_min,
    )

    # --- Lambda -----------------------------------------------------------------------------------------
    batch_p50 = statistics.median(m.batch_seconds)
    run_p50 = statistics.median(m.run_seconds)
    mean_batch = statistics.mean(m.batch_sizes)
    # Billed duration of one executor invocation ~ the batch's wall time + the target's latency (the runs
    # of a batch wait for their targets concurrently).
    per_run_full = (batch_p50 + TARGET_LATENCY_S) / BATCH
    per_run_single = run_p50 + TARGET_LATENCY_S
    plan_per_fire = m.plan_seconds / n
    gbs_full = EXECUTOR_GB * per_run_full + TICKER_GB * plan_per_fire
    gbs_single = EXECUTOR_GB * per_run_single + TICKER_GB * plan_per_fire
    fixed_invocations = SHARDS / TICKER_SHARDS_PER_INVOCATION + 1  # ticker groups + sweeper, per minute
    lambda_req_full = 1 / BATCH + fixed_invocations / runs_per_min
    lambda_req_single = 1 + fixed_invocations / runs_per_min
    print(
        f"\nLambda (measured on MiniStack): batch of {mean_batch:.1f} runs p50 {batch_p50 * 1000:.1f} ms, "
        f"one run alone p50 {run_p50 * 1000:.1f} ms, planning {plan_per_fire * 1000:.2f} ms per fire "
        "(1 thread, with its SQS send)"
    )
    print(
        f"  assumed target latency {TARGET_LATENCY_S * 1000:.0f} ms; executor {EXECUTOR_GB} GB, ticker "
        f"{TICKER_GB} GB; DynamoDB/SQS latency in AWS taken as MiniStack's on loopback (same order)"
    )
    print(f"  GB-s per run: {gbs_full:.5f} (full batches of {BATCH}) .. {gbs_single:.5f} (batches of one)")
    print(f"  invocations per run: {lambda_req_full:.3f} .. {lambda_req_single:.3f}")

    # --- dollars ----------------------------------------------------------------------------------------
    def dollars(sqs_requests: float, gbs: float, invocations: float) -> list[tuple[str, float]]:
        return [
            ("DynamoDB writes", wcu_total * PRICE_WRU * 1e6),
            ("DynamoDB reads", rcu_total * PRICE_RRU * 1e6),
            ("SQS", sqs_requests * PRICE_SQS * 1e6),
            ("Lambda GB-s", gbs * PRICE_GB_S * 1e6),
            ("Lambda requests", invocations * PRICE_LAMBDA_REQ * 1e6),
        ]

    columns = [
        ("as built, full batches", dollars(sqs_as_built[0], gbs_full, lambda_req_full)),
        ("as built, batches of 1", dollars(sqs_as_built[1], gbs_single, lambda_req_single)),
        ("sends batched by 10, full", dollars(sqs_design[0], gbs_full, lambda_req_full)),
    ]
    print(
        "\ndollars per million successful runs "
        "(us-east-1 on-demand; AWS pricing pages, verify before relying):"
    )
    print(f"  {'':<18}" + "".join(f"{title:>28}" for title, _ in columns))
    for i, (name, _) in enumerate(columns[0][1]):
        print(f"  {name:<18}" + "".join(f"{'$' + format(rows[i][1], '.2f'):>28}" for _, rows in columns))
    print(
        f"  {'total':<18}"
        + "".join(f"{'$' + format(sum(v for _, v in rows), '.2f'):>28}" for _, rows in columns)
    )

    # --- storage ----------------------------------------------------------------------------------------
    retention_days = 30
    stored = runs_per_day * retention_days
    run_bytes = run_size + PER_ITEM_OVERHEAD
    runs_gb = stored * run_bytes / 1e9
    # Jobs: the table and the `due` index (projection ALL) each hold the item; `by_owner` holds the keys.
    jobs_gb = TOTAL_JOBS * ((job_size + PER_ITEM_OVERHEAD) * 2 + 80 + PER_ITEM_OVERHEAD) / 1e9
    print(
        f"\nstorage: run history for {retention_days} days at {TOTAL_JOBS:,} jobs "
        "(TTL deletes them after that)"
    )
    print(
        f"  {runs_per_day:,.0f} runs/day x {retention_days} d = {stored:,.0f} runs x {run_bytes:.0f} B "
        f"({run_size:.0f} B item + {PER_ITEM_OVERHEAD} B overhead) = {runs_gb:.1f} GB -> "
        f"${runs_gb * PRICE_GB_MONTH:.2f}/month"
    )
    print(
        f"  jobs table + due index + by_owner: {jobs_gb:.2f} GB -> ${jobs_gb * PRICE_GB_MONTH:.2f}/month; "
        "finished runs leave the sparse open_runs index, so it stays near empty"
    )
    print(
        f"  a run whose response detail is kept in full (1 KiB) is ~{run_size + 1000:.0f} B: "
        f"{stored * (run_size + 1000 + PER_ITEM_OVERHEAD) / 1e9:.0f} GB at the worst"
    )
    print(f"\nother benchmarks running at the end: {concurrency_note()}")
    # The ticker's reads and watermark write happen once per shard and tick, whatever it plans: counted
    # apart from the per-run calls and, like the ticker's write and read units above, spread over the load
    # model's runs a minute (over this benchmark's own runs they weigh as if all 100,000 jobs fired once).
    tick_fixed = sum(m.plan_calls.get(op, 0) for op in TICK_FIXED_OPERATIONS)
    per_run_dynamo = sum(
        v for k, v in m.plan_calls.items() if k not in SQS_OPERATIONS | TICK_FIXED_OPERATIONS
    ) / n + sum(v for k, v in m.exec_calls.items() if k not in SQS_OPERATIONS) / max(1, m.batched_runs)
    print(
        f"DynamoDB calls: {per_run_dynamo:.2f} per run (plan transaction, slot, claim, finish, slot back), "
        "plus "
        f"{tick_fixed} per tick for all {SHARDS} shards (watermark read and write, due-index queries): "
        f"{tick_fixed / n:.3f} per run over this benchmark's {n} runs, {tick_fixed / runs_per_min:.4f} at "
        f"the load model's {runs_per_min:,.0f} runs a minute"
    )
    dynamo_calls = per_run_dynamo + tick_fixed / runs_per_min
    sqs_calls = sum(v for k, v in m.plan_calls.items() if k in SQS_OPERATIONS) / n + sum(
        v for k, v in m.exec_calls.items() if k in SQS_OPERATIONS
    ) / max(1, m.batched_runs)
    print(
        f"per successful run: {wcu_total:.2f} WCU, {rcu_total:.2f} RCU, {dynamo_calls:.2f} DynamoDB calls, "
        f"{sqs_calls:.2f} SQS calls (plan + execute in batches of {BATCH})"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
