"""The registry of who may call what (issue 31) as deployment context: checked at synth, passed to the
functions that use it."""

from __future__ import annotations

import json

import pytest
from infra.config import ConfigError, DeploymentConfig


def test_the_context_is_checked_and_kept_as_json() -> None:
    grants = {"*": ["sqs:shared-inbox"], "arn:aws:iam::1:role/ops": ["lambda:tickwork-target-ops-*"]}
    config = DeploymentConfig.from_context({"target_grants": json.dumps(grants)}.get)
    assert config.target_grants is not None and json.loads(config.target_grants) == grants
    # cdk.json may hold it as an object
    assert DeploymentConfig.from_context({"target_grants": grants}.get).target_grants == json.dumps(grants)
    assert DeploymentConfig().target_grants is None  # one tenant: any target the role may call


@pytest.mark.parametrize("raw", ["{", '{"a": "lambda:x"}', '{"a": ["no kind"]}'])
def test_a_malformed_registry_fails_the_synth_and_says_why(raw: str) -> None:
    with pytest.raises(ConfigError, match="target_grants"):
        DeploymentConfig.from_context({"target_grants": raw}.get)
