"""cfn-lint on the synthesized templates (defaults and production): no errors, and no warnings but W3005.

W3005 ("dependency already enforced by a GetAtt") is CDK's own DependsOn from each function to its role's
default policy, which it adds so the policy exists before the function can be invoked; it is redundant to
CloudFormation, harmless, and not ours to remove.
"""

from __future__ import annotations

import json

import pytest

from tests.infra.conftest import Synth

cfnlint_api = pytest.importorskip("cfnlint.api", reason="cfn-lint is not installed (the dev extra has it)")

ACCEPTED = {"W3005"}


@pytest.mark.parametrize("variant", ["default", "production"])
def test_the_template_is_cfn_lint_clean(variant: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(variant)
    matches = cfnlint_api.lint(json.dumps(synth.template.to_json()), regions=["us-east-1", "eu-west-1"])
    findings = [f"{m.rule.id} {m.message} ({'/'.join(map(str, m.path))})" for m in matches]
    assert [f for f in findings if f.split()[0] not in ACCEPTED] == []
