"""`make package STAGE=prod` produces a deployable, lint-clean SAM template and zip."""

from __future__ import annotations

import json
import zipfile

import pytest
from cfnlint.api import ManualArgs, lint_file  # type: ignore[import-untyped]

from tests.deploy.code_calls import ROOT
from tests.deploy.conftest import Packaged


def test_cfn_lint_reports_no_errors_or_warnings(packaged: Packaged) -> None:
    matches = lint_file(packaged.sam, config=ManualArgs(regions=["us-east-1"]))
    problems = [
        f"{m.rule.id} {m.message} (line {m.linenumber})" for m in matches if m.rule.id[0] in "EW"
    ]
    assert problems == []


RUNTIME_DEPRECATION_RULES = {"E2531", "W2531", "E2533"}


def test_cfn_lint_checks_runtime_deprecation_and_finds_none(packaged: Packaged) -> None:
    matches = lint_file(packaged.sam, config=ManualArgs(regions=["us-east-1"]))
    assert [m for m in matches if m.rule.id in RUNTIME_DEPRECATION_RULES] == []
    # The same configuration does flag a deprecated runtime: the rules are not suppressed.
    old = json.loads(packaged.sam.read_text())
    old["Resources"]["APIHandler"]["Properties"]["Runtime"] = "python3.8"
    stale = packaged.directory / "stale-runtime.json"
    stale.write_text(json.dumps(old))
    flagged = lint_file(stale, config=ManualArgs(regions=["us-east-1"]))
    assert {m.rule.id for m in flagged} & RUNTIME_DEPRECATION_RULES


def test_template_is_sam_with_the_parameters_the_docs_use(packaged: Packaged) -> None:
    template = packaged.template
    assert template["Transform"] == "AWS::Serverless-2016-10-31"
    assert "Default" not in template["Parameters"]["AlertEmail"]
    assert {"EndpointURL", "TokensTableName", "AlertTopicArn"} <= set(template["Outputs"])


def test_deployment_zip_holds_the_app_and_its_runtime_dependencies_only(
    packaged: Packaged,
) -> None:
    with zipfile.ZipFile(packaged.zip) as archive:
        names = archive.namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert "app.py" in names
    assert "chalicelib/policies/default.json" in names  # the stage's quota policy ships
    assert "aws_lambda_powertools" in tops
    # The Lambda runtime provides boto3; tests, tooling and the local backend stay out.
    assert not tops & {"boto3", "botocore", "moto", "tests", "deploy", "scripts", "client"}


# cfn-lint-serverless's findings on the package, each accepted in docs/operations.md
# ("Static analysis: accepted findings"): anything new fails here.
ACCEPTED_SERVERLESS = {
    ("WS1000", "APIHandler"),
    ("WS1000", "Bearer"),
    ("WS1000", "Notifier"),
    ("WS1000", "PreTrafficHook"),
    ("WS2002", "RestAPI"),
    ("WS1004", "PreTrafficHook"),
    ("ES6000", "NotificationDeadLetterQueue"),
    ("ES7000", "AlertEmailSubscription"),
    ("ES7000", "OpsEmailSubscription"),
}


def test_the_serverless_rules_find_only_accepted_findings(packaged: Packaged) -> None:
    """Defect class: a linter's findings left out of the accepted list (the serverless
    rules were not run at all)."""
    pytest.importorskip("cfn_lint_serverless")
    config = ManualArgs(regions=["us-east-1"], append_rules=["cfn_lint_serverless.rules"])
    matches = lint_file(packaged.sam, config=config)
    found = {(m.rule.id, m.path[1]) for m in matches if m.rule.id[1] == "S"}
    assert found == ACCEPTED_SERVERLESS
    accepted = (ROOT / "docs" / "operations.md").read_text()
    for rule, resource in found:
        assert rule in accepted and resource in accepted, (rule, resource)
