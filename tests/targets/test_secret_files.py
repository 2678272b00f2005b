"""`tickwork local`'s secret header values: encrypted files in its state directory."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tickwork.adapters.secret_files import FileHeaderSecrets
from tickwork.domain.secrets import SecretUnavailableError

VALUE = "Bearer local-secret-91b0"


def test_a_value_is_kept_encrypted_and_resolved_for_its_owner_only(tmp_path: Path) -> None:
    secrets = FileHeaderSecrets(tmp_path)
    reference = secrets.put("alice", VALUE)

    assert secrets.put("alice", VALUE) == reference  # one file per (owner, value)
    assert secrets.put("bob", VALUE) != reference
    assert FileHeaderSecrets(tmp_path).get("alice", reference) == VALUE  # another process, the same key
    on_disk = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert VALUE.encode() not in on_disk and b"local-secret" not in on_disk
    assert stat.S_IMODE((tmp_path / "key").stat().st_mode) == 0o600
    with pytest.raises(SecretUnavailableError, match="another owner"):
        secrets.get("bob", reference)


def test_a_reference_that_is_not_one_or_is_gone_or_under_another_key_resolves_to_nothing(
    tmp_path: Path,
) -> None:
    secrets = FileHeaderSecrets(tmp_path / "a")
    reference = secrets.put("alice", VALUE)
    with pytest.raises(SecretUnavailableError, match="not a header secret"):
        secrets.get("alice", "../key")
    with pytest.raises(SecretUnavailableError, match="gone"):
        secrets.get("alice", "0" * 40)
    other = FileHeaderSecrets(tmp_path / "b")
    (tmp_path / "b" / "values" / reference).write_bytes((tmp_path / "a" / "values" / reference).read_bytes())
    with pytest.raises(SecretUnavailableError, match="does not decrypt") as refused:
        other.get("alice", reference)
    assert refused.value.retryable is False
