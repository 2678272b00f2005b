"""The local executor: consumes the dispatch queues with a bounded pool. The pool size IS the concurrency
cap: a message is received only when a slot is free, so the excess waits in the queue as queue depth.

Visibility follows the work, not the queue: a message is received invisible for only
LOCAL_VISIBILITY_SECONDS and a heartbeat extends every message still being handled (held for its fire
time, or its run executing). So a message held by an executor that dies, even by SIGKILL, is visible again
within seconds, instead of after the queue's 960 s visibility timeout (sized for the Lambda's 900 s)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.domain.dispatch import RunMessage
from tickwork.services.executing import Executor, Outcome

logger = logging.getLogger(__name__)

# A message whose processing raised comes back this fast locally (AWS uses the queue's visibility timeout).
LOCAL_RETRY_VISIBILITY_SECONDS = 5
# How long a received message stays invisible without a heartbeat, and how often the heartbeat runs.
LOCAL_VISIBILITY_SECONDS = 6
HEARTBEAT_SECONDS = 2.0
# After a failed receive (the endpoint is down or refusing): wait, doubling up to the maximum.
RECEIVE_BACKOFF_SECONDS = 0.5
RECEIVE_BACKOFF_MAX_SECONDS = 8.0


@dataclass
class PoolStats:
    in_flight: int = 0
    peak_in_flight: int = 0
    processed: int = 0
    errors: int = 0


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
    ) -> None:
        if cap < 1:
            raise ValueError("the concurrency cap must be at least 1")
        self._sqs = sqs
        self._queue_urls = list(queue_urls)
        self._executor_factory = executor_factory
        self._cap = cap
        self._poll_wait = poll_wait_seconds
        self._visibility = visibility_seconds
        self._heartbeat_every = heartbeat_seconds
        self._held: dict[str, str] = {}  # receipt handle -> queue url, for every message being handled
        self._slots = threading.BoundedSemaphore(cap)
        self._lock = threading.Lock()
        self.stats = PoolStats()

    def run(self, stop: threading.Event) -> None:
        executor = self._executor_factory()
        heartbeat_stop = threading.Event()
        heartbeat = threading.Thread(
            target=self._heartbeat, args=(heartbeat_stop,), name="tickwork-visibility", daemon=True
        )
        heartbeat.start()
        try:
            with ThreadPoolExecutor(max_workers=self._cap, thread_name_prefix="tickwork-run") as pool:
                self._receive_loop(stop, executor, pool)
        finally:  # after the runs in flight finished: they keep their messages hidden until then
            heartbeat_stop.set()
            heartbeat.join(timeout=5)

    def _receive_loop(self, stop: threading.Event, executor: Executor, pool: ThreadPoolExecutor) -> None:
        queue_index = 0
        backoff = 0.0
        while not stop.is_set():
            free = self._acquire_free_slots(stop)
            if free == 0:
                continue
            url = self._queue_urls[queue_index % len(self._queue_urls)]
            queue_index += 1
            try:
                response = self._sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=min(10, free),
                    WaitTimeSeconds=self._poll_wait,
                    VisibilityTimeout=self._visibility,
                    MessageSystemAttributeNames=["SentTimestamp"],
                )
            except (BotoCoreError, ClientError) as error:  # endpoint down or refusing: back off, no crash
                backoff = min(RECEIVE_BACKOFF_MAX_SECONDS, max(RECEIVE_BACKOFF_SECONDS, backoff * 2))
                logger.error("receive from %s failed (%s); retrying in %.1f s", url, error, backoff)
                for _ in range(free):
                    self._slots.release()
                stop.wait(backoff)
                continue
            backoff = 0.0
            messages = response.get("Messages", [])
            for _ in range(free - len(messages)):
                self._slots.release()  # slots reserved for messages that did not come
            for message in messages:
                self._enter()
                with self._lock:
                    self._held[message["ReceiptHandle"]] = url
                pool.submit(self._process, executor, url, message)

    def _heartbeat(self, stop: threading.Event) -> None:
        """Keep every message being handled invisible for another LOCAL_VISIBILITY_SECONDS, until done."""
        while not stop.wait(self._heartbeat_every):
            with self._lock:
                held = list(self._held.items())
            by_queue: dict[str, list[str]] = {}
            for receipt, url in held:
                by_queue.setdefault(url, []).append(receipt)
            for url, receipts in by_queue.items():
                for start in range(0, len(receipts), 10):
                    entries = [
                        {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": self._visibility}
                        for i, r in enumerate(receipts[start : start + 10])
                    ]
                    try:
                        self._sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
                    except (BotoCoreError, ClientError) as error:  # a missed beat: it comes back early
                        logger.warning("visibility heartbeat for %s failed: %s", url, error)

    def _acquire_free_slots(self, stop: threading.Event) -> int:
        """Block for one slot, then take every other free one without waiting (up to a batch of 10)."""
        if not self._slots.acquire(timeout=0.5):
            return 0
        taken = 1
        while taken < 10 and self._slots.acquire(blocking=False):
            taken += 1
        if stop.is_set():
            for _ in range(taken):
                self._slots.release()
            return 0
        return taken

    def _enter(self) -> None:
        with self._lock:
            self.stats.in_flight += 1
            self.stats.peak_in_flight = max(self.stats.peak_in_flight, self.stats.in_flight)

    def _process(self, executor: Executor, url: str, message: dict[str, Any]) -> None:
        try:
            received = RunMessage.from_json(message["Body"])
            sent_at = message.get("Attributes", {}).get("SentTimestamp")
            outcome: Outcome = executor.execute(received.with_sent_at_ms(sent_at))
            self._release_hold(message)
            self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            logger.debug("message %s: %s", message.get("MessageId"), outcome)
        except Exception:  # the worker thread's boundary: logged with its traceback, SQS redelivers
            # Left on the queue: it comes back, and after max_receive_count goes to the DLQ (sweeper).
            logger.exception("run message failed, will be redelivered")
            self._release_hold(message)
            with self._lock:
                self.stats.errors += 1
            self._sqs.change_message_visibility(
                QueueUrl=url,
                ReceiptHandle=message["ReceiptHandle"],
                VisibilityTimeout=LOCAL_RETRY_VISIBILITY_SECONDS,
            )
        finally:
            self._release_hold(message)
            with self._lock:
                self.stats.in_flight -= 1
                self.stats.processed += 1
            self._slots.release()

    def _release_hold(self, message: dict[str, Any]) -> None:
        """The heartbeat stops extending this message (before it is deleted or handed back)."""
        with self._lock:
            self._held.pop(message["ReceiptHandle"], None)
