"""Alarms can notify: the alarm topic's policy (which enforce_ssl replaces) lets CloudWatch publish, and the
topic's key lets CloudWatch use it, both only for this account's alarms."""

from __future__ import annotations

from tests.infra.conftest import Synth, as_list, policy_statements

CLOUDWATCH = {"Service": "cloudwatch.amazonaws.com"}
THIS_ACCOUNT = {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


def test_cloudwatch_may_publish_to_the_alarm_topic_for_this_account_only(default: Synth) -> None:
    statements = policy_statements(default.resources("AWS::SNS::TopicPolicy"), "PolicyDocument")
    allows = [s for s in statements if s["Effect"] == "Allow" and s.get("Principal") == CLOUDWATCH]
    assert len(allows) == 1, statements
    assert "sns:Publish" in as_list(allows[0]["Action"])
    assert allows[0]["Condition"] == THIS_ACCOUNT
    # The TLS-only deny stays.
    assert any(s["Effect"] == "Deny" and "aws:SecureTransport" in str(s.get("Condition")) for s in statements)


def test_the_topic_key_lets_cloudwatch_encrypt_for_this_account_only(default: Synth) -> None:
    statements = policy_statements(default.resources("AWS::KMS::Key"), "KeyPolicy")
    for_cloudwatch = [s for s in statements if s.get("Principal") == CLOUDWATCH]
    assert len(for_cloudwatch) == 1, for_cloudwatch
    assert set(as_list(for_cloudwatch[0]["Action"])) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert for_cloudwatch[0]["Condition"] == THIS_ACCOUNT
