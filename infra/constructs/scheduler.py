"""The ticker and the sweeper: minutely EventBridge rules.

Ticker fan-out: the shards are split into groups of `shards_per_invocation`, and every group is its own rule
target with a constant input `{"shards": [...], "time": <the event's time>}`. Each minute EventBridge starts
one ticker invocation per group, all at once: a slow or stuck shard delays only its own group, each invocation
plans a few shards in threads and stays far inside the minute, and the groups scale with `shard_count`
without code changes. A rule takes at most 5 targets, so groups are spread over as many rules as needed.

Reservations. The ticker reserves one concurrent execution per shard group by default (the groups start
together and end within the minute), the sweeper a small fixed number: neither shares the account's
unreserved pool with Lambda targets, and neither can take more than its share.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_

from constructs import Construct
from infra.constructs.dispatch import Dispatch
from infra.constructs.functions import DYNAMODB_READ, DYNAMODB_WRITE, FunctionFactory, FunctionSpec, allow
from infra.constructs.storage import Storage
from tickwork.resources import JOBS, RUNS, SHARDS, SLOTS

TARGETS_PER_RULE = 5  # EventBridge's limit
EVERY_MINUTE = events.Schedule.rate(Duration.minutes(1))
TICKER_TIMEOUT = Duration.seconds(50)  # a tick must end before the next one starts
SWEEPER_TIMEOUT = Duration.seconds(55)


def shard_groups(shard_count: int, per_invocation: int) -> list[list[int]]:
    """Contiguous groups covering 0..shard_count-1 exactly once."""
    if shard_count < 1 or per_invocation < 1:
        raise ValueError("shard_count and per_invocation must be positive")
    return [
        list(range(start, min(start + per_invocation, shard_count)))
        for start in range(0, shard_count, per_invocation)
    ]


class Scheduler(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        factory: FunctionFactory,
        storage: Storage,
        dispatch: Dispatch,
        shard_count: int,
        shards_per_invocation: int,
        ticker_reserved_concurrency: int | None = None,
        sweeper_reserved_concurrency: int = 2,
    ) -> None:
        super().__init__(scope, construct_id)
        self.groups = shard_groups(shard_count, shards_per_invocation)
        self.ticker = factory.create(
            Construct(self, "Ticker"),
            FunctionSpec(
                name="ticker",
                handler="tickwork.handlers.ticker.handler",
                description="Plans the due runs of its shard group each minute and queues them for dispatch",
                timeout=TICKER_TIMEOUT,
                memory_mb=1024,  # planning is CPU-bound per shard (cron math); more memory, more CPU
                reserved_concurrency=ticker_reserved_concurrency or len(self.groups),
                async_retry_attempts=0,  # the next minute's tick resumes from the shard's watermark
            ),
        )
        self.sweeper = factory.create(
            Construct(self, "Sweeper"),
            FunctionSpec(
                name="sweeper",
                handler="tickwork.handlers.sweeper.handler",
                description="Repairs stalled runs and drains the dispatch dead-letter queue each minute",
                timeout=SWEEPER_TIMEOUT,
                reserved_concurrency=sweeper_reserved_concurrency,
                async_retry_attempts=0,  # it runs again in a minute
            ),
        )
        self._grant(storage, dispatch)
        self.ticker_rules: list[events.Rule] = []
        for number, start in enumerate(range(0, len(self.groups), TARGETS_PER_RULE)):
            rule = events.Rule(
                self,
                f"TickerRule{number}",
                description=f"Tickwork ticker, shard groups {start}..{start + TARGETS_PER_RULE - 1}",
                schedule=EVERY_MINUTE,
            )
            for group in self.groups[start : start + TARGETS_PER_RULE]:
                rule.add_target(self._target(self.ticker, {"shards": group, "time": events.EventField.time}))
            self.ticker_rules.append(rule)
        self.sweeper_rule = events.Rule(
            self, "SweeperRule", description="Tickwork sweeper", schedule=EVERY_MINUTE
        )
        self.sweeper_rule.add_target(self._target(self.sweeper, None))

    @staticmethod
    def _target(function: lambda_.Function, payload: dict[str, object] | None) -> targets.LambdaFunction:
        return targets.LambdaFunction(
            function,
            event=events.RuleTargetInput.from_object(payload) if payload is not None else None,
            # Delivery retries (throttling) only while the minute is still current.
            retry_attempts=2,
            max_event_age=Duration.minutes(1),
        )

    def _grant(self, storage: Storage, dispatch: Dispatch) -> None:
        jobs, runs, shards = storage.table(JOBS), storage.table(RUNS), storage.table(SHARDS)
        # Ticker: due jobs from the `due` index, run records, the job's next fire, the shard watermark.
        allow(self.ticker, DYNAMODB_READ, [jobs.table_arn, *storage.index_arns(JOBS), runs.table_arn])
        allow(self.ticker, ("dynamodb:UpdateItem",), [jobs.table_arn])
        allow(self.ticker, ("dynamodb:PutItem",), [runs.table_arn])
        allow(self.ticker, ("dynamodb:GetItem", "dynamodb:PutItem"), [shards.table_arn])
        allow(self.ticker, ("sqs:SendMessage",), dispatch.queue_arns)
        # Sweeper: open runs from the keys-only `open_runs` index (the runs in batches), repairs,
        # re-dispatch, and the DLQ.
        allow(self.sweeper, DYNAMODB_READ, [jobs.table_arn, runs.table_arn, *storage.index_arns(RUNS)])
        # The runs in batches, and the runs in flight from the slots' stripes (the bound's own count).
        allow(self.sweeper, ("dynamodb:BatchGetItem",), [runs.table_arn, storage.table(SLOTS).table_arn])
        allow(self.sweeper, DYNAMODB_WRITE, [jobs.table_arn, runs.table_arn])
        allow(self.sweeper, ("sqs:SendMessage",), dispatch.queue_arns)
        allow(
            self.sweeper,
            ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"),
            [dispatch.dead_letter_queue.queue_arn],
        )
