"""The packaged stack: tables from the one schema, alerting, throttling and wiring."""

from __future__ import annotations

import copy
from typing import Any

from cfnlint.template.transforms._sam_globals import (  # type: ignore[import-untyped]
    merge_globals,
)

from chalicelib.observability import NAMESPACE, SERVICE
from chalicelib.schema import ALL_TABLES
from chalicelib.settings import Settings
from deploy.build_template import load_config
from tests.deploy.code_calls import ROOT
from tests.deploy.conftest import Packaged


def of_type(packaged: Packaged, kind: str) -> dict[str, Any]:
    return {k: v for k, v in packaged.resources.items() if v["Type"] == kind}


def test_tables_are_exactly_the_schema_on_demand_with_ttl_and_pitr(packaged: Packaged) -> None:
    tables = of_type(packaged, "AWS::DynamoDB::Table")
    assert set(tables) == {spec.logical_name for spec in ALL_TABLES.values()}
    for spec in ALL_TABLES.values():
        props = tables[spec.logical_name]["Properties"]
        expected = spec.create_table_kwargs("-")
        assert props["KeySchema"] == expected["KeySchema"], spec.logical_name
        assert props["AttributeDefinitions"] == expected["AttributeDefinitions"]
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert "TableName" not in props  # CloudFormation names them per stack
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        if spec.ttl_attribute is None:
            assert "TimeToLiveSpecification" not in props
        else:
            assert props["TimeToLiveSpecification"] == {
                "AttributeName": spec.ttl_attribute,
                "Enabled": True,
            }


def test_counters_table_is_kept_like_the_others(packaged: Packaged) -> None:
    # It holds suspensions, raises and the emailed links' single uses besides counters:
    # replacing it would reset every budget and lift every suspension.
    counters = packaged.resources[ALL_TABLES["counters"].logical_name]
    assert counters["Properties"]["DeletionProtectionEnabled"] is True
    assert (counters["DeletionPolicy"], counters["UpdateReplacePolicy"]) == ("Retain", "Retain")


def test_quota_mail_and_alarms_have_their_own_topics_and_addresses(packaged: Packaged) -> None:
    assert set(of_type(packaged, "AWS::SNS::Topic")) == {"AlertTopic", "OpsTopic"}
    subscriptions = {
        s["Properties"]["TopicArn"]["Ref"]: s["Properties"]
        for s in of_type(packaged, "AWS::SNS::Subscription").values()
    }
    assert subscriptions == {
        "AlertTopic": {
            "TopicArn": {"Ref": "AlertTopic"},
            "Protocol": "email",
            "Endpoint": {"Ref": "AlertEmail"},
        },
        "OpsTopic": {
            "TopicArn": {"Ref": "OpsTopic"},
            "Protocol": "email",
            "Endpoint": {"Ref": "OpsEmail"},
        },
    }


def test_alarm_watches_the_metric_the_service_emits_and_notifies_the_topic(
    packaged: Packaged,
) -> None:
    props = packaged.resources["BlockedWritesAlarm"]["Properties"]
    assert props["Namespace"] == NAMESPACE
    assert props["MetricName"] == "ChecksBlocked"
    # EMF metrics match only on the exact dimension set observability.count emits.
    assert props["Dimensions"] == [
        {"Name": "service", "Value": SERVICE},
        {"Name": "category", "Value": "write"},
    ]
    assert props["AlarmActions"] == [{"Ref": "OpsTopic"}]
    assert props["TreatMissingData"] == "notBreaching"
    assert '"ChecksBlocked"' in (ROOT / "chalicelib" / "check" / "binding.py").read_text()


def test_api_stage_is_throttled(packaged: Packaged) -> None:
    api = packaged.resources["RestAPI"]
    (setting,) = api["Properties"]["MethodSettings"]
    assert setting["ResourcePath"] == "/*"
    assert setting["HttpMethod"] == "*"
    assert setting["ThrottlingRateLimit"] == {"Ref": "ApiThrottleRateLimit"}
    assert setting["ThrottlingBurstLimit"] == {"Ref": "ApiThrottleBurstLimit"}
    params = packaged.template["Parameters"]
    assert params["ApiThrottleRateLimit"]["Default"] > 0
    assert params["ApiThrottleBurstLimit"]["Default"] >= params["ApiThrottleRateLimit"]["Default"]
    assert api["Properties"]["StageName"] == "api"


