"""The executor: one SQS event source mapping per dispatch queue, in SQS provisioned mode.

Sizing. The concurrency cap counts runs. Each invocation executes its whole batch concurrently (threads: the
runs are I/O bound), so the Lambda environments the cap needs are `ceil(cap / batch_size)`: 1,000 for 10,000
runs in batches of 10.

Each mapping runs in provisioned mode (`ProvisionedPollerConfig`): dedicated event pollers, between a minimum
kept warm (2, the SQS floor) and a maximum. AWS documents up to 10 concurrent invocations per poller (Lambda
developer guide, "Lambda parameters for Amazon SQS event source mappings"), so a mapping at its maximum
pollers can drive `max_pollers x 10` concurrent invocations. Provisioned mode excludes
`ScalingConfig.MaximumConcurrency`, so the one hard bound left is the function's reserved concurrency, and it
is sized to hold every mapping at its maximum: `reserved = queues x max_pollers x 10`. Never less: a mapping
that outruns the reservation gets throttled, and a throttled message only comes back after the queue's
visibility timeout (16 minutes), a missed start. `max_pollers` is the smallest that carries the cap
(`ceil(environments / (queues x 10))`, at least 2), or the context's `executor_max_pollers`. The SQS minimum
of 2 pollers per mapping is a floor on the reservation: 10 queues reserve at least 200 environments (2,000
runs), whatever smaller cap is asked for.

The long-call lane. A batch ends when its slowest run ends, so a run whose call may take minutes
(`domain/lanes.py`) travels in its own queue, read one message per invocation: it holds no batch-mates. Its
mapping carries `long_call_runs` such runs at once (default a tenth of the cap, at least the 2-poller
floor of 20); more wait in that queue. They add `long pollers x 10` to the reservation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_secretsmanager as secretsmanager

from constructs import Construct
from infra.config import DeploymentConfig
from infra.constructs.dispatch import Dispatch
from infra.constructs.functions import DYNAMODB_READ, FunctionFactory, FunctionSpec, allow
from infra.constructs.storage import Storage
from infra.constructs.targets import target_statements
from tickwork.resources import DISPATCH, EVENTS, JOBS, RUNS, SLOTS

EXECUTOR_TIMEOUT_SECONDS = 900  # Lambda's maximum; a run's own timeout is enforced inside
POLLERS_MIN = 2  # SQS provisioned mode: minimum and maximum pollers per mapping (CloudFormation's range)
POLLERS_MAX = 2000
INVOCATIONS_PER_POLLER = 10  # AWS: each poller handles up to 1 MB/s and 10 concurrent invocations

if DISPATCH.visibility_timeout_seconds <= EXECUTOR_TIMEOUT_SECONDS:  # pragma: no cover - a definition error
    raise ValueError("the dispatch queue's visibility timeout must exceed the executor's timeout")


@dataclass(frozen=True, slots=True)
class ExecutorSizing:
    batch_size: int
    min_pollers: int  # each mapping's provisioned pollers, kept warm
    max_pollers: int  # each mapping's ceiling
    # The function's reservation: (queues x max_pollers + long_call_pollers) x INVOCATIONS_PER_POLLER.
    reserved_concurrency: int
    concurrent_runs: int  # what that admits: the batched lane's invocations x batch_size, plus the long calls
    long_call_pollers: int = POLLERS_MIN  # the long-call lane's mapping (batch size 1), min = max

    @property
    def long_call_runs(self) -> int:
        """The long calls the long-call lane carries at once: one per invocation."""
        return self.long_call_pollers * INVOCATIONS_PER_POLLER

    @property
    def per_queue_concurrency(self) -> int:
        """The concurrent invocations one mapping can drive at its maximum pollers."""
        return self.max_pollers * INVOCATIONS_PER_POLLER


def size_executor(
    concurrency_cap: int,
    queue_count: int,
    batch_size: int,
    *,
    min_pollers: int = POLLERS_MIN,
    max_pollers: int | None = None,
    long_call_runs: int | None = None,
) -> ExecutorSizing:
    """Lambda concurrency and pollers for `concurrency_cap` concurrent runs over `queue_count` queues, and
    `long_call_runs` (default a tenth of the cap) in the long-call lane."""
    if concurrency_cap < 1 or queue_count < 1 or not 1 <= batch_size <= 10:
        raise ValueError("cap and queue count must be positive, batch size 1..10")
    if not POLLERS_MIN <= min_pollers <= 200:
        raise ValueError(f"min_pollers={min_pollers} is outside {POLLERS_MIN}..200")
    environments = math.ceil(concurrency_cap / batch_size)
    needed = max(POLLERS_MIN, min_pollers, math.ceil(environments / (queue_count * INVOCATIONS_PER_POLLER)))
    if max_pollers is None:
        max_pollers = needed
    elif max_pollers < needed:
        raise ValueError(
            f"{concurrency_cap} runs in batches of {batch_size} need {environments} concurrent invocations: "
            f"executor_max_pollers={max_pollers} on {queue_count} queues carries "
            f"{max_pollers * queue_count * INVOCATIONS_PER_POLLER}; it must be at least {needed}"
        )
    if max_pollers > POLLERS_MAX:
        queues = math.ceil(environments / (POLLERS_MAX * INVOCATIONS_PER_POLLER))
        raise ValueError(
            f"{concurrency_cap} runs in batches of {batch_size} need {environments} concurrent invocations: "
            f"at most {POLLERS_MAX} pollers per queue, so queue_count must be at least {queues}"
        )
    if long_call_runs is None:
        long_call_runs = math.ceil(concurrency_cap / 10)
    if long_call_runs < 1:
        raise ValueError(f"long_call_runs={long_call_runs} must be at least 1")
    long_pollers = max(POLLERS_MIN, math.ceil(long_call_runs / INVOCATIONS_PER_POLLER))
    if long_pollers > POLLERS_MAX:
        raise ValueError(f"long_call_runs={long_call_runs} needs more than {POLLERS_MAX} pollers")
    batched = queue_count * max_pollers * INVOCATIONS_PER_POLLER
    long_calls = long_pollers * INVOCATIONS_PER_POLLER
    return ExecutorSizing(
        batch_size,
        min_pollers,
        max_pollers,
        reserved_concurrency=batched + long_calls,
        concurrent_runs=batched * batch_size + long_calls,
        long_call_pollers=long_pollers,
    )


def executor_sizing(config: DeploymentConfig) -> ExecutorSizing:
    """The sizing a deployment's context asks for (the stack and preflight both use it)."""
    return size_executor(
        config.concurrency_cap,
        config.queue_count,
        config.executor_batch_size,
        min_pollers=config.executor_min_pollers,
        max_pollers=config.executor_max_pollers,
        long_call_runs=config.long_call_runs,
    )


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
                # It sends to its own trigger queues (retries, deferrals, queued overlap runs): Lambda's loop
                # detection would cut such a chain after ~16 hops; the message carries its own hop counter.
                recursive_loop=lambda_.RecursiveLoop.ALLOW,
            ),
        )
        self.mappings: list[sources.SqsEventSource] = []
        for queue in dispatch.queues:
            source = sources.SqsEventSource(
                queue,
                batch_size=sizing.batch_size,
                # Provisioned mode excludes max_concurrency: the reservation above is the bound.
                provisioned_poller_config=lambda_.ProvisionedPollerConfig(
                    minimum_pollers=sizing.min_pollers, maximum_pollers=sizing.max_pollers
                ),
                report_batch_item_failures=True,
                # No batching window: a message is due the moment it becomes visible.
            )
            self.function.add_event_source(source)
            self.mappings.append(source)
        self.batched_mappings = list(self.mappings)  # the ones the ticker pre-scales before a burst
        long_calls = sources.SqsEventSource(
            dispatch.long_call_queue,
            batch_size=1,  # a long call holds its invocation: nothing else rides in it
            provisioned_poller_config=lambda_.ProvisionedPollerConfig(
                minimum_pollers=sizing.long_call_pollers, maximum_pollers=sizing.long_call_pollers
            ),
            report_batch_item_failures=True,
        )
        self.function.add_event_source(long_calls)
        self.mappings.append(long_calls)
        jobs, runs = storage.table(JOBS), storage.table(RUNS)
        # Runs are claimed and finished by conditional updates (alone, or in a transaction with the job's
        # overlap slot); the executor never puts a whole item.
        allow(self.function, (*DYNAMODB_READ, "dynamodb:UpdateItem"), [jobs.table_arn, runs.table_arn])
        # Concurrency slots: taken, extended and released by conditional updates (a pool's new stripe is put
        # whole), counted for the runs-in-flight metric in batches.
        allow(
            self.function,
            ("dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:BatchGetItem"),
            [storage.table(SLOTS).table_arn],
        )
        allow(self.function, ("sqs:SendMessage",), dispatch.queue_arns)  # retries and queued overlap runs
        # A job's exclusion calendars, read at the claim of its scheduled runs (items of the events table).
        allow(self.function, ("dynamodb:GetItem",), [storage.table(EVENTS).table_arn])
        signing_secret.grant_read(self.function)
        for statement in target_statements(target_arns):
            self.function.add_to_role_policy(statement)

    @property
    def lambda_function(self) -> lambda_.Function:
        return self.function
