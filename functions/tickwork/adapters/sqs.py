"""SQS dispatch: one small message per run attempt, delayed to its due time, in batches of 10."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.domain.dispatch import DeadLetter, RunMessage, delay_seconds, queue_index
from tickwork.domain.errors import DispatchError, ValidationError
from tickwork.domain.lanes import is_long_call
from tickwork.domain.models import Run

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

BATCH_SIZE = 10
# At most this many batches in flight at once per send (a ticker invocation plans up to 16 shards at once).
SEND_THREADS_MAX = 8
SEND_ATTEMPTS = 3


class SqsDispatcher:
    """Runs spread over the dispatch queues by a hash of the run id (domain.dispatch.queue_index): one event
    source mapping tops out at 1,000 concurrent executions, so a 10,000 cap needs several queues, evenly
    loaded. A run whose call may take minutes goes to the long-call queue instead, when there is one
    (domain/lanes.py): its executor invocation then holds no batch-mates."""

    def __init__(
        self,
        client: SQSClient,
        queue_urls: Sequence[str],
        long_call_queue_url: str | None = None,
        send_threads: int = 1,
    ) -> None:
        if not queue_urls:
            raise ValueError("at least one dispatch queue is needed")
        self._client = client
        self._queue_urls = list(queue_urls)
        self._long_call_queue_url = long_call_queue_url
        # A planning round's batches go to different queues: sent side by side, its sends take one call's
        # time, not one per queue (boto3 clients are thread-safe). 1: one after another.
        self._send_threads = send_threads

    def queue_for_run_id(self, run_id: str) -> str:
        return self._queue_urls[queue_index(run_id, len(self._queue_urls))]

    def queue_for(self, message: RunMessage) -> str:
        if self._long_call_queue_url is not None and is_long_call(message):
            return self._long_call_queue_url
        return self.queue_for_run_id(message.run_id)

    def dispatch(self, runs: Sequence[Run], now: datetime, *, commit_by: datetime | None = None) -> None:
        self.redispatch_many([RunMessage.for_run(r, commit_by=commit_by) for r in runs], now)

    def redispatch(self, message: RunMessage, shard: int, now: datetime) -> None:
        """`shard` is part of the port's signature but no longer routes: the run id does, so a re-send
        goes to the queue the run's first message went to (or the long-call queue, by its timeout)."""
        self.send([message], [self.queue_for(message)], now)

    def redispatch_many(self, messages: Sequence[RunMessage], now: datetime) -> None:
        self.send(messages, [self.queue_for(m) for m in messages], now)

    def send(self, messages: Sequence[RunMessage], queue_urls: Sequence[str], now: datetime) -> None:
        by_queue: dict[str, list[RunMessage]] = defaultdict(list)
        for message, url in zip(messages, queue_urls, strict=True):
            by_queue[url].append(message)
        batches = [
            (url, queued[start : start + BATCH_SIZE])
            for url, queued in by_queue.items()
            for start in range(0, len(queued), BATCH_SIZE)
        ]
        threads = min(self._send_threads, SEND_THREADS_MAX, len(batches))
        if threads > 1:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                results = list(pool.map(lambda batch: self._send_batch(batch[0], batch[1], now), batches))
        else:
            results = [self._send_batch(url, batch, now) for url, batch in batches]
        failed = [dedupe_id for batch_failed, _ in results for dedupe_id in batch_failed]
        errors = [detail for _, detail in results if detail]
        if failed:
            raise DispatchError(failed, "; ".join(errors))

    def _send_batch(self, url: str, batch: list[RunMessage], now: datetime) -> tuple[list[str], str]:
        """Send one batch; a partially failed batch is retried for its failed entries only."""
        pending = {str(i): m for i, m in enumerate(batch)}
        detail = ""
        for _ in range(SEND_ATTEMPTS):
            entries: list[Any] = [
                {"Id": key, "MessageBody": m.to_json(), "DelaySeconds": delay_seconds(m.not_before, now)}
                for key, m in pending.items()
            ]
            try:
                response = self._client.send_message_batch(QueueUrl=url, Entries=entries)
            except (ClientError, BotoCoreError) as error:
                detail = f"{type(error).__name__}: {error}"
                continue
            for ok in response.get("Successful", []):
                pending.pop(ok["Id"], None)
            failures = response.get("Failed", [])
            if failures:
                detail = ", ".join(f"{f.get('Code')}: {f.get('Message', '')}" for f in failures)
            if not pending:
                return [], ""
        return [m.dedupe_id for m in pending.values()], detail


class SqsDeadLetters:
    """The dispatch DLQ as the sweeper reads it."""

    def __init__(self, client: SQSClient, queue_url: str) -> None:
        self._client = client
        self._queue_url = queue_url

    def receive(self, max_messages: int) -> list[DeadLetter]:
        try:
            response = self._client.receive_message(
                QueueUrl=self._queue_url,
                MaxNumberOfMessages=min(10, max_messages),
                WaitTimeSeconds=0,
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
        except (ClientError, BotoCoreError) as error:
            raise DispatchError([], f"reading the DLQ: {type(error).__name__}: {error}") from error
        letters: list[DeadLetter] = []
        for raw in response.get("Messages", []):
            body = raw.get("Body", "")
            try:
                message: RunMessage | None = RunMessage.from_json(body)
            except ValidationError:
                message = None
            count = int(raw.get("Attributes", {}).get("ApproximateReceiveCount", "0"))
            letters.append(
                DeadLetter(receipt=raw["ReceiptHandle"], message=message, body=body, receive_count=count)
            )
        return letters

    def delete(self, receipt: str) -> None:
        try:
            self._client.delete_message(QueueUrl=self._queue_url, ReceiptHandle=receipt)
        except (ClientError, BotoCoreError) as error:
            raise DispatchError([], f"deleting a dead letter: {type(error).__name__}: {error}") from error
