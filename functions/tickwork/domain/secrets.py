"""Secret header values are stored as references, never as values (issue 31).

An HTTP target's `secret_headers`, and every header in `headers` whose name reads like a credential
(Authorization, Cookie, X-Api-Key, ...), are secret. When a job is written, each secret value goes into the
deployment's secret store (Secrets Manager on AWS, an encrypted file locally) and the job keeps only the
reference the store hands back, under `secret_refs`. The run views, the indexes that project them, the logs
and the backups therefore hold references; the value exists only in the store and, for the length of one
call, in the executor that resolves it.

A reference is the store's, resolved for the job's owner only: a reference copied into another owner's job
resolves to nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from tickwork.domain.errors import TickworkError
from tickwork.domain.models import Target

SECRET_HEADERS = "secret_headers"  # in a request: header name -> value, stored as references
SECRET_REFS = "secret_refs"  # on a stored job: header name -> the store's reference
# Words that make a header name read like a credential ("key" covers X-Api-Key, X-Auth-Key,
# Ocp-Apim-Subscription-Key, X-Functions-Key; "auth" covers Authorization and Proxy-Authorization).
_CREDENTIAL_WORDS = (
    "auth",
    "cookie",
    "token",
    "secret",
    "password",
    "key",
    "signature",
    "credential",
    "session",
)
REDACTED = "<redacted>"  # what answers show instead of a secret value


def is_credential_header(name: str) -> bool:
    """A header whose name reads like a credential: its value is secret even when not marked so."""
    lowered = name.lower()
    return any(word in lowered for word in _CREDENTIAL_WORDS)


class SecretUnavailableError(TickworkError):
    """A reference that cannot be resolved: missing, another owner's, or the store failed (`retryable`)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class HeaderSecretStore(Protocol):
    def put(self, owner: str, value: str) -> str:
        """Keep `value` for `owner`; return its reference. The same (owner, value) gives the same reference
        (a retried write stores nothing twice, and many jobs sharing one token share one secret)."""
        ...

    def get(self, owner: str, reference: str) -> str:
        """The value `reference` holds for `owner`; SecretUnavailableError otherwise."""
        ...


def has_secret_values(target: Target) -> bool:
    return bool(target.config.get(SECRET_HEADERS))


def sealed(target: Target, put: Callable[[str], str]) -> Target:
    """The target with its secret header values replaced by references (`put` stores one value and returns
    its reference). A target without secret values comes back as it is."""
    values: Mapping[str, str] = target.config.get(SECRET_HEADERS) or {}
    if not values:
        return target
    config = {key: value for key, value in target.config.items() if key != SECRET_HEADERS}
    refs = dict(config.get(SECRET_REFS) or {})
    refs.update({name: put(value) for name, value in values.items()})
    config[SECRET_REFS] = refs
    return Target(target.kind, config)
