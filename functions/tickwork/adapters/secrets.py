"""Secrets Manager: the deployment's signing secret (with the previous one during a rotation's overlap), and
the secret header values of jobs."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.domain.errors import StoreError, TransientStoreError, ValidationError
from tickwork.domain.secrets import SECRET_HEADERS, SecretUnavailableError
from tickwork.signing import ROTATION_OVERLAP_SECONDS


def signing_secrets(client: Any, secret_arn: str, now: datetime) -> tuple[bytes, ...]:
    """The current secret, then the previous one if the current was made less than the overlap ago."""
    try:
        current = client.get_secret_value(SecretId=secret_arn)
        secrets = (str(current["SecretString"]).encode(),)
        made = current.get("CreatedDate")
        if made is None or (now - made).total_seconds() >= ROTATION_OVERLAP_SECONDS:
            return secrets
        try:
            previous = client.get_secret_value(SecretId=secret_arn, VersionStage="AWSPREVIOUS")
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return secrets  # never rotated: the first version has no predecessor
            raise
        return (*secrets, str(previous["SecretString"]).encode())
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", "ClientError"))
        raise StoreError(f"the signing secret {secret_arn} could not be read: {error}", code=code) from error
    except BotoCoreError as error:
        raise StoreError(
            f"the signing secret {secret_arn} could not be read: {error}", code="network"
        ) from error


_HEADER_CACHE_SIZE = 1024
HEADER_CACHE_SECONDS = 300.0  # how long a resolved header value is sent without reading it again


def header_secrets_prefix(deployment_prefix: str) -> str:
    """The names of a deployment's header secrets start with this (its IAM policies grant on it)."""
    return f"{deployment_prefix}/headers/"


class SecretsManagerHeaderSecrets:
    """Secret header values in Secrets Manager (domain/secrets.py): one secret per (owner, value), named
    `<prefix><keyed hash of both>`, holding the owner beside the value. The name is keyed (HMAC with a key of
    the deployment's), so it says nothing about the value to whoever reads the job; and equal values of one
    owner share one secret, which keeps 100,000 jobs with one token at one secret's cost.

    A resolved value is kept for HEADER_CACHE_SECONDS (at most `_HEADER_CACHE_SIZE` of them): a burst of an
    owner's runs reads its token once, not once a run, and a secret an operator deletes (a leaked token)
    stops being sent within that time. Names this process stored are not created again (an `apply` re-sends
    every target) for HEADER_CACHE_SECONDS either."""

    def __init__(
        self,
        client: Any,
        prefix: str,
        name_key: Callable[[], bytes],
        kms_key_id: str = "",
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._name_key = name_key
        self._kms_key_id = kms_key_id
        self._monotonic = monotonic
        self._resolved: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._stored: dict[str, float] = {}  # names this process stored, and when
        self._lock = threading.Lock()

    def reference(self, owner: str, value: str) -> str:
        return self._prefix + header_secret_digest(self._name_key(), owner, value)

    def put(self, owner: str, value: str) -> str:
        name = self.reference(owner, value)
        now = self._monotonic()
        with self._lock:
            if now - self._stored.get(name, -HEADER_CACHE_SECONDS) < HEADER_CACHE_SECONDS:
                return name
        try:
            self._client.create_secret(
                Name=name,
                Description="A secret header value of a Tickwork job",
                SecretString=owned_document(owner, value),
                **({"KmsKeyId": self._kms_key_id} if self._kms_key_id else {}),
            )
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", "ClientError"))
            if code == "InvalidRequestException":
                # Its secret is marked for deletion: an operator revoked this value (a leaked token).
                raise ValidationError(
                    f"target.config.{SECRET_HEADERS}",
                    "a secret header value was revoked (its secret is being deleted); use a new one",
                ) from error
            if code != "ResourceExistsException":  # (exists: this owner stored this value before)
                raise _store_error(code, error) from error
        except BotoCoreError as error:
            raise TransientStoreError(f"a secret header value could not be stored: {error}") from error
        with self._lock:
            self._stored[name] = now
        return name

    def get(self, owner: str, reference: str) -> str:
        if not reference.startswith(self._prefix):
            raise SecretUnavailableError(f"{reference!r} is not a header secret", retryable=False)
        now = self._monotonic()
        with self._lock:
            held = self._resolved.get(reference)
            if held is not None and now - held[0] < HEADER_CACHE_SECONDS:
                self._resolved.move_to_end(reference)
                return owned_value(held[1], owner, reference)
        text = self._read(reference)
        with self._lock:
            self._resolved[reference] = (now, text)
            self._resolved.move_to_end(reference)
            while len(self._resolved) > _HEADER_CACHE_SIZE:
                self._resolved.popitem(last=False)
        return owned_value(text, owner, reference)

    def _read(self, reference: str) -> str:
        try:
            return str(self._client.get_secret_value(SecretId=reference)["SecretString"])
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", "ClientError"))
            # Marked for deletion (revoked) will not come back on a retry. Not found may be a secret made a
            # moment ago that a read does not see yet: the run's retries give it time.
            gone = code == "InvalidRequestException"
            raise SecretUnavailableError(
                f"the secret header value {reference} could not be read: {code}", retryable=not gone
            ) from error
        except BotoCoreError as error:
            raise SecretUnavailableError(
                f"the secret header value {reference} could not be read: {error}", retryable=True
            ) from error


_TRANSIENT_CODES = frozenset(
    {"ThrottlingException", "TooManyRequestsException", "InternalServiceError", "ServiceUnavailable"}
)


def _store_error(code: str, error: ClientError) -> Exception:
    """Throttled or failing for a moment: a 503 the caller retries; else the deployment's fault."""
    if code in _TRANSIENT_CODES:
        return TransientStoreError(f"a secret header value could not be stored now: {code}")
    return StoreError(f"a secret header value could not be stored: {code}", code=code)


def header_secret_digest(key: bytes, owner: str, value: str) -> str:
    """The keyed name of one owner's value: equal for equal (owner, value), unguessable without the key."""
    message = b"tickwork-header-secret\0" + owner.encode() + b"\0" + value.encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:40]


def owned_document(owner: str, value: str) -> str:
    """What a header secret holds, in either store: the value beside its owner."""
    return json.dumps({"owner": owner, "value": value})


def owned_value(held: str, owner: str, reference: str) -> str:
    """The value of a stored `owned_document`, for its owner only."""
    try:
        document = json.loads(held)
    except json.JSONDecodeError:
        document = None
    if not isinstance(document, dict) or not isinstance(document.get("value"), str):
        raise SecretUnavailableError(f"{reference} does not hold a header value", retryable=False)
    if document.get("owner") != owner:
        raise SecretUnavailableError(f"{reference} belongs to another owner", retryable=False)
    return str(document["value"])
