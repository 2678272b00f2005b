"""The embedded engine's queues: the subset of the SQS API that Tickwork's dispatcher, dead-letter reader
and local executor use, over the SQLite database's `messages` table, so that SQS-speaking code
(adapters/sqs.py, local/executor_pool.py, the runtime's status line) runs over it unchanged. A queue "URL" is
the queue's name.

Every mutation is one `BEGIN IMMEDIATE` transaction, so several processes can share one file: a receive
selects and hides its messages atomically against every other receiver, and a message is delivered to one
receiver at a time.

Behaviour, where SQS leaves room or this differs from it:
- A receipt handle is valid until the message is received again (or deleted). A delete or visibility change
  with an outdated receipt changes nothing: ReceiptHandleIsInvalid (raised for the single calls, a `Failed`
  entry in a batch). SQS may accept such a delete; refusing it means a slow consumer can never delete a
  message someone else is now working on. Deleting twice with the same receipt is refused too.
- A message whose receive count reached its queue's max_receive_count is moved to the dead-letter queue by
  the receive that would have delivered it again, as SQS does. It keeps its id, body, SentTimestamp,
  ApproximateFirstReceiveTimestamp and receive count (SQS carries the count over, so the sweeper's
  "dead-lettered after N deliveries" stays true); it is visible in the DLQ at once, with no receipt.
- Errors are botocore ClientErrors with SQS's codes, so callers' `except (BotoCoreError, ClientError)` covers
  them: a busy database is RequestThrottled, any other store failure InternalFailure.
- Not implemented: message retention, message attributes, FIFO, the 256 KiB body limit.

Long polling: a poll first asks SQLite whether anything was committed since this thread last looked
(`PRAGMA data_version`, on a connection that never writes); only then does it read the queue's earliest
visible_at_ms (from its index; no write lock). The write transaction runs only when something is visible.
While nothing is, the receiver sleeps until the earliest hidden message is due (so a message planned ahead
is taken the moment it is due), until a send wakes it, or until its next look. A send from this process
wakes it at once. A send from another process that is due before the receiver's next look rings the
doorbell (adapters/sqlite/doorbell.py) and wakes it at once too; a later one is seen at that look. Where the
doorbell is heard, the looks are LISTENING_POLL_SECONDS apart, a safety net; where it is not (no inotify),
POLL_SECONDS, so another process's send waits up to that long. Each look wakes an idle receiver, which is
what an idle executor's CPU was made of."""

from __future__ import annotations

import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from tickwork.adapters.queue_api import (
    BATCH_LIMIT,
    NON_EXISTENT_QUEUE,
    RECEIPT_INVALID,
    THROTTLED,
    TOO_MANY_ENTRIES,
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
    queue_configs,
    system_attributes,
)
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.doorbell import Doorbell
from tickwork.domain.errors import StoreError, TransientStoreError

# Re-exported: the callers that build these queues (composition, the local runtime, tests) name them here.
__all__ = [
    "BATCH_LIMIT",
    "NON_EXISTENT_QUEUE",
    "POLL_SECONDS",
    "RECEIPT_INVALID",
    "THROTTLED",
    "TOO_MANY_ENTRIES",
    "QueueConfig",
    "SqliteQueues",
    "queue_configs",
]

# The longest a long poll sleeps between looks while nothing is due: the latency of a message another
# process sends, traded against idle CPU, where the doorbell cannot be heard (adapters/sqlite/doorbell.py).
POLL_SECONDS = 1.0
# Where it can: a send due sooner than this rings the doorbell, so a look this often is only a safety net
# for a ring that was lost; a send due later is seen at a look before it is due.
LISTENING_POLL_SECONDS = 10.0
DOORBELL_SUFFIX = "-doorbell"  # the doorbell file, next to the database file
# Receipts and visibility are in milliseconds; a keyset start below any real visible_at_ms.
_BEFORE_ALL = -(2**62)


class _NotEveryReceipt(Exception):
    """A batch delete matched fewer messages than it had receipts: its transaction is rolled back."""


@contextmanager
def _as_client_errors(operation: str) -> Iterator[None]:
    """The store's errors as the ClientErrors the SQS-speaking callers already handle."""
    try:
        yield
    except TransientStoreError as error:
        raise client_error(THROTTLED, str(error), operation) from error
    except StoreError as error:
        raise client_error("InternalFailure", f"{error.code}: {error}", operation, 500) from error


