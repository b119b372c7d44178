"""Issue 21 on the packaged stack: capacity, per-token throttling, notifications off the
request path, the operators' alarms, canary deploys, kept releases, logging, endpoint
type and the dashboard. Read from the template CloudFormation deploys (SAM transformed)
where the transform decides the outcome."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chalicelib.notify import PUBLISH_WORST_MS
from chalicelib.quota.policy import load_policy
from deploy.build_template import LOGGING_CONFIG, load_config
from deploy.package import release, release_version
from tests.deploy.code_calls import ROOT
from tests.deploy.conftest import Packaged

FUNCTIONS = ("APIHandler", "Bearer", "Notifier")
CANARIED = ("APIHandler", "Bearer")


def of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in resources.items() if v["Type"] == kind}


def props(packaged: Packaged, name: str) -> dict[str, Any]:
    properties: dict[str, Any] = packaged.resources[name]["Properties"]
    return properties


# -- notifications off the request path ------------------------------------------------


def test_refusals_enqueue_and_the_notifier_reads_the_stacks_own_queue(
    packaged: Packaged,
) -> None:
    queue = props(packaged, "NotificationQueue")
    dead = props(packaged, "NotificationDeadLetterQueue")
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["NotificationDeadLetterQueue", "Arn"]},
        "maxReceiveCount": 5,
    }
    assert queue["SqsManagedSseEnabled"] is True and dead["SqsManagedSseEnabled"] is True
    assert dead["MessageRetentionPeriod"] == 14 * 86_400
    notifier = props(packaged, "Notifier")
    # A message stays invisible for 6 timeouts while one delivery runs.
    assert queue["VisibilityTimeout"] >= 6 * notifier["Timeout"]
    ((_, source),) = notifier["Events"].items()
    assert source["Type"] == "SQS"
    assert source["Properties"]["Queue"] == {"Fn::GetAtt": ["NotificationQueue", "Arn"]}
    assert source["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert notifier["Handler"] == "chalicelib.api.notifier.notifier"


def test_the_notifier_fits_its_timeout_and_is_capped(packaged: Packaged) -> None:
    """Defect class: a consumer whose batch can outlast its timeout (SQS then resends
    the mails already sent) and whose concurrency nothing bounds."""
    notifier = props(packaged, "Notifier")
    ((_, source),) = notifier["Events"].items()
    batch = source["Properties"]["BatchSize"]
    assert batch * PUBLISH_WORST_MS < notifier["Timeout"] * 1000
    assert notifier["ReservedConcurrentExecutions"] == 2
    assert source["Properties"]["ScalingConfig"] == {"MaximumConcurrency": 2}


def test_the_deployed_notifier_polls_the_queue(deployed: dict[str, Any]) -> None:
    (mapping,) = of_type(deployed["Resources"], "AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["EventSourceArn"] == {"Fn::GetAtt": ["NotificationQueue", "Arn"]}
    assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


# -- the operators' alarms -------------------------------------------------------------


def alarm(packaged: Packaged, name: str) -> dict[str, Any]:
    found = props(packaged, name)
    assert packaged.resources[name]["Type"] == "AWS::CloudWatch::Alarm"
    assert found["AlarmActions"] == [{"Ref": "OpsTopic"}] == found["OKActions"]
    return found


def test_notification_failures_are_alarmed_for_every_category(packaged: Packaged) -> None:
    """Defect class: an alarm narrower than what it guards (it watched the categories
    that notify on refusal, but a suspension's mail goes out for any category)."""
    prod = load_config()["stages"]["prod"]["environment_variables"]
    policy = load_policy(prod["QUOTA_POLICY"])
    notify = set(policy.categories)
    assert {name for name, c in policy.categories.items() if not c.notify}  # read: silent
    found = alarm(packaged, "NotificationFailedAlarm")
    metrics = [m["MetricStat"]["Metric"] for m in found["Metrics"] if "MetricStat" in m]
    assert {m["MetricName"] for m in metrics} == {"NotificationFailed"}
    categories = {
        next((d["Value"] for d in m["Dimensions"] if d["Name"] == "category"), None)
        for m in metrics
    }
    assert categories == notify | {None}  # None: a queued message that was not a note
    (total,) = [m for m in found["Metrics"] if m["ReturnData"]]
    assert total["Expression"] == "SUM(FILL(METRICS(), 0))"


def test_dead_letters_are_alarmed(packaged: Packaged) -> None:
    found = alarm(packaged, "NotificationDeadLettersAlarm")
    assert found["Namespace"] == "AWS/SQS"
    assert found["MetricName"] == "ApproximateNumberOfMessagesVisible"
    (dimension,) = found["Dimensions"]
    assert dimension["Value"] == {"Fn::GetAtt": ["NotificationDeadLetterQueue", "QueueName"]}
    assert (found["Threshold"], found["ComparisonOperator"]) == (0, "GreaterThanThreshold")


def test_p99_latency_is_alarmed_against_a_parameter(packaged: Packaged) -> None:
    found = alarm(packaged, "ApiLatencyP99Alarm")
    assert (found["Namespace"], found["MetricName"]) == ("AWS/ApiGateway", "Latency")
    assert found["ExtendedStatistic"] == "p99"
    assert found["Threshold"] == {"Ref": "LatencyP99AlarmMs"}
    assert packaged.template["Parameters"]["LatencyP99AlarmMs"]["Default"] > 0


def test_concurrency_near_the_reservation_is_alarmed(packaged: Packaged) -> None:
    found = alarm(packaged, "ApiConcurrencyAlarm")
    assert packaged.resources["ApiConcurrencyAlarm"]["Condition"] == "ReserveApiConcurrency"
    (peak,) = [m for m in found["Metrics"] if "MetricStat" in m]
    assert peak["MetricStat"]["Metric"]["MetricName"] == "ConcurrentExecutions"
    assert peak["MetricStat"]["Metric"]["Dimensions"] == [
        {"Name": "FunctionName", "Value": {"Ref": "APIHandler"}}
    ]
    (share,) = [m for m in found["Metrics"] if m["ReturnData"]]
    # Of the reservation itself, not a second figure that can differ from it.
    reserved = packaged.resources["APIHandler"]["Properties"]["ReservedConcurrentExecutions"]
    assert share["Expression"] == {
        "Fn::Sub": ["100 * peak / ${Reserved}", {"Reserved": reserved["Fn::If"][1]}]
    }
    assert 0 < found["Threshold"] < 100


def test_the_heartbeat_is_optional_and_fires_on_silence(packaged: Packaged) -> None:
    found = alarm(packaged, "HeartbeatAlarm")
    assert packaged.resources["HeartbeatAlarm"]["Condition"] == "HeartbeatEnabled"
    assert packaged.template["Parameters"]["HeartbeatMinutes"]["Default"] == 0  # off
    assert packaged.template["Conditions"]["HeartbeatEnabled"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "HeartbeatMinutes"}, 0]}]
    }
    assert (found["MetricName"], found["Period"]) == ("Count", 60)
    assert found["EvaluationPeriods"] == {"Ref": "HeartbeatMinutes"} == found["DatapointsToAlarm"]
    assert (found["Threshold"], found["ComparisonOperator"]) == (1, "LessThanThreshold")
    assert found["TreatMissingData"] == "breaching"


