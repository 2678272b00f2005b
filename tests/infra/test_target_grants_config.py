"""The registry of who may call what (issue 31) as deployment context: checked at synth, passed to the
functions that use it."""

from __future__ import annotations

import json

import pytest
from infra.config import ConfigError, DeploymentConfig

from tests.infra.conftest import Synth


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


def test_an_owner_share_of_the_bound_is_checked_against_the_bound() -> None:
    config = DeploymentConfig.from_context({"concurrency_cap": 100, "owner_concurrency_cap": 25}.get)
    assert config.owner_concurrency_cap == 25
    assert DeploymentConfig().owner_concurrency_cap is None  # one tenant: no share
    with pytest.raises(ConfigError, match="owner_concurrency_cap=101 is above concurrency_cap=100"):
        DeploymentConfig.from_context({"concurrency_cap": 100, "owner_concurrency_cap": 101}.get)


def test_the_owner_share_reaches_every_function_that_takes_a_slot(production: Synth) -> None:
    functions = production.resources("AWS::Lambda::Function").values()
    shares = {
        f["Properties"]["Environment"]["Variables"].get("TICKWORK_OWNER_CONCURRENCY_CAP")
        for f in functions
        if "TICKWORK_CONCURRENCY_CAP" in f["Properties"].get("Environment", {}).get("Variables", {})
    }
    assert shares == {"300"}
