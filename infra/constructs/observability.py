"""Dashboard and alarms. Tickwork's own metrics are Powertools EMF in namespace `Tickwork` with the dimension
`service` (every function shares one service name); AWS metrics come from SQS, Lambda, DynamoDB and API
Gateway.

Every alarm links its runbook entry in docs/deploy.md. With `metric_math=False` (the emulator profile:
MiniStack refuses metric-math alarms) each math alarm becomes one alarm per input, `<alarm>-<input>`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs

from constructs import Construct
from tickwork.resources import TableDef

NAMESPACE = "Tickwork"
MINUTE = Duration.minutes(1)
FIVE_MINUTES = Duration.minutes(5)
TICKER_LAG_LIMIT_SECONDS = 120
MAX_METRICS_PER_ALARM = 10  # CloudWatch's limit for one metric-math alarm


def dashboard_name(prefix: str) -> str:
    """The stack's dashboard: its name is an output, and the web console links to it."""
    return f"{prefix}-scheduler"


EXECUTOR_DURATION_LIMIT = 0.8  # of the executor's timeout: a batch that long is close to being killed
CONCURRENCY_LIMIT = 0.9  # of the executor's reserved concurrency: the cap is nearly full
# The sweeper looks every minute and re-sends within seconds, so a run still overdue 15 minutes after its
# check time is not being repaired (the dispatch visibility timeout, 16 minutes, brings back even a
# throttled message before that).
OVERDUE_RUN_AGE_LIMIT_SECONDS = 900
API_STAGE = "$default"

RUN_COUNTS = (
    "RunsPlanned",
    "RunsStarted",
    "RunsSucceeded",
    "RunsFailed",
    "RunsSkipped",
    "RunsMissed",
    "RunsCancelled",
    "RunsExcluded",
    "RunsQueued",
    "RunsCatchUp",
)
REPAIR_COUNTS = (
    "Retries",
    "ExpiredLeases",
    "StaleCompletions",
    "SweeperRedispatched",
    "DeadLettered",
    "OrphanMessages",
    "MessagesBeforeTheirRun",
    "DispatchFailures",
    "PlanConflicts",
    "CalendarsUnread",
)
# The watcher (services/watching.py): messages to owners' channels.
NOTIFICATION_COUNTS = ("NotificationsSent", "NotificationSendFailures")


@dataclass(frozen=True, slots=True)
class Monitored:
    """What the alarms and the dashboard look at."""

    service: str
    ticker: lambda_.Function
    sweeper: lambda_.Function
    executor: lambda_.Function
    api: lambda_.Function
    watcher: lambda_.Function
    watcher_failures: sqs.Queue  # the watcher's stream batches given up (its mapping's on-failure queue)
    http_api_id: str
    executor_reserved_concurrency: int
    queues: Sequence[sqs.Queue]
    dead_letter_queue: sqs.Queue
    tables: Sequence[tuple[TableDef, dynamodb.ITable]]  # each table with its definition (for index names)
    concurrency_cap: int = 0  # runs in flight at most (the slots' bound), drawn on the dashboard


