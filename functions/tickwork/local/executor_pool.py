"""The local executor: consumes the dispatch queues with a bounded pool. The pool size IS this process's share
of the concurrency cap (the executor processes' shares add up to it): a message is received only when a slot
is free, so the excess waits in the queue as queue depth. Each queue has its own receive loop; the loops share
the pool's slots and take them in turn.

Visibility follows the work, not the queue: a message is received invisible for only
LOCAL_VISIBILITY_SECONDS and a heartbeat extends every message still being handled (held for its fire
time, or its run executing). So a message held by an executor that dies, even by SIGKILL, is visible again
within seconds, instead of after the queue's 960 s visibility timeout (sized for the Lambda's 900 s).

A delivery's writes (its slot and claim, its finish and slot back) go in one commit with those of the other
deliveries at a write step at the same time (see _SharedCommits); nobody waits for that commit. A handled
message is deleted in a batch with the others handled around the same time (see _BatchDeleter)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.domain.dispatch import RunMessage
from tickwork.domain.errors import ValidationError
from tickwork.services.executing import Begun, Executor, Outcome

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

# A message whose processing raised comes back this fast locally (AWS uses the queue's visibility timeout).
LOCAL_RETRY_VISIBILITY_SECONDS = 5
# How long a received message stays invisible without a heartbeat, and how often the heartbeat runs.
LOCAL_VISIBILITY_SECONDS = 6
HEARTBEAT_SECONDS = 2.0
# After a failed receive (the endpoint is down or refusing): wait, doubling up to the maximum.
RECEIVE_BACKOFF_SECONDS = 0.5
RECEIVE_BACKOFF_MAX_SECONDS = 8.0
# SQS takes at most 10 messages per receive, per delete batch and per visibility batch.
SQS_BATCH = 10
# A handled message waits at most this long for others to fill its delete batch.
DELETE_LINGER_SECONDS = 0.05
# At most this many deliveries' write steps go in one commit (SQS's batch: about what a receive begins).
WRITE_BATCH = 10
# On stop, how long the last deletes may take before the pool gives up on them (they then come back).
DELETE_CLOSE_TIMEOUT_SECONDS = 10.0


@dataclass
class PoolStats:
    in_flight: int = 0
    peak_in_flight: int = 0
    processed: int = 0
    errors: int = 0


@dataclass(frozen=True)
class _Handled:
    receipt: str
    message_id: str
    at: float  # time.monotonic() when it was handed to the deleter


class _BatchDeleter:
    """Deletes handled messages in batches of up to 10 per queue, from one thread: a batch goes out when it is
    full or when its oldest message has waited `linger_seconds`, and everything pending goes out on close.

    A delete that fails is logged and not retried: the message comes back after its visibility timeout, and
    the run's fenced claim recognises that second delivery as a duplicate."""

    def __init__(self, sqs: Any, linger_seconds: float) -> None:
        self._sqs = sqs
        self._linger = linger_seconds
        self._pending: dict[str, list[_Handled]] = {}  # queue url -> handled messages, oldest first
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="tickwork-delete", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def add(self, url: str, receipt: str, message_id: str) -> None:
        with self._cond:
            pending = self._pending.setdefault(url, [])
            pending.append(_Handled(receipt, message_id, time.monotonic()))
            # Woken only to time a new batch's linger or to send a full one: between those it wakes on its
            # own, so a burst does not wake it once per handled message.
            if len(pending) == 1 or len(pending) >= SQS_BATCH:
                self._cond.notify()

    def close(self) -> None:
        """Send everything pending and stop; waits for the last batches (bounded: they are safe to lose)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if not self._thread.is_alive():
            return
        self._thread.join(DELETE_CLOSE_TIMEOUT_SECONDS)
        if self._thread.is_alive():
            logger.warning(
                "deletes still pending after %.0f s; those messages come back and count as duplicates",
                DELETE_CLOSE_TIMEOUT_SECONDS,
            )

    def _run(self) -> None:
        while True:
            with self._cond:
                due, wake_in = self._take_due()
                while not due:
                    if self._closed:  # closed takes everything: nothing was left
                        return
                    self._cond.wait(wake_in)
                    due, wake_in = self._take_due()
            for url, batch in due:  # outside the lock: the workers keep handing messages over
                self._send(url, batch)

    def _take_due(self) -> tuple[list[tuple[str, list[_Handled]]], float | None]:
        """The batches to send now (full, lingered long enough, or all once closed), and the seconds until
        the next one is due (None: nothing pending)."""
        now = time.monotonic()
        due: list[tuple[str, list[_Handled]]] = []
        wake_in: float | None = None
        for url, pending in self._pending.items():
            while len(pending) >= SQS_BATCH or (
                pending and (self._closed or now - pending[0].at >= self._linger)
            ):
                due.append((url, pending[:SQS_BATCH]))
                del pending[:SQS_BATCH]
            if pending:
                left = pending[0].at + self._linger - now
                wake_in = left if wake_in is None else min(wake_in, left)
        return due, wake_in

    def _send(self, url: str, batch: list[_Handled]) -> None:
        entries = [{"Id": str(i), "ReceiptHandle": h.receipt} for i, h in enumerate(batch)]
        try:
            response = self._sqs.delete_message_batch(QueueUrl=url, Entries=entries)
        except (BotoCoreError, ClientError) as error:  # left alone: they come back, fenced as duplicates
            logger.warning(
                "deleting %d handled messages from %s failed (%s); they come back and count as duplicates",
                len(batch),
                url,
                error,
            )
            return
        by_id = {entry["Id"]: handled for entry, handled in zip(entries, batch, strict=True)}
        for failed in response.get("Failed", []):
            handled = by_id.get(str(failed.get("Id")))
            logger.warning(
                "deleting handled message %s from %s failed (%s: %s); it comes back, counted as a duplicate",
                handled.message_id if handled else f"with entry id {failed.get('Id')}",
                url,
                failed.get("Code"),
                failed.get("Message"),
            )


@dataclass
class _Delivery:
    """A received message on its way: where it came from and how far it got."""

    url: str
    message: dict[str, Any]
    begun: Begun | None = None  # None: not yet decided (Executor.start)

    @property
    def at(self) -> Begun:
        """Where it got (once decided)."""
        assert self.begun is not None, "a delivery not yet decided"
        return self.begun


class _SharedCommits:
    """The write steps of deliveries that reach one at the same time, carried out in one commit
    (Executor.carry_together) by whichever worker finds no commit under way; the others hand theirs over
    and return to the pool. Nobody waits for a commit: a worker that waited for another's commit cost more
    in wake-ups than the commit saved. While one commit is being made, the next batch gathers.

    What a commit leaves is handed on: a delivery that is done is finished at once, one with more to do
    (a retry, a callback) goes back to a worker. When the commit does not land, each delivery is resumed
    alone by a worker, as it would have been without a batch."""

    def __init__(
        self,
        executor: Executor,
        submit: Callable[..., object],
        advance: Callable[[_Delivery], None],
        alone: Callable[[_Delivery], None],
        done: Callable[[_Delivery, Outcome | None], None],
    ) -> None:
        self._executor = executor
        self._submit = submit  # runs a callable on a worker
        self._advance, self._alone, self._done = advance, alone, done
        self._lock = threading.Lock()
        self._pending: list[_Delivery] = []
        self._committing = False

    def add(self, delivery: _Delivery) -> None:
        """Hand a delivery at a write step over; the calling worker makes the commits if none is under way."""
        with self._lock:
            self._pending.append(delivery)
            if self._committing:
                return
            self._committing = True
        try:
            while True:
                with self._lock:
                    batch = self._pending[:WRITE_BATCH]
                    del self._pending[:WRITE_BATCH]
                    if not batch:
                        self._committing = False
                        return
                self._commit(batch)
        except BaseException:  # the next delivery handed over makes the commits (this one is raised on)
            with self._lock:
                self._committing = False
            raise

    def _commit(self, batch: list[_Delivery]) -> None:
        """One commit for the batch's writes; then each delivery is handed on exactly once."""
        try:
            carried = self._executor.carry_together([delivery.at for delivery in batch])
        except Exception:  # nothing of the batch landed: each is resumed alone, the one at fault fails alone
            logger.exception("carrying out the writes of %d deliveries together failed", len(batch))
            carried = None
        if carried is None:  # busy beyond the engine's wait, or raised: nothing landed
            logger.warning("the writes of %d deliveries did not land together; each goes alone", len(batch))
        for index, delivery in enumerate(batch):
            if carried is not None:  # else it is where it was: nothing landed
                delivery.begun = carried[index]
            after = delivery.at
            try:
                if carried is None or not after.done:  # resumed alone, or carried on: by a worker
                    self._submit(self._alone if carried is None else self._advance, delivery)
                    continue
                outcome: Outcome | None = self._executor.resume(after)  # done: it only records its end
            except Exception:  # its message is handed back like any that raised (what landed stands)
                logger.exception("handing on a delivery after its writes failed; it will be redelivered")
                outcome = None
            self._done(delivery, outcome)


