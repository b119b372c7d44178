"""Generate the CloudFormation template that `chalice package --merge-template` merges
into Chalice's SAM output: the tables (from `chalicelib.schema`, the one definition),
the alert topic and its email subscription, the alarms, API Gateway stage throttling,
access logs and error bodies, the Lambda runtime settings, the environment wiring, and
the Lambda log permissions.

The Lambda roles' data permissions are the per-stage policy files in `.chalice/`; they
reference the resources below by logical id (`Fn::GetAtt`), so they are scoped to this
stack's tables and topic only.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chalice.utils import to_cfn_resource_name  # noqa: E402

from chalicelib.observability import NAMESPACE, SERVICE  # noqa: E402
from chalicelib.policy import load_policy  # noqa: E402
from chalicelib.schema import ALL_TABLES, TableSpec  # noqa: E402

Template = dict[str, Any]

LOCAL_STAGE = "local"
TOPIC = "AlertTopic"
LINK_SECRET = "LinkSecret"
ALARM = "BlockedWritesAlarm"
REST_API = "RestAPI"  # Chalice's logical id for the API
API_HANDLER = "api_handler"  # Chalice's name for the function behind every route
ALARM_CATEGORY = "write"
# Audit records are the evidence behind every block and admin action; the tokens and
# grants cannot be recreated from anything else. These tables refuse deletion, and
# CloudFormation keeps them if the stack is deleted or a table replaced.
PROTECTED_TABLES = frozenset({"audit", "tokens", "grants"})
XRAY_POLICY = "arn:${AWS::Partition}:iam::aws:policy/AWSXrayWriteOnlyAccess"
ACCESS_LOG_GROUP = "ApiAccessLogGroup"
ALARM_PERIOD_SECONDS = 300
# Chalice's swagger is 2.0. Declaring it makes SAM drop the extra stage named `Stage`
# that it would otherwise create, unthrottled, beside the configured one.
OPENAPI_VERSION = "2.0"
RESERVE_CONCURRENCY = "ReserveApiConcurrency"
# ThrottledRequests exists only per table *and* operation: the alarm sums these.
THROTTLE_OPERATIONS = ("GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan")
# One JSON line per request. No header is logged: the Authorization header never is.
ACCESS_LOG_FORMAT = json.dumps(
    {
        "requestId": "$context.requestId",
        "time": "$context.requestTime",
        "ip": "$context.identity.sourceIp",
        "method": "$context.httpMethod",
        "path": "$context.resourcePath",
        "status": "$context.status",
        "latencyMs": "$context.responseLatency",
        "principal": "$context.authorizer.principalId",
        "errorType": "$context.error.responseType",
    },
    separators=(",", ":"),
)


@dataclass(frozen=True)
class GatewayError:
    """The static body API Gateway sends for one of its own error responses."""

    code: str
    message: str
    status: str | None = None  # None keeps API Gateway's status for that response type


# API Gateway's own refusals, in the service's error shape. Every message is static:
# API Gateway's default messages (`$context.error.message`) can quote the caller's
# Authorization header.
GATEWAY_ERRORS: dict[str, GatewayError] = {
    "DEFAULT_4XX": GatewayError("invalid_request", "The request was refused."),
    "DEFAULT_5XX": GatewayError("internal_error", "Internal error; retry shortly."),
    "BAD_REQUEST_BODY": GatewayError("invalid_request", "The request body is not valid."),
    "BAD_REQUEST_PARAMETERS": GatewayError(
        "invalid_request", "The request parameters are not valid."
    ),
    "UNAUTHORIZED": GatewayError(
        "unauthorized", "A token is required: send 'Authorization: Bearer <token>'."
    ),
    "ACCESS_DENIED": GatewayError(
        "forbidden", "The token is not valid, or does not allow this request."
    ),
    "EXPIRED_TOKEN": GatewayError("forbidden", "The token is not valid."),
    "INVALID_SIGNATURE": GatewayError("forbidden", "The token is not valid."),
    "INVALID_API_KEY": GatewayError("forbidden", "The token is not valid."),
    "WAF_FILTERED": GatewayError("forbidden", "The request was refused."),
    # In this API, API Gateway sends this for a path or method no route has.
    "MISSING_AUTHENTICATION_TOKEN": GatewayError(
        "not_found", "No route matches this method and path.", status="404"
    ),
    "RESOURCE_NOT_FOUND": GatewayError("not_found", "No route matches this method and path."),
    "REQUEST_TOO_LARGE": GatewayError("payload_too_large", "The request body is too large."),
    "UNSUPPORTED_MEDIA_TYPE": GatewayError(
        "unsupported_media_type", "The Content-Type must be application/json."
    ),
    "THROTTLED": GatewayError(
        "throttled",
        "Too many requests to the quota service; retry shortly. This is not a quota "
        "refusal: nothing was counted.",
    ),
    "QUOTA_EXCEEDED": GatewayError(
        "throttled", "Too many requests to the quota service; retry shortly."
    ),
    "AUTHORIZER_FAILURE": GatewayError("internal_error", "Internal error; retry shortly."),
    "AUTHORIZER_CONFIGURATION_ERROR": GatewayError(
        "internal_error", "Internal error; retry shortly."
    ),
    "API_CONFIGURATION_ERROR": GatewayError("internal_error", "Internal error; retry shortly."),
    "INTEGRATION_FAILURE": GatewayError(
        "upstream_unavailable", "The quota service did not answer; retry shortly."
    ),
    "INTEGRATION_TIMEOUT": GatewayError(
        "upstream_unavailable", "The quota service did not answer in time; retry shortly."
    ),
}
# A 429 from the gateway is transient: say when to retry (the service's own 503 does too).
RETRY_AFTER_SECONDS = 1
RETRY_AFTER_RESPONSES = frozenset({"THROTTLED", "QUOTA_EXCEEDED"})


@dataclass(frozen=True)
class LambdaNames:
    """Logical ids Chalice gives one Lambda function and its role and log group."""

    function: str
    role: str
    log_group: str


def lambda_names(function_name: str) -> LambdaNames:
    """Chalice 1.34's logical ids for a function (see chalice/package.py, appgraph.py)."""
    function = "APIHandler" if function_name == API_HANDLER else function_name
    return LambdaNames(
        function=to_cfn_resource_name(function),
        role=to_cfn_resource_name(f"{function_name}_role"),
        log_group=to_cfn_resource_name(f"{function_name}-log-group"),
    )


