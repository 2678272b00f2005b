"""The watcher (issue 32): what a job's owner is told about its runs (a run failed, started late, missed its
deadline...), recorded in the events table and sent to the job's channels; and the auto-pause.

Two triggers, one function (`tickwork.handlers.watcher.handler`):

- The runs table's stream (NEW_AND_OLD_IMAGES, `RUNS.change_feed`) through one event source mapping. Each
  batch of run changes is judged (services/watching.py) and recorded, then what the outbox owes is sent.
  Downstream of every run path, so what an owner is told never delays or fails a run. Batches of up to
  `BATCH_SIZE` records from the latest position (a new mapping does not replay the stream's last 24 hours);
  only inserts and modifications invoke it (a removal is a run's retention ending: nothing an owner is told).
  A batch that fails is split in two and retried (bisect), `RETRY_ATTEMPTS` times at most, and a record older
  than `MAX_RECORD_AGE` is not retried: what is given up is described (the shard and its sequence numbers, not
  the records) in the on-failure queue, kept 14 days, while the stream keeps the records 24 hours from their
  write (the WatcherFailedBatches alarm; `MAX_RECORD_AGE` leaves 18 hours to read them again). A change seen
  twice records nothing twice.
- A minutely schedule (the scheduler's group and role, constructs/scheduler.py) invoking it with `{}`: what is
  owed later is sent then (retries, a window's digest, deadline timers).

It sends through the executor's own target invokers: webhooks and Slack-compatible URLs as HTTP calls signed
with the signing secret, SNS topics by publishing, on the same topics the executor may publish to
(`target_arns` or the `<prefix>-target-*` convention, constructs/targets.py). E-mail channels go through a
topic per address (`<prefix>-mail-<hash>`, the AWS-managed SNS key: adapters/email.py), which the API creates
and subscribes the address to when an owner first names it; the watcher publishes to them.

Reservation: `watcher_reserved_concurrency` (default 10). The stream mapping takes one environment per stream
shard at a time (parallelization factor 1: a shard's changes are seen in order); a shard whose batch finds no
environment waits (Lambda retries a throttled batch until `MAX_RECORD_AGE`).
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs

from constructs import Construct
from infra.constructs.dispatch import Dispatch
from infra.constructs.functions import FunctionFactory, FunctionSpec, allow
from infra.constructs.scheduler import Scheduler
from infra.constructs.storage import Storage
from infra.constructs.targets import action_of, target_statements
from tickwork.resources import EVENTS, JOBS, RUNS

# The outbox pass sends until the invocation has handlers/watcher.DELIVERY_MARGIN_SECONDS (20 s: one send's
# 10 s timeout and the report) left, and leaves the rest to the next pass. A minute: a minutely pass ends
# before the next one starts, and a stream batch holds its shard (whose next batch waits) for a minute at
# most, however slow a channel is.
WATCHER_TIMEOUT = Duration.seconds(60)
BATCH_SIZE = 100
RETRY_ATTEMPTS = 5
MAX_RECORD_AGE = Duration.hours(6)  # the stream keeps a record 24 h: 18 h are left to read it again
FAILURES_RETENTION = Duration.days(14)  # SQS's longest
# Only what services/watching.py looks at invokes the function (adapters/dynamodb/stream.run_changes).
CHANGES_ONLY = lambda_.FilterCriteria.filter({"eventName": lambda_.FilterRule.or_("INSERT", "MODIFY")})


class Watcher(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        factory: FunctionFactory,
        storage: Storage,
        dispatch: Dispatch,
        scheduler: Scheduler,
        signing_secret: secretsmanager.ISecret,
        target_arns: tuple[str, ...],
        reserved_concurrency: int,
        production: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        self.function = factory.create(
            Construct(self, "Watcher"),
            FunctionSpec(
                name="watcher",
                handler="tickwork.handlers.watcher.handler",
                description="Turns run changes into owners' events and messages; sends what the outbox owes",
                timeout=WATCHER_TIMEOUT,
                memory_mb=512,
                reserved_concurrency=reserved_concurrency,
                async_retry_attempts=0,  # the minutely pass: the next one sends what this one did not
            ),
        )
        # Batches the mapping gave up on: the shard and sequence numbers to read again (docs/deploy.md).
        self.failures = sqs.Queue(
            self,
            "Failures",
            queue_name=f"{factory.prefix}-watcher-failures",
            retention_period=FAILURES_RETENTION,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            removal_policy=RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY,
        )
        stream = storage.stream_arn(RUNS)
        self.mapping = self.function.add_event_source_mapping(
            "RunChanges",
            event_source_arn=stream,
            starting_position=lambda_.StartingPosition.LATEST,
            batch_size=BATCH_SIZE,
            bisect_batch_on_error=True,
            retry_attempts=RETRY_ATTEMPTS,
            max_record_age=MAX_RECORD_AGE,
            on_failure=sources.SqsDlq(self.failures),  # grants the function's role sending to it
            filters=[CHANGES_ONLY],
        )
        # What the mapping reads the stream with (the function's role): these four, on this stream only.
        allow(
            self.function,
            (
                "dynamodb:DescribeStream",
                "dynamodb:GetRecords",
                "dynamodb:GetShardIterator",
                "dynamodb:ListStreams",
            ),
            [stream],
        )
        self.schedule = scheduler.every_minute(
            self,
            "Schedule",
            "Tickwork watcher: retries, digests and deadline timers the outbox owes",
            self.function,
            {},
        )
        self._grant(storage, signing_secret, target_arns)
        self._grant_bulk(storage, dispatch)
        # E-mail channels: a topic per address (adapters/email.py), under this name prefix.
        self.email_topic_prefix = Stack.of(self).format_arn(
            service="sns", resource=f"{factory.prefix}-mail-", arn_format=ArnFormat.NO_RESOURCE_NAME
        )
        self.email_topics = f"{self.email_topic_prefix}*"
        allow(self.function, ("sns:Publish",), [self.email_topics])
        self.function.add_environment("TICKWORK_EMAIL_TOPIC_PREFIX", self.email_topic_prefix)

    def allow_subscribing(self, function: lambda_.Function) -> None:
        """The API creates an address's topic (tagged with its owner), reads the tag back, and subscribes
        the address, when an owner first names it."""
        function.add_environment("TICKWORK_EMAIL_TOPIC_PREFIX", self.email_topic_prefix)
        allow(
            function,
            ("sns:CreateTopic", "sns:TagResource", "sns:ListTagsForResource", "sns:Subscribe"),
            [self.email_topics],
        )

    def _grant_bulk(self, storage: Storage, dispatch: Dispatch) -> None:
        """The minutely pass works on due bulk actions (services/bulk.py): the owner's jobs a page at a time
        (the keys-only `by_owner` index, then one BatchGetItem); a pause or resume is a job write (the job,
        its runs' views, the runs a resume plans, its revision) whose immediate fires are sent; a retry of
        failed runs reads them from the `failed_runs` index and sends each again."""
        jobs, runs = storage.table(JOBS), storage.table(RUNS)
        allow(self.function, ("dynamodb:Query",), [storage.index_arn(JOBS, "by_owner")])
        allow(self.function, ("dynamodb:Query",), [storage.index_arn(RUNS, "failed_runs")])
        allow(self.function, ("dynamodb:BatchGetItem",), [jobs.table_arn])
        allow(self.function, ("dynamodb:PutItem",), [runs.table_arn])
        allow(self.function, ("sqs:SendMessage",), dispatch.queue_arns)

    def _grant(
        self, storage: Storage, signing_secret: secretsmanager.ISecret, target_arns: tuple[str, ...]
    ) -> None:
        jobs, runs, events = storage.table(JOBS), storage.table(RUNS), storage.table(EVENTS)
        # A job's rules (get_job); a run at its deadline (get_run); the job's recent runs when a streak or a
        # baseline is judged (list_runs), and its claimable runs when it is auto-paused (claimable_runs).
        allow(self.function, ("dynamodb:GetItem",), [jobs.table_arn, runs.table_arn])
        allow(self.function, ("dynamodb:Query",), [runs.table_arn])
        # The auto-pause (JobService.pause -> replace_job): one transaction of an update of the job and of
        # the views of its claimable runs; it plans no run.
        allow(self.function, ("dynamodb:UpdateItem",), [jobs.table_arn, runs.table_arn])
        # The events table (adapters/dynamodb/events.py): windows and channel health read one item at a time;
        # an event with its windows and messages in one transaction (puts), timers, retries and health put;
        # a message claimed before it is sent (a conditional update of its send time); sent messages and
        # spent timers deleted; what is owed now read from the `outbox` index.
        allow(
            self.function,
            ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"),
            [events.table_arn],
        )
        allow(self.function, ("dynamodb:Query",), [storage.index_arn(EVENTS, "outbox")])
        # Sends: webhooks are signed like target calls; SNS channels publish where the executor may.
        signing_secret.grant_read(self.function)
        topics = [arn for arn in target_arns if action_of(arn) == "sns:Publish"]
        for statement in target_statements(topics):
            self.function.add_to_role_policy(statement)
