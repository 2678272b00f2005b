"""The OpenAPI document: generated from the code, committed at docs/openapi.json, every error a problem+json.
(The API honouring it, request by request: tests/api/test_openapi_contract.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from tickwork.handlers import api

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_the_committed_openapi_document_matches_the_code() -> None:
    generated = json.loads(api.openapi_json())
    committed = json.loads(COMMITTED.read_text())
    assert committed == generated, (
        "docs/openapi.json is stale: run `python -m tickwork.handlers.api docs/openapi.json`"
    )


def test_the_document_describes_every_error_as_problem_json() -> None:
    document = json.loads(api.openapi_json())
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for code, response in operation["responses"].items():
                if code.startswith(("4", "5")) and path != "/health":
                    assert list(response["content"]) == ["application/problem+json"], (method, path, code)