def app_function_names() -> list[str]:
    """The Chalice names of the app's Lambda functions: the API handler and authorizers."""
    from app import app  # noqa: PLC0415 (importing the app is the expensive step)

    names = [API_HANDLER] if app.routes else []
    names += [auth.name for auth in app.builtin_auth_handlers]
    names += [fn.name for fn in app.pure_lambda_functions]
    return names


def table_env_var(key: str) -> str:
    """The environment variable `chalicelib.settings` reads a table's name from."""
    return f"QUOTA_{key.upper()}_TABLE"


def table_resource(key: str, spec: TableSpec) -> Template:
    """One on-demand table with TTL and point-in-time recovery, from its schema."""
    properties: Template = dict(spec.create_table_kwargs("-"))
    del properties["TableName"]  # CloudFormation names it: several stacks per account
    properties["PointInTimeRecoverySpecification"] = {"PointInTimeRecoveryEnabled": True}
    if spec.ttl_attribute is not None:
        properties["TimeToLiveSpecification"] = {
            "AttributeName": spec.ttl_attribute,
            "Enabled": True,
        }
    resource: Template = {"Type": "AWS::DynamoDB::Table", "Properties": properties}
    if key in PROTECTED_TABLES:
        properties["DeletionProtectionEnabled"] = True
        resource["DeletionPolicy"] = "Retain"
        resource["UpdateReplacePolicy"] = "Retain"
    return resource


