"""Who may call what (issue 31): the operator's registry of the AWS resources each owner's jobs may target."""

from __future__ import annotations

import pytest

from tickwork.domain.grants import GrantedTargets, TargetGrants, owner_name, resource_of
from tickwork.domain.models import Target
from tickwork.domain.targets import Invocation, TargetResult

ALICE = "arn:aws:iam::123456789012:role/alice"
BOB = "arn:aws:iam::123456789012:role/bob"
GRANTS = TargetGrants.parse('{"*": ["*:tickwork-target-{owner}-*"], "' + ALICE + '": ["sqs:shared-inbox"]}')


@pytest.mark.parametrize(
    ("target", "resource"),
    [
        (
            Target("lambda", {"function_name": "tickwork-target-alice-sync"}),
            "lambda:tickwork-target-alice-sync",
        ),
        (
            Target("lambda", {"function_name": "tickwork-target-alice-sync:live"}),
            "lambda:tickwork-target-alice-sync",
        ),
        (
            Target("lambda", {"function_name": "arn:aws:lambda:us-east-1:123456789012:function:fn-a:3"}),
            "lambda:fn-a",
        ),
        (Target("lambda", {"function_name": "123456789012:function:fn-b"}), "lambda:fn-b"),
        (Target("sqs", {"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q-a"}), "sqs:q-a"),
        (Target("sns", {"topic_arn": "arn:aws:sns:us-east-1:1:topic-a"}), "sns:topic-a"),
        (
            Target("eventbridge", {"event_bus_name": "arn:aws:events:us-east-1:1:event-bus/bus-a"}),
            "eventbridge:bus-a",
        ),
        (
            Target("stepfunctions", {"state_machine_arn": "arn:aws:states:us-east-1:1:stateMachine:sm-a"}),
            "stepfunctions:sm-a",
        ),
        (
            Target(
                "ecs", {"cluster": "c", "task_definition": "arn:aws:ecs:us-east-1:1:task-definition/td-a:4"}
            ),
            "ecs:td-a",
        ),
        (Target("http", {"url": "https://example.com"}), None),
    ],
)
def test_each_aws_target_is_named_by_its_kind_and_resource_name(target: Target, resource: str | None) -> None:
    assert resource_of(target) == resource


def test_an_owner_may_target_its_own_namespace_and_what_it_was_granted_and_nothing_else() -> None:
    own = Target("lambda", {"function_name": "tickwork-target-alice-sync"})
    bobs = Target("lambda", {"function_name": "tickwork-target-bob-sync"})
    shared = Target("sqs", {"queue_url": "https://sqs.us-east-1.amazonaws.com/1/shared-inbox"})

    assert GRANTS.allows(ALICE, own) and GRANTS.allows(ALICE, shared)
    assert not GRANTS.allows(ALICE, bobs)  # another tenant's function
    assert GRANTS.allows(BOB, bobs) and not GRANTS.allows(BOB, own) and not GRANTS.allows(BOB, shared)
    assert GRANTS.allows(BOB, Target("http", {"url": "https://example.com"}))  # signed per owner instead


def test_an_owner_name_with_pattern_characters_matches_only_itself() -> None:
    assert owner_name("arn:aws:iam::1:user/a*") == "a*"
    sneaky = "arn:aws:iam::1:user/a*"
    assert not GRANTS.allows(sneaky, Target("lambda", {"function_name": "tickwork-target-alice-sync"}))


@pytest.mark.parametrize("text", ["", "[]", '{"a": "lambda:x"}', '{"a": ["no-kind"]}', "{"])
def test_a_malformed_registry_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        TargetGrants.parse(text)


def test_the_executor_refuses_a_call_no_longer_granted_before_any_request() -> None:
    calls: list[Target] = []

    class Inner:
        def invoke(self, target: Target, invocation: Invocation) -> TargetResult:
            calls.append(target)
            return TargetResult(ok=True, retryable=False, status="200", latency_ms=1)

    invoker = GrantedTargets(Inner(), GRANTS)
    from datetime import UTC, datetime

    invocation = Invocation("j:1", "j", datetime(2026, 12, 5, tzinfo=UTC), 1, 5.0, owner=ALICE)
    refused = invoker.invoke(Target("lambda", {"function_name": "tickwork-target-bob-sync"}), invocation)

    assert (refused.ok, refused.retryable, refused.status) == (False, False, "TargetNotGranted")
    assert "is not granted to" in (refused.detail or "") and calls == []
    assert invoker.invoke(Target("lambda", {"function_name": "tickwork-target-alice-sync"}), invocation).ok
