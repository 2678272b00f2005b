"""Helpers the planner, idle-tick and cost benchmarks share: job items, threaded seeding, call counting,
a full-table count, and a note of what else was running on the machine."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

import boto3
from botocore.config import Config

from tickwork.adapters.dynamodb.items import serialize
from tickwork.adapters.records import job_to_item
from tickwork.domain.models import Job, Target, shard_of
from tickwork.domain.schedule import Schedule, next_fire_after

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
MINISTACK_VERSION = "1.5.33"


def dummy_aws_env() -> None:
    """Emulator credentials only: never a real account."""
    os.environ["AWS_ACCESS_KEY_ID"] = "test"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "test"
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    for key in ("AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        os.environ.pop(key, None)


def client(service: str, endpoint_url: str, pool: int = 32) -> Any:
    factory: Any = boto3.client  # a str service name: the typed overloads want a literal
    return factory(
        service,
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(max_pool_connections=pool, retries={"max_attempts": 3, "mode": "standard"}),
    )


def make_job(
    n: int,
    shards: int,
    schedule: Schedule,
    next_fire_at: datetime,
    url: str = "https://example.com/",
) -> Job:
    job_id = f"job_{n:07d}"
    return Job(
        job_id=job_id,
        owner="bench",
        name=f"bench job {n}",
        schedule=schedule,
        target=Target("http", {"url": url}),
        shard=shard_of(job_id, shards),
        created_at=NOW,
        updated_at=NOW,
        next_fire_at=next_fire_at,
    )


def seed_jobs(dynamodb: Any, table: str, jobs: Iterable[Job], threads: int = 4) -> int:
    """BatchWriteItem in 25s from `threads` threads, re-sending unprocessed items. Returns items written."""
    batches: list[list[dict[str, Any]]] = []
    batch: list[dict[str, Any]] = []
    for job in jobs:
        batch.append({"PutRequest": {"Item": serialize(job_to_item(job))}})
        if len(batch) == 25:
            batches.append(batch)
            batch = []
    if batch:
        batches.append(batch)

    def write(requests: list[dict[str, Any]]) -> int:
        pending: dict[str, Any] = {table: requests}
        for _ in range(10):
            response = dynamodb.batch_write_item(RequestItems=pending)
            pending = response.get("UnprocessedItems") or {}
            if not pending:
                return len(requests)
            time.sleep(0.05)
        raise RuntimeError("BatchWriteItem left items unprocessed")

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return sum(pool.map(write, batches))


@dataclass
class CallCounter:
    """DynamoDB / SQS calls by operation and the items they returned, from botocore's after-call hooks."""

    calls: dict[str, int] = field(default_factory=dict)
    items_read: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self, parsed: dict[str, Any], model: Any = None, **_: Any) -> None:
        name = getattr(model, "name", "?")
        items = len(parsed.get("Items", [])) + (1 if "Item" in parsed else 0)
        with self._lock:
            self.calls[name] = self.calls.get(name, 0) + 1
            self.items_read += items

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.items_read = 0

    def attach(self, *clients: Any) -> None:
        for c in clients:
            prefix = c.meta.service_model.endpoint_prefix
            c.meta.events.register(f"after-call.{prefix}.*", self)

    def detach(self, *clients: Any) -> None:
        for c in clients:
            prefix = c.meta.service_model.endpoint_prefix
            c.meta.events.unregister(f"after-call.{prefix}.*", self)


def scan_values(dynamodb: Any, table: str, attribute: str) -> list[str]:
    """Every item's `attribute` (a full Scan, paginated)."""
    values: list[str] = []
    request: dict[str, Any] = {"TableName": table, "ProjectionExpression": attribute}
    while True:
        page = dynamodb.scan(**request)
        values.extend(str(item[attribute]["S"]) for item in page.get("Items", []) if attribute in item)
        if not page.get("LastEvaluatedKey"):
            return values
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def delete_tables(dynamodb: Any, names: Sequence[str]) -> None:
    for name in names:
        try:
            dynamodb.delete_table(TableName=name)
        except dynamodb.exceptions.ResourceNotFoundException:
            continue


def other_benchmarks() -> list[str]:
    """Command lines of other benchmark processes running now (not this one, not its parent shell)."""
    try:
        out = subprocess.run(["pgrep", "-af", "benchmarks/"], capture_output=True, text=True, check=False)
    except OSError:
        return []
    mine = {os.getpid(), os.getppid()}
    lines = []
    for line in out.stdout.splitlines():
        pid, _, cmd = line.partition(" ")
        if pid.isdigit() and int(pid) not in mine and "pgrep" not in cmd:
            lines.append(line)
    return lines


def concurrency_note() -> str:
    others = other_benchmarks()
    return "none" if not others else "; ".join(others)


def machine() -> str:
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} CPUs, {memory_gb:.1f} GiB RAM, Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}, MiniStack {MINISTACK_VERSION}"
    )


def next_fire(schedule: Schedule, after: datetime) -> datetime:
    fire = next_fire_after(schedule, after)
    if fire is None:
        raise ValueError("the schedule has no next fire")
    return fire


def timed(operation: Callable[[], Any]) -> float:
    started = time.perf_counter()
    operation()
    return time.perf_counter() - started


def percentile(samples: Sequence[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


@contextmanager
def baseline_checkout(ref: str, workdir: Path) -> Iterator[Path]:
    """A detached worktree of this repository at `ref`, removed afterwards."""
    repo = Path(__file__).resolve().parent.parent
    path = workdir / "baseline-src"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "-q", str(path), ref], check=True)
    emulator_venv = repo / ".venv-ministack"
    if emulator_venv.exists():
        # The emulator is found next to the source; the worktree has none of its own.
        (path / ".venv-ministack").symlink_to(emulator_venv, target_is_directory=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(path)], check=False)