def parameters() -> Template:
    """Stack parameters: the alert address and the operational thresholds."""
    return {
        "AlertEmail": {
            "Type": "String",
            "Description": "Address that receives quota-exhaustion and alarm emails.",
            "AllowedPattern": r"^[^@\s]+@[^@\s]+\.[^@\s]+$",
            "ConstraintDescription": "an email address",
        },
        "ApiThrottleRateLimit": {
            "Type": "Number",
            "Default": 200,
            "MinValue": 1,
            "Description": "API Gateway steady-state requests per second, whole stage.",
        },
        "ApiThrottleBurstLimit": {
            "Type": "Number",
            "Default": 400,
            "MinValue": 1,
            "Description": "API Gateway burst capacity (requests), whole stage.",
        },
        "BlockedWritesAlarmThreshold": {
            "Type": "Number",
            "Default": 1,
            "MinValue": 1,
            "Description": "Blocked write checks in 5 minutes that raise the alarm.",
        },
        "PublicUrl": {
            "Type": "String",
            "Default": "",
            "AllowedPattern": r"^(https://[^\s/]+(/[^\s]*)?)?$",
            "Description": (
                "Base URL of the email's links and console (e.g. a custom domain); empty: "
                "the API's own execute-api URL, as the request shows it."
            ),
        },
        "ApiReservedConcurrency": {
            "Type": "Number",
            "Default": 50,
            "MinValue": 0,
            "Description": (
                "Concurrent executions reserved for (and capping) the API handler; "
                "0 reserves none, for accounts with a low concurrency limit."
            ),
        },
    }


def gateway_responses() -> Template:
    """SAM `GatewayResponses`: API Gateway's own errors with the service's static bodies."""
    responses: Template = {}
    for response_type, error in GATEWAY_ERRORS.items():
        body = {"error": {"code": error.code, "message": error.message}}
        response: Template = {
            "ResponseTemplates": {"application/json": json.dumps(body, separators=(",", ":"))}
        }
        if error.status is not None:
            response["StatusCode"] = error.status
        if response_type in RETRY_AFTER_RESPONSES:
            # SAM passes header values through as mapping expressions: a quoted literal.
            response["ResponseParameters"] = {
                "Headers": {"Retry-After": f"'{RETRY_AFTER_SECONDS}'"}
            }
        responses[response_type] = response
    return responses


def alarm(description: str, metric: Template, threshold: Any = 0) -> Template:
    """An alarm on one 5-minute sum that notifies the alert topic when over `threshold`."""
    comparison = "GreaterThanThreshold" if threshold == 0 else "GreaterThanOrEqualToThreshold"
    properties: Template = {
        "AlarmDescription": description,
        **metric,
        "EvaluationPeriods": 1,
        "Threshold": threshold,
        "ComparisonOperator": comparison,
        "TreatMissingData": "notBreaching",
        "AlarmActions": [{"Ref": TOPIC}],
    }
    return {"Type": "AWS::CloudWatch::Alarm", "Properties": properties}


def metric_sum(namespace: str, name: str, dimensions: dict[str, Any]) -> Template:
    """The alarm properties for a 5-minute sum of one metric."""
    return {
        "Namespace": namespace,
        "MetricName": name,
        "Dimensions": [{"Name": key, "Value": value} for key, value in dimensions.items()],
        "Statistic": "Sum",
        "Period": ALARM_PERIOD_SECONDS,
    }


