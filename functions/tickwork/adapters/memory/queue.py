"""The in-memory engine's queues: the subset of the SQS API that Tickwork's dispatcher, dead-letter reader and
local executor use (adapters/queue_api.py), so that SqsDispatcher and SqsDeadLetters implement the
Dispatcher and DeadLetterSource ports over it unchanged. A queue "URL" is the queue's name.

The same behaviour as the SQLite engine's queues (adapters/sqlite/queue.py), which its module docstring
spells out where SQS leaves room: per-message delay, visibility timeout, receive count, dead-lettering by
the receive after max_receive_count receives (id, timestamps and count kept), a receipt valid until the
message is received again, batches of at most ten, SQS's error codes as botocore ClientErrors. One lock
makes every call atomic against every other thread; a long poll waits until the earliest hidden message is
due or a send wakes it (the clock and the sleep are injected, so a fake clock drives it in tests)."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tickwork.adapters.queue_api import (
    RECEIPT_INVALID,
    QueueConfig,
    batch_result,
    check_batch,
    check_dead_letters,
    check_delays,
    check_receive,
    check_visibility,
    client_error,
    count_attributes,
    delivered_message,
    invalid_receipt,
    md5_of,
    no_such_queue,
    system_attributes,
)


@dataclass
class _Message:
    message_id: int
    queue: str
    body: str
    sent_at_ms: int
    visible_at_ms: int
    receive_count: int = 0
    receipt: str | None = None
    first_received_at_ms: int | None = None


class MemoryQueues:
    """SQS-shaped queues in this process's memory. Thread-safe."""

    def __init__(
        self,
        queues: Mapping[str, QueueConfig],
        now_ms: Callable[[], int],
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        check_dead_letters(queues)
        self._queues = dict(queues)
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._messages: dict[int, _Message] = {}
        self._next_id = 1
        # A waiting receiver is woken at once by a send. Tests inject `sleep` (a fake clock's).
        self._sent = threading.Condition()
        self._sleep = sleep or self._wait_for_a_send

    def _wait_for_a_send(self, seconds: float) -> None:
        with self._sent:
            self._sent.wait(seconds)

    # --- sending -----------------------------------------------------------------------------------

    def send_message(self, *, QueueUrl: str, MessageBody: str, DelaySeconds: int = 0) -> dict[str, Any]:
        response = self._send(QueueUrl, [("0", MessageBody, DelaySeconds)], "SendMessage")
        ok = response["Successful"][0]
        return {"MessageId": ok["MessageId"], "MD5OfMessageBody": ok["MD5OfMessageBody"]}

    def send_message_batch(self, *, QueueUrl: str, Entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """All the entries are sent at once, or none is (the call raises)."""
        check_batch(Entries, "SendMessageBatch")
        messages = [(str(e["Id"]), str(e["MessageBody"]), int(e.get("DelaySeconds", 0))) for e in Entries]
        return self._send(QueueUrl, messages, "SendMessageBatch")

    def _send(self, queue: str, messages: list[tuple[str, str, int]], operation: str) -> dict[str, Any]:
        self._config(queue, operation)
        check_delays([delay for _, _, delay in messages], operation)
        successful: list[dict[str, Any]] = []
        with self._lock:
            now = self._now_ms()
            for entry_id, body, delay in messages:
                message = _Message(self._next_id, queue, body, now, now + delay * 1000)
                self._messages[message.message_id] = message
                self._next_id += 1
                successful.append(
                    {"Id": entry_id, "MessageId": str(message.message_id), "MD5OfMessageBody": md5_of(body)}
                )
        with self._sent:
            self._sent.notify_all()
        return {"Successful": successful, "Failed": []}

    # --- receiving ---------------------------------------------------------------------------------

    def receive_message(
        self,
        *,
        QueueUrl: str,
        MaxNumberOfMessages: int = 1,
        WaitTimeSeconds: int = 0,
        VisibilityTimeout: int | None = None,
        MessageSystemAttributeNames: Sequence[str] = (),
        AttributeNames: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Up to MaxNumberOfMessages visible messages, oldest visible first, hidden for VisibilityTimeout
        (the queue's default when None). With WaitTimeSeconds, waits until at least one is there or the
        wait is over. `AttributeNames` is the older spelling of `MessageSystemAttributeNames`."""
        operation = "ReceiveMessage"
        config = self._config(QueueUrl, operation)
        check_receive(MaxNumberOfMessages, WaitTimeSeconds, operation)
        visibility = config.visibility_timeout_seconds if VisibilityTimeout is None else VisibilityTimeout
        check_visibility(visibility, operation)
        attributes = system_attributes(MessageSystemAttributeNames, AttributeNames)

        # The wait ends when the sleeps add up to it or the clock passed it, whichever comes first: a clock
        # that stands still (a fake one) or jumps back cannot stretch it.
        remaining = float(WaitTimeSeconds)
        deadline_ms = self._now_ms() + WaitTimeSeconds * 1000
        while True:
            with self._lock:
                now = self._now_ms()
                messages = self._take(QueueUrl, config, MaxNumberOfMessages, visibility, now)
                # None delivered: every message left in the queue is hidden until its visible_at_ms.
                due = [m.visible_at_ms for m in self._in(QueueUrl)]
            if messages:
                return {"Messages": [delivered_message(**m, attributes=attributes) for m in messages]}
            remaining = min(remaining, (deadline_ms - now) / 1000)
            if remaining <= 0:
                return {"Messages": []}
            pause = remaining if not due else min(remaining, (min(due) - now) / 1000)
            self._sleep(pause)
            remaining -= pause

    def _take(
        self, queue: str, config: QueueConfig, count: int, visibility: int, now: int
    ) -> list[dict[str, Any]]:
        """Dead-letter the visible messages past max_receive_count, and receive up to `count` of the others,
        in (visible_at_ms, id) order (under the lock)."""
        visible = sorted(
            (m for m in self._in(queue) if m.visible_at_ms <= now),
            key=lambda m: (m.visible_at_ms, m.message_id),
        )
        delivered: list[dict[str, Any]] = []
        for message in visible:
            if len(delivered) == count:
                break
            if config.dead_letter is not None and config.dead_lettered_after(message.receive_count):
                # Keeps its id, timestamps and receive count, as SQS does; visible in the DLQ at once.
                message.queue, message.visible_at_ms, message.receipt = config.dead_letter, now, None
                continue
            message.receive_count += 1
            message.receipt = f"{message.message_id}.{secrets.token_urlsafe(18)}"
            message.visible_at_ms = now + visibility * 1000
            if message.first_received_at_ms is None:
                message.first_received_at_ms = now
            delivered.append(
                {
                    "message_id": str(message.message_id),
                    "receipt": message.receipt,
                    "body": message.body,
                    "sent_at_ms": message.sent_at_ms,
                    "receive_count": message.receive_count,
                    "first_received_at_ms": message.first_received_at_ms,
                }
            )
        return delivered

    # --- deleting and hiding -----------------------------------------------------------------------

    def delete_message(self, *, QueueUrl: str, ReceiptHandle: str) -> dict[str, Any]:
        """ReceiptHandleIsInvalid unless the message still holds this receipt."""
        failed = self._by_receipt(QueueUrl, [("0", ReceiptHandle, None)], "DeleteMessage")
        if failed:
            raise client_error(RECEIPT_INVALID, failed[0]["Message"], "DeleteMessage")
        return {}

    def delete_message_batch(self, *, QueueUrl: str, Entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        check_batch(Entries, "DeleteMessageBatch")
        entries = [(str(e["Id"]), str(e["ReceiptHandle"]), None) for e in Entries]
        return batch_result(entries, self._by_receipt(QueueUrl, entries, "DeleteMessageBatch"))

    def change_message_visibility(
        self, *, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int
    ) -> dict[str, Any]:
        """Visible again VisibilityTimeout seconds from now, if the message still holds this receipt."""
        operation = "ChangeMessageVisibility"
        check_visibility(VisibilityTimeout, operation)
        failed = self._by_receipt(QueueUrl, [("0", ReceiptHandle, VisibilityTimeout)], operation)
        if failed:
            raise client_error(RECEIPT_INVALID, failed[0]["Message"], operation)
        return {}

    def change_message_visibility_batch(
        self, *, QueueUrl: str, Entries: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        operation = "ChangeMessageVisibilityBatch"
        check_batch(Entries, operation)
        entries = [(str(e["Id"]), str(e["ReceiptHandle"]), int(e["VisibilityTimeout"])) for e in Entries]
        for _, _, visibility in entries:
            check_visibility(visibility, operation)
        return batch_result(entries, self._by_receipt(QueueUrl, entries, operation))

    def _by_receipt(
        self, queue: str, entries: Sequence[tuple[str, str, int | None]], operation: str
    ) -> list[dict[str, Any]]:
        """Delete each entry's message (visibility None) or hide it for `visibility` seconds from now, if
        it still holds the entry's receipt, all at once; the entries that did not match, as SQS's `Failed`
        entries."""
        self._config(queue, operation)
        failed: list[dict[str, Any]] = []
        with self._lock:
            now = self._now_ms()
            by_receipt = {m.receipt: m for m in self._in(queue) if m.receipt}
            for entry_id, receipt, visibility in entries:
                message = by_receipt.pop(receipt, None)
                if message is None:
                    failed.append(invalid_receipt(entry_id))
                elif visibility is None:
                    del self._messages[message.message_id]
                else:
                    message.visible_at_ms = now + visibility * 1000
                    by_receipt[receipt] = message
        return failed

    # --- attributes --------------------------------------------------------------------------------

    def get_queue_attributes(self, *, QueueUrl: str, AttributeNames: Sequence[str] = ()) -> dict[str, Any]:
        """The message counts asked for ("All": every one), as SQS's strings: visible now, delayed (never
        received and not yet due), and in flight (received and still hidden)."""
        operation = "GetQueueAttributes"
        self._config(QueueUrl, operation)
        with self._lock:
            now = self._now_ms()
            queued = [
                (m.visible_at_ms, m.receive_count) for m in self._messages.values() if m.queue == QueueUrl
            ]
        visible = sum(at <= now for at, _ in queued)
        delayed = sum(at > now and count == 0 for at, count in queued)
        hidden = sum(at > now and count > 0 for at, count in queued)
        return count_attributes(AttributeNames, (visible, delayed, hidden), operation)

    def _in(self, queue: str) -> list[_Message]:
        """The queue's messages (under the lock)."""
        return [m for m in self._messages.values() if m.queue == queue]

    def _config(self, queue: str, operation: str) -> QueueConfig:
        config = self._queues.get(queue)
        if config is None:
            raise no_such_queue(queue, operation)
        return config
