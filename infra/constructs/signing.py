"""The stack's keys: the HMAC secret that signs HTTP target calls (`X-Tickwork-Signature`, shared with
receivers), and the key of callback runs' URL tokens (never shared; the API verifies tokens with it, so the
API never holds the key that signs target calls)."""

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
        self.callback_key = secretsmanager.Secret(
            self,
            "CallbackKey",
            secret_name=f"{prefix}/callback-token-key",
            description="Tickwork: HMAC-SHA256 key of callback runs' completion and heartbeat URL tokens",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=48, exclude_punctuation=True
            ),
            removal_policy=RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY,
        )
