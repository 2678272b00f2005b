"""Deployment parameters, read once from CDK context (`cdk.json` or `cdk deploy -c name=value`).

Values given on the command line arrive as strings, values from `cdk.json` as JSON: both are accepted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tickwork.domain.grants import TargetGrants

T = TypeVar("T")

_PREFIX = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


class ConfigError(ValueError):
    """A context parameter is malformed; the message names it."""


def _bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise ConfigError(f"context {name}={raw!r} must be true or false")


def _int(low: int, high: int) -> Callable[[str, Any], int]:
    def parse(name: str, raw: Any) -> int:
        try:
            value = int(raw)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"context {name}={raw!r} is not an integer") from error
        if not low <= value <= high:
            raise ConfigError(f"context {name}={value} is outside {low}..{high}")
        return value

    return parse


def _list(name: str, raw: Any) -> tuple[str, ...]:
    if isinstance(raw, list | tuple):
        return tuple(str(item).strip() for item in raw if str(item).strip())
    if isinstance(raw, str):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    raise ConfigError(f"context {name}={raw!r} must be a list or a comma-separated string")


def _optional_str(name: str, raw: Any) -> str | None:
    text = str(raw).strip()
    return text or None


def _per_environment(parse: Callable[[str, Any], T]) -> Callable[[str, Any, str], T]:
    """A value, or a mapping by environment (`{"development": 100, "production": 10000}`)."""

    def pick(name: str, raw: Any, environment: str) -> T:
        if isinstance(raw, dict):
            if environment not in raw:
                raise ConfigError(
                    f"context {name} has no value for {environment}: pass -c {name}=<value> "
                    f'or add "{environment}" to its mapping in cdk.json'
                )
            return parse(name, raw[environment])
        return parse(name, raw)

    return pick


# The smallest warm throughput DynamoDB accepts on an on-demand table (its default start).
WARM_READ_MIN = 12_000
WARM_WRITE_MIN = 4_000


def _claim(name: str, raw: Any) -> str:
    if not isinstance(raw, str) or not re.fullmatch(r"[A-Za-z0-9_:./-]{1,128}", raw):
        raise ConfigError(f"context {name}={raw!r} must be a JWT claim name")
    return raw


def _grants_json(name: str, raw: Any) -> str:
    text = raw if isinstance(raw, str) else json.dumps(raw)
    try:
        TargetGrants.parse(text)
    except ValueError as error:
        raise ConfigError(f"{name}: {error}") from error
    return text


def burst_write_units(concurrency_cap: int) -> dict[str, int]:
    """The write units per second each table the top of the hour writes takes, at the cap. Draining:
    `cap` one-second runs end every second, each with two writes on the runs table (claim, finish) and two
    on the slots table (take, give back): 2 x cap each. Planning, a minute or two before: the jobs table
    takes 4 units per fire (the advance and its `due` index moves) and the runs table 2, while every shard
    plans its share of a burst of about 6 x cap (the load model's 60,000 at a cap of 10,000) in about 9 s
    (benchmarks/bench_plan_latency.py): 4 x 6 / 9 = 2.7 x cap on the jobs table, 1.3 x cap on the runs
    table. `python benchmarks/load_model.py` prints each table's need beside these. A new on-demand table
    starts at 4,000 and DynamoDB doubles it only over minutes (AWS documentation)."""
    return {
        "jobs": max(WARM_WRITE_MIN, 3 * concurrency_cap),
        "runs": max(WARM_WRITE_MIN, 2 * concurrency_cap),
        "slots": max(WARM_WRITE_MIN, 2 * concurrency_cap),
    }


@dataclass(frozen=True, slots=True)
class DeploymentConfig:
    """Everything a deployment can choose. The defaults are a development stack that fits a default account
    (100 concurrent runs); production states its `concurrency_cap` explicitly (docs/deploy.md)."""

    prefix: str = "tickwork"
    shard_count: int = 16
    queue_count: int = 10
    concurrency_cap: int = 100
    executor_batch_size: int = 10
    # SQS provisioned mode on every event source mapping. None: derived from the cap (executor.size_executor).
    executor_min_pollers: int = 2
    executor_max_pollers: int | None = None
    # Runs whose call may take minutes, at once, in the long-call lane (one per invocation). None: a tenth of
    # the cap (executor.size_executor).
    long_call_runs: int | None = None
    # Reserved concurrency of the other functions. None: one per ticker shard group (they start together).
    ticker_reserved_concurrency: int | None = None
    sweeper_reserved_concurrency: int = 2
    # The API: `tickwork jobs apply` of 10,000 jobs a minute is ~170 requests/s from one caller. A create is
    # ~30-60 ms in the function (one transaction, a few small writes), so 20 environments carry ~300-600/s:
    # the stage throttle (200/s, bursts of 400) binds first, and one bulk apply leaves others room.
    api_reserved_concurrency: int = 20
    # The watcher (constructs/watcher.py): the runs stream's batches (one at a time per stream shard) and the
    # minutely outbox pass share it. Above the stream's shard count its mapping never waits for an
    # environment; below, a shard's batch waits (throttled, retried until the mapping's record age).
    watcher_reserved_concurrency: int = 10
    # DynamoDB warm throughput (units per second) of the jobs and runs tables; None: DynamoDB's default start.
    jobs_warm_reads: int | None = None
    jobs_warm_writes: int | None = None
    runs_warm_reads: int | None = None
    runs_warm_writes: int | None = None
    # One shard per ticker invocation: a 60,000-fire top of the hour needs ~33 s of CPU at 4 shards an
    # invocation (1,024 MB = 0.58 vCPU), 1.5x inside the 50 s timeout; at 1 it is ~9 s (bench_planner.py).
    ticker_shards_per_invocation: int = 1
    lookahead_seconds: int = 120
    audit_segments: int = 10  # the reconciliation audit: a pass over the jobs takes this many minutes
    audit_grace_seconds: int = 600  # and a queue-carried run unmoved this long past due counts as lost
    production: bool = False
    alarm_email: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: tuple[str, ...] = ()
    # With JWT auth: the claim that names the caller's tenant (`sub`: each user its own).
    jwt_tenant_claim: str = "sub"
    # Owners (in full) with the operator scope: list, pause and resume any owner's job, each use recorded.
    operators: tuple[str, ...] = ()
    start_delay_objective_ms: int = 1000
    # The top of the hour: p99 start delay of any one minute (StartDelayBurstP99). 60,000 one-second runs at a
    # cap of 10,000 drain in 6 s at best; the goal for the last start is 1.5x that (9 s).
    burst_start_delay_objective_ms: int = 10_000
    oldest_message_age_seconds: int = 1200
    api_rate_limit: int = 200
    api_burst_limit: int = 400
    log_retention_days: int = 30
    target_arns: tuple[str, ...] = ()
    allowed_networks: tuple[str, ...] = ()
    # Who may call what: {"<owner>" or "*": ["<kind>:<pattern>", ...]} (domain/grants.py); None: any target
    # the executor's role may call (a deployment with one tenant).
    target_grants: str | None = None
    # Per-owner quotas (domain/quotas.py); None: no such limit.
    owner_max_jobs: int | None = None
    owner_min_interval_seconds: int | None = None
    owner_max_backfill_rate: int | None = None
    # Each owner's share of the concurrency bound: at most this many of one owner's runs at once (None: no
    # share; one owner whose target hangs may then hold the whole bound until its timeouts end).
    owner_concurrency_cap: int | None = None
    # The MiniStack profile (`make e2e-aws`): single-metric alarms (it refuses metric math) and a Lambda
    # bundle built for the interpreter the emulator runs handlers with. Everything else is the AWS stack.
    emulator: bool = False

    def __post_init__(self) -> None:
        if not _PREFIX.match(self.prefix):
            raise ConfigError(f"context prefix={self.prefix!r} must match {_PREFIX.pattern}")
        if bool(self.jwt_issuer) != bool(self.jwt_audience):
            raise ConfigError("context jwt_issuer and jwt_audience go together: set both or neither")
        if self.alarm_email is not None and "@" not in self.alarm_email:
            raise ConfigError(f"context alarm_email={self.alarm_email!r} is not an e-mail address")
        if self.executor_max_pollers is not None and self.executor_max_pollers < self.executor_min_pollers:
            raise ConfigError(
                f"context executor_max_pollers={self.executor_max_pollers} is below "
                f"executor_min_pollers={self.executor_min_pollers}"
            )
        if self.owner_concurrency_cap is not None and self.owner_concurrency_cap > self.concurrency_cap:
            raise ConfigError(
                f"context owner_concurrency_cap={self.owner_concurrency_cap} is above "
                f"concurrency_cap={self.concurrency_cap}: a share cannot exceed the whole"
            )

    def warm(self) -> dict[str, tuple[int | None, int | None]]:
        """Warm throughput per table, (reads, writes) a second. Production pre-warms the writes of the tables
        the burst writes (jobs, runs, slots) to `burst_write_units(cap)` unless the context names them."""
        burst = burst_write_units(self.concurrency_cap) if self.production else {}
        return {
            "jobs": (self.jobs_warm_reads, self.jobs_warm_writes or burst.get("jobs")),
            "runs": (self.runs_warm_reads, self.runs_warm_writes or burst.get("runs")),
            "slots": (None, burst.get("slots")),
        }

    @property
    def environment(self) -> str:
        """The key of per-environment context values."""
        return "production" if self.production else "development"

    @classmethod
    def from_context(cls, get: Callable[[str], Any]) -> DeploymentConfig:
        """`get` is `node.try_get_context`: it returns None for an absent key.

        `concurrency_cap` is per environment: a number, or a mapping by environment (cdk.json holds
        `{"development": 100}`). A production deployment must name its own: there is no production default.
        """
        parsers: dict[str, Callable[[str, Any], Any]] = {
            "prefix": lambda _name, raw: str(raw).strip(),
            "shard_count": _int(1, 4096),
            "queue_count": _int(1, 100),
            "executor_batch_size": _int(1, 10),
            "executor_min_pollers": _int(2, 200),
            "executor_max_pollers": _int(2, 2000),
            "long_call_runs": _int(1, 20_000),
            "ticker_reserved_concurrency": _int(1, 1000),
            "sweeper_reserved_concurrency": _int(1, 100),
            "api_reserved_concurrency": _int(1, 10_000),
            "watcher_reserved_concurrency": _int(1, 1000),
            "jobs_warm_reads": _int(WARM_READ_MIN, 10_000_000),
            "jobs_warm_writes": _int(WARM_WRITE_MIN, 10_000_000),
            "runs_warm_reads": _int(WARM_READ_MIN, 10_000_000),
            "runs_warm_writes": _int(WARM_WRITE_MIN, 10_000_000),
            "ticker_shards_per_invocation": _int(1, 64),
            "lookahead_seconds": _int(1, 600),
            "audit_segments": _int(1, 1_000),
            "audit_grace_seconds": _int(60, 86_400),
            "production": _bool,
            "alarm_email": _optional_str,
            "jwt_issuer": _optional_str,
            "jwt_audience": _list,
            "start_delay_objective_ms": _int(1, 3_600_000),
            "burst_start_delay_objective_ms": _int(1, 3_600_000),
            "oldest_message_age_seconds": _int(60, 14 * 24 * 3600),
            "api_rate_limit": _int(1, 100_000),
            "api_burst_limit": _int(1, 100_000),
            "log_retention_days": _int(1, 3653),
            "target_arns": _list,
            "allowed_networks": _list,
            "jwt_tenant_claim": _claim,
            "operators": _list,
            "target_grants": _grants_json,
            "owner_max_jobs": _int(1, 10_000_000),
            "owner_min_interval_seconds": _int(10, 86_400),
            "owner_max_backfill_rate": _int(1, 1_000),
            "owner_concurrency_cap": _int(1, 100_000),
            "emulator": _bool,
        }
        values: dict[str, Any] = {}
        for name, parse in parsers.items():
            raw = get(name)
            if raw is not None:
                values[name] = parse(name, raw)
        environment = "production" if values.get("production") else "development"
        cap = get("concurrency_cap")
        if cap is not None:
            values["concurrency_cap"] = _per_environment(_int(1, 100_000))(
                "concurrency_cap", cap, environment
            )
        elif environment == "production":
            raise ConfigError(
                "context concurrency_cap is required with production=true (e.g. -c concurrency_cap=10000): "
                "it sizes the Lambda reservation the account must hold (python -m infra.preflight checks it)"
            )
        return cls(**values)
