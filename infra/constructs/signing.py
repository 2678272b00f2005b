"""The HMAC secret that signs HTTP target calls (`X-Tickwork-Signature`), created by the stack."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_secretsmanager as secretsmanager

from constructs import Construct


class SigningSecret(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, prefix: str, production: bool) -> None:
        super().__init__(scope, construct_id)
        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            secret_name=f"{prefix}/signing-secret",
            description="Tickwork: HMAC-SHA256 key for X-Tickwork-Signature; share it with HTTP receivers",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=48, exclude_punctuation=True
            ),
            removal_policy=RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY,
        )
