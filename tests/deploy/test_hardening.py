"""Issue 10 on the packaged stack: error bodies, stages, monitoring, what is kept, and
the Lambda settings. Read from the template CloudFormation deploys (SAM transformed)
where the transform decides the outcome."""

from __future__ import annotations

import json
import math
import zipfile
from collections import defaultdict
from typing import Any

import pytest

from chalicelib.observability import NAMESPACE, SERVICE
from chalicelib.quota.policy import load_policy
from chalicelib.schema import ALL_TABLES
from deploy.build_template import THROTTLE_OPERATIONS, load_config
from tests.deploy.code_calls import api_calls
from tests.deploy.conftest import Packaged
from tests.deploy.test_iam import target_of

OPS_TOPIC = {"Ref": "OpsTopic"}
FUNCTIONS = ("APIHandler", "Bearer", "Notifier")


def of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in resources.items() if v["Type"] == kind}


def alarms(packaged: Packaged) -> dict[str, dict[str, Any]]:
    found = of_type(packaged.resources, "AWS::CloudWatch::Alarm")
    return {name: alarm["Properties"] for name, alarm in found.items()}


def dimensions(props: dict[str, Any]) -> dict[str, Any]:
    return {d["Name"]: d["Value"] for d in props["Dimensions"]}


# -- 5: API Gateway's own errors have the service's body -------------------------------

GATEWAY_RESPONSE_TYPES = {
    "DEFAULT_4XX",
    "DEFAULT_5XX",
    "UNAUTHORIZED",
    "ACCESS_DENIED",
    "MISSING_AUTHENTICATION_TOKEN",
    "RESOURCE_NOT_FOUND",
    "UNSUPPORTED_MEDIA_TYPE",
    "THROTTLED",
    "REQUEST_TOO_LARGE",
    "BAD_REQUEST_BODY",
    "AUTHORIZER_FAILURE",
    "INTEGRATION_TIMEOUT",
}


def gateway_responses(deployed: dict[str, Any]) -> dict[str, Any]:
    (api,) = of_type(deployed["Resources"], "AWS::ApiGateway::RestApi").values()
    responses: dict[str, Any] = api["Properties"]["Body"]["x-amazon-apigateway-gateway-responses"]
    return responses


def test_gateway_errors_have_the_service_error_shape(deployed: dict[str, Any]) -> None:
    responses = gateway_responses(deployed)
    assert set(responses) >= GATEWAY_RESPONSE_TYPES
    for name, response in responses.items():
        (template,) = response["responseTemplates"].values()
        body = json.loads(template)
        assert set(body) == {"error"}, name
        assert set(body["error"]) == {"code", "message"}, name
        assert body["error"]["code"].islower(), name
        assert body["error"]["message"], name
    codes = {
        n: json.loads(r["responseTemplates"]["application/json"])["error"]["code"]
        for n, r in responses.items()
    }
    assert codes["UNAUTHORIZED"] == "unauthorized"
    assert codes["ACCESS_DENIED"] == "forbidden"  # as the service's own 403
    assert codes["UNSUPPORTED_MEDIA_TYPE"] == "unsupported_media_type"
    assert codes["THROTTLED"] != "quota_exceeded"  # a gateway 429 is not a quota refusal
    # An unknown path or method: API Gateway's 403 becomes the 404 it means.
    assert responses["MISSING_AUTHENTICATION_TOKEN"]["statusCode"] == "404"
    assert codes["MISSING_AUTHENTICATION_TOKEN"] == "not_found"
    throttled_headers = responses["THROTTLED"]["responseParameters"]
    assert throttled_headers == {"gatewayresponse.header.Retry-After": "'1'"}


def test_gateway_error_messages_are_static_and_never_quote_the_request(
    deployed: dict[str, Any],
) -> None:
    # `$context.error.message` quotes the Authorization header for some errors; no
    # template or header may use any variable at all.
    for name, response in gateway_responses(deployed).items():
        text = json.dumps(response)
        assert "$" not in text, name
        assert "method.request" not in text, name


# -- 14: no unthrottled stage -----------------------------------------------------------


