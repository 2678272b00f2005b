"""Tenants' data at rest: the customer-managed key of the tables and of the jobs' secret header values, and
who may read and write those values (issue 31)."""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import ArnFormat, Duration, Fn, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_

from constructs import Construct
from infra.constructs.functions import allow
from tickwork.adapters.secrets import header_secrets_prefix

# What administering the key takes (AWS's "key administrators" statement, without CreateGrant): no Encrypt,
# Decrypt or GenerateDataKey. The account keeps these, or a policy mistake could lock the key for good; so
# an administrator who may PutKeyPolicy can still give themselves more (docs/deploy.md says so).
_ADMIN_ACTIONS = [
    "kms:CreateAlias",
    "kms:Describe*",
    "kms:Enable*",
    "kms:List*",
    "kms:Put*",
    "kms:Update*",
    "kms:Revoke*",
    "kms:Disable*",
    "kms:Get*",
    "kms:Delete*",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
    "kms:RotateKeyOnDemand",
]
_USE_ACTIONS = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"]


def _deploying_role(stack: Stack) -> str:
    """The role CloudFormation deploys this stack with: the bootstrap's execution role (its exact ARN, not a
    name pattern anyone able to create a role could match)."""
    arn = getattr(stack.synthesizer, "cloud_formation_execution_role_arn", None)
    if not isinstance(arn, str):
        raise ValueError("the data key names CloudFormation's execution role: use the default synthesizer")
    return Fn.sub(arn)  # it holds ${AWS::AccountId}-style placeholders


class DataProtection(Construct):
    """One customer-managed key (rotated yearly) whose policy lets only the stack's functions use it, and only
    through DynamoDB and Secrets Manager: a reader of the tables, their backups or the secrets needs one of
    the functions' roles, not just table access."""

    def __init__(self, scope: Construct, construct_id: str, *, prefix: str, production: bool) -> None:
        super().__init__(scope, construct_id)
        self._prefix = prefix
        stack = Stack.of(self)
        self.key = kms.Key(
            self,
            "Key",
            alias=f"alias/{prefix}-data",
            description=f"Tickwork {prefix}: the tables and the jobs' secret header values",
            enable_key_rotation=True,
            # Deleting the key makes the tables' backups unreadable: production keeps it.
            removal_policy=RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY,
            pending_window=Duration.days(30 if production else 7),
            policy=iam.PolicyDocument(
                statements=[
                    iam.PolicyStatement(
                        sid="Administer",
                        principals=[iam.AccountRootPrincipal()],
                        actions=_ADMIN_ACTIONS,
                        resources=["*"],
                    ),
                    # CloudFormation creates and updates the tables with the key: DynamoDB needs the
                    # deploying role to use it (through DynamoDB only), and to make the table's grant.
                    iam.PolicyStatement(
                        sid="DeployTheTables",
                        principals=[iam.AccountRootPrincipal()],
                        actions=[*_USE_ACTIONS, "kms:CreateGrant"],
                        resources=["*"],
                        conditions={
                            "StringEquals": {
                                "kms:ViaService": f"dynamodb.{stack.region}.amazonaws.com",
                                "kms:CallerAccount": stack.account,
                            },
                            "ArnEquals": {"aws:PrincipalArn": _deploying_role(stack)},
                        },
                    ),
                    # DynamoDB itself describes the key it encrypts with.
                    iam.PolicyStatement(
                        sid="DynamoDbDescribes",
                        principals=[iam.ServicePrincipal("dynamodb.amazonaws.com")],
                        actions=["kms:Describe*", "kms:Get*", "kms:List*"],
                        resources=["*"],
                    ),
                ]
            ),
        )
        self._via = [f"dynamodb.{stack.region}.amazonaws.com", f"secretsmanager.{stack.region}.amazonaws.com"]
        self._header_secrets = stack.format_arn(
            service="secretsmanager",
            resource="secret",
            resource_name=f"{header_secrets_prefix(prefix)}*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )

    def allow_use(self, functions: Iterable[lambda_.Function]) -> None:
        """The key policy names each function's role: no other principal may decrypt with the key."""
        roles = [iam.ArnPrincipal(f.role.role_arn) for f in functions if f.role is not None]
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="UseThroughTheTablesAndSecrets",
                principals=roles,
                actions=_USE_ACTIONS,
                resources=["*"],
                conditions={"StringEquals": {"kms:ViaService": self._via}},
            )
        )
        # DynamoDB keeps a grant for each table's use of the key, made in the caller's name.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="GrantForTheTables",
                principals=roles,
                actions=["kms:CreateGrant"],
                resources=["*"],
                conditions={
                    "StringEquals": {"kms:ViaService": self._via},
                    "Bool": {"kms:GrantIsForAWSResource": "true"},
                },
            )
        )

    def allow_header_secrets(self, *, writer: lambda_.Function, reader: lambda_.Function) -> None:
        """The API stores jobs' secret header values (named `<prefix>/headers/...`); the executor reads them
        at call time. Nothing else may, and neither may touch another secret through these names."""
        allow(writer, ("secretsmanager:CreateSecret",), [self._header_secrets])
        allow(reader, ("secretsmanager:GetSecretValue",), [self._header_secrets])
