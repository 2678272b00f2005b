"""The local executor: consumes the dispatch queues with a bounded pool. The pool size IS the concurrency
cap: a message is received only when a slot is free, so the excess waits in the queue as queue depth."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tickwork.domain.dispatch import RunMessage
from tickwork.services.executing import Executor, Outcome

logger = logging.getLogger(__name__)

# A message whose processing raised comes back this fast locally (AWS uses the queue's visibility timeout).
LOCAL_RETRY_VISIBILITY_SECONDS = 5


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
    ) -> None:
        if cap < 1:
            raise ValueError("the concurrency cap must be at least 1")
        self._sqs = sqs
        self._queue_urls = list(queue_urls)
        self._executor_factory = executor_factory
        self._cap = cap
        self._poll_wait = poll_wait_seconds
        self._slots = threading.BoundedSemaphore(cap)
        self._lock = threading.Lock()
        self.stats = PoolStats()

    def run(self, stop: threading.Event) -> None:
        executor = self._executor_factory()
        with ThreadPoolExecutor(max_workers=self._cap, thread_name_prefix="tickwork-run") as pool:
            queue_index = 0
            while not stop.is_set():
                free = self._acquire_free_slots(stop)
                if free == 0:
                    continue
                url = self._queue_urls[queue_index % len(self._queue_urls)]
                queue_index += 1
                response = self._sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=min(10, free),
                    WaitTimeSeconds=self._poll_wait,
                    MessageSystemAttributeNames=["SentTimestamp"],
                )
                messages = response.get("Messages", [])
                for _ in range(free - len(messages)):
                    self._slots.release()  # slots reserved for messages that did not come
                for message in messages:
                    self._enter()
                    pool.submit(self._process, executor, url, message)

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
            self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            logger.debug("message %s: %s", message.get("MessageId"), outcome)
        except Exception:  # the worker thread's boundary: logged with its traceback, SQS redelivers
            # Left on the queue: it comes back, and after max_receive_count goes to the DLQ (sweeper).
            logger.exception("run message failed, will be redelivered")
            with self._lock:
                self.stats.errors += 1
            self._sqs.change_message_visibility(
                QueueUrl=url,
                ReceiptHandle=message["ReceiptHandle"],
                VisibilityTimeout=LOCAL_RETRY_VISIBILITY_SECONDS,
            )
        finally:
            with self._lock:
                self.stats.in_flight -= 1
                self.stats.processed += 1
            self._slots.release()