def test_the_only_stage_is_the_configured_one_and_it_is_throttled(
    deployed: dict[str, Any], packaged: Packaged
) -> None:
    resources = deployed["Resources"]
    # A Deployment with a StageName creates a stage (SAM's default `Stage`) that has none
    # of the stage's settings: no throttling, no access logs.
    for name, deployment in of_type(resources, "AWS::ApiGateway::Deployment").items():
        assert "StageName" not in deployment["Properties"], name
    stages = of_type(resources, "AWS::ApiGateway::Stage")
    assert [s["Properties"]["StageName"] for s in stages.values()] == ["api"]
    for stage in stages.values():
        (setting,) = stage["Properties"]["MethodSettings"]
        assert (setting["ResourcePath"], setting["HttpMethod"]) == ("/*", "*")
        assert setting["ThrottlingRateLimit"] == {"Ref": "ApiThrottleRateLimit"}
        assert setting["ThrottlingBurstLimit"] == {"Ref": "ApiThrottleBurstLimit"}
    params = packaged.template["Parameters"]
    assert 0 < params["ApiThrottleRateLimit"]["Default"] <= 10_000
    assert params["ApiThrottleRateLimit"]["Default"] <= params["ApiThrottleBurstLimit"]["Default"]


# -- 15: monitoring -----------------------------------------------------------------------


def test_api_access_logs_go_to_an_expiring_group_without_headers(
    deployed: dict[str, Any],
) -> None:
    resources = deployed["Resources"]
    (stage,) = of_type(resources, "AWS::ApiGateway::Stage").values()
    setting = stage["Properties"]["AccessLogSetting"]
    group, attribute = setting["DestinationArn"]["Fn::GetAtt"]
    assert attribute == "Arn"
    assert resources[group]["Type"] == "AWS::Logs::LogGroup"
    assert resources[group]["Properties"]["RetentionInDays"] == 30
    fields = json.loads(setting["Format"])
    assert "$context.requestId" in fields.values()
    assert "$context.status" in fields.values()
    assert not [v for v in fields.values() if "header" in v.lower() or "error.message" in v]


def test_every_alarm_tells_the_operators_when_it_fires_and_when_it_clears(
    packaged: Packaged,
) -> None:
    found = alarms(packaged)
    assert len(found) > 1
    for name, props in found.items():
        assert props["AlarmActions"] == [OPS_TOPIC], name
        assert props["OKActions"] == [OPS_TOPIC], name
        expected = "breaching" if name == "HeartbeatAlarm" else "notBreaching"
        assert props["TreatMissingData"] == expected, name


def test_each_function_has_error_and_throttle_alarms(packaged: Packaged) -> None:
    watched: dict[str, set[str]] = defaultdict(set)
    for props in alarms(packaged).values():
        if props.get("Namespace") == "AWS/Lambda" and "Resource" not in dimensions(props):
            assert props["Statistic"] == "Sum" and props["Period"] == 300
            assert (props["Threshold"], props["ComparisonOperator"]) == (0, "GreaterThanThreshold")
            (function,) = dimensions(props)["FunctionName"].values()
            watched[function].add(props["MetricName"])
    assert watched == {name: {"Errors", "Throttles"} for name in FUNCTIONS}


def test_api_5xx_alarm_watches_this_stacks_api(packaged: Packaged) -> None:
    props = alarms(packaged)["Api5xxAlarm"]
    assert props["MetricName"] == "5XXError"
    api = packaged.resources["RestAPI"]["Properties"]
    # API Gateway's metrics name the API by its name: one per stack, not Chalice's title.
    assert dimensions(props) == {"ApiName": api["Name"], "Stage": api["StageName"]}
    assert api["Name"] == {"Ref": "AWS::StackName"}


def test_each_table_has_a_throttle_alarm_over_every_operation_the_code_makes(
    packaged: Packaged,
) -> None:
    per_table: dict[str, set[str]] = defaultdict(set)
    for props in alarms(packaged).values():
        metrics = props.get("Metrics", [])
        stats = [m["MetricStat"]["Metric"] for m in metrics if "MetricStat" in m]
        if not stats or stats[0]["Namespace"] != "AWS/DynamoDB":
            continue
        (expression,) = [m for m in metrics if m["ReturnData"]]
        assert expression["Expression"] == "SUM(FILL(METRICS(), 0))"
        for metric in stats:
            assert metric["MetricName"] == "ThrottledRequests"
            dims = {d["Name"]: d["Value"] for d in metric["Dimensions"]}
            per_table[dims["TableName"]["Ref"]].add(dims["Operation"])
    assert set(per_table) == {spec.logical_name for spec in ALL_TABLES.values()}
    # ThrottledRequests is published per operation: a missing one would hide throttling.
    for call in api_calls():
        if call.service == "dynamodb" and call.module.startswith("chalicelib/storage/"):
            assert call.operation in THROTTLE_OPERATIONS, call
            assert call.operation in per_table[target_of(call)], call


