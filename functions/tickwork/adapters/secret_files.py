"""Secret header values in encrypted files, for `tickwork local` (Secrets Manager's part on AWS).

One file per (owner, value) under `<directory>/values/`, named by a keyed hash of both and holding the owner
beside the value, encrypted with Fernet (AES-128-CBC with HMAC-SHA256, from `cryptography`) under a key kept
in `<directory>/key` (mode 0600). The state directory's database then holds references only: a copy of it,
or of its backups, carries no secret value.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from tickwork.adapters.secrets import header_secret_digest, owned_document, owned_value
from tickwork.domain.errors import StoreError
from tickwork.domain.secrets import SecretUnavailableError

_REFERENCE = re.compile(r"^[0-9a-f]{40}$")


class FileHeaderSecrets:
    def __init__(self, directory: Path) -> None:
        self._values = directory / "values"
        self._values.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = _key(directory / "key")
        self._fernet = Fernet(key)
        # The names' key derives from the encryption key, for another purpose.
        self._name_key = hashlib.sha256(b"tickwork-header-secret-names\0" + key).digest()

    def reference(self, owner: str, value: str) -> str:
        return header_secret_digest(self._name_key, owner, value)

    def put(self, owner: str, value: str) -> str:
        reference = self.reference(owner, value)
        path = self._values / reference
        if path.exists():
            return reference  # this owner stored this value before
        token = self._fernet.encrypt(owned_document(owner, value).encode())
        try:
            _write_atomically(path, token)
        except OSError as error:
            raise StoreError(f"a secret header value could not be stored: {error}", code="io") from error
        return reference

    def get(self, owner: str, reference: str) -> str:
        if not _REFERENCE.match(reference):
            raise SecretUnavailableError(f"{reference!r} is not a header secret", retryable=False)
        try:
            token = (self._values / reference).read_bytes()
        except FileNotFoundError:
            raise SecretUnavailableError(
                f"the secret header value {reference} is gone", retryable=False
            ) from None
        except OSError as error:
            raise SecretUnavailableError(
                f"the secret header value {reference} could not be read: {error}", retryable=True
            ) from error
        try:
            held = self._fernet.decrypt(token).decode()
        except InvalidToken:
            raise SecretUnavailableError(
                f"the secret header value {reference} does not decrypt with this state's key", retryable=False
            ) from None
        return owned_value(held, owner, reference)


def _key(path: Path) -> bytes:
    """The state's key: made once (`tickwork local` makes it before it starts any role), read by every
    other process. Written whole to a temporary file and linked into place (link creates only if absent), so
    a crash while making it leaves no empty or partial key behind, and two makers agree on one key."""
    if not path.exists():
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".key-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(Fernet.generate_key())
                file.flush()
                os.fsync(file.fileno())
            os.chmod(temporary, 0o600)
            with contextlib.suppress(FileExistsError):  # another process made it first: theirs is the key
                os.link(temporary, path)
        finally:
            Path(temporary).unlink(missing_ok=True)
    return path.read_bytes().strip()


def _write_atomically(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
