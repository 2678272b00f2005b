"""The dispatch queues and their dead-letter queue, from `tickwork.resources.DISPATCH`."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_sqs as sqs

from constructs import Construct
from tickwork.adapters.sqs_provision import dispatch_queue_name
from tickwork.resources import DISPATCH, DISPATCH_LONG_CALL, QueueDef, ResourceNames


def _dead_letter_definition() -> QueueDef:
    if DISPATCH.dead_letter is None:  # pragma: no cover - the shared definition always has one
        raise ValueError("DISPATCH must define its dead-letter queue")
    return DISPATCH.dead_letter


class Dispatch(Construct):
    """`queue_count` dispatch queues `<prefix>-dispatch-<i>` (runs are spread by run id; one event source
    mapping tops out at 1,000 concurrent invocations) and the long-call queue `<prefix>-dispatch-long-call`
    (domain/lanes.py), redriving to one `<prefix>-dispatch-dlq`. In production every queue is retained when
    the stack is deleted or a queue replaced, as the tables are: a planned run's message is its only
    pointer until it runs (the reconciliation audit finds it again, but only after its grace)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        names: ResourceNames,
        queue_count: int,
        production: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        self._removal = RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY
        dead_letter = _dead_letter_definition()
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetter",
            queue_name=names.queue(dead_letter),
            retention_period=Duration.seconds(dead_letter.retention_seconds),
            visibility_timeout=Duration.seconds(dead_letter.visibility_timeout_seconds),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            removal_policy=self._removal,
        )
        self.queues: list[sqs.Queue] = [
            self._redriving(f"Queue{index}", dispatch_queue_name(names, index), DISPATCH)
            for index in range(queue_count)
        ]
        self.long_call_queue = self._redriving(
            "LongCallQueue", names.queue(DISPATCH_LONG_CALL), DISPATCH_LONG_CALL
        )

    def _redriving(self, construct_id: str, name: str, definition: QueueDef) -> sqs.Queue:
        """A queue of run messages: encrypted, TLS only, redriving to the dead-letter queue."""
        return sqs.Queue(
            self,
            construct_id,
            queue_name=name,
            visibility_timeout=Duration.seconds(definition.visibility_timeout_seconds),
            retention_period=Duration.seconds(definition.retention_seconds),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            removal_policy=self._removal,
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter_queue, max_receive_count=definition.max_receive_count
            ),
        )

    @property
    def queue_urls(self) -> list[str]:
        return [queue.queue_url for queue in self.queues]

    @property
    def all_queues(self) -> list[sqs.Queue]:
        """Every queue a run's message may travel in: the batched lane's and the long-call lane's."""
        return [*self.queues, self.long_call_queue]

    @property
    def queue_arns(self) -> list[str]:
        """What a sender of run messages may send to: every lane."""
        return [queue.queue_arn for queue in self.all_queues]