class SqliteQueues:
    """The subset of the SQS API that Tickwork's dispatcher, dead-letter reader and local executor use,
    over the SQLite database. Thread-safe, and safe across processes sharing the file."""

    def __init__(
        self,
        db: Database,
        queues: Mapping[str, QueueConfig],
        now_ms: Callable[[], int],
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        check_dead_letters(queues)
        self._db = db
        self._queues = dict(queues)
        self._now_ms = now_ms
        # A waiting receiver is woken at once by a send from this process, and by one from another process
        # that must be seen before its next look (the doorbell's ring). Tests inject `sleep`.
        self._doorbell = Doorbell(db.path.with_name(db.path.name + DOORBELL_SUFFIX))
        self._sleep = sleep
        self._waits_stopped = False  # set by stop_waiting(), for good
        # Per thread: the database's data_version and the queue's earliest visible_at_ms last seen.
        self._seen = threading.local()

    def stop_waiting(self) -> None:
        """From now on no receive of this process waits (the caller is stopping): those waiting return at
        once, and any later one returns what is visible, or nothing, without a wait. For good: a receive
        that started just after the call must not hold a stop for its whole wait either."""
        self._waits_stopped = True
        self._doorbell.knock()

    def close(self) -> None:
        """Stop listening for other processes' sends (the listener thread ends)."""
        self._doorbell.close()

    # --- sending -----------------------------------------------------------------------------------

    def send_message(self, *, QueueUrl: str, MessageBody: str, DelaySeconds: int = 0) -> dict[str, Any]:
        response = self._send(QueueUrl, [("0", MessageBody, DelaySeconds)], "SendMessage")
        ok = response["Successful"][0]
        return {"MessageId": ok["MessageId"], "MD5OfMessageBody": ok["MD5OfMessageBody"]}

    def send_message_batch(self, *, QueueUrl: str, Entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """All the entries are sent in one transaction, or none is (the call raises)."""
        check_batch(Entries, "SendMessageBatch")
        messages = [(str(e["Id"]), str(e["MessageBody"]), int(e.get("DelaySeconds", 0))) for e in Entries]
        return self._send(QueueUrl, messages, "SendMessageBatch")

    def _send(self, queue: str, messages: list[tuple[str, str, int]], operation: str) -> dict[str, Any]:
        self._config(queue, operation)
        check_delays([delay for _, _, delay in messages], operation)
        successful: list[dict[str, Any]] = []
        with _as_client_errors(operation), self._db.write() as connection:
            now = self._now_ms()
            for entry_id, body, delay in messages:
                cursor = connection.execute(
                    "INSERT INTO messages (queue, body, sent_at_ms, visible_at_ms) VALUES (?, ?, ?, ?)",
                    (queue, body, now, now + delay * 1000),
                )
                successful.append(
                    {"Id": entry_id, "MessageId": str(cursor.lastrowid), "MD5OfMessageBody": md5_of(body)}
                )
        if any(delay < LISTENING_POLL_SECONDS for _, _, delay in messages):
            self._doorbell.ring()  # due before the other processes' receivers look again
        else:
            self._doorbell.knock()  # this process's receivers look again now; the others in time
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
            # Taken before the look: a send between the look and the sleep moves it, and the sleep is skipped.
            generation = self._doorbell.generation
            with _as_client_errors(operation):
                earliest, now = self._earliest_visible_at(QueueUrl)
                if earliest is not None and earliest <= now:
                    messages = self._take(QueueUrl, config, MaxNumberOfMessages, visibility, attributes)
                    if messages:
                        return {"Messages": messages}
                    continue  # taken by another receiver, or dead-lettered: look again
            remaining = min(remaining, (deadline_ms - now) / 1000)
            if remaining <= 0 or self._waits_stopped:
                return {"Messages": []}
            pause = min(self._poll_seconds(), remaining)
            if earliest is not None:
                pause = min(pause, (earliest - now) / 1000)
            if self._sleep is not None:
                self._sleep(pause)
            else:
                self._doorbell.wait_past(generation, pause)
            remaining -= pause

    def _poll_seconds(self) -> float:
        """How long a receiver sleeps between looks while nothing is due: long where other processes' sends
        ring the doorbell, a second where they cannot be heard."""
        if self._sleep is not None:  # a test's fake sleep: no ring could wake it
            return POLL_SECONDS
        return LISTENING_POLL_SECONDS if self._doorbell.listening() else POLL_SECONDS

    def _earliest_visible_at(self, queue: str) -> tuple[int | None, int]:
        """The queue's earliest visible_at_ms (None: empty) and now, from a read: no write lock, so an idle
        poll does not queue behind (or hold up) the writers."""
        now = self._now_ms()
        version = self._db.data_version()
        seen: dict[str, tuple[int, int | None]] = self._seen.__dict__.setdefault("by_queue", {})
        known = seen.get(queue)
        if known is not None and known[0] == version and (known[1] is None or known[1] > now):
            # Nobody else wrote since this thread last looked, and what it saw is not due yet: an idle
            # poll costs a pragma, not a query.
            return known[1], now
        with self._db.read() as connection:
            row = connection.execute(
                "SELECT MIN(visible_at_ms) FROM messages WHERE queue = ?", (queue,)
            ).fetchone()
        earliest = None if row[0] is None else int(row[0])
        seen[queue] = (version, earliest)
        return earliest, now

    def _take(
        self, queue: str, config: QueueConfig, count: int, visibility: int, attributes: Sequence[str]
    ) -> list[dict[str, Any]]:
        """One write transaction: dead-letter the visible messages past max_receive_count, and receive up to
        `count` of the others. Walks the visible messages in (visible_at_ms, id) order from where the last
        page ended, so nothing is looked at twice (a message received with visibility 0 stays visible)."""
        delivered: list[dict[str, Any]] = []
        with self._db.write() as connection:
            now = self._now_ms()
            after: tuple[int, int] = (_BEFORE_ALL, -1)
            while len(delivered) < count:
                page = count - len(delivered)
                rows = connection.execute(
                    "SELECT id, body, sent_at_ms, visible_at_ms, receive_count, first_received_at_ms "
                    "FROM messages WHERE queue = ? AND visible_at_ms <= ? AND (visible_at_ms, id) > (?, ?) "
                    "ORDER BY visible_at_ms, id LIMIT ?",
                    (queue, now, *after, page),
                ).fetchall()
                live: list[tuple[Any, ...]] = []
                for row in rows:  # row[4]: the receive count so far
                    if config.dead_lettered_after(row[4]):
                        self._dead_letter(connection, int(row[0]), config, now)
                    else:
                        live.append(row)
                delivered.extend(self._deliver(connection, live, now, visibility))
                if len(rows) < page:
                    break
                after = (int(rows[-1][3]), int(rows[-1][0]))
        return [delivered_message(**m, attributes=attributes) for m in delivered]

    def _dead_letter(
        self, connection: sqlite3.Connection, message_id: int, config: QueueConfig, now: int
    ) -> None:
        """Into the dead-letter queue: keeps its id, timestamps and receive count, as SQS does; visible there
        at once."""
        connection.execute(
            "UPDATE messages SET queue = ?, visible_at_ms = ?, receipt = NULL WHERE id = ?",
            (config.dead_letter, now, message_id),
        )

    def _deliver(
        self, connection: sqlite3.Connection, rows: Sequence[tuple[Any, ...]], now: int, visibility: int
    ) -> list[dict[str, Any]]:
        """Receive these messages (rows as `_take` selects them): one UPDATE for them all, not one each
        (inside the write lock each statement waits for the GIL back: adapters/sqlite/db.py, `_nested`).
        Each receipt is the message's id and a token drawn for this receive, so it names that message
        alone, and no earlier receive's receipt matches it."""
        if not rows:
            return []
        token = secrets.token_urlsafe(18)
        ids = ", ".join("?" for _ in rows)
        cursor = connection.execute(
            "UPDATE messages SET receive_count = receive_count + 1, receipt = id || '.' || ?, "
            "visible_at_ms = ?, first_received_at_ms = coalesce(first_received_at_ms, ?) "
            f"WHERE id IN ({ids})",
            (token, now + visibility * 1000, now, *(row[0] for row in rows)),
        )
        if cursor.rowcount != len(rows):  # read in this same transaction: cannot happen
            raise StoreError(f"received {cursor.rowcount} of {len(rows)} messages read", code="ReceiveMoved")
        return [
            {
                "message_id": str(message_id),
                "receipt": f"{message_id}.{token}",
                "body": body,
                "sent_at_ms": sent_at,
                "receive_count": receive_count + 1,
                "first_received_at_ms": now if first_received is None else first_received,
            }
            for message_id, body, sent_at, _, receive_count, first_received in rows
        ]

    # --- deleting and hiding -----------------------------------------------------------------------

    def delete_message(self, *, QueueUrl: str, ReceiptHandle: str) -> dict[str, Any]:
        """ReceiptHandleIsInvalid unless the message still holds this receipt (see the module docstring)."""
        failed = self._by_receipt(
            QueueUrl, [("0", ReceiptHandle, None)], "DeleteMessage", "DELETE FROM messages"
        )
        if failed:
            raise client_error(RECEIPT_INVALID, failed[0]["Message"], "DeleteMessage")
        return {}

    def delete_message_batch(self, *, QueueUrl: str, Entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        operation = "DeleteMessageBatch"
        check_batch(Entries, operation)
        entries = [(str(e["Id"]), str(e["ReceiptHandle"]), None) for e in Entries]
        if self._delete_all(QueueUrl, [receipt for _, receipt, _ in entries], operation):
            return batch_result(entries, [])
        failed = self._by_receipt(QueueUrl, entries, operation, "DELETE FROM messages")
        return batch_result(entries, failed)

    def _delete_all(self, queue: str, receipts: Sequence[str], operation: str) -> bool:
        """Delete the messages of every receipt with one statement: True if each receipt was a message's
        (the executors' deletes, nearly always), else nothing is deleted and False (the caller then
        deletes entry by entry, to tell which failed). One statement, not one per message: inside the
        write lock each statement waits for the GIL back (adapters/sqlite/db.py, `_nested`)."""
        self._config(queue, operation)
        marks = ", ".join("?" for _ in receipts)
        try:
            with _as_client_errors(operation), self._db.write() as connection:
                # `+queue`: the receipts' index finds the rows. Given `queue = ?` too, SQLite walked the
                # queue's messages instead (2 ms a batch of 10 against 2,500 messages in an ad hoc script;
                # 30 us this way, as the deletes one by one).
                cursor = connection.execute(
                    f"DELETE FROM messages WHERE receipt IN ({marks}) AND +queue = ?", (*receipts, queue)
                )
                if cursor.rowcount != len(receipts):
                    raise _NotEveryReceipt
        except _NotEveryReceipt:
            return False
        return True

    def change_message_visibility(
        self, *, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int
    ) -> dict[str, Any]:
        """Visible again VisibilityTimeout seconds from now, if the message still holds this receipt."""
        operation = "ChangeMessageVisibility"
        check_visibility(VisibilityTimeout, operation)
        failed = self._by_receipt(
            QueueUrl,
            [("0", ReceiptHandle, VisibilityTimeout)],
            operation,
            "UPDATE messages SET visible_at_ms = ?",
        )
        if failed:
            raise client_error(RECEIPT_INVALID, failed[0]["Message"], operation)
        # A message handed back sooner than it would have come back: this process's receivers look again.
        # (Not the batch: the heartbeat's extensions only make messages later.)
        self._doorbell.knock()
        return {}

    def change_message_visibility_batch(
        self, *, QueueUrl: str, Entries: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        operation = "ChangeMessageVisibilityBatch"
        check_batch(Entries, operation)
        entries = [(str(e["Id"]), str(e["ReceiptHandle"]), int(e["VisibilityTimeout"])) for e in Entries]
        for _, _, visibility in entries:
            check_visibility(visibility, operation)
        failed = self._by_receipt(QueueUrl, entries, operation, "UPDATE messages SET visible_at_ms = ?")
        return batch_result(entries, failed)

    def _by_receipt(
        self, queue: str, entries: Sequence[tuple[str, str, int | None]], operation: str, statement: str
    ) -> list[dict[str, Any]]:
        """Apply `statement` (a DELETE, or an UPDATE of visible_at_ms given `now + visibility`) to each
        entry's message if it still holds the entry's receipt, in one transaction; the entries that did
        not match, as SQS's `Failed` entries."""
        self._config(queue, operation)
        failed: list[dict[str, Any]] = []
        with _as_client_errors(operation), self._db.write() as connection:
            now = self._now_ms()
            for entry_id, receipt, visibility in entries:
                values: tuple[Any, ...] = (queue, receipt)
                if visibility is not None:
                    values = (now + visibility * 1000, *values)
                cursor = connection.execute(f"{statement} WHERE queue = ? AND receipt = ?", values)
                if cursor.rowcount == 0:
                    failed.append(invalid_receipt(entry_id))
        return failed

    # --- attributes --------------------------------------------------------------------------------

    def get_queue_attributes(self, *, QueueUrl: str, AttributeNames: Sequence[str] = ()) -> dict[str, Any]:
        """The message counts asked for ("All": every one), as SQS's strings: visible now, delayed (never
        received and not yet due), and in flight (received and still hidden)."""
        operation = "GetQueueAttributes"
        self._config(QueueUrl, operation)
        with _as_client_errors(operation), self._db.read() as connection:
            now = self._now_ms()
            visible, delayed, hidden = connection.execute(
                "SELECT COALESCE(SUM(visible_at_ms <= ?), 0), "
                "COALESCE(SUM(visible_at_ms > ? AND receive_count = 0), 0), "
                "COALESCE(SUM(visible_at_ms > ? AND receive_count > 0), 0) FROM messages WHERE queue = ?",
                (now, now, now, QueueUrl),
            ).fetchone()
        return count_attributes(AttributeNames, (visible, delayed, hidden), operation)

    def _config(self, queue: str, operation: str) -> QueueConfig:
        config = self._queues.get(queue)
        if config is None:
            raise no_such_queue(queue, operation)
        return config
