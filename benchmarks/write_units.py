"""DynamoDB write units per successful run, counted from real item sizes and DynamoDB's rules (moto's
ConsumedCapacity is fake): 1 KB rounding per item, 2x for transactional writes, and one index write per
index item added, removed or changed (two when an index key changes: delete + put).

    python benchmarks/write_units.py
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from random import Random
from typing import Any

from tickwork.adapters.dynamodb.slots import SAMPLE, STRIPE_SIZE, marker_key, stripe_key
from tickwork.adapters.records import job_to_item, request_to_item, run_to_item
from tickwork.domain.execution import after_attempt, claimed
from tickwork.domain.models import Job, Run, RunState, Target, Trigger, shard_of
from tickwork.domain.requests import RequestKind, RunRequest, manual_run, off_slot_instant, retried
from tickwork.domain.schedule import next_fire_after, parse_schedule
from tickwork.domain.slots import holder_key, lease_ms
from tickwork.domain.targets import TargetResult
from tickwork.resources import JOBS, REQUESTS, RUNS, SLOTS, IndexDef, TableDef

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


def value_size(value: Any) -> int:
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, int | float | Decimal):
        digits = len(str(abs(value)).replace(".", "").lstrip("0")) or 1
        return math.ceil(digits / 2) + 1
    if isinstance(value, Mapping):
        return 3 + sum(len(k.encode()) + value_size(v) + 1 for k, v in value.items())
    if isinstance(value, list | tuple):
        return 3 + sum(value_size(v) + 1 for v in value)
    raise TypeError(type(value))


def item_size(item: Mapping[str, Any]) -> int:
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


def index_item(index: IndexDef, table: TableDef, item: Mapping[str, Any]) -> dict[str, Any] | None:
    keys = [index.partition.name] + ([index.sort.name] if index.sort else [])
    if any(k not in item for k in keys):
        return None  # sparse: not in the index
    if index.projection == "ALL":
        return dict(item)
    base = [table.partition.name] + ([table.sort.name] if table.sort else [])
    return {k: item[k] for k in {*keys, *base}}


def index_writes(table: TableDef, before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> int:
    total = 0
    for index in table.indexes:
        old = None if before is None else index_item(index, table, before)
        new = index_item(index, table, after)
        keys = [index.partition.name] + ([index.sort.name] if index.sort else [])
        if (old is None and new is None) or old == new:
            continue
        if old is None or new is None:
            total += units(item_size(old or new or {}))
        elif any(old[k] != new[k] for k in keys):
            total += units(item_size(old)) + units(item_size(new))  # key moved: delete + put
        else:
            total += units(max(item_size(old), item_size(new)))
    return total


def write(
    table: TableDef, before: Mapping[str, Any] | None, after: Mapping[str, Any], transactional: bool
) -> int:
    base = units(max(item_size(before or {}), item_size(after)))
    return base * (2 if transactional else 1) + index_writes(table, before, after)


def main() -> None:
    schedule = parse_schedule("*/5 * * * *", "Europe/Berlin")
    job = Job(
        job_id="job_0123456789abcdef0123",
        owner="arn:aws:iam::123456789012:role/payments-batch",
        name="nightly settlement export",
        schedule=schedule,
        target=Target(
            "http", {"url": "https://hooks.example.com/settlement", "method": "POST", "headers": {}}
        ),
        shard=shard_of("job_0123456789abcdef0123", 16),
        created_at=NOW,
        updated_at=NOW,
        next_fire_at=next_fire_after(schedule, NOW),
        tags={"team": "payments"},
    )
    assert job.next_fire_at is not None
    # As the ticker plans it: its message goes before its commit, so it carries no sweeper index entry.
    run = replace(
        Run.for_fire(job, job.next_fire_at, now=NOW, trigger=Trigger.SCHEDULE, state=RunState.PLANNED),
        queue_carried=True,
    )
    job_after = job.advanced_to(next_fire_after(schedule, job.next_fire_at))
    running = claimed(run, job, worker="executor-1f2e3d4c", now=run.due_at + timedelta(milliseconds=180))
    ok = TargetResult(ok=True, retryable=False, status="200", latency_ms=84, detail='{"status":"accepted"}')
    finished = after_attempt(running, job.policies.retry, ok, now=running.started_at or NOW, rng=Random(1))
    assert finished.state is RunState.SUCCEEDED

    steps = [
        ("plan: put run (transaction)", write(RUNS, None, run_to_item(run), True)),
        ("plan: advance job (transaction)", write(JOBS, job_to_item(job), job_to_item(job_after), True)),
        ("claim: run -> running", write(RUNS, run_to_item(run), run_to_item(running), False)),
        (
            "finish: run -> succeeded",
            write(RUNS, run_to_item(running), run_to_item(replace(finished)), False),
        ),
    ]
    print(
        f"item sizes: job {item_size(job_to_item(job))} B, run planned {item_size(run_to_item(run))} B, "
        f"run finished {item_size(run_to_item(finished))} B"
    )
    for name, wcu in steps:
        print(f"  {name:<34} {wcu:>3} WCU")
    total = sum(w for _, w in steps)
    minimum = 2 + 2 + 1 + 1 + 2  # txn put run, txn update job, claim, finish, due-index move
    print(f"total per successful run: {total} WCU; design minimum {minimum} WCU; ratio {total / minimum:.2f}")
    requests_costs(job, running, ok)
    slot_costs(job, total)


def stripe(pool: str, holders: list[str], markers: int = 0) -> dict[str, Any]:
    """A slots stripe as adapters/dynamodb/slots.py writes it: holders with a lease, and markers."""
    lease = lease_ms(NOW + timedelta(minutes=15))
    return {
        "slot_key": stripe_key(pool, 833),
        "h": {holder: lease for holder in holders},
        "m": {marker_key(f"away-{i}"): {"s": 833, "l": lease} for i in range(markers)},
    }


def slot_costs(job: Job, per_run: int) -> None:
    """Concurrency slots: what taking and giving back a slot costs, on the hot path (one pool, `all`, the
    home stripe has room) and when the home is full (the hold goes elsewhere and leaves a marker). A refused
    conditional write is charged like a write of the item as it is."""
    fires = [NOW + timedelta(minutes=5 * i) for i in range(STRIPE_SIZE)]
    holders = [holder_key(f"{job.job_id}:{f.strftime('%Y%m%dT%H%M%SZ')}", 1) for f in fires]
    full, spare = stripe("all", holders), stripe("all", holders[:-1])
    take = write(SLOTS, spare, full, False)
    give = write(SLOTS, full, spare, False)
    marked = stripe("all", holders, markers=1)
    away = units(item_size(full)) + take + write(SLOTS, full, marked, False)
    back = write(SLOTS, marked, full, False) + give
    owner = f"owner:{job.owner}"
    owner_full = stripe(owner, holders)
    owner_take = write(SLOTS, stripe(owner, holders[:-1]), owner_full, False)
    most = next(n for n in range(100) if units(item_size(stripe("all", holders, markers=n + 1))) > 1)
    print(
        f"concurrency slots (a stripe of {STRIPE_SIZE} holders is {item_size(full)} B, "
        f"{item_size(owner_full)} B for the owner pool; 1 WCU up to {most} markers):"
    )
    print(f"  acquire, home has room (hot path)  {take:>3} WCU (owner pool: {owner_take})")
    print(f"  release, at home                   {give:>3} WCU")
    print(f"  extend (heartbeat), at home        {take:>3} WCU")
    print(
        f"  acquire, home full: elsewhere      {away:>3} WCU + {SAMPLE // 2} RCU (read of {SAMPLE} stripes)"
    )
    print(f"  release of a hold elsewhere        {back:>3} WCU")
    print(f"  a waiting run's try, pool full     {units(item_size(full)):>3} WCU + {SAMPLE // 2} RCU")
    print(
        f"total per successful run with its slot (hot path): {per_run + take + give} WCU "
        f"({per_run} + {take + give})"
    )


def requests_costs(job: Job, running: Run, ok: TargetResult) -> None:
    """Runs on request: what a run now, a backfilled run, a retry and a failure cost in write units."""
    requested = replace(job, run_requests=1)
    counter = write(JOBS, job_to_item(job), job_to_item(requested), True)
    manual = manual_run(job, off_slot_instant(NOW), now=NOW)
    record = RunRequest(
        request_key="0" * 64,
        owner=job.owner,
        kind=RequestKind.RUN_NOW,
        job_id=job.job_id,
        fingerprint="0" * 64,
        created_at=NOW,
        expires_at=NOW + timedelta(hours=24),
        answer={"run_ids": [manual.run_id]},
    )
    put_run = write(RUNS, None, run_to_item(manual), True)
    put_record = write(REQUESTS, None, request_to_item(record), True)
    bad = TargetResult(ok=False, retryable=False, status="400", latency_ms=84, detail='{"error":"bad"}')
    failed = after_attempt(running, job.policies.retry, bad, now=running.started_at or NOW, rng=Random(1))
    fail = write(RUNS, run_to_item(running), run_to_item(failed), False)
    succeed = write(
        RUNS,
        run_to_item(running),
        run_to_item(after_attempt(running, job.policies.retry, ok, now=NOW, rng=Random(1))),
        False,
    )
    again = retried(failed, job, now=NOW)
    retry = write(RUNS, run_to_item(failed), run_to_item(again), True)
    print("runs on request (each a transaction with the job's request counter):")
    print(f"  job request counter (transaction)  {counter:>3} WCU")
    print(f"  run now: put run (transaction)     {put_run:>3} WCU")
    print(f"  Idempotency-Key record             {put_record:>3} WCU")
    print(f"  run now with a key, until claimed  {counter + put_run + put_record:>3} WCU")
    print(f"  backfill: per run (90 a txn)       {put_run + counter / 90:>5.2f} WCU")
    print(f"  finish failed (+ failed_runs, ALL) {fail:>3} WCU (succeeded: {succeed})")
    print(f"  retry: run failed -> retry_wait    {retry + counter:>3} WCU (with the counter)")


if __name__ == "__main__":
    main()
