"""DynamoDB concurrency slots (services/ports.SlotStore): one conditional write to take a slot and one to
give it back, in the common case.

Layout. A pool of N slots is `ceil(N / STRIPE_SIZE)` stripes whose sizes differ by at most one and add up
to N exactly (`stripe_sizes`). A stripe is one item of the slots table under its own partition key
(`<pool>#<index>`), so a busy pool's writes spread over many partitions (DynamoDB allows 1,000 write units
a second per key): `h` maps each holder (`<run id>/<attempt>`) to its lease end (epoch ms), `m` holds the
markers of the holds whose home it is but that live in another stripe (below). A stripe stays under 1 KB
(one write unit a write) unless many markers pile up on it.

Exactness. Every write that adds a holder to a stripe is conditioned on the stripe having room
(`size(h) < :n`, its own size), or replaces holders whose leases ended, each conditioned on the lease it
was seen with. A stripe therefore never has more holders than its size, ended or not, and the live holds of
a pool never outnumber the sum of its stripes' sizes: the pool's size. Reads only guide: a refused write
returns the stripe as it was (ReturnValuesOnConditionCheckFailure=ALL_OLD), which is how an acquire sees
the holders it may take over.

Where a hold lives. Each hold has a home stripe, a hash of the pool and the holder, so its release and its
extend find it with one write, in any process, without being told where it went. An acquire tries the home
first: one write, the common case. If the home is full (and none of its holders' leases has ended), it reads
up to SAMPLE other stripes (one eventually consistent BatchGetItem), tries those with room or with ended
holders (up to MAX_WRITES writes in all), and leaves a marker at the home (`m.<marker key>` = {s: stripe,
l: lease}) saying where the hold went: three writes and a read. If the read shows every stripe full, the
acquire answers False after its one write. A release removes the hold and its marker at the home in one
write and, when the marker names another stripe, the hold there with a second. The marker also makes an
acquire asked again (a lost response) find the hold it took instead of taking another; an extend moves the
marker's lease first, then the hold's.

What a crash between two writes leaves: a hold placed away from home whose marker was not yet written is
found by neither its release nor a repeated acquire (which may then take a second slot); it keeps its slot
until its lease end, then counts as free. A marker whose lease ended is removed by a later acquire that
meets it at the home (MARKER_GC_MIN at a time).

Changing a pool's size changes its layout. Until the holds taken before the change have ended (their
releases may miss them: they then free their slots at their lease end), a pool made smaller can admit more
than its new size (holds in stripes beyond its new count are not counted)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from random import Random
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from tickwork.adapters.dynamodb.base import StoreBase, _code, _NetworkErrorsAreTransient
from tickwork.adapters.dynamodb.items import deserialize, serialize
from tickwork.domain.errors import TransientStoreError
from tickwork.domain.slots import Pool, SlotHold, holder_key, is_live, lease_ms

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# Holders per stripe at most. A holder is ~52 bytes (a 43-character run id and attempt, a 13-digit lease):
# a full stripe with its key and a few markers stays under 1 KB, so every write costs one write unit.
STRIPE_SIZE = 12
# Conditional writes one acquire spends looking for a slot in one pool (the home first, then stripes a read
# showed room in) before it answers False; the marker write after a placement away from home is not counted.
MAX_WRITES = 4
# Stripes an acquire reads when its home is full (0.5 read units each): a pool of up to SAMPLE + 1 stripes
# (396 slots) is read whole, so a free slot anywhere in it is found.
SAMPLE = 32
# An acquire that sees this many markers past their lease at a home removes them (one write).
MARKER_GC_MIN = 3
_CONDITION_FAILED = "ConditionalCheckFailedException"
_BATCH_KEYS = 100
_MAX_BATCH_ROUNDS = 5


def stripe_sizes(size: int, stripe_size: int = STRIPE_SIZE) -> tuple[int, ...]:
    """The sizes of a pool's stripes: as few as `stripe_size` allows, as even as possible, adding up to
    `size` exactly."""
    count = -(-size // stripe_size)
    base, extra = divmod(size, count)
    return tuple(base + 1 if index < extra else base for index in range(count))


def stripe_key(pool: str, index: int) -> str:
    return f"{pool}#{index}"


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def home_stripe(pool: str, holder: str, stripes: int) -> int:
    """The stripe a hold tries first and where its marker lives: the same in every process."""
    return int.from_bytes(_digest(f"{pool}\n{holder}")[:8], "big") % stripes


def marker_key(holder: str) -> str:
    """A holder's name in its home's markers: 96 bits of its hash (16 characters, not its ~45)."""
    return base64.urlsafe_b64encode(_digest(holder)[:12]).decode()


@dataclass(frozen=True, slots=True)
class _Refused:
    """A conditional write refused; `item` is the stripe as it was (None: no such stripe yet)."""

    item: dict[str, Any] | None


@dataclass(slots=True)
class _Attempt:
    """One acquire of one pool: the hold's names and the writes spent so far."""

    pool: Pool
    sizes: tuple[int, ...]
    holder: str
    marker: str
    home: int
    lease: int
    now: int
    writes: int = 0