def _resolve(value: Any, parameters: dict[str, Any] | None = None) -> str:
    """Stand-in physical values: a Ref becomes `<LogicalId>`, or a parameter's default; a
    condition on Cognito (the default: no OidcIssuer) its Cognito branch; a Sub its text."""
    if isinstance(value, dict) and "Fn::If" in value:
        condition, when_true, _ = value["Fn::If"]
        assert condition == "UseCognito", value
        return _resolve(when_true, parameters)
    if isinstance(value, dict) and "Fn::Sub" in value:
        return str(value["Fn::Sub"])
    if isinstance(value, dict):
        (name,) = value.values()
        if parameters and name in parameters:
            return str(parameters[name].get("Default", ""))
        return f"<{name}>"
    return str(value)


def test_every_function_is_wired_to_this_stacks_tables_and_topic(packaged: Packaged) -> None:
    template = merge_globals(copy.deepcopy(packaged.template))
    functions = of_type(Packaged(packaged.directory, template), "AWS::Serverless::Function")
    functions.pop("PreTrafficHook")  # the deploy's check, not the app: no table, no topic
    assert set(functions) == {"APIHandler", "Bearer", "Notifier"}
    for name, function in functions.items():
        variables = function["Properties"]["Environment"]["Variables"]
        for value in variables.values():
            if isinstance(value, dict) and "Ref" in value:
                (target,) = value.values()
                known = {**packaged.resources, **packaged.template.get("Parameters", {})}
                known["AWS::StackName"] = "names the tenants' usage keys"
                assert target in known, (name, value)
        parameters = packaged.template.get("Parameters", {})
        settings = Settings.from_env({k: _resolve(v, parameters) for k, v in variables.items()})
        assert settings.stage == "prod"
        assert not settings.is_local
        assert not settings.dev_tokens  # no development tokens in a deployed stage
        assert settings.counters_table == "<CountersTable>"
        assert settings.tokens_table == "<TokensTable>"
        assert settings.audit_table == "<AuditTable>"
        assert settings.grants_table == "<GrantsTable>"
        assert settings.topic_arn == "<AlertTopic>"
        assert settings.link_secret_arn == "<LinkSecret>"  # generated, never in clear
        assert settings.notify_queue_url == "<NotificationQueue>"  # refusals enqueue
        assert settings.idle_timeout_seconds == 3600
        # People sign in through the stack's own user pool, its client found by name.
        assert settings.oidc_issuer.endswith("amazonaws.com/${SignInUserPool}")
        assert settings.oidc_cognito_client_name == "mcp-quota-console"
        assert variables["POWERTOOLS_LOG_LEVEL"] == "INFO"
        assert not any(key.startswith("QUOTA_DEV_") for key in variables)
        props = function["Properties"]
        assert props["Tracing"] == "PassThrough"  # X-Ray is opt-in per stage
        assert props["Runtime"] == load_config()["lambda_python_version"]


def test_log_groups_belong_to_the_functions_or_the_api_and_expire(packaged: Packaged) -> None:
    groups = of_type(packaged, "AWS::Logs::LogGroup")
    for named_by_cloudformation in ("ApiAccessLogGroup", "PreTrafficHookLogGroup"):
        group = groups.pop(named_by_cloudformation)
        assert "LogGroupName" not in group["Properties"]
        assert group["Properties"]["RetentionInDays"] == 30
    assert {g["Properties"]["LogGroupName"]["Fn::Sub"] for g in groups.values()} == {
        "/aws/lambda/${APIHandler}",
        "/aws/lambda/${Bearer}",
        "/aws/lambda/${Notifier}",
    }
    assert all(g["Properties"]["RetentionInDays"] == 30 for g in groups.values())
