"""The Tickwork stack: composes the capability constructs, and nothing else."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack, Tags
from aws_cdk import aws_lambda as lambda_

from constructs import Construct
from infra.config import DeploymentConfig
from infra.constructs.api import Api
from infra.constructs.bundling import LAMBDA_TARGET, emulator_target, lambda_code
from infra.constructs.data_protection import DataProtection
from infra.constructs.dispatch import Dispatch
from infra.constructs.executor import ExecutorFunction, executor_sizing
from infra.constructs.functions import FunctionFactory, allow, retention
from infra.constructs.observability import Monitored, Observability, dashboard_name
from infra.constructs.scheduler import Scheduler
from infra.constructs.signing import SigningSecret
from infra.constructs.storage import Storage
from infra.constructs.targets import default_target_arns
from infra.constructs.watcher import Watcher
from tickwork.resources import ResourceNames


class TickworkStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: DeploymentConfig,
        code: lambda_.Code | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        names = ResourceNames(prefix=config.prefix)
        self.sizing = executor_sizing(config)

        self.data = DataProtection(self, "Data", prefix=config.prefix, production=config.production)
        self.storage = Storage(
            self,
            "Storage",
            names=names,
            production=config.production,
            warm=config.warm(),
            encryption_key=self.data.key,
        )
        self.dispatch = Dispatch(
            self, "Dispatch", names=names, queue_count=config.queue_count, production=config.production
        )
        self.signing = SigningSecret(self, "Signing", prefix=config.prefix, production=config.production)
        self.factory = FunctionFactory(
            self,
            "Functions",
            code=code or lambda_code(target=emulator_target() if config.emulator else LAMBDA_TARGET),
            prefix=config.prefix,
            environment=self._environment(),
            log_retention_days=config.log_retention_days,
            production=config.production,
        )
        self.scheduler = Scheduler(
            self,
            "Scheduler",
            factory=self.factory,
            storage=self.storage,
            dispatch=self.dispatch,
            shard_count=config.shard_count,
            shards_per_invocation=config.ticker_shards_per_invocation,
            ticker_reserved_concurrency=config.ticker_reserved_concurrency,
            sweeper_reserved_concurrency=config.sweeper_reserved_concurrency,
        )
        target_arns = config.target_arns or default_target_arns(config.prefix)
        self.executor = ExecutorFunction(
            self,
            "Executor",
            factory=self.factory,
            storage=self.storage,
            dispatch=self.dispatch,
            signing_secret=self.signing.secret,
            sizing=self.sizing,
            target_arns=target_arns,
        )
        self.watcher = Watcher(
            self,
            "Watcher",
            factory=self.factory,
            storage=self.storage,
            dispatch=self.dispatch,
            scheduler=self.scheduler,
            signing_secret=self.signing.secret,
            target_arns=target_arns,
            reserved_concurrency=config.watcher_reserved_concurrency,
            production=config.production,
        )
        self.api = Api(
            self,
            "Api",
            factory=self.factory,
            storage=self.storage,
            dispatch=self.dispatch,
            jwt_issuer=config.jwt_issuer,
            jwt_audience=config.jwt_audience,
            rate_limit=config.api_rate_limit,
            burst_limit=config.api_burst_limit,
            log_retention=retention(config.log_retention_days),
            production=config.production,
            callback_key=self.signing.callback_key,
            reserved_concurrency=config.api_reserved_concurrency,
        )
        # Callback runs report to the API: their calls carry URLs on it (the API exists after the executor).
        self.executor.function.add_environment("TICKWORK_CALLBACK_URL", self.api.url)
        self.signing.callback_key.grant_read(self.executor.function)
        self.watcher.allow_subscribing(self.api.function)
        self.data.allow_header_secrets(writer=self.api.function, reader=self.executor.function)
        self.data.allow_use(self.factory.functions.values())
        # The executor is updated before the API: an API that writes secret references while the executor
        # still runs code that does not know them would fail those jobs' runs (docs/deploy.md).
        self.api.function.node.add_dependency(self.executor.function)
        if not config.emulator:
            self._start_warm()
        self.observability = Observability(
            self,
            "Observability",
            monitored=Monitored(
                service=config.prefix,
                ticker=self.scheduler.ticker,
                sweeper=self.scheduler.sweeper,
                executor=self.executor.function,
                api=self.api.function,
                watcher=self.watcher.function,
                watcher_failures=self.watcher.failures,
                http_api_id=self.api.http_api.api_id,
                executor_reserved_concurrency=self.sizing.reserved_concurrency,
                queues=self.dispatch.all_queues,
                dead_letter_queue=self.dispatch.dead_letter_queue,
                tables=[(d, self.storage.table(d)) for d in self.storage.definitions.values()],
                concurrency_cap=config.concurrency_cap,
            ),
            prefix=config.prefix,
            alarm_email=config.alarm_email,
            start_delay_objective_ms=config.start_delay_objective_ms,
            burst_start_delay_objective_ms=config.burst_start_delay_objective_ms,
            oldest_message_age_seconds=config.oldest_message_age_seconds,
            production=config.production,
            metric_math=not config.emulator,
        )
        Tags.of(self).add("application", "tickwork")
        Tags.of(self).add("tickwork:prefix", config.prefix)
        CfnOutput(self, "ApiUrl", value=self.api.url)
        CfnOutput(self, "SigningSecretArn", value=self.signing.secret.secret_arn)
        CfnOutput(self, "AlarmTopicArn", value=self.observability.topic.topic_arn)
        CfnOutput(self, "DashboardName", value=dashboard_name(config.prefix))
        # The layout, read back by preflight before the next deploy: shards and queues only ever grow.
        CfnOutput(self, "ShardCount", value=str(config.shard_count))
        CfnOutput(self, "QueueCount", value=str(config.queue_count))

    def _start_warm(self) -> None:
        """The ticker raises the batched lane's warm pollers before a burst it planned (prescale.py)."""
        ticker, mappings = self.scheduler.ticker, self.executor.batched_mappings
        ids = ",".join(m.event_source_mapping_id for m in mappings)
        ticker.add_environment("TICKWORK_EXECUTOR_MAPPING_IDS", ids)
        ticker.add_environment("TICKWORK_EXECUTOR_MIN_POLLERS", str(self.sizing.min_pollers))
        ticker.add_environment("TICKWORK_EXECUTOR_MAX_POLLERS", str(self.sizing.max_pollers))
        ticker.add_environment("TICKWORK_EXECUTOR_BATCH_SIZE", str(self.sizing.batch_size))
        arns = [m.event_source_mapping_arn for m in mappings]
        allow(ticker, ("lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping"), arns)

    def _environment(self) -> dict[str, str]:
        """What `tickwork.settings.Settings.from_env` reads; validated by the functions at cold start."""
        c = self.config
        return {
            "TICKWORK_MODE": "aws",
            "TICKWORK_TABLE_PREFIX": c.prefix,
            "TICKWORK_SHARD_COUNT": str(c.shard_count),
            "TICKWORK_LOOKAHEAD_SECONDS": str(c.lookahead_seconds),
            "TICKWORK_AUDIT_SEGMENTS": str(c.audit_segments),
            "TICKWORK_AUDIT_GRACE_SECONDS": str(c.audit_grace_seconds),
            "TICKWORK_CONCURRENCY_CAP": str(c.concurrency_cap),
            "TICKWORK_DISPATCH_QUEUE_URLS": ",".join(self.dispatch.queue_urls),
            "TICKWORK_LONG_CALL_QUEUE_URL": self.dispatch.long_call_queue.queue_url,
            "TICKWORK_DLQ_URL": self.dispatch.dead_letter_queue.queue_url,
            "TICKWORK_SIGNING_SECRET_ARN": self.signing.secret.secret_arn,
            "TICKWORK_CALLBACK_KEY_ARN": self.signing.callback_key.secret_arn,
            "TICKWORK_DATA_KEY_ARN": self.data.key.key_arn,
            "TICKWORK_ALLOWED_NETWORKS": ",".join(c.allowed_networks),
            **({} if c.target_grants is None else {"TICKWORK_TARGET_GRANTS": c.target_grants}),
            **{
                name: str(value)
                for name, value in (
                    ("TICKWORK_OWNER_MAX_JOBS", c.owner_max_jobs),
                    ("TICKWORK_OWNER_MIN_INTERVAL_SECONDS", c.owner_min_interval_seconds),
                    ("TICKWORK_OWNER_MAX_BACKFILL_RATE", c.owner_max_backfill_rate),
                    ("TICKWORK_OWNER_CONCURRENCY_CAP", c.owner_concurrency_cap),
                )
                if value is not None
            },
            "TICKWORK_API_AUTH": "jwt" if c.jwt_issuer else "iam",
            "TICKWORK_TENANT_CLAIM": c.jwt_tenant_claim,
            "TICKWORK_OPERATORS": ",".join(c.operators),
            "TICKWORK_DASHBOARD_NAME": dashboard_name(c.prefix),
            "POWERTOOLS_SERVICE_NAME": c.prefix,
            "POWERTOOLS_METRICS_NAMESPACE": "Tickwork",
            "POWERTOOLS_LOG_LEVEL": "INFO",
        }