# -- capacity and per-token throttling -------------------------------------------------


def test_one_token_past_its_rate_gets_429_alone(packaged: Packaged) -> None:
    acl = packaged.resources["TokenRateLimitAcl"]
    assert acl["Condition"] == "RateLimitTokens"
    properties = acl["Properties"]
    assert (properties["Scope"], properties["DefaultAction"]) == ("REGIONAL", {"Allow": {}})
    (rule,) = [r for r in properties["Rules"] if r["Name"] == "per-token-rate"]
    rate = rule["Statement"]["RateBasedStatement"]
    assert rate["Limit"] == {"Ref": "TokenRateLimitPerMinute"}
    assert rate["EvaluationWindowSec"] == 60
    assert rate["AggregateKeyType"] == "CUSTOM_KEYS"
    assert [key["Header"]["Name"] for key in rate["CustomKeys"]] == ["authorization"]
    response = rule["Action"]["Block"]["CustomResponse"]
    assert response["ResponseCode"] == 429
    assert response["ResponseHeaders"] == [{"Name": "Retry-After", "Value": "1"}]
    body = json.loads(
        properties["CustomResponseBodies"][response["CustomResponseBodyKey"]]["Content"]
    )
    assert body["error"]["code"] == "throttled"
    assert "allowed" not in body  # the client retries it: not a quota decision


