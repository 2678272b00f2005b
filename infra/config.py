"""Deployment parameters, read once from CDK context (`cdk.json` or `cdk deploy -c name=value`).

Values given on the command line arrive as strings, values from `cdk.json` as JSON: both are accepted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

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


@dataclass(frozen=True, slots=True)
class DeploymentConfig:
    """Everything a deployment can choose. Defaults size the stack for 10,000 concurrent runs."""

    prefix: str = "tickwork"
    shard_count: int = 16
    queue_count: int = 10
    concurrency_cap: int = 10_000
    executor_batch_size: int = 10
    ticker_shards_per_invocation: int = 4
    lookahead_seconds: int = 120
    production: bool = False
    alarm_email: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: tuple[str, ...] = ()
    start_delay_objective_ms: int = 1000
    oldest_message_age_seconds: int = 1200
    api_rate_limit: int = 50
    api_burst_limit: int = 100
    log_retention_days: int = 30
    target_arns: tuple[str, ...] = ()
    allowed_networks: tuple[str, ...] = ()
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

    @classmethod
    def from_context(cls, get: Callable[[str], Any]) -> DeploymentConfig:
        """`get` is `node.try_get_context`: it returns None for an absent key."""
        parsers: dict[str, Callable[[str, Any], Any]] = {
            "prefix": lambda _name, raw: str(raw).strip(),
            "shard_count": _int(1, 4096),
            "queue_count": _int(1, 100),
            "concurrency_cap": _int(1, 100_000),
            "executor_batch_size": _int(1, 10),
            "ticker_shards_per_invocation": _int(1, 64),
            "lookahead_seconds": _int(1, 600),
            "production": _bool,
            "alarm_email": _optional_str,
            "jwt_issuer": _optional_str,
            "jwt_audience": _list,
            "start_delay_objective_ms": _int(1, 3_600_000),
            "oldest_message_age_seconds": _int(60, 14 * 24 * 3600),
            "api_rate_limit": _int(1, 100_000),
            "api_burst_limit": _int(1, 100_000),
            "log_retention_days": _int(1, 3653),
            "target_arns": _list,
            "allowed_networks": _list,
            "emulator": _bool,
        }
        values: dict[str, Any] = {}
        for name, parse in parsers.items():
            raw = get(name)
            if raw is not None:
                values[name] = parse(name, raw)
        return cls(**values)