def table_throttles(table: str) -> Template:
    """The alarm properties for a table's throttled requests, summed over operations."""
    queries: list[Template] = [
        {
            "Id": f"m{index}",
            "ReturnData": False,
            "MetricStat": {
                "Metric": {
                    "Namespace": "AWS/DynamoDB",
                    "MetricName": "ThrottledRequests",
                    "Dimensions": [
                        {"Name": "TableName", "Value": {"Ref": table}},
                        {"Name": "Operation", "Value": operation},
                    ],
                },
                "Period": ALARM_PERIOD_SECONDS,
                "Stat": "Sum",
            },
        }
        for index, operation in enumerate(THROTTLE_OPERATIONS)
    ]
    queries.append(
        {
            "Id": "throttled",
            "Expression": "SUM(FILL(METRICS(), 0))",
            "Label": "ThrottledRequests, all operations",
            "ReturnData": True,
        }
    )
    return {"Metrics": queries}


def operational_alarms(
    functions: list[LambdaNames], api_stage: str, categories: list[str]
) -> Template:
    """Alarms on Lambda errors and throttles, API 5XX, table throttling and client
    fail-open; each notifies the alert topic."""
    alarms: Template = {}
    for names in functions:
        function = {"FunctionName": {"Ref": names.function}}
        alarms[f"{names.function}ErrorsAlarm"] = alarm(
            f"The {names.function} Lambda function failed (Errors > 0 in 5 minutes).",
            metric_sum("AWS/Lambda", "Errors", function),
        )
        alarms[f"{names.function}ThrottlesAlarm"] = alarm(
            f"The {names.function} Lambda function was throttled (Throttles > 0 in 5 minutes).",
            metric_sum("AWS/Lambda", "Throttles", function),
        )
    alarms["Api5xxAlarm"] = alarm(
        "The API answered 5XX (5XXError > 0 in 5 minutes): clients fail closed on writes "
        "and open on reads.",
        metric_sum(
            "AWS/ApiGateway", "5XXError", {"ApiName": {"Ref": "AWS::StackName"}, "Stage": api_stage}
        ),
    )
    for spec in ALL_TABLES.values():
        alarms[f"{spec.logical_name}ThrottlesAlarm"] = alarm(
            f"DynamoDB throttled requests to {spec.logical_name} (> 0 in 5 minutes).",
            table_throttles(spec.logical_name),
        )
    for category in categories:
        alarms[f"ClientFailOpen{to_cfn_resource_name(category)}Alarm"] = alarm(
            f"MCP servers ran '{category}' tool calls uncounted because they could not "
            "reach mcp-quota (ClientFailOpen > 0 in 5 minutes).",
            metric_sum(NAMESPACE, "ClientFailOpen", {"service": SERVICE, "category": category}),
        )
    return alarms


def alarm_resource() -> Template:
    """Alarm on the blocked-write metric the service emits, notifying the alert topic."""
    return {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "AlarmDescription": (
                "MCP tool calls in the write category were refused by mcp-quota: "
                "an agent exhausted its write budget. See the audit trail."
            ),
            "Namespace": NAMESPACE,
            "MetricName": "ChecksBlocked",
            "Dimensions": [
                {"Name": "service", "Value": SERVICE},
                {"Name": "category", "Value": ALARM_CATEGORY},
            ],
            "Statistic": "Sum",
            "Period": 300,
            "EvaluationPeriods": 1,
            "Threshold": {"Ref": "BlockedWritesAlarmThreshold"},
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "notBreaching",
            "AlarmActions": [{"Ref": TOPIC}],
        },
    }


def logs_policy(names: LambdaNames) -> Template:
    """Log-writing rights for one function, on its own log group only.

    A separate policy, not part of the role: the log group's name depends on the
    function, which depends on the role, so an inline grant would be a cycle.
    """
    return {
        "Type": "AWS::IAM::Policy",
        "Properties": {
            "PolicyName": "write-own-logs",
            "Roles": [{"Ref": names.role}],
            "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "WriteOwnLogGroup",
                        "Effect": "Allow",
                        "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                        "Resource": [{"Fn::GetAtt": [names.log_group, "Arn"]}],
                    }
                ],
            },
        },
    }


