"""Tickwork's AWS deployment (CDK): `cdk synth` / `cdk deploy` from the repository root."""
