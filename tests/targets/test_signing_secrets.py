"""The deployment's signing secret from Secrets Manager (moto): the previous version signs too only while
the current one is less than a day old (issue 31: rotation with an overlap window)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from tickwork.adapters.secrets import signing_secrets
from tickwork.domain.errors import StoreError
from tickwork.signing import ROTATION_OVERLAP_SECONDS

MISSING = "arn:aws:secretsmanager:us-east-1:123456789012:secret:tickwork-missing"


def test_a_fresh_rotation_signs_with_both_and_an_old_one_with_the_current_only(aws_env: None) -> None:
    with mock_aws():
        client = boto3.client("secretsmanager", region_name="us-east-1")
        arn = client.create_secret(Name="tickwork-signing", SecretString="first")["ARN"]
        made = client.get_secret_value(SecretId=arn)["CreatedDate"]

        assert signing_secrets(client, arn, made + timedelta(minutes=1)) == (b"first",)  # never rotated

        client.put_secret_value(SecretId=arn, SecretString="second")
        rotated = client.get_secret_value(SecretId=arn)["CreatedDate"]
        assert signing_secrets(client, arn, rotated + timedelta(hours=1)) == (b"second", b"first")
        later = rotated + timedelta(seconds=ROTATION_OVERLAP_SECONDS)
        assert signing_secrets(client, arn, later) == (b"second",)


def test_a_secret_that_cannot_be_read_is_a_store_error_naming_it(aws_env: None) -> None:
    with mock_aws():
        client = boto3.client("secretsmanager", region_name="us-east-1")
        with pytest.raises(StoreError, match="tickwork-missing") as error:
            signing_secrets(client, MISSING, datetime(2026, 12, 5, tzinfo=UTC))
    assert error.value.code == "ResourceNotFoundException"


def test_a_warm_environment_follows_a_rotation_within_the_ttl(aws_env: None) -> None:
    from tickwork.adapters.metrics import InMemoryMetrics
    from tickwork.composition import SIGNING_SECRETS_TTL, Components
    from tickwork.domain.clock import FakeClock
    from tickwork.settings import Settings

    with mock_aws():
        client = boto3.client("secretsmanager", region_name="us-east-1")
        arn = client.create_secret(Name="tickwork-signing", SecretString="first")["ARN"]
        read_at = client.get_secret_value(SecretId=arn)["CreatedDate"] + timedelta(minutes=1)
        clock = FakeClock(read_at)
        parts = Components(Settings(signing_secret_arn=arn), clock, lambda _: client, InMemoryMetrics())
        assert parts.signing_secrets() == (b"first",)

        client.put_secret_value(SecretId=arn, SecretString="second")
        clock.set(read_at + SIGNING_SECRETS_TTL - timedelta(seconds=1))
        assert parts.signing_secrets() == (b"first",)  # read at most every TTL
        clock.set(read_at + SIGNING_SECRETS_TTL)
        assert parts.signing_secrets() == (b"second", b"first")  # the new one, and the old during the overlap
