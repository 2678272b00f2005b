"""IAM coverage: every AWS operation the API handler performs while its flows run (create, get, list with
an owned job, patch, pause, resume, run history, preview, delete) is granted by the API function's
synthesized role, on the table or index it touched. moto enforces no IAM, so without this test a missing
grant surfaces only as a 500 in AWS (it did: `GET /jobs` uses BatchGetItem)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.client import BaseClient

from tests.api.conftest import Api, job_body
from tests.api.conftest import call as call  # the fixture, re-exported for this module
from tests.infra.conftest import Synth
from tickwork.resources import TABLES, ResourceNames

Call = tuple[str, str]  # (IAM action, physical table or table/index)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[Call]]:
    calls: set[Call] = set()
    original = BaseClient._make_api_call

    def record(self: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        prefix = self.meta.service_model.signing_name
        if prefix == "dynamodb":
            tables: list[str] = []
            if "TableName" in params:
                index = params.get("IndexName")
                tables.append(params["TableName"] + (f"/index/{index}" if index else ""))
            tables += list(params.get("RequestItems", {}))
            for item in params.get("TransactItems", []):
                tables += [body["TableName"] for body in item.values()]
            for table in tables:
                calls.add((f"dynamodb:{operation}", table))
            if operation == "TransactWriteItems":
                # A transaction needs the action of each of its items on each item's table.
                for item in params["TransactItems"]:
                    for kind, body in item.items():
                        action = {"ConditionCheck": "ConditionCheckItem", "Put": "PutItem"}.get(
                            kind, f"{kind}Item"
                        )
                        calls.add((f"dynamodb:{action}", body["TableName"]))
                calls.discard(("dynamodb:TransactWriteItems", tables[0]))
        else:
            calls.add((f"{prefix}:{operation}", params.get("QueueUrl", "*")))
        return original(self, operation, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", record)
    yield calls


def _granted(synth: Synth, function_name: str) -> set[Call]:
    """(action, physical table or table/index) pairs the function's role allows."""
    functions = synth.resources("AWS::Lambda::Function")
    role = next(
        f["Properties"]["Role"]["Fn::GetAtt"][0]
        for f in functions.values()
        if f["Properties"]["FunctionName"] == function_name
    )
    names = ResourceNames(prefix=synth.stack.config.prefix)
    tables = {
        logical: names.table(t)
        for logical, resource in synth.resources("AWS::DynamoDB::Table").items()
        for t in TABLES
        if resource["Properties"]["TableName"] == names.table(t)
    }
    granted: set[Call] = set()
    for policy in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": role} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = (
                statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            )
            for resource in resources:
                target = _resolve(resource, tables)
                for action in actions:
                    granted.add((action, target))
    return granted


def _resolve(resource: Any, tables: dict[str, str]) -> str:
    if isinstance(resource, dict) and "Fn::GetAtt" in resource:
        return tables.get(resource["Fn::GetAtt"][0], "?")
    if isinstance(resource, dict) and "Fn::Join" in resource:
        parts = resource["Fn::Join"][1]
        head = _resolve(parts[0], tables)
        return head + "".join(p for p in parts[1:] if isinstance(p, str))
    return str(resource)


def test_the_api_role_grants_every_operation_the_api_performs(
    call: Api, recorded: set[Call], default: Synth
) -> None:
    created = call("POST", "/jobs", body=job_body())
    assert created.status == 201, created.body
    job_id = created.body["id"]
    version = created.headers["ETag"]
    assert call("GET", f"/jobs/{job_id}").status == 200
    listed = call("GET", "/jobs")
    assert listed.status == 200 and [j["id"] for j in listed.body["items"]] == [job_id]
    patched = call("PATCH", f"/jobs/{job_id}", body={"name": "renamed"}, headers={"If-Match": version})
    assert patched.status == 200, patched.body
    assert call("POST", f"/jobs/{job_id}/pause").status == 200
    assert call("POST", f"/jobs/{job_id}/resume").status == 200
    assert call("GET", f"/jobs/{job_id}/runs").status == 200
    assert call("GET", f"/jobs/{job_id}/preview").status == 200
    assert call("DELETE", f"/jobs/{job_id}").status == 204

    granted = _granted(default, f"{default.stack.config.prefix}-api")
    physical = {ResourceNames(prefix=call.parts.settings.table_prefix).table(t): t for t in TABLES}
    names = ResourceNames(prefix=default.stack.config.prefix)
    needed = set()
    for action, table in recorded:
        base, _, index = table.partition("/index/")
        definition = physical.get(base)
        assert definition is not None, f"{action} on an unknown table {table}"
        deployed = names.table(definition) + (f"/index/{index}" if index else "")
        needed.add((action, deployed))
    assert any(action == "dynamodb:BatchGetItem" for action, _ in needed), "list_jobs was not exercised"
    assert sorted(needed - granted) == []
