"""Stages in .chalice/config.json, and the merge template's stage switches (no packaging)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deploy.build_template import build_merge_template, load_config
from deploy.package import package
from tests.deploy.code_calls import ROOT

FUNCTIONS = ["api_handler", "bearer"]


def test_stages_have_policy_files_debug_off_and_xray_opt_in() -> None:
    config = load_config()
    assert config["autogen_policy"] is False
    assert config.get("xray", False) is False
    assert {"local", "prod"} <= set(config["stages"])
    for name, stage in config["stages"].items():
        policy = ROOT / ".chalice" / stage["iam_policy_file"]
        assert json.loads(policy.read_text())["Version"] == "2012-10-17", name
        assert stage.get("xray", False) is False, name
    prod = config["stages"]["prod"]["environment_variables"]
    assert prod["QUOTA_STAGE"] == "prod"
    assert {"QUOTA_POLICY", "QUOTA_IDLE_TIMEOUT_SECONDS", "POWERTOOLS_LOG_LEVEL"} <= set(prod)


def test_local_stage_stays_configurable_by_env_and_cannot_be_deployed() -> None:
    local = load_config()["stages"]["local"]
    # `chalice local` overwrites the process env with these: no tunables here.
    assert {k for k in local["environment_variables"] if k.startswith("QUOTA_")} == {"QUOTA_STAGE"}
    deny = json.loads((ROOT / ".chalice" / local["iam_policy_file"]).read_text())
    assert {s["Effect"] for s in deny["Statement"]} == {"Deny"}
    with pytest.raises(SystemExit, match="local stage"):
        build_merge_template("local", load_config(), FUNCTIONS)


def test_app_never_runs_in_debug_mode() -> None:
    from app import app  # noqa: PLC0415

    assert app.debug is False


def with_xray(config: dict[str, Any]) -> dict[str, Any]:
    config = json.loads(json.dumps(config))
    config["stages"]["prod"]["xray"] = True
    return config


def test_xray_opt_in_grants_trace_writes_and_traces_the_api() -> None:
    plain = build_merge_template("prod", load_config(), FUNCTIONS)["Resources"]
    traced = build_merge_template("prod", with_xray(load_config()), FUNCTIONS)["Resources"]
    assert "TracingEnabled" not in plain["RestAPI"]["Properties"]
    assert "ApiHandlerRole" not in plain
    assert traced["RestAPI"]["Properties"]["TracingEnabled"] is True
    for role in ("ApiHandlerRole", "BearerRole"):
        (arn,) = traced[role]["Properties"]["ManagedPolicyArns"]
        assert arn["Fn::Sub"].endswith(":iam::aws:policy/AWSXrayWriteOnlyAccess")


def test_unknown_stage_is_refused() -> None:
    with pytest.raises(SystemExit, match="unknown stage"):
        build_merge_template("staging", load_config(), FUNCTIONS)


def with_env(config: dict[str, Any], env: dict[str, str], function: str | None) -> dict[str, Any]:
    config = json.loads(json.dumps(config))
    stage = config["stages"]["prod"]
    if function is None:
        stage["environment_variables"].update(env)
    else:
        stage["lambda_functions"][function]["environment_variables"] = env
    return config


@pytest.mark.parametrize("function", [None, "bearer"])
@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"QUOTA_DEV_TOKENS": "1"}, "QUOTA_DEV_TOKENS"),
        ({"QUOTA_DEV_TOKENS": "0"}, "QUOTA_DEV_TOKENS"),
        ({"QUOTA_STAGE": "local"}, "QUOTA_STAGE=local"),
    ],
)
def test_a_stage_that_would_accept_development_tokens_is_refused(
    env: dict[str, str], message: str, function: str | None
) -> None:
    with pytest.raises(SystemExit, match=message):
        build_merge_template("prod", with_env(load_config(), env, function), FUNCTIONS)


def test_packaging_refuses_it_with_a_clear_error(tmp_path: Path) -> None:
    config = with_env(load_config(), {"QUOTA_DEV_TOKENS": "1"}, None)
    (tmp_path / ".chalice").mkdir()
    (tmp_path / ".chalice" / "config.json").write_text(json.dumps(config))
    with pytest.raises(SystemExit, match="development tokens exist only under `make run`"):
        package("prod", tmp_path / "out", project_dir=tmp_path)
    assert not (tmp_path / "out").exists()