class _Turns:
    """A lock granted in the order it was asked for. The receive loops take their slots in turn: with the
    semaphore alone, a loop that just gave its slots back (after an empty receive) takes them straight back,
    and with a cap smaller than the number of queues the other queues would starve."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._line: deque[object] = deque()

    def __enter__(self) -> None:
        me = object()
        with self._cond:
            self._line.append(me)
            self._cond.wait_for(lambda: self._line[0] is me)

    def __exit__(self, *exc_info: object) -> None:
        with self._cond:
            self._line.popleft()
            self._cond.notify_all()


class ExecutorPool:
    def __init__(
        self,
        sqs: Any,
        queue_urls: Sequence[str],
        executor_factory: Callable[[], Executor],
        cap: int,
        poll_wait_seconds: int = 1,
        visibility_seconds: int = LOCAL_VISIBILITY_SECONDS,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
        delete_linger_seconds: float = DELETE_LINGER_SECONDS,
        stop_waiting: Callable[[], None] | None = None,
    ) -> None:
        if cap < 1:
            raise ValueError("the concurrency cap must be at least 1")
        if not queue_urls:
            raise ValueError("the pool needs at least one dispatch queue")
        self._sqs = sqs
        self._queue_urls = list(queue_urls)
        self._executor_factory = executor_factory
        self._cap = cap
        self._poll_wait = poll_wait_seconds
        # Ends the receives' waits when the pool stops (a long poll would hold the stop up to its wait).
        self._stop_waiting = stop_waiting
        self._visibility = visibility_seconds
        self._heartbeat_every = heartbeat_seconds
        self._held: dict[str, str] = {}  # receipt handle -> queue url, for every message being handled
        # Set while any message is held: the heartbeat sleeps on it, so an idle pool's heartbeat never wakes.
        self._holding = threading.Event()
        self._slots = threading.BoundedSemaphore(cap)
        self._turns = _Turns()
        self._deleter = _BatchDeleter(sqs, delete_linger_seconds)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # told when no delivery is left in flight
        self._running: tuple[Executor, _SharedCommits] | None = None  # while run() runs
        self.stats = PoolStats()

    def run(self, stop: threading.Event) -> None:
        executor = self._executor_factory()
        heartbeat_stop = threading.Event()
        heartbeat = threading.Thread(
            target=self._heartbeat, args=(heartbeat_stop,), name="tickwork-visibility", daemon=True
        )
        heartbeat.start()
        self._deleter.start()
        try:
            # One worker more than the cap: the worker making the shared commits goes on with them after
            # its own delivery was handed on to another.
            with ThreadPoolExecutor(max_workers=self._cap + 1, thread_name_prefix="tickwork-run") as pool:
                commits = _SharedCommits(executor, pool.submit, self._advance, self._alone, self._done)
                self._running = (executor, commits)
                self._receive_all(stop, executor, pool)
                # Every delivery ends before the pool does: a shared commit may hand one on to a worker.
                # (After a crashed loop the pool ends at once: a delivery it can no longer take is handed
                # back, and one received but never begun comes back after its visibility timeout.)
                self._wait_idle()
        finally:  # after the runs in flight finished: they keep their messages hidden until then
            self._deleter.close()
            heartbeat_stop.set()
            self._holding.set()
            heartbeat.join(timeout=5)

    def _executor(self) -> Executor:
        assert self._running is not None, "the pool is not running"
        return self._running[0]

    def _commits(self) -> _SharedCommits:
        assert self._running is not None, "the pool is not running"
        return self._running[1]

    def _wait_idle(self) -> None:
        with self._idle:
            self._idle.wait_for(lambda: not self.stats.in_flight)

    def _receive_all(self, stop: threading.Event, executor: Executor, pool: ThreadPoolExecutor) -> None:
        """One receive loop per queue until `stop`. A loop that crashed stops the others and its error is
        raised (the process exits and is restarted, as when the single loop crashed)."""
        halt = threading.Event()  # the loops' own stop: set on `stop`, or when one of them crashed
        # `stop` is passed on to `halt` by a thread that sleeps until then, and a loop that is done (it
        # crashed: a loop returns only once halted) sets `halt` itself. Nothing polls.
        threading.Thread(target=_pass_on, args=(stop, halt), name="tickwork-stop", daemon=True).start()
        urls = self._queue_urls
        with ThreadPoolExecutor(max_workers=len(urls), thread_name_prefix="tickwork-receive") as receivers:
            loops = [receivers.submit(self._receive_loop, url, halt, executor, pool) for url in urls]
            for loop in loops:
                loop.add_done_callback(lambda _: halt.set())
            halt.wait()
            if self._stop_waiting is not None:
                self._stop_waiting()
        # Every loop has returned here, before the run pool shuts down: a loop may have been submitting.
        for loop in loops:
            loop.result()

    def _receive_loop(
        self, url: str, halt: threading.Event, executor: Executor, pool: ThreadPoolExecutor
    ) -> None:
        backoff = 0.0
        # A queue that was empty is polled for one message, so an idle queue holds one slot, not ten,
        # while it waits.
        wanted = 1
        while not halt.is_set():
            free = self._reserve_slots(halt, wanted)
            if free == 0:
                continue
            try:
                response = self._sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=free,
                    WaitTimeSeconds=self._poll_wait,
                    VisibilityTimeout=self._visibility,
                    MessageSystemAttributeNames=["SentTimestamp"],
                )
            except (BotoCoreError, ClientError) as error:  # endpoint down or refusing: back off, no crash
                backoff = min(RECEIVE_BACKOFF_MAX_SECONDS, max(RECEIVE_BACKOFF_SECONDS, backoff * 2))
                logger.error("receive from %s failed (%s); retrying in %.1f s", url, error, backoff)
                self._release_slots(free)
                halt.wait(backoff)
                continue
            backoff = 0.0
            messages = response.get("Messages", [])
            wanted = SQS_BATCH if messages else 1
            self._release_slots(free - len(messages))  # slots reserved for messages that did not come
            for message in messages:
                self._enter()
                with self._lock:
                    self._held[message["ReceiptHandle"]] = url
                    self._holding.set()
            for message, begun in zip(messages, _begin(executor, messages), strict=True):
                pool.submit(self._process, url, message, begun)

    def _heartbeat(self, stop: threading.Event) -> None:
        """Keep every message being handled invisible for another LOCAL_VISIBILITY_SECONDS, until done."""
        while not stop.is_set():
            self._holding.wait()  # nothing held, nothing to extend: asleep until a message is
            if stop.wait(self._heartbeat_every):
                return
            with self._lock:
                held = list(self._held.items())
            by_queue: dict[str, list[str]] = {}
            for receipt, url in held:
                by_queue.setdefault(url, []).append(receipt)
            for url, receipts in by_queue.items():
                for start in range(0, len(receipts), SQS_BATCH):
                    entries = [
                        {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": self._visibility}
                        for i, r in enumerate(receipts[start : start + SQS_BATCH])
                    ]
                    try:
                        self._sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
                    except (BotoCoreError, ClientError) as error:  # a missed beat: it comes back early
                        logger.warning("visibility heartbeat for %s failed: %s", url, error)

    def _reserve_slots(self, halt: threading.Event, wanted: int) -> int:
        """In turn with the other loops: block for one slot, then take up to `wanted` in all of those free
        without waiting. 0 when none came free within 0.5 s or the pool is stopping."""
        with self._turns:
            if halt.is_set() or not self._slots.acquire(timeout=0.5):
                return 0
            taken = 1
            while taken < wanted and self._slots.acquire(blocking=False):
                taken += 1
        if halt.is_set():
            self._release_slots(taken)
            return 0
        return taken

    def _release_slots(self, count: int) -> None:
        for _ in range(count):
            self._slots.release()

    def _enter(self) -> None:
        with self._lock:
            self.stats.in_flight += 1
            self.stats.peak_in_flight = max(self.stats.peak_in_flight, self.stats.in_flight)

    def _process(self, url: str, message: dict[str, Any], begun: Begun | None) -> None:
        """A worker's first turn with a received message (begun: its first writes landed with the batch's)."""
        delivery = _Delivery(url, message, begun)
        if delivery.begun is None:
            delivery.begun = self._guarded(delivery, lambda: self._executor().start(_run_message(message)))
        if delivery.begun is not None:
            self._advance(delivery)

    def _advance(self, delivery: _Delivery) -> None:
        """A worker carries a delivery on until it is done, or hands its next writes to the shared commits."""
        at = delivery.at
        after = self._guarded(delivery, lambda: self._executor().advance(at))
        if isinstance(after, Outcome):
            self._done(delivery, after)
        elif after is not None:
            delivery.begun = after
            self._commits().add(delivery)

    def _alone(self, delivery: _Delivery) -> None:
        """A worker carries a delivery on to its end, each write committed alone (a shared commit failed)."""
        at = delivery.at
        outcome = self._guarded(delivery, lambda: self._executor().resume(at))
        if outcome is not None:
            self._done(delivery, outcome)

    def _guarded(self, delivery: _Delivery, work: Callable[[], _T]) -> _T | None:
        """The worker thread's boundary: what `work` raised is logged with its traceback and the delivery
        ends with its message handed back (SQS redelivers it); None then."""
        try:
            return work()
        except Exception:
            logger.exception("run message failed, will be redelivered")
            self._done(delivery, None)
            return None

    def _done(self, delivery: _Delivery, outcome: Outcome | None) -> None:
        """The delivery ended: its message is deleted, or handed back when it failed (outcome None: the
        failure was logged where it happened). Its slot in the pool is free again."""
        receipt = delivery.message["ReceiptHandle"]
        try:
            # First: the heartbeat stops extending it (a beat must not undo a hand back's shorter visibility).
            self._release_hold(receipt)
            if outcome is None:
                with self._lock:
                    self.stats.errors += 1
                self._hand_back(delivery.url, receipt)
            else:
                self._deleter.add(delivery.url, receipt, str(delivery.message.get("MessageId")))
                logger.debug("message %s: %s", delivery.message.get("MessageId"), outcome)
        finally:
            with self._lock:
                self.stats.in_flight -= 1
                self.stats.processed += 1
                if not self.stats.in_flight:
                    self._idle.notify_all()
            self._slots.release()

    def _hand_back(self, url: str, receipt: str) -> None:
        """Make a message whose processing raised visible again soon."""
        try:
            self._sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=LOCAL_RETRY_VISIBILITY_SECONDS
            )
        except (BotoCoreError, ClientError) as error:  # it still comes back, after LOCAL_VISIBILITY_SECONDS
            logger.warning("handing back message %s on %s failed: %s", receipt, url, error)

    def _release_hold(self, receipt: str) -> None:
        """The heartbeat stops extending this message (before it is deleted or handed back)."""
        with self._lock:
            self._held.pop(receipt, None)
            if not self._held:
                self._holding.clear()


def _run_message(message: dict[str, Any]) -> RunMessage:
    """The run message a received message carries, stamped with its SentTimestamp."""
    sent_at = message.get("Attributes", {}).get("SentTimestamp")
    return RunMessage.from_json(message["Body"]).with_sent_at_ms(sent_at)


def _begin(executor: Executor, messages: list[dict[str, Any]]) -> list[Begun | None]:
    """The received messages' first writes (their slots and claims) in one commit instead of one each
    (Executor.begin_together). None for a message to be executed alone by its worker: one whose body is
    not a run message (its worker meets that error), or every one when the batch did not land (the engine
    was busy, or one of them raised: that one then fails alone, and its message is handed back)."""
    runs: dict[int, RunMessage] = {}
    for index, message in enumerate(messages):
        try:
            runs[index] = _run_message(message)
        except (ValidationError, ValueError):
            continue  # its worker parses it again, fails, and hands it back
    try:
        begun = executor.begin_together(list(runs.values())) if len(runs) > 1 else None
    except Exception:  # nothing of the batch landed: each is executed alone, and the one at fault fails alone
        logger.exception("beginning %d deliveries together failed; each is executed alone", len(runs))
        begun = None
    if begun is None:
        return [None] * len(messages)
    by_index = dict(zip(runs, begun, strict=True))
    return [by_index.get(index) for index in range(len(messages))]


def _pass_on(stop: threading.Event, halt: threading.Event) -> None:
    """Set `halt` once `stop` is set (a daemon thread: after a crash it sleeps until the process ends)."""
    stop.wait()
    halt.set()
