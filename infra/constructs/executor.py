"""The executor: one SQS event source mapping per dispatch queue.

Sizing. The concurrency cap counts runs. Each invocation executes its whole batch concurrently (threads: the
runs are I/O bound), so the Lambda environments the cap needs are `ceil(cap / batch_size)`: 1,000 for 10,000
runs in batches of 10. That share is split evenly over the queues as each mapping's maximum concurrency (100
per queue by default; AWS allows 2..1,000 per mapping), and the function's reserved concurrency is exactly
their sum. The sum must never exceed the reservation: a mapping that outruns the reservation gets throttled,
and a throttled message only comes back after the queue's visibility timeout (16 minutes), a missed start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_secretsmanager as secretsmanager

from constructs import Construct
from infra.constructs.dispatch import Dispatch
from infra.constructs.functions import DYNAMODB_READ, DYNAMODB_WRITE, FunctionFactory, FunctionSpec, allow
from infra.constructs.storage import Storage
from infra.constructs.targets import target_statements
from tickwork.resources import DISPATCH, JOBS, RUNS

EXECUTOR_TIMEOUT_SECONDS = 900  # Lambda's maximum; a run's own timeout is enforced inside
MAPPING_CONCURRENCY_MIN = 2
MAPPING_CONCURRENCY_MAX = 1000

if DISPATCH.visibility_timeout_seconds <= EXECUTOR_TIMEOUT_SECONDS:  # pragma: no cover - a definition error
    raise ValueError("the dispatch queue's visibility timeout must exceed the executor's timeout")


@dataclass(frozen=True, slots=True)
class ExecutorSizing:
    batch_size: int
    per_queue_concurrency: int  # each event source mapping's maximum concurrency
    reserved_concurrency: int  # the function's reservation: per_queue_concurrency x queues
    concurrent_runs: int  # what that admits: reserved_concurrency x batch_size


def size_executor(concurrency_cap: int, queue_count: int, batch_size: int) -> ExecutorSizing:
    """Lambda concurrency for `concurrency_cap` concurrent runs over `queue_count` queues."""
    if concurrency_cap < 1 or queue_count < 1 or not 1 <= batch_size <= 10:
        raise ValueError("cap and queue count must be positive, batch size 1..10")
    environments = math.ceil(concurrency_cap / batch_size)
    per_queue = max(MAPPING_CONCURRENCY_MIN, environments // queue_count)
    if per_queue > MAPPING_CONCURRENCY_MAX:
        needed = math.ceil(environments / MAPPING_CONCURRENCY_MAX)
        raise ValueError(
            f"{concurrency_cap} runs in batches of {batch_size} need {environments} concurrent invocations: "
            f"at most {MAPPING_CONCURRENCY_MAX} per queue, so queue_count must be at least {needed}"
        )
    reserved = per_queue * queue_count
    return ExecutorSizing(batch_size, per_queue, reserved, reserved * batch_size)


class ExecutorFunction(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        factory: FunctionFactory,
        storage: Storage,
        dispatch: Dispatch,
        signing_secret: secretsmanager.ISecret,
        sizing: ExecutorSizing,
        target_arns: tuple[str, ...],
    ) -> None:
        super().__init__(scope, construct_id)
        self.sizing = sizing
        self.function = factory.create(
            Construct(self, "Executor"),
            FunctionSpec(
                name="executor",
                handler="tickwork.handlers.executor.handler",
                description="Executes a batch of due runs concurrently and records their outcomes",
                timeout=Duration.seconds(EXECUTOR_TIMEOUT_SECONDS),
                memory_mb=512,
                reserved_concurrency=sizing.reserved_concurrency,
            ),
        )
        self.mappings: list[sources.SqsEventSource] = []
        for queue in dispatch.queues:
            source = sources.SqsEventSource(
                queue,
                batch_size=sizing.batch_size,
                max_concurrency=sizing.per_queue_concurrency,
                report_batch_item_failures=True,
                # No batching window: a message is due the moment it becomes visible.
            )
            self.function.add_event_source(source)
            self.mappings.append(source)
        jobs, runs = storage.table(JOBS), storage.table(RUNS)
        allow(self.function, (*DYNAMODB_READ, *DYNAMODB_WRITE), [jobs.table_arn, runs.table_arn])
        allow(self.function, ("sqs:SendMessage",), dispatch.queue_arns)  # retries and queued overlap runs
        signing_secret.grant_read(self.function)
        for statement in target_statements(target_arns):
            self.function.add_to_role_policy(statement)

    @property
    def lambda_function(self) -> lambda_.Function:
        return self.function
