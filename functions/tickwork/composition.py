"""The composition root: builds adapters from settings and hands them to services. Handlers and the
local runtime call this; services never see boto3."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from random import Random
from typing import Any

from tickwork.adapters.dynamodb.bulk import DynamoBulkActions
from tickwork.adapters.dynamodb.calendars import DynamoCalendars
from tickwork.adapters.dynamodb.events import DynamoAlertDefaults, DynamoEventLog, DynamoRevisions
from tickwork.adapters.dynamodb.slots import DynamoSlots
from tickwork.adapters.dynamodb.store import DynamoStore, TableNames
from tickwork.adapters.dynamodb.stream import DynamoStreamFeed
from tickwork.adapters.email import SnsEmail
from tickwork.adapters.lambda_mappings import LambdaPollerControl
from tickwork.adapters.secrets import SecretsManagerHeaderSecrets, header_secrets_prefix, signing_secrets
from tickwork.adapters.sqlite.bulk import SqliteBulkActions
from tickwork.adapters.sqlite.calendars import SqliteCalendars
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.events import (
    SqliteAlertDefaults,
    SqliteEventLog,
    SqliteRevisions,
    SqliteRunChangeFeed,
    SqliteWatchQuiet,
)
from tickwork.adapters.sqlite.queue import SqliteQueues, queue_configs
from tickwork.adapters.sqlite.slots import SqliteSlots
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.adapters.sqlite.units import SqliteWriteUnits
from tickwork.adapters.sqs import SqsDeadLetters, SqsDispatcher
from tickwork.adapters.targets.aws import AwsInvoker
from tickwork.adapters.targets.http import HttpInvoker
from tickwork.adapters.targets.registry import TargetRegistry
from tickwork.domain.callbacks import CallbackLinks, derived_callback_key
from tickwork.domain.clock import Clock
from tickwork.domain.grants import GrantedTargets
from tickwork.domain.models import JobState
from tickwork.domain.secrets import HeaderSecretStore
from tickwork.domain.slots import SlotLimits
from tickwork.resources import RUNS, SLOTS
from tickwork.services.auditing import AUDIT_THREADS, AuditConfig, Auditor
from tickwork.services.bulk import BulkService
from tickwork.services.callbacks import Callbacks
from tickwork.services.executing import Executor, ExecutorConfig
from tickwork.services.jobs import JobService, JobServiceConfig
from tickwork.services.planning import (
    DISPATCH_BATCH,
    PLAN_COMMIT_THREADS,
    PLAN_SHARD_THREADS,
    Planner,
    PlannerConfig,
)
from tickwork.services.ports import (
    AlertDefaults,
    BulkStore,
    CalendarStore,
    EmailChannel,
    EventLog,
    Metrics,
    RevisionReader,
    RunChangeFeed,
    SlotStore,
    WatchQuiet,
)
from tickwork.services.prescaling import PrescaleConfig, Prescaler
from tickwork.services.requests import RunRequests
from tickwork.services.retrying import retrying
from tickwork.services.revisions import RevisionService
from tickwork.services.sweeping import Sweeper
from tickwork.services.watching import (
    SEND_TIMEOUT_SECONDS,
    EventReader,
    EventRecorder,
    JobMetrics,
    Watcher,
    WithoutJob,
)
from tickwork.settings import Settings, SettingsError

ClientFor = Callable[[str], Any]
SIGNING_SECRETS_TTL = timedelta(minutes=5)  # how stale the signing secrets may be in a warm environment
# The store of either engine: both implement every storage port.
EngineStore = DynamoStore | SqliteStore


class Components:
    """Lazily built, shared per process (one Lambda environment, or one local worker process)."""

    def __init__(self, settings: Settings, clock: Clock, client_for: ClientFor, metrics: Metrics) -> None:
        self.settings = settings
        self.clock = clock
        self.client_for = client_for
        self.metrics = metrics
        self._secrets: tuple[bytes, ...] | None = None
        self._secrets_read_at = datetime.min.replace(tzinfo=UTC)
        self._secrets_lock = threading.Lock()
        # Told the process's SQLite write lock figures after each commit (Database's `on_commit`); set
        # before the database is first used. `tickwork local`'s roles publish them in their snapshots.
        self.on_write_commit: Callable[[int, float], None] | None = None

    @cached_property
    def database(self) -> Database:
        """The embedded engine's database file, opened (and migrated) once per process."""
        self.settings.require("database_path")
        path = Path(self.settings.database_path)
        synchronous = self.settings.sqlite_synchronous
        return Database(path, synchronous=synchronous, on_commit=self.on_write_commit).open()

    @cached_property
    def store(self) -> EngineStore:
        """The store, with every call retried on throttling (the one place store retries happen)."""
        if self.settings.engine == "sqlite":
            return retrying(SqliteStore(self.database), self.clock, Random())
        tables = TableNames.from_resources(self.settings.resource_names)
        return retrying(DynamoStore(self.client_for("dynamodb"), tables), self.clock, Random())

    @cached_property
    def queues(self) -> Any:
        """The queues as the SQS API reaches them: SQS itself, or the SQLite engine's queues, which speak
        the part of that API the dispatcher, the dead-letter reader and the local executor use."""
        if self.settings.engine != "sqlite":
            return self.client_for("sqs")
        self.settings.require("dispatch_queue_urls")
        _, _, configs = queue_configs(self.settings.resource_names, len(self.settings.dispatch_queue_urls))
        return SqliteQueues(self.database, configs, lambda: int(self.clock.now().timestamp() * 1000))

    def expire_runs(self) -> int | None:
        """Delete runs (and Idempotency-Key records) past their retention where the engine does not do it
        itself (DynamoDB's TTL does): how many runs went, or None when the engine expires them on its own."""
        if self.settings.engine != "sqlite":
            return None
        store = SqliteStore(self.database)
        now = self.clock.now()
        store.delete_expired_requests(now)
        SqliteEventLog(self.database).delete_expired(now)
        return store.delete_expired(now)

    @cached_property
    def dispatcher(self) -> SqsDispatcher:
        self.settings.require("dispatch_queue_urls")
        # The SQLite engine's queues have one writer: its sends stay in order.
        threads = 1 if self.settings.engine == "sqlite" else len(self.settings.dispatch_queue_urls)
        return SqsDispatcher(
            self.queues,
            self.settings.dispatch_queue_urls,
            self.settings.long_call_queue_url,
            send_threads=threads,
        )

    def signing_secrets(self) -> tuple[bytes, ...]:
        """The deployment's signing secret, then the previous one while a rotation's overlap lasts
        (signing.ROTATION_OVERLAP_SECONDS after the current one was made); every owner's key derives from
        them (signing.owner_key). Read again every SIGNING_SECRETS_TTL: a warm environment follows a
        rotation, and stops signing with the previous secret when its overlap ends."""
        settings = self.settings
        if settings.signing_secret:
            previous = settings.signing_secret_previous.encode()
            return (settings.signing_secret.encode(), *((previous,) if previous else ()))
        if not settings.signing_secret_arn:
            raise SettingsError("TICKWORK_SIGNING_SECRET or TICKWORK_SIGNING_SECRET_ARN must be set")
        now = self.clock.now()
        with self._secrets_lock:
            if self._secrets is None or now >= self._secrets_read_at + SIGNING_SECRETS_TTL:
                self._secrets = signing_secrets(
                    self.client_for("secretsmanager"), settings.signing_secret_arn, now
                )
                self._secrets_read_at = now
            return self._secrets

    @property
    def signing_secret(self) -> bytes:
        """The current secret (what the callback key derives from)."""
        return self.signing_secrets()[0]

    @cached_property
    def targets(self) -> TargetRegistry:
        http = HttpInvoker(
            self.signing_secret,
            lambda: self.clock.now().timestamp(),
            allow_loopback=self.settings.mode == "local",
            allowed_networks=self.settings.allowed_networks,
            secrets=self.signing_secrets,
            header_secrets=self.header_secrets,
        )
        return TargetRegistry(http=http, aws=AwsInvoker(self.client_for))

    def planner(self) -> Planner:
        settings = self.settings
        # A round fills one SQS batch per queue. DynamoDB: its transactions go out together. The SQLite
        # engine has one writer: a round's commits go in order, in one transaction.
        queues = max(1, len(settings.dispatch_queue_urls))
        parallel = settings.engine != "sqlite"
        config = PlannerConfig(
            lookahead=settings.lookahead,
            reread=settings.reread,
            round_messages=DISPATCH_BATCH * queues,
            commit_threads=PLAN_COMMIT_THREADS if parallel else 1,
            commit_together=not parallel,
            shard_threads=PLAN_SHARD_THREADS if parallel else 1,
        )
        return Planner(self.store, self.dispatcher, self.clock, config)

    @cached_property
    def prescaler(self) -> Prescaler | None:
        """Starting warm (None: no mappings to scale: the local runtime, the emulator profile)."""
        s = self.settings
        if not s.executor_mapping_ids:
            return None
        # A short, retried client: the ticker must not wait on it (the targets' invoke client waits 910 s).
        timed = getattr(self.client_for, "timed", None)
        client = timed("lambda", 5.0) if timed is not None else self.client_for("lambda")
        control = LambdaPollerControl(client, s.executor_mapping_ids, s.executor_max_pollers)
        config = PrescaleConfig(
            shard_count=s.shard_count,
            queues=len(s.executor_mapping_ids),
            batch_size=s.executor_batch_size,
            min_pollers=s.executor_min_pollers,
            max_pollers=s.executor_max_pollers,
        )
        return Prescaler(control, config)

    @cached_property
    def slots(self) -> SlotStore:
        """The concurrency slots (the bound counts runs), retried on throttling like the store."""
        if self.settings.engine == "sqlite":
            return retrying(SqliteSlots(self.database), self.clock, Random())
        table = self.settings.resource_names.table(SLOTS)
        return retrying(DynamoSlots(self.client_for("dynamodb"), table), self.clock, Random())

    @property
    def slot_limits(self) -> SlotLimits:
        return SlotLimits(self.settings.concurrency_cap, self.settings.owner_concurrency_cap)

    def executor(self, worker_id: str | None = None) -> Executor:
        worker = worker_id or f"{socket.gethostname()}-{Random().getrandbits(32):08x}"
        granted = self.settings.target_grants
        return Executor(
            self.store,
            self.targets if granted is None else GrantedTargets(self.targets, granted),
            self.dispatcher,
            self.clock,
            self.metrics,
            ExecutorConfig(
                worker_id=worker,
                lease_margin=timedelta(seconds=self.settings.lease_margin_seconds),
                callbacks=self.callback_links,
                limits=self.slot_limits,
            ),
            slots=self.slots,
            tracker=self.targets,
            calendars=self.calendars,
            # The store and the slots share this one database: their writes in a row make one commit.
            units=SqliteWriteUnits(self.database) if self.settings.engine == "sqlite" else None,
        )

    @cached_property
    def calendars(self) -> CalendarStore:
        """The owners' exclusion calendars (the events table), every call retried on throttling."""
        if self.settings.engine == "sqlite":
            return retrying(SqliteCalendars(self.database), self.clock, Random())
        tables = TableNames.from_resources(self.settings.resource_names)
        return retrying(DynamoCalendars(self.client_for("dynamodb"), tables), self.clock, Random())

    @cached_property
    def callback_links(self) -> CallbackLinks | None:
        """Where callback runs report (None when the deployment names no API URL)."""
        if not self.settings.callback_url:
            return None
        return CallbackLinks(self.settings.callback_url, self.callback_key)

    @cached_property
    def callback_key(self) -> bytes:
        """The key of callback URL tokens (see Settings.callback_key)."""
        if self.settings.callback_key:
            return self.settings.callback_key.encode()
        if self.settings.callback_key_arn:
            secret = self.client_for("secretsmanager").get_secret_value(
                SecretId=self.settings.callback_key_arn
            )
            return str(secret["SecretString"]).encode()
        return derived_callback_key(self.signing_secret)

    def callbacks(self) -> Callbacks:
        return Callbacks(
            self.store,
            self.dispatcher,
            self.clock,
            self.callback_key,
            lease_margin=timedelta(seconds=self.settings.lease_margin_seconds),
            slots=(self.slots, self.slot_limits),
        )

    def sweeper(self) -> Sweeper:
        self.settings.require("dead_letter_queue_url")
        dead_letters = SqsDeadLetters(self.queues, self.settings.dead_letter_queue_url)
        return Sweeper(
            self.store, self.dispatcher, dead_letters, self.clock, self.metrics, self.settings.shard_count
        )

    def auditor(self) -> Auditor:
        settings = self.settings
        config = AuditConfig(
            segments=settings.audit_segments,
            grace=timedelta(seconds=settings.audit_grace_seconds),
            reread=settings.reread,
            threads=1 if settings.engine == "sqlite" else AUDIT_THREADS,  # SQLite: one writer, as planning
            read_together=settings.engine == "sqlite",
        )
        return Auditor(self.store, self.sweeper(), self.dispatcher, self.clock, self.metrics, config)

    @cached_property
    def event_log(self) -> EventLog:
        """The events table, every call retried on throttling (as the store's)."""
        if self.settings.engine == "sqlite":
            return retrying(SqliteEventLog(self.database), self.clock, Random())
        names = self.settings.resource_names
        tables = TableNames.from_resources(names)
        log = DynamoEventLog(self.client_for("dynamodb"), tables)
        return retrying(log, self.clock, Random())

    def run_change_feed(self) -> RunChangeFeed:
        """The runs' changes for a watcher that reads them itself (`tickwork local`): the embedded engine's
        trigger outbox, or the emulator's stream (on AWS the stream's mapping hands them to the Lambda)."""
        if self.settings.engine == "sqlite":
            return SqliteRunChangeFeed(self.database)
        runs = self.settings.resource_names.table(RUNS)
        return DynamoStreamFeed(self.client_for("dynamodb"), self.client_for("dynamodbstreams"), runs)

    def watch_quiet(self) -> WatchQuiet | None:
        """What lets an idle `tickwork local` watcher skip its rounds: the embedded engine's. The
        emulator's watcher reads its stream every round."""
        if self.settings.engine == "sqlite":
            return SqliteWatchQuiet(self.database)
        return None

    @cached_property
    def bulk_actions(self) -> BulkStore:
        """Bulk actions' records (the events table), every call retried on throttling."""
        if self.settings.engine == "sqlite":
            return retrying(SqliteBulkActions(self.database), self.clock, Random())
        tables = TableNames.from_resources(self.settings.resource_names)
        return retrying(DynamoBulkActions(self.client_for("dynamodb"), tables), self.clock, Random())

    def bulk_service(self) -> BulkService:
        requests = RunRequests(self.store, self.dispatcher, self.clock, self.settings.owner_quotas)
        return BulkService(
            self.bulk_actions, self.job_service(), self.store, self.store, requests, self.clock
        )

    def watcher(self) -> Watcher:
        jobs = self.job_service()

        def pause(owner: str, job_id: str, reason: str, cause_at: datetime) -> bool:
            job = jobs.pause(owner, job_id, reason=reason, cause_at=cause_at)
            return job.state is JobState.PAUSED and job.paused_reason == reason

        per_job = self.metrics if isinstance(self.metrics, JobMetrics) else WithoutJob(self.metrics)
        # A channel is called as a target is: an owner whose grant to a topic was withdrawn is refused.
        granted = self.settings.target_grants
        targets = self.targets if granted is None else GrantedTargets(self.targets, granted)
        return Watcher(
            self.store, self.event_log, targets, pause, self.clock, self.metrics, per_job, email=self.email
        )

    @cached_property
    def email(self) -> EmailChannel | None:
        """E-mail channels, where the stack has them (None: `tickwork local`). Its calls end within a send's
        timeout (the watcher's claims and the API's 29 s assume it), as the targets' AWS calls do."""
        if not self.settings.email_topic_prefix:
            return None
        timed = getattr(self.client_for, "timed", None)
        sns = timed("sns", SEND_TIMEOUT_SECONDS) if timed is not None else self.client_for("sns")
        return SnsEmail(sns, self.settings.email_topic_prefix)

    def event_recorder(self) -> EventRecorder:
        """Recording events without sending them (the API's resumed event): no channel is called."""
        return EventRecorder(self.store, self.event_log, self.clock)

    def event_reader(self) -> EventReader:
        return EventReader(self.job_service(), self.event_log)

    @cached_property
    def revision_reader(self) -> RevisionReader:
        """Jobs' revisions and owners' audit logs (the events table), every call retried on throttling."""
        if self.settings.engine == "sqlite":
            return retrying(SqliteRevisions(self.database), self.clock, Random())
        tables = TableNames.from_resources(self.settings.resource_names)
        return retrying(DynamoRevisions(self.client_for("dynamodb"), tables), self.clock, Random())

    def revision_service(self) -> RevisionService:
        return RevisionService(self.job_service(), self.revision_reader)

    def job_service(self) -> JobService:
        config = JobServiceConfig(
            shard_count=self.settings.shard_count,
            lookahead=self.settings.lookahead,
            grants=self.settings.target_grants,
            quotas=self.settings.owner_quotas,
        )
        return JobService(
            self.store,
            self.dispatcher,
            self.clock,
            config,
            secrets=self.header_secrets,
            alert_defaults=self.alert_defaults,
            email=self.email,
            calendars=self.calendars,
        )

    @cached_property
    def alert_defaults(self) -> AlertDefaults:
        if self.settings.engine == "sqlite":
            return retrying(SqliteAlertDefaults(self.database), self.clock, Random())
        names = self.settings.resource_names
        tables = TableNames.from_resources(names)
        defaults = DynamoAlertDefaults(self.client_for("dynamodb"), tables)
        return retrying(defaults, self.clock, Random())

    @cached_property
    def header_secrets(self) -> HeaderSecretStore:
        """Where secret header values are kept: the local runtime's encrypted files, else Secrets Manager."""
        s = self.settings
        if s.secrets_dir:
            # Imported here: `cryptography` comes with the local runtime, not in the Lambda bundle.
            from tickwork.adapters.secret_files import FileHeaderSecrets

            return FileHeaderSecrets(Path(s.secrets_dir))
        # A short, retried client: resolving is part of a run's call, inside its lease (the cache makes it
        # rare); the targets' client waits up to 910 s.
        timed = getattr(self.client_for, "timed", None)
        return SecretsManagerHeaderSecrets(
            timed("secretsmanager", 5.0) if timed is not None else self.client_for("secretsmanager"),
            header_secrets_prefix(s.table_prefix),
            lambda: self.callback_key,
            kms_key_id=s.data_key_arn,
        )
