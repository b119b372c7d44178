"""`deployment.zip` holds the service and its runtime dependencies, nothing of the repository
besides: the operator tools (`admin_cli/`), tests and benchmarks never ship in the Lambda."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from deploy.build_template import load_config
from deploy.package import as_on_lambda, runtime_python
from tests.deploy.code_calls import ROOT
from tests.deploy.conftest import Packaged

# What the repository contributes to the Lambda; every other top-level entry of the zip
# must be a runtime dependency from requirements.txt.
SERVICE_TOPS = {"app.py", "chalicelib"}
NEVER_SHIPPED = ("admin_cli", "tests", "bench", "scripts", "examples", "deploy", "client")


@pytest.fixture(scope="module")
def names(packaged: Packaged) -> list[str]:
    with zipfile.ZipFile(packaged.zip) as archive:
        return archive.namelist()


def test_only_the_service_comes_from_the_repository(names: list[str]) -> None:
    repository_entries = {path.name for path in ROOT.iterdir()}
    # The top-level __pycache__ holds the bytecode of app.py and typing_extensions.py.
    tops = {name.split("/", 1)[0] for name in names} - {"__pycache__"}

    assert tops & repository_entries == SERVICE_TOPS


@pytest.mark.parametrize("directory", NEVER_SHIPPED)
def test_no_operator_tools_tests_or_benchmarks_anywhere_in_the_zip(
    names: list[str], directory: str
) -> None:
    first_party = [n for n in names if n.split("/", 1)[0] in SERVICE_TOPS]
    assert [n for n in first_party if directory in PurePosixPath(n).parts] == []
    assert [n for n in names if n.split("/", 1)[0] == directory] == []


def test_no_cli_or_provisioning_module_in_the_zip(names: list[str]) -> None:
    modules = [PurePosixPath(n) for n in names if n.endswith(".py")]

    assert [m for m in modules if m.parts[0] == "admin_cli"] == []
    assert [m for m in modules if m.parts[0] == "chalicelib" and m.stem.startswith("cli")] == []
    assert "chalicelib/provision.py" not in names


def test_every_service_module_ships_and_nothing_else(names: list[str]) -> None:
    in_repository = {
        path.relative_to(ROOT).as_posix() for path in (ROOT / "chalicelib").rglob("*.py")
    } | {"app.py"}
    in_zip = {n for n in names if n.split("/", 1)[0] in SERVICE_TOPS and n.endswith(".py")}

    assert in_zip == in_repository
    assert {"app.py", "chalicelib/check/service.py", "chalicelib/check/requests.py"} <= in_zip
    assert "chalicelib/policies/default.json" in names


def test_what_lambdas_runtime_already_holds_is_not_shipped(names: list[str]) -> None:
    # jmespath comes with the runtime's boto3, byte-compiled; a copy in the zip would
    # shadow it and be compiled from source at every cold start.
    tops = {name.split("/", 1)[0] for name in names}

    assert [top for top in tops if top.split("-")[0] == "jmespath"] == []
    assert "aws_lambda_powertools" in tops


def runtime_tag() -> str:
    version = str(load_config()["lambda_python_version"]).removeprefix("python")
    return "cpython-" + version.replace(".", "")


def test_bytecode_is_the_runtimes_only(names: list[str]) -> None:
    # Lambda's code directory is read-only: a module without bytecode for the runtime's
    # Python compiles from source at every cold start; the build machine's is never used.
    bytecode = [n for n in names if n.endswith(".pyc")]
    if runtime_python(load_config()["lambda_python_version"]) is None:
        pytest.skip("the runtime's Python is not on this machine: the zip ships source only")

    assert [n for n in bytecode if not n.endswith(f".{runtime_tag()}.pyc")] == []
    assert all("/__pycache__/" in f"/{n}" for n in bytecode)


def test_every_module_has_bytecode_checked_against_its_source(packaged: Packaged) -> None:
    if runtime_python(load_config()["lambda_python_version"]) is None:
        pytest.skip("the runtime's Python is not on this machine: the zip ships source only")
    with zipfile.ZipFile(packaged.zip) as archive:
        names = set(archive.namelist())
        sources = [PurePosixPath(n) for n in names if n.endswith(".py")]
        compiled = {m: m.parent / "__pycache__" / f"{m.stem}.{runtime_tag()}.pyc" for m in sources}
        assert [str(m) for m, pyc in compiled.items() if str(pyc) not in names] == []
        # PEP 552: flags 0b11 = checked hash (unzipping need not keep modification times).
        headers = {archive.read(str(pyc))[4:8] for pyc in compiled.values()}
    assert headers == {(3).to_bytes(4, "little")}


FIRST_CHECK_PATH = """
import json, sys
import app
from chalicelib import precompiled
from chalicelib.api import check
check.warm()  # the check path, as the init phase loads it on Lambda
print(json.dumps(precompiled.USED))
"""


def test_the_check_paths_dataclass_methods_ship_compiled(
    packaged: Packaged, tmp_path: Path
) -> None:
    """A cold start compiles none of its dataclass methods (`chalicelib.precompiled`):
    every one its init loads is in the zip, compiled by the runtime's Python."""
    interpreter = runtime_python(load_config()["lambda_python_version"])
    if interpreter is None:
        pytest.skip("the runtime's Python is not on this machine: the zip ships source only")
    with zipfile.ZipFile(packaged.zip) as archive:
        assert f"chalicelib/__pycache__/dataclasses.{runtime_tag()}.bin" in archive.namelist()
        archive.extractall(tmp_path)
    env = {
        "PATH": os.environ.get("PATH", ""),
        **as_on_lambda(tmp_path),
        "AWS_DEFAULT_REGION": "us-east-1",
        "QUOTA_STAGE": "prod",
    }
    done = subprocess.run(
        [interpreter, "-c", FIRST_CHECK_PATH],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    used = json.loads(done.stdout.strip().splitlines()[-1])
    assert used["compiled"] == 0
    assert used["found"] >= 50
