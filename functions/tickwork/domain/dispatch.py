"""The dispatch message (small: the run's key and the attempt it is for) and its delay rule."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from tickwork.domain.errors import ValidationError
from tickwork.domain.execution import Finish
from tickwork.domain.models import Concurrency, Run, make_run_id
from tickwork.domain.timekeys import format_instant, format_instant_ms, parse_instant

MAX_DELAY_SECONDS = 900  # SQS's per-message delay limit
# Re-sends of one run's message by the executor (deferrals, retries, blocked-retry waits) before the run is
# taken for a runaway loop and failed. The worst legitimate chain is far below it: 10 attempts (the API's
# limit), each waiting behind a slot for at most its lease (840 s timeout + 30 s margin) in 30 s steps, is
# about 10 x (29 + 2) = 310 hops. Lambda's own recursive-loop cut-off (16 hops) is turned off on the
# executor, so this bound is what stops a real loop.
MAX_HOPS = 1000
# The ticker sends a run's message before it commits the run (so a crash between the two cannot strand a
# committed run without a message, and the run needs no sweeper index entry). It starts no commit of that
# run later than COMMIT_WINDOW after the send (the message's `commit_by`), and a commit once started lands
# within COMMIT_SETTLE (the store's 6 tries of at most 3 x 35 s client calls, with their backoff, is
# about 11 minutes). A message that finds no run waits until then: its run may still appear. After that the
# run can no longer be committed by that tick, and the job, never advanced past the fire, is planned again
# by a later tick with a message of its own.
COMMIT_WINDOW = timedelta(seconds=30)
COMMIT_SETTLE = timedelta(minutes=15)
# A message that found no run looks again after this (doubling with each look, up to the cap).
MISSING_RUN_RECHECK_FIRST = timedelta(seconds=1)
MISSING_RUN_RECHECK_CAP = timedelta(seconds=300)
_QUEUE_HASH_PERSON = b"tickwork-queue"  # keeps the queue hash independent of the shard hash (sha256 of job)


def queue_index(run_id: str, queue_count: int) -> int:
    """The dispatch queue a run's messages go to: a stable hash of the run id, so runs spread evenly over
    the queues whatever the shard and queue counts (shard % queue_count overloads some queues when the
    counts do not divide). Every message of one run lands on the same queue. Not Python's hash(): that is
    salted per process."""
    if queue_count < 1:
        raise ValueError("queue_count must be at least 1")
    digest = hashlib.blake2b(run_id.encode(), digest_size=8, person=_QUEUE_HASH_PERSON).digest()
    return int.from_bytes(digest, "big") % queue_count


@dataclass(frozen=True, slots=True)
class RunMessage:
    job_id: str
    scheduled_for: datetime
    attempt: int  # the run's attempt counter when sent: a claim succeeds only if it still matches
    not_before: datetime  # the run's due time (or retry time): executors hold early arrivals until then
    # How many times the executor re-sent this run's message to its own queues (a message without the field,
    # from before it existed, is hop 0). Bookkeeping of the delivery, not part of its identity.
    hops: int = field(default=0, compare=False)
    # When the queue accepted this message (SQS SentTimestamp), filled in by the consumer; not in the body.
    sent_at: datetime | None = field(default=None, compare=False)
    # The target's timeout as the run's job view had it when sent: the executor computes the lease from it
    # before claiming, and the claim checks it against the view (None: the executor reads the job).
    timeout_seconds: int | None = field(default=None, compare=False)
    # Set when the message was sent before its run was committed: no commit of the run starts after this
    # instant (COMMIT_WINDOW). Kept across re-sends, so a re-sent message still knows it.
    commit_by: datetime | None = field(default=None, compare=False)
    # Set on a message that carries an attempt's end because its finish write could not land: its delivery
    # writes that end, and never calls the target again (docs/design.md, "A delivery, step by step").
    finish: Finish | None = field(default=None, compare=False)
    # The run's owner (its per-owner slot pool is known before the claim reads anything), and how many times
    # this message went back to wait for a concurrency slot: waits are not hops (a run waiting behind the
    # bound is not a loop, and never fails for waiting).
    owner: str | None = field(default=None, compare=False)
    slot_waits: int = field(default=0, compare=False)
    # The job's concurrency key and limit as the run's job view had them when sent (None: none): the key's
    # slot pool is known before the claim too, and the claim checks it against the view.
    concurrency: Concurrency | None = field(default=None, compare=False)
    # A tracked run's look at what it started: this message's how-many-th (0: not a look). Looks are not
    # hops either: a long workflow is followed for as long as its attempt's deadline allows.
    polls: int = field(default=0, compare=False)
    # A message that watches its running run's lease (it comes back at the lease end): it reads the run
    # before anything else, so it never waits for a concurrency slot only to look at a lease.
    watch: bool = field(default=False, compare=False)

    @classmethod
    def for_run(
        cls,
        run: Run,
        not_before: datetime | None = None,
        *,
        hops: int = 0,
        commit_by: datetime | None = None,
    ) -> RunMessage:
        view = run.job_view
        timeout = None if view is None else view.timeout_seconds
        return cls(
            run.job_id,
            run.scheduled_for,
            run.attempt,
            not_before or run.due_at,
            hops=hops,
            timeout_seconds=timeout,
            commit_by=commit_by,
            owner=run.owner or None,
            concurrency=None if view is None else view.concurrency,
        )

    def run_may_appear(self, now: datetime) -> bool:
        """Whether a commit of this message's run may still land: it was sent before its commit, and the
        commit's window and settling time have not both passed. Until then a missing run is not an orphan."""
        return self.commit_by is not None and now < self.commit_by + COMMIT_SETTLE

    def missing_run_recheck(self, now: datetime) -> RunMessage:
        """This message sent again to look for its run later: the wait doubles with each hop, capped."""
        wait = min(MISSING_RUN_RECHECK_FIRST * (2 ** min(self.hops, 16)), MISSING_RUN_RECHECK_CAP)
        return replace(self.resent(), not_before=max(self.not_before, now + wait))

    def resent(self) -> RunMessage:
        """This message sent again unchanged (an early arrival going back to the queue): one hop more."""
        return replace(self, hops=self.hops + 1, sent_at=None)

    @property
    def runaway(self) -> bool:
        """Re-sent more often than any legitimate run needs: a loop to stop, not a message to follow."""
        return self.hops > MAX_HOPS

    def to_json(self) -> str:
        body: dict[str, object] = {
            "job_id": self.job_id,
            "scheduled_for": format_instant(self.scheduled_for),
            "attempt": self.attempt,
            "not_before": format_instant_ms(self.not_before),
            "hops": self.hops,
        }
        if self.timeout_seconds is not None:
            body["timeout_seconds"] = self.timeout_seconds
        if self.commit_by is not None:
            body["commit_by"] = format_instant_ms(self.commit_by)
        if self.finish is not None:
            body["finish"] = self.finish.to_dict()
        if self.owner is not None:
            body["owner"] = self.owner
        if self.slot_waits:
            body["slot_waits"] = self.slot_waits
        if self.concurrency is not None:
            body["concurrency_key"] = self.concurrency.key
            body["concurrency_limit"] = self.concurrency.limit
        if self.polls:
            body["polls"] = self.polls
        if self.watch:
            body["watch"] = True
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, body: str) -> RunMessage:
        try:
            data = json.loads(body)
            return cls(
                job_id=str(data["job_id"]),
                scheduled_for=parse_instant(str(data["scheduled_for"])),
                attempt=int(data["attempt"]),
                not_before=parse_instant(str(data["not_before"])),
                hops=_hops(data.get("hops", 0)),
                timeout_seconds=_timeout(data.get("timeout_seconds")),
                commit_by=None if data.get("commit_by") is None else parse_instant(str(data["commit_by"])),
                finish=None if data.get("finish") is None else Finish.from_dict(data["finish"]),
                owner=None if data.get("owner") is None else str(data["owner"]),
                slot_waits=_hops(data.get("slot_waits", 0)),
                concurrency=_concurrency(data.get("concurrency_key"), data.get("concurrency_limit")),
                polls=_hops(data.get("polls", 0)),
                watch=data.get("watch") is True,
            )
        except (ValueError, KeyError, TypeError) as error:
            raise ValidationError("message", f"not a Tickwork run message: {error}") from error

    def with_sent_at_ms(self, sent_timestamp_ms: str | int | None) -> RunMessage:
        """The message as received, stamped with SQS's SentTimestamp (epoch milliseconds), if known."""
        if sent_timestamp_ms is None:
            return self
        return replace(self, sent_at=datetime.fromtimestamp(int(sent_timestamp_ms) / 1000, tz=UTC))

    @property
    def run_id(self) -> str:
        return make_run_id(self.job_id, self.scheduled_for)

    @property
    def dedupe_id(self) -> str:
        return f"{self.job_id}:{format_instant(self.scheduled_for)}:{self.attempt}"


def _hops(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"hops must be a non-negative integer, not {value!r}")
    return value


def _concurrency(key: object, limit: object) -> Concurrency | None:
    """Both or neither (a message from before the fields existed has neither)."""
    if key is None and limit is None:
        return None
    if not isinstance(key, str) or not isinstance(limit, int) or isinstance(limit, bool):
        raise ValueError(f"concurrency_key and concurrency_limit go together, not {key!r} and {limit!r}")
    try:
        return Concurrency(key, limit)
    except ValidationError as error:
        raise ValueError(str(error)) from None


def _timeout(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"timeout_seconds must be a positive integer, not {value!r}")
    return value


def delay_seconds(not_before: datetime, now: datetime) -> int:
    """Whole seconds SQS should hide the message: rounded down so it is never late (the executor holds the
    sub-second remainder), clamped to SQS's 0..900; longer waits are re-sent by the executor."""
    remaining = (not_before - now).total_seconds()
    return max(0, min(MAX_DELAY_SECONDS, math.floor(remaining)))


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dispatch message the queue gave up on (it failed max_receive_count deliveries)."""

    receipt: str
    message: RunMessage | None  # None: the body was not a run message
    body: str
    receive_count: int
