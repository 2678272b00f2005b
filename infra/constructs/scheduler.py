"""The ticker and the sweeper: minutely EventBridge Scheduler schedules.

The trigger. EventBridge Scheduler, not scheduled rules (documented as legacy): its schedules are
`cron(* * * * ? *)` with the flexible time window off, so each tick is scheduled for second :00 of its minute
(the phase is chosen, not whatever second a `rate(1 minute)` rule was created at), and the input carries that
scheduled time (`<aws.scheduler.scheduled-time>`), so the ticker knows how late it started (TickerLag). A fire
at F is first planned by the tick scheduled for F - 2 min (the planner looks 120 s ahead), which leaves
120 s less that tick's lag for planning and queueing (docs/design.md, "The tick").

Ticker fan-out: the shards are split into groups of `shards_per_invocation`, and every group is its own
schedule with a constant input `{"shards": [...], "time": <scheduled time>}`. Each minute Scheduler starts
one ticker invocation per group, all at once: a slow or stuck shard delays only its own group, each invocation
plans a few shards in threads and stays far inside the minute, and the groups scale with `shard_count`
without code changes.

Reservations. The ticker reserves one concurrent execution per shard group by default (the groups start
together and end within the minute), the sweeper a small fixed number: neither shares the account's
unreserved pool with Lambda targets, and neither can take more than its share.

Other minutely functions (the watcher's outbox pass, constructs/watcher.py) get their schedule here too
(`every_minute`): one schedule group per deployment, one role that invokes them.
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets

from constructs import Construct
from infra.constructs.dispatch import Dispatch
from infra.constructs.functions import DYNAMODB_READ, DYNAMODB_WRITE, FunctionFactory, FunctionSpec, allow
from infra.constructs.storage import Storage
from tickwork.resources import JOBS, RUNS, SHARDS, SLOTS

EVERY_MINUTE_AT_ZERO = "cron(* * * * ? *)"  # second :00 of every minute, UTC
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
        # A group per deployment: its schedules are listed (and could be paused) together, and the role that
        # invokes the functions trusts only this group's schedules.
        self.group = scheduler.ScheduleGroup(self, "Group", schedule_group_name=factory.prefix)
        self.invoke_role = iam.Role(
            self,
            "InvokeRole",
            description="Lets this deployment's schedules invoke its minutely functions",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={
                    "StringEquals": {
                        "aws:SourceAccount": Stack.of(self).account,
                        "aws:SourceArn": self.group.schedule_group_arn,
                    }
                },
            ),
        )
        self.ticker_schedules = [
            self.every_minute(
                self,
                f"TickerSchedule{number}",
                f"Tickwork ticker, shards {group[0]}..{group[-1]}",
                self.ticker,
                {"shards": group, "time": scheduler.ContextAttribute.scheduled_time},
            )
            for number, group in enumerate(self.groups)
        ]
        self.sweeper_schedule = self.every_minute(
            self,
            "SweeperSchedule",
            "Tickwork sweeper",
            self.sweeper,
            {"time": scheduler.ContextAttribute.scheduled_time},
        )

    def every_minute(
        self,
        scope: Construct,
        construct_id: str,
        description: str,
        function: lambda_.Function,
        payload: dict[str, object],
    ) -> scheduler.Schedule:
        """A schedule at second :00 of every minute in this deployment's group, invoking `function`
        asynchronously with `payload` through the group's role."""
        return scheduler.Schedule(
            scope,
            construct_id,
            description=description,
            schedule_group=self.group,
            schedule=scheduler.ScheduleExpression.expression(EVERY_MINUTE_AT_ZERO),
            time_window=scheduler.TimeWindow.off(),
            target=targets.LambdaInvoke(
                function,
                role=self.invoke_role,
                input=scheduler.ScheduleTargetInput.from_object(payload),
                # Delivery retries (throttling) only while the minute is still current: 60 s is
                # Scheduler's least event age.
                retry_attempts=2,
                max_event_age=Duration.minutes(1),
            ),
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
        # The reconciliation audit: a segment of the jobs a minute (parallel Scan), the shards' watermarks.
        allow(self.sweeper, ("dynamodb:Scan",), [jobs.table_arn])
        allow(self.sweeper, ("dynamodb:GetItem",), [shards.table_arn])
        allow(self.sweeper, ("sqs:SendMessage",), dispatch.queue_arns)
        allow(
            self.sweeper,
            ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"),
            [dispatch.dead_letter_queue.queue_arn],
        )