def test_the_rate_rule_guards_the_deployed_stage(deployed: dict[str, Any]) -> None:
    resources = deployed["Resources"]
    association = resources["TokenRateLimitAssociation"]
    (stage,) = of_type(resources, "AWS::ApiGateway::Stage")
    assert association["DependsOn"] == [stage]
    arn = association["Properties"]["ResourceArn"]["Fn::Sub"]
    assert arn.endswith("/restapis/${RestAPI}/stages/api")


# -- safe deploys and rollback ---------------------------------------------------------


def test_the_api_and_authorizer_deploy_as_a_10_percent_canary(packaged: Packaged) -> None:
    for name in CANARIED:
        properties = props(packaged, name)
        assert properties["AutoPublishAlias"] == "live"
        preference = properties["DeploymentPreference"]
        assert preference["Type"] == "Canary10Percent5Minutes"
        expected = [f"{name}CanaryErrorsAlarm"]
        if name == "APIHandler":
            expected.append("APIHandlerCanaryFaultsAlarm")
        assert preference["Alarms"] == [{"Ref": alarm} for alarm in expected]


def test_canary_rollback_watches_the_new_version_minute_by_minute(
    packaged: Packaged, deployed: dict[str, Any]
) -> None:
    """Defect class: a rollback alarm that cannot tell the new version from the old
    (function- and stage-wide) and that cannot fire inside the canary (a 300 s period
    for a 300 s canary)."""
    canary_seconds = 5 * 60
    for name in CANARIED:
        (rollback,) = [
            ref["Ref"] for ref in props(packaged, name)["DeploymentPreference"]["Alarms"][:1]
        ]
        found = alarm(packaged, rollback)
        dimensions = {d["Name"]: d["Value"] for d in found["Dimensions"]}
        assert dimensions == {
            "FunctionName": {"Ref": name},
            "Resource": {"Fn::Sub": f"${{{name}}}:live"},
            "ExecutedVersion": {"Fn::GetAtt": [f"{name}.Version", "Version"]},
        }
        assert found["Period"] == 60
        assert found["Period"] * found["EvaluationPeriods"] * 2 <= canary_seconds
    faults = alarm(packaged, "APIHandlerCanaryFaultsAlarm")
    assert faults["MetricName"] == "UnhandledError" and faults["Period"] == 60
    assert {d["Name"]: d["Value"] for d in faults["Dimensions"]}["version"] == {
        "Fn::GetAtt": ["APIHandler.Version", "Version"]
    }
    # SAM resolves the new version: the deployed alarm names the published version.
    resources = deployed["Resources"]
    versions = {k for k, v in resources.items() if v["Type"] == "AWS::Lambda::Version"}
    deployed_alarm = resources["APIHandlerCanaryErrorsAlarm"]["Properties"]
    (executed,) = [d for d in deployed_alarm["Dimensions"] if d["Name"] == "ExecutedVersion"]
    (target, attribute) = executed["Value"]["Fn::GetAtt"]
    assert target in versions and target.startswith("APIHandlerVersion")
    assert attribute == "Version"


