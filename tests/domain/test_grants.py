"""Who may call what (issue 31): the operator's registry of the AWS resources each owner's jobs may target."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tickwork.domain.grants import GrantedTargets, TargetGrants, resources_of
from tickwork.domain.models import Target
from tickwork.domain.targets import Invocation, TargetResult

ALICE = "arn:aws:iam::123456789012:role/alice"
ALICE_PROD = "arn:aws:iam::123456789012:role/alice-prod"
OTHER_ALICE = "arn:aws:iam::999999999999:role/alice"  # the same name in another account
BOB = "arn:aws:iam::123456789012:role/bob"
GRANTS = TargetGrants(
    {
        "*": ["sqs:shared-inbox"],
        ALICE: ["*:tickwork-target-alice-*"],
        ALICE_PROD: ["*:tickwork-target-alice-prod-*"],
        BOB: ["*:tickwork-target-bob-*", "ecs-cluster:shared"],
    }
)
SFN = "arn:aws:states:us-east-1:1:stateMachine"


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
        (Target("stepfunctions", {"state_machine_arn": f"{SFN}:sm-a"}), "stepfunctions:sm-a"),
        # A qualifier (an alias or a version) is not the name: bob's machine stays bob's.
        (Target("stepfunctions", {"state_machine_arn": f"{SFN}:sm-b:alice-live"}), "stepfunctions:sm-b"),
        (Target("stepfunctions", {"state_machine_arn": f"{SFN}:sm-c:2"}), "stepfunctions:sm-c"),
    ],
)
def test_each_aws_target_is_named_by_its_kind_and_resource_name(target: Target, resource: str) -> None:
    assert resources_of(target) == (resource,)


def test_an_http_target_is_no_aws_resource_and_is_signed_per_owner_instead() -> None:
    web = Target("http", {"url": "https://example.com"})
    assert resources_of(web) == () and GRANTS.allows(BOB, web)


def test_an_owner_may_target_what_it_was_granted_and_nothing_else() -> None:
    own = Target("lambda", {"function_name": "tickwork-target-alice-sync"})
    bobs = Target("lambda", {"function_name": "tickwork-target-bob-sync"})
    shared = Target("sqs", {"queue_url": "https://sqs.us-east-1.amazonaws.com/1/shared-inbox"})

    assert GRANTS.allows(ALICE, own) and GRANTS.allows(ALICE, shared)
    assert not GRANTS.allows(ALICE, bobs)  # another tenant's function
    assert GRANTS.allows(BOB, bobs) and not GRANTS.allows(BOB, own) and GRANTS.allows(BOB, shared)


def test_owners_are_named_in_full_so_a_like_name_or_another_account_gets_nothing() -> None:
    assert GRANTS.allows(
        ALICE_PROD, Target("lambda", {"function_name": "tickwork-target-alice-prod-payroll"})
    )
    assert not GRANTS.allows(OTHER_ALICE, Target("lambda", {"function_name": "tickwork-target-alice-sync"}))


def test_an_ecs_task_needs_its_task_definition_and_its_cluster_granted() -> None:
    def task(cluster: str) -> Target:
        return Target("ecs", {"cluster": cluster, "task_definition": "tickwork-target-bob-export:3"})

    assert resources_of(task("shared")) == ("ecs:tickwork-target-bob-export", "ecs-cluster:shared")
    assert GRANTS.allows(BOB, task("shared"))
    assert not GRANTS.allows(BOB, task("tickwork-target-alice-cluster"))  # bob's task on alice's hosts
    assert not GRANTS.allows(ALICE, task("shared"))


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
    invocation = Invocation("j:1", "j", datetime(2026, 12, 5, tzinfo=UTC), 1, 5.0, owner=ALICE)
    refused = invoker.invoke(Target("lambda", {"function_name": "tickwork-target-bob-sync"}), invocation)

    assert (refused.ok, refused.retryable, refused.status) == (False, False, "TargetNotGranted")
    assert "is not granted to" in (refused.detail or "") and calls == []
    assert invoker.invoke(Target("lambda", {"function_name": "tickwork-target-alice-sync"}), invocation).ok
