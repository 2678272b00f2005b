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

import re
from collections.abc import Callable, Mapping
from itertools import pairwise
from typing import Protocol
from urllib.parse import urlsplit

from tickwork.domain.errors import TickworkError, ValidationError
from tickwork.domain.models import Target

SECRET_HEADERS = "secret_headers"  # in a request: header name -> value, stored as references
SECRET_REFS = "secret_refs"  # on a stored job: header name -> the store's reference
# A header name reads like a credential when one of its parts (split at "-" and "_") is one of these words,
# or it ends in a key named for access: whole parts, so X-Routing-Key, X-Session-Id or X-Author stay plain.
_CREDENTIAL_PARTS = frozenset(
    {
        "authorization",
        "cookie",
        "token",
        "secret",
        "password",
        "passwd",
        "credential",
        "credentials",
        "apikey",
    }
)
_ACCESS_KEYS = frozenset(
    {"api", "access", "auth", "subscription", "functions", "secret", "private", "client"}
)
# What answers show instead of a secret value; sent back in an edit, it keeps the stored one.
REDACTED = "<redacted>"


def is_credential_header(name: str) -> bool:
    """A header whose name reads like a credential: its value is secret even when not marked so."""
    parts = re.split(r"[-_]", name.lower())
    if _CREDENTIAL_PARTS.intersection(parts):
        return True
    return any(part == "key" and before in _ACCESS_KEYS for before, part in pairwise(parts))


class SecretUnavailableError(TickworkError):
    """A reference that cannot be resolved: missing, another owner's, or the store failed (`retryable`)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class HeaderSecretStore(Protocol):
    def reference(self, owner: str, value: str) -> str:
        """The reference `value` is kept under for `owner`, stored or not: the same (owner, value) always
        gives the same reference (a retried write stores nothing twice, and many jobs sharing one token share
        one secret), and it says nothing about the value to whoever reads it."""
        ...

    def put(self, owner: str, value: str) -> str:
        """Keep `value` for `owner` under its reference; return the reference."""
        ...

    def get(self, owner: str, reference: str) -> str:
        """The value `reference` holds for `owner`; SecretUnavailableError otherwise."""
        ...


def has_secret_values(target: Target) -> bool:
    return bool(target.config.get(SECRET_HEADERS))


def sealed(target: Target, reference: Callable[[str, str], str]) -> Target:
    """The target with its secret header values replaced by references: `reference(name, value)` gives the
    one for a value (the store's name for it; for REDACTED, the one the job already keeps for that header).
    A target without secret values comes back as it is."""
    values: Mapping[str, str] = target.config.get(SECRET_HEADERS) or {}
    if not values:
        return target
    config = {key: value for key, value in target.config.items() if key != SECRET_HEADERS}
    refs = dict(config.get(SECRET_REFS) or {})
    refs.update({name: reference(name, value) for name, value in values.items()})
    config[SECRET_REFS] = refs
    return Target(target.kind, config)


def kept_reference(current: Target | None, name: str) -> str:
    """The reference `current` (the job as stored) keeps for header `name`, in any case: what a REDACTED value
    in an edit means ("keep it"). ValidationError when there is none to keep."""
    refs: Mapping[str, str] = (current.config.get(SECRET_REFS) or {}) if current is not None else {}
    found = [ref for kept, ref in refs.items() if kept.lower() == name.lower()]
    if not found:
        raise ValidationError(
            f"target.config.headers.{name}",  # (answers show every secret header among the headers)
            f"is {REDACTED!r}, which keeps a stored secret value, and the job keeps none: send the value",
        )
    return found[0]


def with_plain_values(target: Target, current: Target | None) -> Target:
    """`target` with each REDACTED secret value that `current` still stores in plain text (a job written
    before secret values were references) replaced by that value: an edit that keeps it seals it."""
    values: Mapping[str, str] = target.config.get(SECRET_HEADERS) or {}
    plain: Mapping[str, str] = (current.config.get("headers") or {}) if current is not None else {}
    # Only the names answers hide: a plain header is answered with its value, never as REDACTED.
    by_name = {n.lower(): v for n, v in plain.items() if v != REDACTED and is_credential_header(n)}
    if not any(v == REDACTED and n.lower() in by_name for n, v in values.items()):
        return target
    restored = {n: by_name.get(n.lower(), v) if v == REDACTED else v for n, v in values.items()}
    return Target(target.kind, {**target.config, SECRET_HEADERS: restored})


def check_kept_origin(target: Target, current: Target) -> None:
    """A kept secret value (REDACTED in an edit) goes only where it went: to another scheme, host or port,
    whoever sends the edit must know the values and send them, or a writer who does not could send them
    elsewhere."""
    if REDACTED not in (target.config.get(SECRET_HEADERS) or {}).values():
        return
    new, old = urlsplit(str(target.config.get("url"))), urlsplit(str(current.config.get("url", "")))
    if current.kind != "http" or (new.scheme, new.hostname, new.port) != (old.scheme, old.hostname, old.port):
        raise ValidationError(
            "target.config.url",
            f"moves kept secret headers ({REDACTED!r}) to another origin: send their values with it",
        )