def stage_environments(config: Template, stage: str) -> list[dict[str, str]]:
    """Every environment a stage's functions get: the app's, the stage's, per function."""
    stage_config = config["stages"][stage]
    shared = {**config.get("environment_variables", {})}
    shared.update(stage_config.get("environment_variables", {}))
    environments = [shared]
    for scope in (config, stage_config):
        for function in scope.get("lambda_functions", {}).values():
            environments.append({**shared, **function.get("environment_variables", {})})
    return environments


def refuse_development_settings(config: Template, stage: str) -> None:
    """Refuse a stage that would accept the fixed development tokens.

    Raises:
        SystemExit: the stage sets QUOTA_DEV_TOKENS, or QUOTA_STAGE=local.
    """
    for env in stage_environments(config, stage):
        if "QUOTA_DEV_TOKENS" in env:
            raise SystemExit(
                f"stage {stage!r} sets QUOTA_DEV_TOKENS: the fixed development tokens "
                "exist only under `make run`; remove it from .chalice/config.json"
            )
        if env.get("QUOTA_STAGE") == LOCAL_STAGE:
            raise SystemExit(
                f"stage {stage!r} sets QUOTA_STAGE=local, which is only for `make run`; "
                "set QUOTA_STAGE to the stage's name in .chalice/config.json"
            )


def policy_categories(config: Template, stage: str) -> list[str]:
    """The categories of the quota policy the stage deploys, in file order."""
    (env, *_) = stage_environments(config, stage)
    return list(load_policy(env.get("QUOTA_POLICY", "default.json")).categories)


def lambda_settings(runtime: str) -> Template:
    """Runtime for every function (Chalice 1.34 picks the building interpreter's)."""
    return {"Properties": {"Runtime": runtime}}