class DynamoSlots:
    """The slots table (`resources.SLOTS`) through one client. `rng` picks the stripes an acquire tries
    after the home (inject a seeded one in tests)."""

    def __init__(self, client: DynamoDBClient, table: str, *, rng: Random | None = None) -> None:
        self._client = cast("DynamoDBClient", _NetworkErrorsAreTransient(client))
        self.table = table
        self._rng = rng or Random()

    # --- the port ---

    def acquire(self, pools: Sequence[Pool], hold: SlotHold, now: datetime) -> bool:
        for index, pool in enumerate(pools):
            if not self._acquire_one(pool, hold, now):
                self.release(pools[:index], hold.run_id, hold.attempt)
                return False
        return True

    def extend(self, pools: Sequence[Pool], hold: SlotHold) -> bool:
        holder = holder_key(hold.run_id, hold.attempt)
        lease = lease_ms(hold.lease_expires_at)
        for pool in pools:
            home = home_stripe(pool.name, holder, len(stripe_sizes(pool.size)))
            refused = self._set_lease(pool, home, holder, lease)
            if refused is None:
                continue
            marker = _markers(refused.item).get(marker_key(holder))
            if marker is None:
                return False
            # The marker first: a crash after it leaves a marker outliving its hold (harmless), never a
            # live hold whose marker has expired (which a later acquire would remove).
            where = int(marker["s"])
            moved = self._update(
                pool,
                home,
                "SET m.#mk.l = :l",
                "m.#mk.s = :s",
                {"#mk": marker_key(holder)},
                {":l": lease, ":s": where},
            )
            if moved is not None or self._set_lease(pool, where, holder, lease) is not None:
                return False
        return True

    def release(self, pools: Sequence[Pool], run_id: str, attempt: int) -> None:
        holder = holder_key(run_id, attempt)
        for pool in pools:
            home = home_stripe(pool.name, holder, len(stripe_sizes(pool.size)))
            old = self._remove(pool, home, "REMOVE h.#me, m.#mk", {"#me": holder, "#mk": marker_key(holder)})
            marker = _markers(old).get(marker_key(holder))
            if marker is not None and int(marker["s"]) != home:
                self._remove(pool, int(marker["s"]), "REMOVE h.#me", {"#me": holder})

    def in_flight(self, pool: Pool, now: datetime) -> int:
        now_ms = lease_ms(now)
        keys = [stripe_key(pool.name, index) for index in range(len(stripe_sizes(pool.size)))]
        return sum(
            1 for item in self._batch_get(keys) for lease in _holders(item).values() if is_live(lease, now_ms)
        )

    # --- acquiring one pool ---

    def _acquire_one(self, pool: Pool, hold: SlotHold, now: datetime) -> bool:
        holder = holder_key(hold.run_id, hold.attempt)
        sizes = stripe_sizes(pool.size)
        attempt = _Attempt(
            pool=pool,
            sizes=sizes,
            holder=holder,
            marker=marker_key(holder),
            home=home_stripe(pool.name, holder, len(sizes)),
            lease=lease_ms(hold.lease_expires_at),
            now=lease_ms(now),
        )
        refused = self._take(attempt, attempt.home)
        if refused is None:
            return True
        home_item = refused.item
        marker = _markers(home_item).get(attempt.marker)
        if marker is not None:
            # Taken before (a repeated acquire): the marker says where. Refresh the lease there. (A marker
            # whose hold is gone, taken over after its lease end, is replaced below.)
            where = int(marker["s"])
            attempt.writes += 1
            if self._set_lease(pool, where, holder, attempt.lease) is None:
                if int(marker["l"]) != attempt.lease:
                    self._write_marker(attempt, where)
                return True
        elif self._settle(attempt, attempt.home, refused):
            return True
        self._collect_markers(attempt, home_item)
        for where in self._candidates(attempt):
            if attempt.writes >= MAX_WRITES:
                break
            if self._settle(attempt, where, self._take(attempt, where)):
                if not self._write_marker(attempt, where):
                    # Meanwhile the same hold (a duplicate delivery) took the home: keep that one.
                    self._remove(pool, where, "REMOVE h.#me", {"#me": holder})
                return True
        return False

    def _settle(self, attempt: _Attempt, where: int, refused: _Refused | None) -> bool:
        """After a refused write on a stripe, keep at the stripe while the stripe as it came back shows room
        (a take-over freed some) or holders whose leases ended (take them over), within the write budget.
        True once the holder is in."""
        while refused is not None:
            holders = _holders(refused.item)
            ended = {name: lease for name, lease in holders.items() if not is_live(lease, attempt.now)}
            if attempt.writes >= MAX_WRITES or (
                where == attempt.home and _markers(refused.item).get(attempt.marker)
            ):
                return False
            if attempt.holder in holders or len(holders) < attempt.sizes[where]:
                refused = self._take(attempt, where)  # (in already: a duplicate of this hold put it there)
            elif ended:
                refused = self._take_over(attempt, where, ended)
            else:
                return False
        return True

    def _candidates(self, attempt: _Attempt) -> list[int]:
        """Where to look when the home is full: up to SAMPLE other stripes picked at random and read in one
        eventually consistent BatchGetItem (reading a stripe costs a tenth of a refused write to it): those
        with room first, then those with holders whose leases ended, each group in its random order. Full
        stripes are not tried at all (so a full pool costs a waiting run one write and one read)."""
        count = len(attempt.sizes)
        picked = [
            (attempt.home + offset) % count
            for offset in self._rng.sample(range(1, count), min(count - 1, SAMPLE))
        ]
        seen = {
            str(item["slot_key"]): item
            for item in self._batch_get(
                [stripe_key(attempt.pool.name, where) for where in picked], consistent=False
            )
        }
        with_room: list[int] = []
        with_ended: list[int] = []
        for where in picked:
            item = seen.get(stripe_key(attempt.pool.name, where))
            holders = _holders(item)
            if len(holders) < attempt.sizes[where]:
                with_room.append(where)  # a stripe not written yet is all room
            elif any(not is_live(lease, attempt.now) for lease in holders.values()):
                with_ended.append(where)
        return with_room + with_ended

    def _take(self, attempt: _Attempt, where: int) -> _Refused | None:
        """Add the holder to a stripe with room (or find it there already). At its home only while it has
        no marker there (a hold that lives elsewhere is not taken twice). A stripe that does not exist yet
        is created with the holder in it."""
        attempt.writes += 1
        room = "attribute_exists(h) AND size(h) < :n"
        if where == attempt.home:
            room += " AND attribute_not_exists(m.#mk)"
        names = {"#me": attempt.holder}
        if where == attempt.home:
            names["#mk"] = attempt.marker
        refused = self._update(
            attempt.pool,
            where,
            "SET h.#me = :l",
            f"attribute_exists(h.#me) OR ({room})",
            names,
            {":l": attempt.lease, ":n": attempt.sizes[where]},
        )
        if refused is None or refused.item is not None:
            return refused
        if self._create(attempt.pool, where, attempt.holder, attempt.lease):
            return None
        # Created by another acquire meanwhile: ask again (once; then the stripe is there).
        return self._take(attempt, where)

    def _take_over(self, attempt: _Attempt, where: int, ended: Mapping[str, int]) -> _Refused | None:
        """Replace the holders of a stripe whose leases ended (each only if still at the lease seen) with
        the holder: the stripe's count does not grow."""
        attempt.writes += 1
        names = {"#me": attempt.holder}
        # Replacing k holders by one leaves the stripe within its size (a pool made smaller since keeps
        # stripes over their new size until enough holds end).
        values: dict[str, Any] = {":l": attempt.lease, ":n": attempt.sizes[where] + len(ended)}
        removed: list[str] = []
        conditions = ["size(h) < :n"]
        for index, (name, lease) in enumerate(ended.items()):
            names[f"#x{index}"] = name
            values[f":x{index}"] = lease
            removed.append(f"h.#x{index}")
            conditions.append(f"h.#x{index} = :x{index}")
        if where == attempt.home:
            names["#mk"] = attempt.marker
            conditions.append("attribute_not_exists(m.#mk)")
        return self._update(
            attempt.pool,
            where,
            f"REMOVE {', '.join(removed)} SET h.#me = :l",
            " AND ".join(conditions),
            names,
            values,
        )

    def _write_marker(self, attempt: _Attempt, where: int) -> bool:
        """Point the home's marker at the stripe holding the hold. False if the home holds the hold itself
        (the same hold acquired twice at once): the caller then drops the other one."""
        if where == attempt.home:
            return True
        refused = self._update(
            attempt.pool,
            attempt.home,
            "SET m.#mk = :v",
            "attribute_exists(h) AND attribute_not_exists(h.#me)",
            {"#me": attempt.holder, "#mk": attempt.marker},
            {":v": {"s": where, "l": attempt.lease}},
        )
        return refused is None

    def _collect_markers(self, attempt: _Attempt, item: Mapping[str, Any] | None) -> None:
        """Remove the markers of a home whose holds' leases ended (a crashed holder's), once there are a few:
        each only if still at the lease seen. A refusal means one moved: left for the next acquire."""
        ended = {
            name: marker
            for name, marker in _markers(item).items()
            if name != attempt.marker and not is_live(int(marker["l"]), attempt.now)
        }
        if len(ended) < MARKER_GC_MIN:
            return
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        removed: list[str] = []
        conditions: list[str] = []
        for index, (name, marker) in enumerate(ended.items()):
            names[f"#g{index}"] = name
            values[f":g{index}"] = int(marker["l"])
            removed.append(f"m.#g{index}")
            conditions.append(f"m.#g{index}.l = :g{index}")
        update = f"REMOVE {', '.join(removed)}"
        self._update(attempt.pool, attempt.home, update, " AND ".join(conditions), names, values)

    # --- requests ---

    def _set_lease(self, pool: Pool, where: int, holder: str, lease: int) -> _Refused | None:
        """Move a holder's lease, if it is in the stripe."""
        return self._update(
            pool, where, "SET h.#me = :l", "attribute_exists(h.#me)", {"#me": holder}, {":l": lease}
        )

    def _update(
        self,
        pool: Pool,
        where: int,
        update: str,
        condition: str,
        names: Mapping[str, str],
        values: Mapping[str, Any],
    ) -> _Refused | None:
        """One conditional UpdateItem on a stripe: None if it was written, the refusal otherwise."""
        request: dict[str, Any] = {
            "TableName": self.table,
            "Key": serialize({"slot_key": stripe_key(pool.name, where)}),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": dict(names),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if values:
            request["ExpressionAttributeValues"] = serialize(values)
        try:
            self._client.update_item(**request)
        except ClientError as error:
            if _code(error) != _CONDITION_FAILED:
                raise StoreBase._translate(error) from error
            item = cast("Mapping[str, Any] | None", error.response.get("Item"))
            return _Refused(deserialize(item) if item else None)
        return None

    def _remove(self, pool: Pool, where: int, update: str, names: Mapping[str, str]) -> dict[str, Any] | None:
        """REMOVE paths from a stripe if it exists (removing what is not there changes nothing); returns the
        stripe as it was before (None: no such stripe)."""
        try:
            response = self._client.update_item(
                TableName=self.table,
                Key=serialize({"slot_key": stripe_key(pool.name, where)}),
                UpdateExpression=update,
                ConditionExpression="attribute_exists(slot_key)",
                ExpressionAttributeNames=dict(names),
                ReturnValues="ALL_OLD",
            )
        except ClientError as error:
            if _code(error) == _CONDITION_FAILED:
                return None
            raise StoreBase._translate(error) from error
        attributes: Mapping[str, Any] | None = response.get("Attributes")
        return deserialize(attributes) if attributes else None

    def _create(self, pool: Pool, where: int, holder: str, lease: int) -> bool:
        """Create a stripe holding `holder`; False if it exists already."""
        try:
            self._client.put_item(
                TableName=self.table,
                Item=serialize({"slot_key": stripe_key(pool.name, where), "h": {holder: lease}, "m": {}}),
                ConditionExpression="attribute_not_exists(slot_key)",
            )
        except ClientError as error:
            if _code(error) == _CONDITION_FAILED:
                return False
            raise StoreBase._translate(error) from error
        return True

    def _batch_get(self, keys: Sequence[str], *, consistent: bool = True) -> list[dict[str, Any]]:
        """The stripes that exist among `keys` (100 keys a request)."""
        found: list[dict[str, Any]] = []
        for start in range(0, len(keys), _BATCH_KEYS):
            chunk = keys[start : start + _BATCH_KEYS]
            request: dict[str, Any] = {
                self.table: {
                    "Keys": [serialize({"slot_key": key}) for key in chunk],
                    "ConsistentRead": consistent,
                }
            }
            for _ in range(_MAX_BATCH_ROUNDS):
                try:
                    response = self._client.batch_get_item(RequestItems=request)
                except ClientError as error:
                    raise StoreBase._translate(error) from error
                found.extend(deserialize(item) for item in response.get("Responses", {}).get(self.table, []))
                request = dict(response.get("UnprocessedKeys") or {})
                if not request:
                    break
            else:
                raise TransientStoreError("BatchGetItem left slot stripes unprocessed after retries")
        return found


def _holders(item: Mapping[str, Any] | None) -> dict[str, int]:
    return {str(name): int(lease) for name, lease in ((item or {}).get("h") or {}).items()}


def _markers(item: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    return dict((item or {}).get("m") or {})
