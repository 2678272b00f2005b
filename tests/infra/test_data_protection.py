"""Tenants' data at rest (issue 31): the tables and the secret header values under the deployment's own key,
which only the functions may use; the secret header values written by the API only and read by the executor
only."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.conftest import Synth, as_list


def _key(synth: Synth) -> tuple[str, dict[str, Any]]:
    keys = synth.resources("AWS::KMS::Key")
    data = {k: v for k, v in keys.items() if "secret header values" in v["Properties"]["Description"]}
    assert len(data) == 1
    return next(iter(data.items()))


def _function_roles(synth: Synth) -> set[str]:
    return {
        f["Properties"]["Role"]["Fn::GetAtt"][0] for f in synth.resources("AWS::Lambda::Function").values()
    }


def test_every_table_is_encrypted_with_the_deployments_rotated_key(production: Synth) -> None:
    key_id, key = _key(production)
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Retain"  # the backups need it
    for table in production.resources("AWS::DynamoDB::Table").values():
        sse = table["Properties"]["SSESpecification"]
        assert sse == {
            "SSEEnabled": True,
            "SSEType": "KMS",
            "KMSMasterKeyId": {"Fn::GetAtt": [key_id, "Arn"]},
        }


def test_only_the_functions_roles_may_use_the_key_and_only_through_the_tables_and_secrets(
    default: Synth,
) -> None:
    _, key = _key(default)
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    users: set[str] = set()
    for statement in statements:
        actions = set(as_list(statement["Action"]))
        can_decrypt = {"kms:Decrypt", "kms:*", "kms:GenerateDataKey*"} & actions
        if statement["Sid"] == "Administer":
            assert not can_decrypt and not any(
                a.startswith(("kms:Encrypt", "kms:ReEncrypt")) for a in actions
            )
            assert not {"kms:Create*", "kms:CreateGrant", "kms:*"} & actions  # no grant to oneself
            continue
        if statement["Sid"] == "DeployTheTables":  # CloudFormation's role, through DynamoDB only
            principal = json.dumps(statement["Condition"]["ArnEquals"]["aws:PrincipalArn"])
            assert ":role/cdk-hnb659fds-cfn-exec-role-${AWS::AccountId}-${AWS::Region}" in principal
            via = json.dumps(statement["Condition"]["StringEquals"]["kms:ViaService"])
            assert "dynamodb." in via and "secretsmanager" not in via
            continue
        if statement["Sid"] == "DynamoDbDescribes":
            assert statement["Principal"] == {"Service": "dynamodb.amazonaws.com"} and not can_decrypt
            continue
        assert statement["Sid"] in ("UseThroughTheTablesAndSecrets", "GrantForTheTables")
        via = statement["Condition"]["StringEquals"]["kms:ViaService"]
        assert {v["Fn::Join"][1][0].split(".")[0] for v in via} == {"dynamodb", "secretsmanager"}
        users |= {p["Fn::GetAtt"][0] for p in as_list(statement["Principal"]["AWS"])}
    assert users == _function_roles(default)


def _secret_actions(synth: Synth) -> dict[str, set[str]]:
    """Per role: the Secrets Manager actions it has on the header secrets' names."""
    found: dict[str, set[str]] = {}
    for policy in synth.resources("AWS::IAM::Policy").values():
        roles = [r["Ref"] for r in policy["Properties"]["Roles"]]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            names = [str(r) for r in as_list(statement["Resource"])]
            if any("/headers/*" in n for n in names):
                for role in roles:
                    found.setdefault(role, set()).update(as_list(statement["Action"]))
    return found


def test_the_api_writes_secret_header_values_and_the_executor_reads_them_and_nobody_else(
    default: Synth,
) -> None:
    functions = default.resources("AWS::Lambda::Function")
    role_of = {
        f["Properties"]["FunctionName"]: f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions.values()
    }
    api, executor = role_of["tickwork-api"], role_of["tickwork-executor"]
    assert _secret_actions(default) == {
        api: {"secretsmanager:CreateSecret"},
        executor: {"secretsmanager:GetSecretValue"},
    }
    env = next(iter(functions.values()))["Properties"]["Environment"]["Variables"]
    assert env["TICKWORK_DATA_KEY_ARN"]["Fn::GetAtt"][1] == "Arn"  # secrets are stored under the same key
