"""Lambda code without Docker: `pip install --target` for the Lambda platform, then the `tickwork` sources.

The bundle carries every runtime dependency from pyproject's `[project].dependencies`, each pinned to the
version installed where synth runs (the versions the test suite ran against). boto3 is bundled although the
runtime provides one: the runtime's copy changes under a deployed function whenever AWS updates it, and the
code relies on recent botocore retry settings. Reproducible behaviour is worth the extra megabytes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, cast

import jsii
from aws_cdk import BundlingOptions, ILocalBundling
from aws_cdk import aws_lambda as lambda_

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = REPO_ROOT / "functions"
PACKAGE = "tickwork"
PLATFORM = "manylinux2014_aarch64"
PYTHON_VERSION = "3.12"
# MiniStack runs every handler in a subprocess of its own interpreter, whatever the function's runtime and
# architecture say (`make install` builds it in .venv-ministack).
EMULATOR_PYTHON = REPO_ROOT / ".venv-ministack" / "bin" / "python"


@dataclass(frozen=True, slots=True)
class BundleTarget:
    """The interpreter the bundled wheels must import under: a pip platform tag and a Python version."""

    platform: str
    python_version: str
    docker_platform: str


LAMBDA_TARGET = BundleTarget(PLATFORM, PYTHON_VERSION, "linux/arm64")


def emulator_target(python: Path = EMULATOR_PYTHON) -> BundleTarget:
    """The target of the emulator profile: the emulator interpreter's own version and machine."""
    if not python.exists():
        raise FileNotFoundError(
            f"the emulator profile bundles for {python}, which does not exist: run `make install`"
        )
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import platform, sys; print(platform.machine(), '%d.%d' % sys.version_info[:2])",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    machine, version = probe.stdout.split()
    docker = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}.get(machine)
    if docker is None:
        raise ValueError(f"the emulator interpreter runs on {machine}: no manylinux wheels for it")
    return BundleTarget(f"manylinux2014_{machine}", version, docker)


_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?")


def requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """The project's runtime dependencies, pinned to the installed versions when they are installed."""
    with pyproject.open("rb") as handle:
        declared: list[str] = tomllib.load(handle)["project"]["dependencies"]
    pinned = []
    for requirement in declared:
        match = _NAME.match(requirement)
        if match is None:
            raise ValueError(f"cannot read the requirement {requirement!r}")
        name, extras = match.group(1), match.group(2) or ""
        try:
            pinned.append(f"{name}{extras}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pinned.append(requirement)
    return pinned


@jsii.implements(ILocalBundling)
class PipLocalBundler:
    """Runs pip from the synthesising interpreter, asking for wheels built for the Lambda platform only."""

    def __init__(
        self,
        source_dir: Path,
        requirements: Sequence[str],
        *,
        platform: str = PLATFORM,
        python_version: str = PYTHON_VERSION,
        python: str = sys.executable,
    ) -> None:
        self.source_dir = source_dir
        self.requirements = list(requirements)
        self.platform = platform
        self.python_version = python_version
        self.python = python

    def pip_command(self, output_dir: str) -> list[str]:
        return [
            self.python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",  # .pyc for the synthesising interpreter would be dead weight on 3.12
            "--target",
            output_dir,
            "--platform",
            self.platform,
            "--implementation",
            "cp",
            "--python-version",
            self.python_version,
            "--only-binary=:all:",
            *self.requirements,
        ]

    def copy_sources(self, output_dir: str) -> None:
        shutil.copytree(
            self.source_dir / PACKAGE,
            Path(output_dir) / PACKAGE,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            dirs_exist_ok=True,
        )

    def try_bundle(self, output_dir: str, options: Any) -> bool:
        subprocess.run(self.pip_command(output_dir), check=True)
        self.copy_sources(output_dir)
        return True


def docker_command(pinned: Sequence[str]) -> list[str]:
    """The same build inside the Lambda build image, used only where Docker exists and local bundling is
    refused. It is also part of the asset hash, so a changed pin produces a new asset."""
    quoted = " ".join(f"'{r}'" for r in pinned)
    return [
        "bash",
        "-c",
        f"pip install --no-compile --target /asset-output {quoted}"
        f" && cp -r /asset-input/{PACKAGE} /asset-output/",
    ]


def lambda_code(
    source_dir: Path = FUNCTIONS_DIR,
    pinned: Sequence[str] | None = None,
    target: BundleTarget = LAMBDA_TARGET,
) -> lambda_.Code:
    """One asset for every function: the same package, different handlers."""
    pinned = list(pinned if pinned is not None else requirements())
    bundler = PipLocalBundler(
        source_dir, pinned, platform=target.platform, python_version=target.python_version
    )
    return lambda_.Code.from_asset(
        str(source_dir),
        exclude=["*.egg-info", "**/__pycache__", "**/*.pyc"],
        bundling=BundlingOptions(
            image=lambda_.Runtime.PYTHON_3_12.bundling_image,
            platform=target.docker_platform,
            command=docker_command(pinned),
            # The target is part of the asset hash: an emulator bundle never stands in for a Lambda one.
            environment={"TICKWORK_BUNDLE_TARGET": f"{target.platform}/cp{target.python_version}"},
            # jsii calls try_bundle(output_dir, options) with the options struct as one argument, not the
            # keyword form the generated protocol declares.
            local=cast(ILocalBundling, bundler),
        ),
    )
