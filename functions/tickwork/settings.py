"""Deployment settings from the environment, validated once at cold start (a bad value fails loudly)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from tickwork.domain.grants import TargetGrants
from tickwork.domain.planning import MIN_REREAD_SECONDS
from tickwork.domain.quotas import OwnerQuotas
from tickwork.resources import ResourceNames

ENGINES = ("dynamodb", "sqlite")
API_AUTH = ("iam", "jwt", "bearer")
# Under a `tickwork local` state dir: the running instance's API URL and a token, for the `tickwork` CLI.
LOCAL_API_FILE = "run/api.json"


class SettingsError(ValueError):
    """A setting is missing or malformed; the message names the environment variable."""


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as error:
        raise SettingsError(f"{name}={raw!r} is not an integer") from error
    if not low <= value <= high:
        raise SettingsError(f"{name}={value} is outside {low}..{high}")
    return value


def _rate(text: str) -> float | None:
    if not text:
        return None
    try:
        rate = float(text)
    except ValueError as error:
        raise SettingsError(f"TICKWORK_OWNER_MAX_BACKFILL_RATE={text!r} must be a number") from error
    if not 0 < rate <= 1_000:
        raise SettingsError(f"TICKWORK_OWNER_MAX_BACKFILL_RATE={text!r} must be in (0, 1000]")
    return rate


def _grants(text: str) -> TargetGrants | None:
    if not text:
        return None
    try:
        return TargetGrants.parse(text)
    except ValueError as error:
        raise SettingsError(f"TICKWORK_TARGET_GRANTS: {error}") from error


def _reread(env: Mapping[str, str]) -> int:
    name = "TICKWORK_REREAD_SECONDS"
    value = _int(env, name, 120, 0, 3600)
    if value < MIN_REREAD_SECONDS:
        raise SettingsError(
            f"{name}={value} is below {MIN_REREAD_SECONDS}: ticks re-read the due index this far behind "
            "their watermark because the index lags its table; less than a minute's bucket plus the lag "
            "allowance could leave a job written just before a tick unplanned forever"
        )
    return value


def _csv(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


@dataclass(frozen=True, slots=True)
class Settings:
    table_prefix: str = "tickwork"
    shard_count: int = 16
    lookahead_seconds: int = 120
    reread_seconds: int = 120
    # The reconciliation audit (domain/audit.py): how long a queue-carried run may sit unmoved past its
    # due time or lease before it counts as lost, and how many segments (minutes) a pass over the jobs takes.
    audit_grace_seconds: int = 600
    audit_segments: int = 10
    concurrency_cap: int = 10_000  # runs running at once, counted by the slots (domain/slots.py)
    owner_concurrency_cap: int | None = None  # and at most this many of any one owner (None: no limit)
    mode: str = "aws"  # "aws" or "local": local allows loopback targets (SSRF rule)
    dispatch_queue_urls: tuple[str, ...] = ()
    long_call_queue_url: str | None = None  # runs whose call may take minutes (domain/lanes.py); None: none
    # Starting warm (domain/prescale.py): the executor's batched-lane mappings and their poller bounds;
    # no ids, no pre-scaling (the local runtime, tests).
    executor_mapping_ids: tuple[str, ...] = ()
    executor_min_pollers: int = 2
    executor_max_pollers: int = 2
    executor_batch_size: int = 10
    dead_letter_queue_url: str = ""
    signing_secret: str = ""
    signing_secret_arn: str = ""  # AWS: the secret lives in Secrets Manager, read once at cold start
    # A rotation's overlap, locally: the previous secret, still signing (tickwork local sets it for a day).
    signing_secret_previous: str = ""
    # Who may call what (domain/grants.py): None, any AWS resource the executor's role may call (one tenant).
    target_grants: TargetGrants | None = None
    # The JWT claim that names the caller's tenant (the owner of what it makes): `sub`, one tenant a user.
    tenant_claim: str = "sub"
    # Owners with the operator scope: may list, pause and resume any owner's job (every use is recorded).
    operators: frozenset[str] = frozenset()
    # Per-owner quotas (domain/quotas.py): jobs, minimum interval, backfill rate; unset: no such limit.
    owner_quotas: OwnerQuotas = field(default_factory=OwnerQuotas)
    allowed_networks: tuple[str, ...] = ()  # CIDRs opened past the SSRF rule
    region: str = "us-east-1"
    lease_margin_seconds: int = 30  # beyond a job's timeout before a silent worker counts as dead
    # "dynamodb": DynamoDB and SQS (AWS, or an AWS-compatible endpoint); "sqlite": one SQLite database file
    # holds the tables and the queues (`tickwork local`'s default engine).
    engine: str = "dynamodb"
    database_path: str = ""
    # SQLite's PRAGMA synchronous for this process (see adapters/sqlite/db.py): FULL where a write is
    # acknowledged to a user (the API), NORMAL where the at-least-once design recovers a lost tail.
    sqlite_synchronous: str = "FULL"
    # How callers prove who they are: "iam" (SigV4, API Gateway's IAM authorizer), "jwt" (a JWT authorizer),
    # "bearer" (`tickwork local`'s tokens); "" means the mode's own (bearer locally, IAM in AWS). The web
    # console says what it can do with each.
    api_auth: str = ""
    dashboard_name: str = ""  # the CloudWatch dashboard the console links to (AWS)
    # The API's base URL, for the completion and heartbeat URLs of callback runs ("" : none are given, and
    # a callback job's 202 counts as a plain success).
    callback_url: str = ""
    # The key of callback URL tokens (AWS: a secret of its own, so the API that verifies tokens never holds
    # the key that signs target calls; locally and in tests, derived from the signing secret when unset).
    callback_key: str = ""
    callback_key_arn: str = ""
    # Where secret header values are kept (domain/secrets.py): a directory of encrypted files locally
    # (`tickwork local` sets it); otherwise, in AWS, Secrets Manager under `<prefix>/headers/`, encrypted
    # with this KMS key ("": the account's default key for Secrets Manager).
    secrets_dir: str = ""
    data_key_arn: str = ""
    # E-mail channels' topics, one per address: this ARN prefix and a hash of the address
    # (adapters/email.py); "" (tickwork local): no e-mail channel.
    email_topic_prefix: str = ""

    @property
    def caller_auth(self) -> str:
        return self.api_auth or ("bearer" if self.mode == "local" else "iam")

    @property
    def resource_names(self) -> ResourceNames:
        return ResourceNames(prefix=self.table_prefix)

    @property
    def lookahead(self) -> timedelta:
        return timedelta(seconds=self.lookahead_seconds)

    @property
    def reread(self) -> timedelta:
        return timedelta(seconds=self.reread_seconds)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        mode = env.get("TICKWORK_MODE", "aws")
        if mode not in ("aws", "local"):
            raise SettingsError(f"TICKWORK_MODE={mode!r} must be 'aws' or 'local'")
        engine = env.get("TICKWORK_ENGINE", "dynamodb")
        if engine not in ENGINES:
            raise SettingsError(f"TICKWORK_ENGINE={engine!r} must be one of {', '.join(ENGINES)}")
        database_path = env.get("TICKWORK_DATABASE", "")
        if engine == "sqlite" and not database_path:
            raise SettingsError("TICKWORK_DATABASE must name the database file when TICKWORK_ENGINE=sqlite")
        synchronous = env.get("TICKWORK_SQLITE_SYNCHRONOUS", "FULL")
        if synchronous not in ("FULL", "NORMAL"):
            raise SettingsError(f"TICKWORK_SQLITE_SYNCHRONOUS={synchronous!r} must be FULL or NORMAL")
        api_auth = env.get("TICKWORK_API_AUTH", "bearer" if mode == "local" else "iam")
        if api_auth not in API_AUTH:
            raise SettingsError(f"TICKWORK_API_AUTH={api_auth!r} must be one of {', '.join(API_AUTH)}")
        prefix = env.get("TICKWORK_TABLE_PREFIX", "tickwork")
        if not prefix or not prefix.replace("-", "").replace("_", "").isalnum():
            raise SettingsError(f"TICKWORK_TABLE_PREFIX={prefix!r} must be alphanumeric with - or _")
        return cls(
            table_prefix=prefix,
            shard_count=_int(env, "TICKWORK_SHARD_COUNT", 16, 1, 4096),
            # SQS delays at most 900 s; a transaction holds at most 100 items (the 10 s floor allows 99 fires
            # in 990 s): 600 s keeps both with room to spare.
            lookahead_seconds=_int(env, "TICKWORK_LOOKAHEAD_SECONDS", 120, 1, 600),
            reread_seconds=_reread(env),
            audit_grace_seconds=_int(env, "TICKWORK_AUDIT_GRACE_SECONDS", 600, 60, 86_400),
            audit_segments=_int(env, "TICKWORK_AUDIT_SEGMENTS", 10, 1, 1_000),
            concurrency_cap=_int(env, "TICKWORK_CONCURRENCY_CAP", 10_000, 1, 100_000),
            owner_concurrency_cap=(
                _int(env, "TICKWORK_OWNER_CONCURRENCY_CAP", 1, 1, 100_000)
                if env.get("TICKWORK_OWNER_CONCURRENCY_CAP")
                else None
            ),
            mode=mode,
            dispatch_queue_urls=_csv(env.get("TICKWORK_DISPATCH_QUEUE_URLS", "")),
            long_call_queue_url=env.get("TICKWORK_LONG_CALL_QUEUE_URL") or None,
            executor_mapping_ids=_csv(env.get("TICKWORK_EXECUTOR_MAPPING_IDS", "")),
            executor_min_pollers=_int(env, "TICKWORK_EXECUTOR_MIN_POLLERS", 2, 2, 200),
            executor_max_pollers=_int(env, "TICKWORK_EXECUTOR_MAX_POLLERS", 2, 2, 2000),
            executor_batch_size=_int(env, "TICKWORK_EXECUTOR_BATCH_SIZE", 10, 1, 10),
            dead_letter_queue_url=env.get("TICKWORK_DLQ_URL", ""),
            signing_secret=env.get("TICKWORK_SIGNING_SECRET", ""),
            signing_secret_arn=env.get("TICKWORK_SIGNING_SECRET_ARN", ""),
            signing_secret_previous=env.get("TICKWORK_SIGNING_SECRET_PREVIOUS", ""),
            target_grants=_grants(env.get("TICKWORK_TARGET_GRANTS", "")),
            tenant_claim=env.get("TICKWORK_TENANT_CLAIM", "sub") or "sub",
            operators=frozenset(o.strip() for o in env.get("TICKWORK_OPERATORS", "").split(",") if o.strip()),
            owner_quotas=OwnerQuotas(
                max_jobs=_int(env, "TICKWORK_OWNER_MAX_JOBS", 0, 1, 10_000_000)
                if env.get("TICKWORK_OWNER_MAX_JOBS")
                else None,
                min_interval_seconds=(
                    _int(env, "TICKWORK_OWNER_MIN_INTERVAL_SECONDS", 0, 10, 86_400)
                    if env.get("TICKWORK_OWNER_MIN_INTERVAL_SECONDS")
                    else None
                ),
                max_backfill_rate=_rate(env.get("TICKWORK_OWNER_MAX_BACKFILL_RATE", "")),
            ),
            allowed_networks=_csv(env.get("TICKWORK_ALLOWED_NETWORKS", "")),
            lease_margin_seconds=_int(env, "TICKWORK_LEASE_MARGIN_SECONDS", 30, 1, 600),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            engine=engine,
            database_path=database_path,
            sqlite_synchronous=synchronous,
            api_auth=api_auth,
            dashboard_name=env.get("TICKWORK_DASHBOARD_NAME", ""),
            callback_url=env.get("TICKWORK_CALLBACK_URL", "").rstrip("/"),
            callback_key=env.get("TICKWORK_CALLBACK_KEY", ""),
            callback_key_arn=env.get("TICKWORK_CALLBACK_KEY_ARN", ""),
            secrets_dir=env.get("TICKWORK_SECRETS_DIR", ""),
            data_key_arn=env.get("TICKWORK_DATA_KEY_ARN", ""),
            email_topic_prefix=env.get("TICKWORK_EMAIL_TOPIC_PREFIX", ""),
        )

    def require(self, *names: str) -> Settings:
        """Fail at cold start, naming the variable, when a component needs a setting that is empty."""
        env_names = {
            "dispatch_queue_urls": "TICKWORK_DISPATCH_QUEUE_URLS",
            "dead_letter_queue_url": "TICKWORK_DLQ_URL",
            "signing_secret": "TICKWORK_SIGNING_SECRET",
            "database_path": "TICKWORK_DATABASE",
        }
        for name in names:
            if not getattr(self, name):
                raise SettingsError(f"{env_names.get(name, name)} must be set")
        return self
