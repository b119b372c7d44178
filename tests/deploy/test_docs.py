"""docs/deploy.md says what a first deployment needs, in commands that match the stack;
the README stays a short front door whose links lead somewhere."""

from __future__ import annotations

import re

from tests.deploy.code_calls import ROOT
from tests.deploy.conftest import Packaged

DOC = ROOT / "docs" / "deploy.md"


def test_deploy_doc_creates_the_bucket_and_warns_off_chalice_deploy() -> None:
    text = DOC.read_text()
    assert "aws s3 mb " in text
    assert "LocationConstraint" in text  # the create-bucket region rule
    assert "Do not use `chalice deploy` for prod" in text
    assert "make package STAGE=prod" in text
    assert "CloudWatchRoleArn" in text and "AWS::ApiGateway::Account" in text
    readme = (ROOT / "README.md").read_text()
    assert "`chalice deploy` is not the way to deploy prod" in readme


def test_first_admin_token_sets_every_variable_its_audit_event_needs() -> None:
    text = DOC.read_text()
    section = text[text.index("## Create the first admin token") :]
    section = section[: section.index("mcp-quota token create")]
    # `token create` writes the token and an audit event: both tables and the region.
    for variable in ("QUOTA_TOKENS_TABLE", "QUOTA_AUDIT_TABLE", "AWS_REGION"):
        assert f"export {variable}=" in section, variable


def test_every_output_and_parameter_the_doc_names_exists(packaged: Packaged) -> None:
    text = DOC.read_text()
    # The outputs the doc's commands query: `OutputKey=='X'` and the `output X` helper.
    outputs = set(re.findall(r"OutputKey=='(\w+)'", text)) | set(
        re.findall(r"\$\(output (\w+)\)", text)
    )
    assert {"TokensTableName", "AuditTableName", "AlertTopicArn"} <= outputs
    assert outputs <= set(packaged.template["Outputs"])
    for parameter in re.findall(
        r"`(Api(?:Throttle|Reserved)\w+|BlockedWrites\w+Threshold|AlertEmail)`", text
    ):
        assert parameter in packaged.template["Parameters"], parameter


OPERATIONS = ROOT / "docs" / "operations.md"


def test_every_alarm_has_an_entry_in_the_operations_page(packaged: Packaged) -> None:
    """Each alarm is named in docs/operations.md with what to do, by name or by its
    family (`…ThrottlesAlarm`, `ClientFailOpen…Alarm`)."""
    text = OPERATIONS.read_text()
    alarms = [
        name
        for name, resource in packaged.resources.items()
        if resource["Type"] == "AWS::CloudWatch::Alarm"
    ]
    assert len(alarms) > 10
    for name in alarms:
        family = re.sub(r"^(ClientFailOpen)\w+(Alarm)$", r"\1…\2", name)
        family = re.sub(r"^\w+(TableThrottlesAlarm)$", r"…\1", family)
        family = re.sub(r"^(?!.*Table)\w+(ThrottlesAlarm)$", r"…\1", family)
        assert f"`{name}`" in text or f"`{family}`" in text, name


def test_the_operations_page_has_each_section_the_issue_asks_for() -> None:
    text = OPERATIONS.read_text()
    for heading in (
        "## Deadlines",
        "## Alarms",
        "## Deploys and rollback",
        "## Link key rotation",
        "## Token rotation",
        "## Capacity and account limits",
        "## Trust model",
        "## Cost",
        "## Multi-region",
    ):
        assert heading in text, heading
    assert "make rotate-link-key" in text and "arm64" in text


def test_the_readme_is_a_front_door_whose_links_all_lead_somewhere() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [target for target in targets if "://" not in target]
    assert "docs/index.md" in local and "CONTRIBUTING.md" in local and "LICENSE" in local
    missing = [target for target in local if not (ROOT / target).exists()]
    assert not missing, missing
