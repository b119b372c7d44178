"""An impossible policy stops `make run` and `make package` before anything starts: one
line on stderr that names the problem, no traceback, a non-zero exit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import chalicelib.quota.policy
from deploy.package import package
from tests.support import ROOT, free_port

pytestmark = pytest.mark.e2e

# The tenant may make fewer writes an hour than one principal a day: the principal's
# budget could never be reached, and before issue 18 every call answered 500.
IMPOSSIBLE: dict[str, Any] = {
    "version": 1,
    "categories": {
        "read": {"limit": 200},
        "write": {
            "limit": 15,
            "principal": {"limit": 100, "window": "24h"},
            "tenant": {"limit": 50, "window": "1h"},
        },
    },
}


def _policy_file(directory: Path, document: dict[str, Any], name: str = "bad.json") -> Path:
    path = directory / name
    path.write_text(json.dumps(document))
    return path


def _serve(extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUOTA_")}
    env.pop("AWS_ENDPOINT_URL", None)
    env.update({"PORT": str(free_port()), **extra_env})
    return subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "scripts" / "serve_local.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        # Generous under a loaded machine; a service that starts instead never exits.
        timeout=60,
        check=False,
    )


def test_make_run_refuses_an_impossible_policy_in_one_line(tmp_path: Path) -> None:
    path = _policy_file(tmp_path, IMPOSSIBLE)
    run = _serve({"QUOTA_POLICY": str(path)})
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert str(path) in lines[0] and "'tenant'" in lines[0] and "below" in lines[0]
    assert "Traceback" not in run.stderr + run.stdout
    assert "mcp-quota (stage local) on" not in run.stdout  # nothing was started


def test_make_run_refuses_an_unreadable_policy_and_bad_settings_in_one_line(
    tmp_path: Path,
) -> None:
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(b'{"version": 1, "categories": {"caf\xe9": {"limit": 1}}}')
    for env, named in (
        ({"QUOTA_POLICY": str(latin1)}, "latin1.json"),
        ({"QUOTA_IDLE_TIMEOUT_SECONDS": "soon"}, "QUOTA_IDLE_TIMEOUT_SECONDS"),
    ):
        run = _serve(env)
        lines = run.stderr.strip().splitlines()
        assert run.returncode != 0 and len(lines) == 1, run.stderr
        assert named in lines[0] and "Traceback" not in run.stderr


def _project(tmp_path: Path, policy: str) -> Path:
    """A copy of the project's Chalice config whose prod stage deploys `policy`."""
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    config["stages"]["prod"]["environment_variables"]["QUOTA_POLICY"] = policy
    (tmp_path / ".chalice").mkdir(parents=True)
    shutil.copy(ROOT / ".chalice" / "policy-prod.json", tmp_path / ".chalice")
    (tmp_path / ".chalice" / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_make_package_refuses_an_impossible_policy_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    _policy_file(policies, IMPOSSIBLE, "tight.json")
    monkeypatch.setattr(chalicelib.quota.policy, "POLICY_DIR", policies)
    out = tmp_path / "build"
    with pytest.raises(SystemExit) as refused:
        package("prod", out, project_dir=_project(tmp_path / "project", "tight.json"))
    message = str(refused.value.code)
    assert "\n" not in message and "tight.json" in message and "below" in message
    assert not out.exists()  # refused before anything was built


def test_make_package_refuses_a_policy_the_zip_would_not_hold(tmp_path: Path) -> None:
    # A valid policy given by path: the Lambda would not find it, and answer 503.
    path = _policy_file(
        tmp_path, json.loads((chalicelib.quota.policy.POLICY_DIR / "default.json").read_text())
    )
    with pytest.raises(SystemExit) as refused:
        package("prod", tmp_path / "build", project_dir=_project(tmp_path / "project", str(path)))
    assert "chalicelib/policies" in str(refused.value.code)
