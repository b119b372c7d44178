"""Stages in .chalice/config.json, and the merge template's stage switches (no packaging)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deploy.build_template import build_merge_template, load_config
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