def test_client_fail_open_alarm_per_policy_category(packaged: Packaged) -> None:
    prod = load_config()["stages"]["prod"]["environment_variables"]
    categories = set(load_policy(prod["QUOTA_POLICY"]).categories)
    assert {"read", "write"} <= categories
    watched = set()
    for props in alarms(packaged).values():
        if props.get("MetricName") == "ClientFailOpen":
            assert props["Namespace"] == NAMESPACE
            dims = dimensions(props)
            assert set(dims) == {"service", "category"}  # exactly what the service emits
            assert dims["service"] == SERVICE
            assert (props["Statistic"], props["Period"]) == ("Sum", 300)
            assert (props["Threshold"], props["ComparisonOperator"]) == (0, "GreaterThanThreshold")
            watched.add(dims["category"])
    assert watched == categories


# -- 16: what must not be lost ----------------------------------------------------------


@pytest.mark.parametrize("key", ["tokens", "grants", "audit", "counters"])
def test_tables_that_cannot_be_recreated_are_kept(packaged: Packaged, key: str) -> None:
    table = packaged.resources[ALL_TABLES[key].logical_name]
    assert table["Properties"]["DeletionProtectionEnabled"] is True
    assert table["DeletionPolicy"] == "Retain"
    assert table["UpdateReplacePolicy"] == "Retain"


def test_expired_grants_are_cleaned_up_by_ttl(packaged: Packaged) -> None:
    grants = ALL_TABLES["grants"]
    assert grants.ttl_attribute is not None
    props = packaged.resources[grants.logical_name]["Properties"]
    assert props["TimeToLiveSpecification"] == {
        "AttributeName": grants.ttl_attribute,
        "Enabled": True,
    }


# -- 17: Lambda settings ------------------------------------------------------------------


def test_functions_run_a_current_python_on_arm64(packaged: Packaged) -> None:
    from chalice.deploy.packager import BaseLambdaDeploymentPackager  # noqa: PLC0415

    runtime = load_config()["lambda_python_version"]
    assert runtime in BaseLambdaDeploymentPackager._RUNTIME_TO_ABI  # Chalice packages for it
    assert tuple(int(part) for part in runtime.removeprefix("python").split(".")) >= (3, 13)
    for name in FUNCTIONS:
        props = packaged.resources[name]["Properties"]
        assert props["Runtime"] == runtime, name
        assert props["Architectures"] == ["arm64"], name


def test_deployment_zip_has_no_native_code(packaged: Packaged) -> None:
    # The zip is built on this machine for another runtime and architecture: only pure
    # Python is portable across them.
    with zipfile.ZipFile(packaged.zip) as archive:
        native = [n for n in archive.namelist() if n.endswith((".so", ".pyd", ".dylib"))]
    assert native == []


def test_handler_reservation_is_the_rate_times_a_checks_p99_not_the_burst(
    packaged: Packaged, deployed: dict[str, Any]
) -> None:
    """Defect class: capacity sized from the wrong figure (the burst, which says how many
    requests may arrive at once, not how many run at once: rate x duration)."""
    template = packaged.template
    params = template["Parameters"]
    reserved = packaged.resources["APIHandler"]["Properties"]["ReservedConcurrentExecutions"]
    condition, value, otherwise = reserved["Fn::If"]
    assert otherwise == {"Ref": "AWS::NoValue"}
    assert template["Conditions"][condition] == {
        "Fn::Equals": [{"Ref": "ReserveApiConcurrency"}, "true"]
    }
    param = params["ReserveApiConcurrency"]
    assert (param["Default"], param["AllowedValues"]) == ("true", ["true", "false"])
    mapping, by_rate, by_p99 = value["Fn::FindInMap"]
    assert (by_rate, by_p99) == ({"Ref": "ApiThrottleRateLimit"}, {"Ref": "CheckP99Ms"})
    # CloudFormation has no arithmetic: every rate and p99 a deploy may pass has its
    # reservation in the mapping (a missing pair would fail the deploy), by the formula
    # docs/operations.md gives: ceil(rate x p99 x 2), at least 10.
    table = template["Mappings"][mapping]
    rates = params["ApiThrottleRateLimit"]["AllowedValues"]
    p99s = params["CheckP99Ms"]["AllowedValues"]
    assert set(table) == {str(rate) for rate in rates}
    for rate in rates:
        assert set(table[str(rate)]) == {str(p99) for p99 in p99s}
        for p99 in p99s:
            assert table[str(rate)][str(p99)] == max(10, math.ceil(rate * p99 * 2 / 1000))
    default = table[str(params["ApiThrottleRateLimit"]["Default"])][
        str(params["CheckP99Ms"]["Default"])
    ]
    assert default == 40  # 200 checks/s x 100 ms x 2
    assert default < params["ApiThrottleBurstLimit"]["Default"]
    # SAM's transform keeps the look-up as it is.
    assert deployed["Mappings"] == template["Mappings"]
    assert deployed["Resources"]["APIHandler"]["Properties"]["ReservedConcurrentExecutions"] == (
        reserved
    )