def build_merge_template(stage: str, config: Template, function_names: list[str]) -> Template:
    """The merge template for `stage`, given `.chalice/config.json` and the function names.

    Raises:
        SystemExit: the stage is the local one, unknown, lacks log retention or a runtime,
            or would accept the development tokens.
    """
    stages = config.get("stages", {})
    if stage == LOCAL_STAGE:
        raise SystemExit("the local stage runs only under `make run`; package a real stage")
    if stage not in stages:
        raise SystemExit(f"unknown stage {stage!r}; stages: {', '.join(sorted(stages))}")
    refuse_development_settings(config, stage)
    stage_config = stages[stage]
    retention = stage_config.get("log_retention_in_days", config.get("log_retention_in_days"))
    if not retention:
        raise SystemExit(f"stage {stage!r} needs log_retention_in_days: its log groups are ours")
    runtime = stage_config.get("lambda_python_version", config.get("lambda_python_version"))
    if not runtime:
        raise SystemExit(f"stage {stage!r} needs lambda_python_version, e.g. python3.13")
    xray = bool(stage_config.get("xray", config.get("xray", False)))
    api_stage = stage_config.get("api_gateway_stage", config.get("api_gateway_stage", "api"))
    functions = [lambda_names(name) for name in function_names]

    resources: Template = {
        spec.logical_name: table_resource(key, spec) for key, spec in ALL_TABLES.items()
    }
    resources[TOPIC] = {
        "Type": "AWS::SNS::Topic",
        "Properties": {"DisplayName": "mcp-quota alerts"},
    }
    resources["AlertEmailSubscription"] = {
        "Type": "AWS::SNS::Subscription",
        "Properties": {
            "TopicArn": {"Ref": TOPIC},
            "Protocol": "email",
            "Endpoint": {"Ref": "AlertEmail"},
        },
    }
    # Signs the email's one-click links: generated by CloudFormation, never in the
    # template in clear; the API handler reads it once per container.
    resources[LINK_SECRET] = {
        "Type": "AWS::SecretsManager::Secret",
        "Properties": {
            "Description": "mcp-quota: HMAC key of the one-click links in alert emails",
            "GenerateSecretString": {"PasswordLength": 64, "ExcludePunctuation": True},
        },
    }
    resources[ALARM] = alarm_resource()
    resources.update(operational_alarms(functions, api_stage, policy_categories(config, stage)))
    log_policies = [f"{names.role}Logs" for names in functions]
    for policy, names in zip(log_policies, functions, strict=True):
        resources[policy] = logs_policy(names)
    resources[ACCESS_LOG_GROUP] = {
        "Type": "AWS::Logs::LogGroup",
        "Properties": {"RetentionInDays": retention},
    }
    api_properties: Template = {
        # Named per stack, so that its CloudWatch metrics (ApiName) are this stack's only.
        "Name": {"Ref": "AWS::StackName"},
        "MethodSettings": [
            {
                "ResourcePath": "/*",
                "HttpMethod": "*",
                "ThrottlingRateLimit": {"Ref": "ApiThrottleRateLimit"},
                "ThrottlingBurstLimit": {"Ref": "ApiThrottleBurstLimit"},
            }
        ],
        "AccessLogSetting": {
            "DestinationArn": {"Fn::GetAtt": [ACCESS_LOG_GROUP, "Arn"]},
            "Format": ACCESS_LOG_FORMAT,
        },
        "GatewayResponses": gateway_responses(),
    }
    if xray:
        api_properties["TracingEnabled"] = True
    # The API is the only way in: it waits for the log grants, so no first request can
    # run before its function may log.
    resources[REST_API] = {"DependsOn": log_policies, "Properties": api_properties}
    for names in functions:
        # Chalice 1.34 names the API handler's log group `/aws/lambda/${ApiHandler}`,
        # but the function's logical id is `APIHandler`.
        resources[names.log_group] = {
            "Properties": {"LogGroupName": {"Fn::Sub": f"/aws/lambda/${{{names.function}}}"}}
        }
        resources[names.function] = lambda_settings(runtime)
        if xray:
            resources[names.role] = {
                "Properties": {"ManagedPolicyArns": [{"Fn::Sub": XRAY_POLICY}]}
            }
    handler = lambda_names(API_HANDLER).function
    if handler in resources:
        resources[handler]["Properties"]["ReservedConcurrentExecutions"] = {
            "Fn::If": [
                RESERVE_CONCURRENCY,
                {"Ref": "ApiReservedConcurrency"},
                {"Ref": "AWS::NoValue"},
            ]
        }

    variables: Template = {
        table_env_var(key): {"Ref": spec.logical_name} for key, spec in ALL_TABLES.items()
    }
    variables["QUOTA_TOPIC_ARN"] = {"Ref": TOPIC}
    variables["QUOTA_LINK_SECRET_ARN"] = {"Ref": LINK_SECRET}
    variables["QUOTA_PUBLIC_URL"] = {"Ref": "PublicUrl"}
    outputs: Template = {
        f"{spec.logical_name}Name": {"Value": {"Ref": spec.logical_name}}
        for spec in ALL_TABLES.values()
    }
    outputs["AlertTopicArn"] = {"Value": {"Ref": TOPIC}}

    return {
        "Description": f"mcp-quota ({stage}): per-session tool-call quotas for MCP servers",
        "Parameters": parameters(),
        "Conditions": {
            RESERVE_CONCURRENCY: {
                "Fn::Not": [{"Fn::Equals": [{"Ref": "ApiReservedConcurrency"}, 0]}]
            }
        },
        "Globals": {
            "Function": {"Environment": {"Variables": variables}},
            "Api": {"OpenApiVersion": OPENAPI_VERSION},
        },
        "Resources": resources,
        "Outputs": outputs,
    }


def load_config(project_dir: Path = ROOT) -> Template:
    """`.chalice/config.json`."""
    config: Template = json.loads((project_dir / ".chalice" / "config.json").read_text())
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--stage", required=True)
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    template = build_merge_template(args.stage, load_config(), app_function_names())
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(template, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
