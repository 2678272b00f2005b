"""cdk-nag AwsSolutions suppressions: each one names what it covers and why it is acceptable."""

from __future__ import annotations

from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo

from infra.stack import TickworkStack


def suppress(stack: TickworkStack) -> None:
    functions = list(stack.factory.functions.values())
    NagSuppressions.add_resource_suppressions(
        functions,
        [
            NagPackSuppression(
                id="AwsSolutions-L1",
                reason="Python 3.12 is the runtime Tickwork is built and tested for; the bundle's wheels are "
                "resolved for cp312, so the runtime moves only together with them.",
            )
        ],
    )
    NagSuppressions.add_resource_suppressions(
        stack.signing.secret,
        [
            NagPackSuppression(
                id="AwsSolutions-SMG4",
                reason="The HMAC signing key is shared with every HTTP receiver, which must accept the new "
                "key first; automatic rotation would break verification. Rotation is a manual runbook step "
                "(docs/deploy.md).",
            )
        ],
    )
    executor_role = stack.executor.function.role
    assert executor_role is not None  # the factory always gives a role
    NagSuppressions.add_resource_suppressions(
        executor_role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="Job targets are user data: the executor may call only the target ARNs configured via "
                "context `target_arns` or, by default, resources named `<prefix>-target-*` in this account "
                "and region (one action per service). Lambda targets include `:*` for versions and aliases.",
                applies_to=[
                    RegexAppliesTo(
                        regex=r"/^Resource::arn:(<AWS::Partition>|aws[a-z-]*):(lambda|sqs|sns|events|states):.*\*$/g"
                    )
                ],
            )
        ],
        apply_to_children=True,
    )
    if not stack.config.production:
        NagSuppressions.add_resource_suppressions(
            list(stack.storage.tables.values()),
            [
                NagPackSuppression(
                    id="AwsSolutions-DDB3",
                    reason="Non-production stacks are disposable; `production=true` enables point-in-time "
                    "recovery, deletion protection and RETAIN.",
                )
            ],
        )