class Observability(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        monitored: Monitored,
        prefix: str,
        alarm_email: str | None,
        start_delay_objective_ms: int,
        oldest_message_age_seconds: int,
        production: bool,
        metric_math: bool = True,
        burst_start_delay_objective_ms: int = 10_000,
    ) -> None:
        super().__init__(scope, construct_id)
        self.m = monitored
        self.metric_math = metric_math
        key = kms.Key(
            self,
            "TopicKey",
            description="Tickwork alarm topic encryption",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY,
        )
        # CloudWatch publishes alarm notifications to the encrypted topic. enforce_ssl replaces the topic's
        # default policy, so CloudWatch needs an explicit allow: on the topic and on the key, each only for
        # alarms of this account.
        cloudwatch = iam.ServicePrincipal("cloudwatch.amazonaws.com")
        this_account = {"StringEquals": {"aws:SourceAccount": Stack.of(self).account}}
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsOfThisAccount",
                principals=[cloudwatch],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions=this_account,
            )
        )
        self.topic = sns.Topic(
            self, "AlarmTopic", topic_name=f"{prefix}-alarms", master_key=key, enforce_ssl=True
        )
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsOfThisAccount",
                principals=[cloudwatch],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions=this_account,
            )
        )
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
        self.alarms: dict[str, cw.Alarm] = {}
        self._alarms(start_delay_objective_ms, oldest_message_age_seconds)
        self._burst_alarms(burst_start_delay_objective_ms)
        action = cw_actions.SnsAction(self.topic)
        for alarm in self.alarms.values():
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
        self.dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=dashboard_name(prefix))
        self._dashboard(start_delay_objective_ms, oldest_message_age_seconds)

    # metrics -------------------------------------------------------------------------------------------

    def metric(self, name: str, statistic: str = "Sum", period: Duration = MINUTE) -> cw.Metric:
        return cw.Metric(
            namespace=NAMESPACE,
            metric_name=name,
            dimensions_map={"service": self.m.service},
            statistic=statistic,
            period=period,
        )

    def _functions(self) -> dict[str, lambda_.Function]:
        return {
            "ticker": self.m.ticker,
            "sweeper": self.m.sweeper,
            "executor": self.m.executor,
            "api": self.m.api,
            "watcher": self.m.watcher,
        }

    def _queue_age(self, queues: Sequence[sqs.Queue], period: Duration) -> cw.IMetric:
        metrics = {
            f"q{i}": q.metric_approximate_age_of_oldest_message(statistic="Maximum", period=period)
            for i, q in enumerate(queues)
        }
        if len(metrics) == 1:
            return next(iter(metrics.values()))
        return cw.MathExpression(
            expression=f"MAX([{','.join(metrics)}])",
            using_metrics=metrics,
            label="oldest message age (s)",
            period=period,
        )

    def _queue_age_groups(self) -> list[list[sqs.Queue]]:
        queues = list(self.m.queues)
        return [queues[i : i + MAX_METRICS_PER_ALARM] for i in range(0, len(queues), MAX_METRICS_PER_ALARM)]

    def _dlq(self, period: Duration) -> cw.MathExpression:
        # The sweeper drains the DLQ every minute, so its depth alone can miss a message: add what the
        # sweeper reports having taken out.
        return cw.MathExpression(
            expression="FILL(depth, 0) + FILL(drained, 0)",
            using_metrics={
                "depth": self.m.dead_letter_queue.metric_approximate_number_of_messages_visible(
                    statistic="Maximum", period=period
                ),
                "drained": self.metric("DeadLettered", period=period),
            },
            label="dead-lettered messages",
            period=period,
        )

    def _lambda_throttles(self, period: Duration) -> cw.MathExpression:
        metrics = {
            name: fn.metric_throttles(statistic="Sum", period=period)
            for name, fn in self._functions().items()
        }
        return cw.MathExpression(
            expression=" + ".join(f"FILL({n}, 0)" for n in metrics),
            using_metrics=metrics,
            label="Lambda throttles",
        )

    def _table_throttle_metrics(self, period: Duration) -> dict[str, cw.IMetric]:
        metrics: dict[str, cw.IMetric] = {}
        for i, (_definition, table) in enumerate(self.m.tables):
            for kind in ("Read", "Write"):
                metrics[f"{kind.lower()}{i}"] = cw.Metric(
                    namespace="AWS/DynamoDB",
                    metric_name=f"{kind}ThrottleEvents",
                    dimensions_map={"TableName": table.table_name},
                    statistic="Sum",
                    period=period,
                )
        return metrics

    def _index_throttle_metrics(self, period: Duration) -> dict[str, cw.IMetric]:
        """The table-level throttle metrics leave out the global secondary indexes: each index has its own."""
        metrics: dict[str, cw.IMetric] = {}
        for definition, table in self.m.tables:
            for index in definition.indexes:
                for kind in ("Read", "Write"):
                    metrics[f"{kind.lower()}_{definition.logical_name}_{index.name}"] = cw.Metric(
                        namespace="AWS/DynamoDB",
                        metric_name=f"{kind}ThrottleEvents",
                        dimensions_map={
                            "TableName": table.table_name,
                            "GlobalSecondaryIndexName": index.name,
                        },
                        statistic="Sum",
                        period=period,
                    )
        return metrics

    @staticmethod
    def _sum(metrics: dict[str, cw.IMetric], label: str, period: Duration) -> cw.MathExpression:
        return cw.MathExpression(
            expression=" + ".join(f"FILL({n}, 0)" for n in metrics),
            using_metrics=metrics,
            label=label,
            period=period,
        )

    def _dynamodb_throttles(self, period: Duration) -> cw.MathExpression:
        return self._sum(self._table_throttle_metrics(period), "DynamoDB throttle events", period)

    def _sum_alarms(
        self, name: str, metrics: dict[str, cw.IMetric], label: str, period: Duration, description: str
    ) -> None:
        """`>= 1` on the sum of counts, in groups of at most 10 metrics (`name`, `name1`, ...)."""
        keys = list(metrics)
        for number, start in enumerate(range(0, len(keys), MAX_METRICS_PER_ALARM)):
            group = {k: metrics[k] for k in keys[start : start + MAX_METRICS_PER_ALARM]}
            self._alarm(
                f"{name}{number}" if number else name,
                self._sum(group, label, period),
                1,
                description,
                runbook=name,
            )

    # alarms --------------------------------------------------------------------------------------------

    def _alarm(
        self,
        name: str,
        metric: cw.IMetric,
        threshold: float,
        description: str,
        *,
        periods: int = 1,
        datapoints: int | None = None,
        missing: cw.TreatMissingData = cw.TreatMissingData.NOT_BREACHING,
        comparison: cw.ComparisonOperator = cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        runbook: str | None = None,
    ) -> None:
        if not self.metric_math and isinstance(metric, cw.MathExpression):
            # The emulator profile: MiniStack refuses metric-math alarms. Every math alarm here is a SUM of
            # counts or a MAX of ages against its threshold, so one alarm per input metric fires on the
            # same condition.
            for key, single in metric.using_metrics.items():
                self._alarm(
                    f"{name}-{key}",
                    single,
                    threshold,
                    description,
                    periods=periods,
                    datapoints=datapoints,
                    missing=missing,
                    comparison=comparison,
                    runbook=runbook or name,
                )
            return
        self.alarms[name] = cw.Alarm(
            self,
            name,
            alarm_description=f"{description} Runbook: docs/deploy.md#{(runbook or name).lower()}",
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=periods,
            datapoints_to_alarm=datapoints or periods,
            treat_missing_data=missing,
        )

    def _burst_alarms(self, objective_ms: int) -> None:
        """The top of the hour lasts a minute: the 5-minute start-delay alarm, two periods in a row, cannot
        see it. These look at single minutes."""
        greater = cw.ComparisonOperator.GREATER_THAN_THRESHOLD
        self._alarm(
            "StartDelayBurstP99",
            self.metric("StartDelay", statistic="p99", period=MINUTE),
            objective_ms,
            f"Run start delay p99 of a single minute above {objective_ms} ms (a burst started late).",
            periods=2,
            datapoints=1,
            comparison=greater,
        )
        self._alarm(
            "ShardsOutOfTime",
            self.metric("ShardsOutOfTime", period=MINUTE),
            1,
            "A tick ran out of time before planning every due job of its shards, in 2 of 3 minutes.",
            periods=3,
            datapoints=2,
        )

    def _alarms(self, objective_ms: int, oldest_age_s: int) -> None:
        greater = cw.ComparisonOperator.GREATER_THAN_THRESHOLD
        self._alarm(
            "DlqNotEmpty", self._dlq(MINUTE), 1, "A run message failed every delivery and was dead-lettered."
        )
        self._alarm(
            "RunsFailed",
            self.metric("RunsFailed", period=FIVE_MINUTES),
            1,
            "Runs ended failed (retries exhausted).",
        )
        # Failures the ticker and the sweeper isolated (the rest of their work went on), sustained.
        for name, what in (
            ("PlanFailures", "Jobs or shards could not be planned"),
            ("SweepFailures", "Runs or shards could not be repaired"),
            ("AuditFailures", "Jobs could not be audited"),
        ):
            self._alarm(
                name,
                self.metric(name, period=MINUTE),
                1,
                f"{what} (isolated, the rest went on) in 2 of 3 minutes.",
                periods=3,
                datapoints=2,
            )
        self._alarm(
            "TickerLag",
            self.metric("TickerLag", statistic="Maximum"),
            TICKER_LAG_LIMIT_SECONDS,
            "Ticks start over 2 minutes late, or no tick reported at all (missing data breaches).",
            periods=3,
            datapoints=2,
            missing=cw.TreatMissingData.BREACHING,
            comparison=greater,
        )
        self._alarm(
            "StartDelayP99",
            self.metric("StartDelay", statistic="p99", period=FIVE_MINUTES),
            objective_ms,
            f"Run start delay p99 above its {objective_ms} ms objective for 10 minutes.",
            periods=2,
            comparison=greater,
        )
        for number, group in enumerate(self._queue_age_groups()):
            self._alarm(
                f"OldestMessageAge{number}" if number else "OldestMessageAge",
                self._queue_age(group, MINUTE),
                oldest_age_s,
                f"A dispatch message waits over {oldest_age_s} s: the executor is not keeping up or failing.",
                periods=5,
                datapoints=3,
                comparison=greater,
                runbook="OldestMessageAge",  # every queue group shares one runbook entry
            )
        self._alarm(
            "LambdaThrottles", self._lambda_throttles(FIVE_MINUTES), 1, "Tickwork functions were throttled."
        )
        self._sum_alarms(
            "DynamoDbThrottles",
            self._table_throttle_metrics(FIVE_MINUTES),
            "DynamoDB throttle events",
            FIVE_MINUTES,
            "Tickwork's tables throttled requests.",
        )
        self._sum_alarms(
            "DynamoDbIndexThrottles",
            self._index_throttle_metrics(FIVE_MINUTES),
            "DynamoDB index throttle events",
            FIVE_MINUTES,
            "A global secondary index of Tickwork's tables throttled (this also slows its table's writes).",
        )
        self._function_alarms()
        # The reconciliation audit (services/auditing.py): any repair means a run or a job was lost around
        # the code (a purged queue, a restored table, an index that lagged): someone should know why.
        self._alarm(
            "AuditRepairs",
            self.metric("AuditRepairs", period=FIVE_MINUTES),
            1,
            "The audit found and repaired runs or jobs lost around the code (a purged queue, a restored "
            "table, a stranded job).",
        )
        self._alarm(
            "AuditIncomplete",
            self.metric("AuditCutShort", period=MINUTE),
            1,
            "The audit ran out of time before the end of its segment in 2 of 3 minutes: jobs go unchecked.",
            periods=3,
            datapoints=2,
        )
        self._alarm(
            "OldestOverdueRun",
            self.metric("OldestOverdueRunAge", statistic="Maximum"),
            OVERDUE_RUN_AGE_LIMIT_SECONDS,
            f"An unfinished run is over {OVERDUE_RUN_AGE_LIMIT_SECONDS} s past its sweeper check time "
            "in 2 of 3 minutes: the sweeper is not repairing it.",
            periods=3,
            datapoints=2,
            comparison=greater,
        )

    def _function_alarms(self) -> None:
        """Errors of the other functions, API 5xx, and the executor near its timeout or its reservation."""
        greater = cw.ComparisonOperator.GREATER_THAN_THRESHOLD
        # The minutely functions alarm on 2 failed minutes of 3 (one failed tick is retried by the next);
        # the event-driven ones on any failure in five minutes.
        errors: list[tuple[str, lambda_.IFunction, Duration, int, int, str]] = [
            ("Ticker", self.m.ticker, MINUTE, 3, 2, "Ticker invocations failed in 2 of 3 minutes."),
            ("Sweeper", self.m.sweeper, MINUTE, 3, 2, "Sweeper invocations failed in 2 of 3 minutes."),
            (
                "Executor",
                self.m.executor,
                FIVE_MINUTES,
                1,
                1,
                "Executor invocations failed (a whole batch returns to its queue).",
            ),
            ("Api", self.m.api, FIVE_MINUTES, 1, 1, "API function invocations failed."),
            (
                "Watcher",
                self.m.watcher,
                MINUTE,
                3,
                2,
                "Watcher invocations failed in 2 of 3 minutes (a stream batch is retried, split, then "
                "given up to its on-failure queue; a minutely pass is redone by the next).",
            ),
        ]
        for name, function, period, periods, datapoints, description in errors:
            self._alarm(
                f"{name}Errors",
                function.metric_errors(statistic="Sum", period=period),
                1,
                description,
                periods=periods,
                datapoints=datapoints,
            )
        self._alarm(
            "WatcherFailedBatches",
            self.m.watcher_failures.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=MINUTE
            ),
            1,
            "The watcher gave up on a batch of run changes: their events were not recorded nor sent. The "
            "runs stream keeps the records 24 h from their write.",
        )
        self._alarm(
            "Api5xx",
            cw.Metric(
                namespace="AWS/ApiGateway",
                metric_name="5xx",
                dimensions_map={"ApiId": self.m.http_api_id, "Stage": API_STAGE},
                statistic="Sum",
                period=FIVE_MINUTES,
            ),
            1,
            "The management API answered 5xx.",
        )
        timeout = self.m.executor.timeout
        if timeout is None:  # pragma: no cover - the executor construct always sets it
            raise ValueError("the executor function has no timeout")
        limit_ms = EXECUTOR_DURATION_LIMIT * timeout.to_milliseconds()
        self._alarm(
            "ExecutorDurationNearTimeout",
            self.m.executor.metric_duration(statistic="Maximum", period=MINUTE),
            limit_ms,
            f"An executor batch ran over {limit_ms:.0f} ms, {EXECUTOR_DURATION_LIMIT:.0%} of its timeout.",
            comparison=greater,
        )
        cap = self.m.executor_reserved_concurrency
        self._alarm(
            "ExecutorConcurrencyNearCap",
            self.m.executor.metric("ConcurrentExecutions", statistic="Maximum", period=MINUTE),
            CONCURRENCY_LIMIT * cap,
            f"Executor concurrency above {CONCURRENCY_LIMIT:.0%} of its reservation ({cap}) in 3 of 5 "
            "minutes.",
            periods=5,
            datapoints=3,
            comparison=greater,
        )

    # dashboard -----------------------------------------------------------------------------------------

    def _dashboard(self, objective_ms: int, oldest_age_s: int) -> None:
        board = self.dashboard
        wide, half, third = 24, 12, 8
        board.add_widgets(
            cw.GraphWidget(
                title="Runs per minute",
                left=[self.metric(name) for name in RUN_COUNTS],
                width=half,
                stacked=False,
            ),
            cw.GraphWidget(
                title="Start delay (ms)",
                left=[self.metric("StartDelay", statistic=s) for s in ("p50", "p90", "p99", "Maximum")],
                left_annotations=[cw.HorizontalAnnotation(value=objective_ms, label="objective (p99)")],
                width=half,
            ),
        )
        board.add_widgets(
            cw.GraphWidget(
                title="Retries and repairs per minute",
                left=[self.metric(n) for n in REPAIR_COUNTS],
                width=half,
            ),
            cw.GraphWidget(
                title="Ticker (s)",
                left=[self.metric("TickerDuration", "Maximum"), self.metric("TickerLag", "Maximum")],
                left_annotations=[
                    cw.HorizontalAnnotation(value=60, label="one minute"),
                    cw.HorizontalAnnotation(value=TICKER_LAG_LIMIT_SECONDS, label="lag alarm"),
                ],
                width=half,
            ),
        )
        depth = {
            f"q{i}": q.metric_approximate_number_of_messages_visible(statistic="Maximum", period=MINUTE)
            for i, q in enumerate(self.m.queues)
        }
        delayed = {
            f"d{i}": q.metric("ApproximateNumberOfMessagesDelayed", statistic="Maximum", period=MINUTE)
            for i, q in enumerate(self.m.queues)
        }
        in_flight = {
            f"f{i}": q.metric_approximate_number_of_messages_not_visible(statistic="Maximum", period=MINUTE)
            for i, q in enumerate(self.m.queues)
        }
        board.add_widgets(
            cw.GraphWidget(
                title="Dispatch queues: messages",
                left=[
                    cw.MathExpression(
                        expression=f"SUM([{','.join(m)}])", using_metrics=m, label=label, period=MINUTE
                    )
                    for m, label in (
                        (depth, "visible (due now)"),
                        (delayed, "delayed (planned)"),
                        (in_flight, "in flight"),
                    )
                ],
                width=third,
            ),
            cw.GraphWidget(
                title="Oldest dispatch message (s)",
                left=[self._queue_age(group, MINUTE) for group in self._queue_age_groups()],
                left_annotations=[cw.HorizontalAnnotation(value=oldest_age_s, label="alarm")],
                width=third,
            ),
            cw.GraphWidget(title="Dead-letter queue", left=[self._dlq(MINUTE)], width=third),
        )
        board.add_widgets(
            cw.GraphWidget(
                title="Runs in flight (the bound's count) and executor invocations",
                left=[self.metric("RunsInFlight", statistic="Maximum")],
                left_annotations=[cw.HorizontalAnnotation(value=self.m.concurrency_cap, label="cap")],
                right=[self.m.executor.metric("ConcurrentExecutions", statistic="Maximum", period=MINUTE)],
                right_annotations=[
                    cw.HorizontalAnnotation(value=self.m.executor_reserved_concurrency, label="reserved")
                ],
                width=third,
            ),
            cw.GraphWidget(
                title="Lambda errors and throttles",
                left=[
                    fn.metric_errors(label=f"{n} errors", period=MINUTE)
                    for n, fn in self._functions().items()
                ],
                right=[
                    fn.metric_throttles(label=f"{n} throttles", period=MINUTE)
                    for n, fn in self._functions().items()
                ],
                width=third,
            ),
            cw.GraphWidget(title="DynamoDB throttles", left=[self._dynamodb_throttles(MINUTE)], width=third),
        )
        board.add_widgets(
            cw.GraphWidget(
                title="Notifications to owners' channels per minute",
                left=[self.metric(n) for n in NOTIFICATION_COUNTS],
                width=third,
            ),
            cw.GraphWidget(
                title="Watcher: age of the run changes it reads (ms)",
                left=[self.m.watcher.metric("IteratorAge", statistic="Maximum", period=MINUTE)],
                width=third,
            ),
            cw.GraphWidget(
                title="Watcher: batches given up",
                left=[
                    self.m.watcher_failures.metric_approximate_number_of_messages_visible(
                        statistic="Maximum", period=MINUTE
                    )
                ],
                width=third,
            ),
        )
        board.add_widgets(cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=wide))
