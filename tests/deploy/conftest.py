"""Package the prod stage once per test session; every deploy test reads that output."""

from __future__ import annotations

import copy
import fcntl
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.code_calls import ROOT

STAGE = "prod"


@dataclass(frozen=True)
class Packaged:
    """The output of `make package STAGE=prod`."""

    directory: Path
    template: dict[str, Any]

    @property
    def sam(self) -> Path:
        return self.directory / "sam.json"

    @property
    def zip(self) -> Path:
        return self.directory / "deployment.zip"

    @property
    def resources(self) -> dict[str, Any]:
        resources: dict[str, Any] = self.template["Resources"]
        return resources


@pytest.fixture(scope="session")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Packaged:
    """Run the packaging exactly as `make package` does (region only, no credentials)."""
    out = tmp_path_factory.mktemp("package") / STAGE
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    missing = str(out.parent / "no-such-file")
    env.update(
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=missing,
        AWS_SHARED_CREDENTIALS_FILE=missing,
    )
    command = [sys.executable, "-m", "deploy.package", "--stage", STAGE, "--out", str(out)]
    # Chalice packages through a cache in .chalice/deployments: two xdist workers
    # packaging at once would share it, so they take turns.
    with (ROOT / ".chalice" / ".package.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run(
            command, check=False, cwd=ROOT, env=env, capture_output=True, text=True
        )
    assert result.returncode == 0, f"packaging failed:\n{result.stdout}\n{result.stderr}"
    return Packaged(out, json.loads((out / "sam.json").read_text()))


@pytest.fixture(scope="session")
def deployed(packaged: Packaged) -> dict[str, Any]:
    """The template CloudFormation deploys: SAM's transform applied, as after `aws
    cloudformation package` (code in S3). The transform makes no AWS call."""
    import boto3  # noqa: PLC0415
    from samtranslator.parser.parser import Parser  # type: ignore[import-untyped]  # noqa: PLC0415
    from samtranslator.translator.translator import (  # type: ignore[import-untyped]  # noqa: PLC0415
        Translator,
    )

    template = copy.deepcopy(packaged.template)
    for resource in template["Resources"].values():
        if "CodeUri" in resource.get("Properties", {}):
            resource["Properties"]["CodeUri"] = "s3://artifact-bucket/deployment.zip"
    translator = Translator(
        None, Parser(), boto_session=boto3.session.Session(region_name="us-east-1")
    )
    result: dict[str, Any] = translator.translate(
        template,
        parameter_values={"AlertEmail": "oncall@example.com"},
        get_managed_policy_map=dict,
    )
    return result
