"""cdk-nag suppressions (AwsSolutions and Serverless packs): each one names what it covers and why it is
acceptable."""

from __future__ import annotations

from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo

from infra.stack import TickworkStack


def suppress(stack: TickworkStack) -> None:
    functions = list(stack.factory.functions.values())
    NagSuppressions.add_resource_suppressions(
        functions,
        [
            NagPackSuppression(
                id=rule,
                reason="Python 3.12 is the runtime Tickwork is built and tested for; the bundle's wheels are "
                "resolved for cp312, so the runtime moves only together with them.",
            )
            for rule in ("AwsSolutions-L1", "Serverless-LambdaLatestVersion")
        ],
    )
    scheduled = [stack.scheduler.ticker, stack.scheduler.sweeper]
    NagSuppressions.add_resource_suppressions(
        [*scheduled, *stack.scheduler.ticker_schedules, stack.scheduler.sweeper_schedule],
        [
            NagPackSuppression(
                id=rule,
                reason="The minutely ticker and sweeper events carry no work of their own: each invocation "
                "resumes from the stored watermark or the open-runs index, so a failed or undelivered event "
                "is redone by the next minute's. A dead letter would hold nothing to replay; failures show "
                "in the TickerErrors, SweeperErrors and TickerLag alarms.",
            )
            for rule in (
                "Serverless-LambdaDLQ",
                "Serverless-LambdaAsyncFailureDestination",
                "Serverless-EventBusDLQ",
            )
        ],
        apply_to_children=True,
    )
    watcher = stack.watcher
    NagSuppressions.add_resource_suppressions(
        [watcher.function, watcher.schedule],
        [
            NagPackSuppression(
                id=rule,
                reason="The watcher's asynchronous invocations are its minutely schedule's `{}`: they carry "
                "no work of their own (what is owed is in the events table's outbox index), so a failed or "
                "undelivered one is redone by the next minute's. Its stream invocations are synchronous and "
                "have their own on-failure queue; failures show in WatcherErrors and WatcherFailedBatches.",
            )
            for rule in (
                "Serverless-LambdaDLQ",
                "Serverless-LambdaAsyncFailureDestination",
                "Serverless-EventBusDLQ",
            )
        ],
        apply_to_children=True,
    )
    NagSuppressions.add_resource_suppressions(
        watcher.failures,
        [
            NagPackSuppression(
                id=rule,
                reason="This is a dead-letter destination itself: the watcher's stream mapping describes "
                "here the batches it gave up on (kept 14 days, WatcherFailedBatches alarms on any).",
            )
            for rule in ("AwsSolutions-SQS3", "Serverless-SQSRedrivePolicy")
        ],
    )
    NagSuppressions.add_resource_suppressions(
        stack.api.console_routes,
        [
            NagPackSuppression(
                id="AwsSolutions-APIG4",
                reason="GET /ui and GET /ui/{file} serve the web console's packaged page, script and style "
                "(an allow-list of three files plus the auth mode): no tenant data. The page then calls "
                "every other route with the caller's token, through the API's authorizer.",
            )
        ],
        apply_to_children=True,
    )
    NagSuppressions.add_resource_suppressions(
        stack.api.callback_routes,
        [
            NagPackSuppression(
                id="AwsSolutions-APIG4",
                reason="POST /callbacks/{token}/complete and /heartbeat are called by a callback run's own "
                "target with the URL its call carried: the token (an HMAC over run, attempt and deadline "
                "with the stack's callback key) is the credential, checked by the handler; it reaches one "
                "attempt of one run and nothing else, and the routes have their own throttle.",
            )
        ],
        apply_to_children=True,
    )
    NagSuppressions.add_resource_suppressions(
        stack.signing.callback_key,
        [
            NagPackSuppression(
                id="AwsSolutions-SMG4",
                reason="Rotating the callback key would refuse the tokens of every callback run in flight "
                "(up to 24 h): it is rotated by hand when none is running (docs/deploy.md).",
            )
        ],
    )
    NagSuppressions.add_resource_suppressions(
        [stack.executor.function, stack.api.function],
        [
            NagPackSuppression(
                id="Serverless-LambdaDLQ",
                reason="Invoked synchronously only (the executor by its SQS event source mappings, the "
                "API by API Gateway): a function dead-letter queue applies to asynchronous invocations "
                "alone. The dispatch queues' redrive policy is the executor's dead-letter path.",
            )
        ],
    )
    NagSuppressions.add_resource_suppressions(
        stack.executor.function,
        [
            NagPackSuppression(
                id="Serverless-LambdaEventSourceMappingDestination",
                reason="An on-failure destination is for stream and Kafka sources; an SQS source "
                "dead-letters through the queue's redrive policy (maxReceiveCount 5 to the dispatch DLQ, "
                "which the sweeper reconciles and DlqNotEmpty alarms on).",
            )
        ],
        apply_to_children=True,
    )
    NagSuppressions.add_resource_suppressions(
        stack.dispatch.dead_letter_queue,
        [
            NagPackSuppression(
                id="Serverless-SQSRedrivePolicy",
                reason="This is the dead-letter queue itself; its messages are reconciled by the sweeper and "
                "kept for 14 days.",
            )
        ],
    )
    NagSuppressions.add_resource_suppressions(
        stack.signing.secret,
        [
            NagPackSuppression(
                id="AwsSolutions-SMG4",
                reason="Every owner's signing key derives from this secret, and receivers hold their key: "
                "a rotation must be announced (a day's overlap signs with both, docs/deploy.md), so it is "
                "a manual runbook step, not an automatic schedule.",
            )
        ],
    )
    NagSuppressions.add_resource_suppressions(
        stack.scheduler.invoke_role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="The schedules' role may invoke the ticker, the sweeper and the watcher only; CDK's "
                "Scheduler target adds `:*` for their versions and aliases. Only this deployment's schedule "
                "group may assume it.",
                applies_to=[
                    RegexAppliesTo(
                        regex=r"/^Resource::<(Scheduler(Ticker|Sweeper)|Watcher)Function[0-9A-F]+\.Arn>:\*$/g"
                    )
                ],
            )
        ],
        apply_to_children=True,
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
                "and region (one action per resource type). Lambda targets include `:*` for versions and "
                "aliases; a state machine's executions (`execution:<machine>:*`) are described to follow "
                "tracked runs; ECS tasks are described by task ARN (`task/<cluster>/*`); iam:PassRole is "
                "limited to roles passed to ecs-tasks.amazonaws.com.",
                applies_to=[
                    RegexAppliesTo(
                        regex=r"/^Resource::arn:(<AWS::Partition>|aws[a-z-]*):(lambda|sqs|sns|events|states|ecs|iam):.*\*$/g"
                    )
                ],
            )
        ],
        apply_to_children=True,
    )
    watcher_role = watcher.function.role
    assert watcher_role is not None
    NagSuppressions.add_resource_suppressions(
        watcher_role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="SNS channels of jobs' alert rules are user data, as SNS targets are: the watcher may "
                "publish only to the topics the executor may (context `target_arns` or, by default, topics "
                "named `<prefix>-target-*` in this account and region), sns:Publish only; and to e-mail "
                "channels' topics, one per address, named `<prefix>-mail-<hash>` (adapters/email.py).",
                applies_to=[
                    RegexAppliesTo(regex=r"/^Resource::arn:(<AWS::Partition>|aws[a-z-]*):sns:.*\*$/g")
                ],
            )
        ],
        apply_to_children=True,
    )
    for function in (stack.api.function, stack.executor.function):
        assert function.role is not None
        NagSuppressions.add_resource_suppressions(
            function.role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="Jobs' secret header values are one secret per (owner, value), named "
                    "`<prefix>/headers/<keyed hash>` when a job is written: the API may only create them "
                    "and the executor only read them, under that prefix and no other "
                    "(constructs/data_protection.py).",
                    applies_to=[
                        RegexAppliesTo(
                            # (the region and account are tokens, or literal in an environment-bound stack)
                            regex=r"/^Resource::arn:<AWS::Partition>:secretsmanager:(<AWS::Region>|[a-z0-9-]+):"
                            r"(<AWS::AccountId>|[0-9]{12}):secret:[a-z0-9-]+\/headers\/\*$/g"
                        )
                    ],
                )
            ],
            apply_to_children=True,
        )
    assert stack.api.function.role is not None
    NagSuppressions.add_resource_suppressions(
        stack.api.function.role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="E-mail channels have a topic per address, named `<prefix>-mail-<hash>`, created by "
                "the API when an owner first names the address (tagged with that owner, read back to "
                "refuse another owner) and subscribed to it (adapters/email.py): those four actions, on "
                "topics of that prefix in this account and region only.",
                applies_to=[
                    RegexAppliesTo(
                        regex=r"/^Resource::arn:<AWS::Partition>:sns:(<AWS::Region>|[a-z0-9-]+):"
                        r"(<AWS::AccountId>|[0-9]{12}):[a-z0-9-]+-mail-\*$/g"
                    )
                ],
            )
        ],
        apply_to_children=True,
    )
    NagSuppressions.add_resource_suppressions(
        stack.observability.topic,
        [
            NagPackSuppression(
                id="Serverless-SNSRedrivePolicy",
                reason="The only subscription is the operator's alarm e-mail: SNS retries it, and an alarm "
                "whose mail is lost stays in ALARM in CloudWatch and on the dashboard. A queue nobody reads "
                "would hide nothing more.",
            )
        ],
        apply_to_children=True,
    )
