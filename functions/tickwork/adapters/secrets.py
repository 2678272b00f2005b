"""The deployment's signing secret from Secrets Manager, with the previous one during a rotation's overlap."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.domain.errors import StoreError
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