def test_api_gateway_calls_the_aliases_only(deployed: dict[str, Any]) -> None:
    resources = deployed["Resources"]
    aliases = of_type(resources, "AWS::Lambda::Alias")
    assert set(aliases) == {f"{name}Aliaslive" for name in CANARIED}
    (api,) = of_type(resources, "AWS::ApiGateway::RestApi").values()
    body = json.dumps(api["Properties"]["Body"])
    called = set(re.findall(r"/functions/\$\{(\w+)\}/invocations", body))
    assert called == set(aliases)
    for name in CANARIED:
        permission = resources[f"{name}InvokePermission"]["Properties"]
        assert permission["FunctionName"] == {"Ref": f"{name}Aliaslive"}
    groups = of_type(resources, "AWS::CodeDeploy::DeploymentGroup")
    assert set(groups) == {f"{name}DeploymentGroup" for name in CANARIED}
    for group in groups.values():
        assert group["Properties"]["AutoRollbackConfiguration"]["Enabled"] is True


def test_make_package_keeps_each_release(tmp_path: Path) -> None:
    version = release_version(ROOT, datetime(2026, 12, 3, 21, 0, tzinfo=UTC))
    assert re.fullmatch(r"20261203T210000Z-([0-9a-f]{12}(-dirty)?|nogit)", version)
    assert "--out" not in (ROOT / "mk" / "package.mk").read_text()  # releases by default

    first = release("prod", tmp_path, "20261203T210000Z-aaaaaaaaaaaa")
    second = release("prod", tmp_path, "20261203T220000Z-bbbbbbbbbbbb")

    for sam in (first, second):  # the previous release is still there to roll back to
        assert sam.exists() and (sam.parent / "deployment.zip").exists()
        assert json.loads(sam.read_text())["Resources"]["APIHandler"]
    assert (tmp_path / "latest").read_text().strip() == second.parent.name
    assert (tmp_path / "sam.json").read_bytes() == second.read_bytes()


# -- capacity, logging, endpoint, dashboard ---------------------------------------------


def test_every_function_logs_json_without_per_invocation_lines(packaged: Packaged) -> None:
    assert LOGGING_CONFIG["SystemLogLevel"] == "WARN"
    for name in FUNCTIONS:
        assert props(packaged, name)["LoggingConfig"] == {
            "LogFormat": "JSON",
            "SystemLogLevel": "WARN",
            "ApplicationLogLevel": "INFO",
        }, name


def test_the_endpoint_type_is_a_parameter(packaged: Packaged, deployed: dict[str, Any]) -> None:
    parameter = packaged.template["Parameters"]["EndpointType"]
    assert (parameter["Default"], parameter["AllowedValues"]) == ("REGIONAL", ["REGIONAL", "EDGE"])
    assert props(packaged, "RestAPI")["EndpointConfiguration"] == {"Type": {"Ref": "EndpointType"}}
    (api,) = of_type(deployed["Resources"], "AWS::ApiGateway::RestApi").values()
    assert api["Properties"]["EndpointConfiguration"] == {"Types": [{"Ref": "EndpointType"}]}


def test_the_dashboard_shows_checks_refusals_fail_open_latency_and_notifications(
    packaged: Packaged,
) -> None:
    body = props(packaged, "Dashboard")["DashboardBody"]["Fn::Sub"]
    widgets = json.loads(body)["widgets"]
    text = json.dumps(widgets)
    for shown in ("Count", "ChecksBlocked", "ClientFailOpen", "Latency", "NotificationFailed"):
        assert f'\\"{shown}\\"' in text or f'"{shown}"' in text, shown
    assert "NotificationDeadLetterQueue.QueueName" in text
    # The handler's p99 Duration, the figure CheckP99Ms (its reservation) should follow.
    duration = [
        metric
        for widget in widgets
        for metric in widget["properties"]["metrics"]
        if isinstance(metric, list) and metric[:2] == ["AWS/Lambda", "Duration"]
    ]
    assert [(m[3], m[4]["stat"]) for m in duration] == [("${APIHandler}", "p99")]
    substituted = set(re.findall(r"\$\{([\w:.]+)\}", body))
    known = set(packaged.resources) | {"AWS::StackName", "AWS::Region"}
    assert {name.split(".")[0] for name in substituted} <= known
