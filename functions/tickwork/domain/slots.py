"""Concurrency slots: the bound counts runs. Pure.

A `Pool` is one bound: `all` (the instance's cap), `owner:<owner>` (an optional limit per owner) and
`key:<key>@<limit>/<owner>` (a job's own limit on its owner's runs sharing its key, e.g. one target host:
`key_pool`). A run attempt
runs only while it holds one slot in every pool that applies to it (`pools_for`); it holds it as a
`SlotHold` until its lease ends, and a hold whose lease has ended counts as free: anyone may take it over,
so a crashed worker's slot comes back no later than its lease end. The store (services/ports.SlotStore)
keeps the holds, and keeps the live holds of a pool at or below its size at every instant."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tickwork.domain.errors import ValidationError

ALL = "all"
OWNER_PREFIX = "owner:"
KEY_PREFIX = "key:"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class Pool:
    """A bound: at most `size` run attempts hold a slot of the pool `name` at once."""

    name: str
    size: int

    def __post_init__(self) -> None:
        if not self.name:
            raise ValidationError("pool.name", "must not be empty")
        if self.size < 1:
            raise ValidationError(f"pool.{self.name}.size", f"must be at least 1, not {self.size}")


@dataclass(frozen=True, slots=True)
class SlotHold:
    """A run attempt holding (or asking for) a slot until `lease_expires_at`. The attempt is part of its
    identity: a newer attempt of the same run is another hold."""

    run_id: str
    attempt: int
    lease_expires_at: datetime

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ValidationError("hold.run_id", "must not be empty")
        if self.attempt < 1:
            raise ValidationError("hold.attempt", f"must be at least 1, not {self.attempt}")
        if self.lease_expires_at.tzinfo is None:
            raise ValidationError("hold.lease_expires_at", "must be timezone-aware")


@dataclass(frozen=True, slots=True)
class SlotLimits:
    """The instance's bounds: `total` runs at once, and at most `per_owner` runs of any one owner (None:
    no limit per owner)."""

    total: int
    per_owner: int | None = None

    def __post_init__(self) -> None:
        if self.total < 1:
            raise ValidationError("limits.total", f"must be at least 1, not {self.total}")
        if self.per_owner is not None and self.per_owner < 1:
            raise ValidationError("limits.per_owner", f"must be at least 1, not {self.per_owner}")


def pools_for(
    owner: str, concurrency_key: str | None, limits: SlotLimits, key_limit: int | None = None
) -> tuple[Pool, ...]:
    """The pools a run of `owner`'s job must hold a slot in: its concurrency key's (only when the job names
    both a key and a limit), the owner's (when the instance limits owners), and `all`, always. Narrowest
    first, so a run its key or owner holds back is refused before it touches the instance-wide pool."""
    if not owner:
        raise ValidationError("owner", "must not be empty")
    if concurrency_key is not None and not concurrency_key:
        raise ValidationError("concurrency_key", "must not be empty")
    pools: list[Pool] = []
    if concurrency_key is not None and key_limit is not None:
        pools.append(key_pool(owner, concurrency_key, key_limit))
    if limits.per_owner is not None:
        pools.append(Pool(OWNER_PREFIX + owner, limits.per_owner))
    pools.append(Pool(ALL, limits.total))
    return tuple(pools)


def key_pool(owner: str, concurrency_key: str, limit: int) -> Pool:
    """The pool of the runs of `owner`'s jobs that name `concurrency_key` with `limit`:
    `key:<key>@<limit>/<owner>`.

    The owner is in the name, so one tenant's key never counts another's runs. The limit is too, because a
    store lays a pool out from its size (the DynamoDB stripes: adapters/dynamodb/slots.py): jobs that name
    the same key with another limit are another pool, each exact, rather than one pool whose holds are
    counted against two layouts. The owner comes last and a key has no `@`, so the name reads back one way
    only (an owner may hold any character, `/` and `@` included)."""
    if limit < 1:
        raise ValidationError("concurrency_limit", f"must be at least 1, not {limit}")
    return Pool(f"{KEY_PREFIX}{concurrency_key}@{limit}/{owner}", limit)


def holder_key(run_id: str, attempt: int) -> str:
    """How the stores name a hold: the run id and the attempt (`job_…:20261202T120500Z/2`)."""
    return f"{run_id}/{attempt}"


def lease_ms(instant: datetime) -> int:
    """An instant as the stores keep leases: whole milliseconds since the epoch (floored, exactly)."""
    return (instant - _EPOCH) // _MS


def is_live(lease: int, now_ms: int) -> bool:
    """A hold with this lease (ms) still holds its slot at `now_ms`; at its lease end it is free."""
    return lease > now_ms
