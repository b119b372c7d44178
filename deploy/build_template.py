"""Generate the CloudFormation template that `chalice package --merge-template` merges
into Chalice's SAM output: the tables (from `chalicelib.schema`, the one definition, all
kept on deletion), the quota-mail and operators' topics, the notification queue and its
dead-letter queue, the alarms and dashboard (`deploy.monitoring`), API Gateway stage
throttling, a per-token rate rule (WAF), access logs and error bodies, the Lambda runtime,
logging, concurrency and canary settings, the environment wiring, and the Lambda log
permissions.

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

from chalicelib.auth.authorizer import UNVERIFIED_USAGE_KEY, USAGE_KEY_PREFIX  # noqa: E402
from chalicelib.auth.roles import SERVER_ONLY  # noqa: E402
from chalicelib.quota.policy import load_policy  # noqa: E402
from chalicelib.schema import ALL_TABLES, TableSpec  # noqa: E402
from deploy import capacity, sign_in  # noqa: E402
from deploy.monitoring import (  # noqa: E402
    DEAD_LETTERS,
    HEARTBEAT,
    NOTIFY_QUEUE,
    OPS_TOPIC,
    RESERVE_CONCURRENCY,
    THROTTLE_OPERATIONS,
    alarm,
    api_dimensions,
    blocked_writes_alarm,
    canary_alarms,
    concurrency_alarm,
    dashboard,
    delivery_alarms,
    fail_open_alarms,
    function_alarms,
    heartbeat_alarm,
    latency_alarm,
    metric_sum,
    table_throttles,
)

__all__ = ["THROTTLE_OPERATIONS", "build_merge_template", "load_config"]

Template = dict[str, Any]

LOCAL_STAGE = "local"
TOPIC = "AlertTopic"
LINK_SECRET = "LinkSecret"
ALARM = "BlockedWritesAlarm"
REST_API = "RestAPI"  # Chalice's logical id for the API
API_HANDLER = "api_handler"  # Chalice's name for the function behind every route
NOTIFIER = "notifier"  # Chalice's name for the function that sends the queued emails
ALARM_CATEGORY = "write"
# Every table is kept: audit records are the evidence behind every block and admin
# action; tokens and grants cannot be recreated from anything else; the counters table
# holds suspensions, raises and the single-use records of emailed links besides the
# counters, so replacing it would reset every budget and lift every suspension. Each
# refuses deletion, and CloudFormation keeps it if the stack is deleted or it is replaced.
PROTECTED_TABLES = frozenset({"audit", "tokens", "grants", "counters"})
XRAY_POLICY = "arn:${AWS::Partition}:iam::aws:policy/AWSXrayWriteOnlyAccess"
ACCESS_LOG_GROUP = "ApiAccessLogGroup"
# Chalice's swagger is 2.0. Declaring it makes SAM drop the extra stage named `Stage`
# that it would otherwise create, unthrottled, beside the configured one.
OPENAPI_VERSION = "2.0"
RATE_LIMIT_TOKENS = "RateLimitTokens"
TOKEN_RATE_ACL = "TokenRateLimitAcl"
TENANT_PLAN = "TenantUsagePlan"
PRE_TRAFFIC = "PreTrafficHook"
UNVERIFIED_KEY = "UnverifiedUsageKey"
# The authorizer's accepted header, lowercased (RFC 6750's b64token): anything else is
# counted by address. PCRE, as WAF reads it.
WELL_FORMED_AUTHORIZATION = r"^bearer [a-z0-9._~+/-]+=*$"
# The per-token key folds what the authorizer folds: the scheme's case (LOWERCASE; the
# token's case too, which only merges tokens that differ in case alone) and runs of
# whitespace (COMPRESS_WHITE_SPACE), so each token is one bucket however it is spelled.
TOKEN_KEY_TRANSFORMATIONS = ("LOWERCASE", "COMPRESS_WHITE_SPACE")
# Canary: 10 % of calls go to the new version for 5 minutes; the new version's own errors
# (one-minute alarms) roll it back (docs/operations.md, "Deploys and rollback").
ALIAS = "live"
DEPLOYMENT_TYPE = "Canary10Percent5Minutes"
CANARY_FUNCTIONS = (API_HANDLER, "bearer")
# SQS: a message is tried this often before it goes to the dead-letter queue; it stays
# invisible for 6 function timeouts while one try runs (AWS's advice for event sources).
NOTIFY_MAX_RECEIVES = 5
NOTIFIER_CONCURRENCY = 2  # SQS event sources' least MaximumConcurrency
DEAD_LETTER_RETENTION_SECONDS = 14 * 86_400
THROTTLED_BODY = json.dumps(
    {
        "error": {
            "code": "throttled",
            "message": "Too many requests with this token; retry shortly. This is not a "
            "quota refusal: nothing was counted.",
        }
    },
    separators=(",", ":"),
)
ADDRESS_THROTTLED_BODY = json.dumps(
    {
        "error": {
            "code": "throttled",
            "message": "Too many requests without a valid 'Authorization: Bearer <token>' "
            "from this address; retry later.",
        }
    },
    separators=(",", ":"),
)
LOGGING_CONFIG = {"LogFormat": "JSON", "SystemLogLevel": "WARN", "ApplicationLogLevel": "INFO"}
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
        "forbidden", f"The token is not valid, or does not allow this request. {SERVER_ONLY}"
    ),
    "EXPIRED_TOKEN": GatewayError("forbidden", "The token is not valid."),
    "INVALID_SIGNATURE": GatewayError("forbidden", "The token is not valid."),
    # The authorizer named a tenant usage key the stack does not hold (`make tenant-limit`).
    "INVALID_API_KEY": GatewayError(
        "forbidden",
        "This tenant has no request limit on this stack yet; its operators must add it.",
    ),
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
    names += [source.name for source in app.event_sources]
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
            "Description": "Address that receives the quota-exhaustion emails (tenants' admins).",
            "AllowedPattern": r"^[^@\s]+@[^@\s]+\.[^@\s]+$",
            "ConstraintDescription": "an email address",
        },
        "OpsEmail": {
            "Type": "String",
            "Description": "Address that receives the alarms (the service's operators).",
            "AllowedPattern": r"^[^@\s]+@[^@\s]+\.[^@\s]+$",
            "ConstraintDescription": "an email address",
        },
        "EndpointType": {
            "Type": "String",
            "Default": "REGIONAL",
            "AllowedValues": ["REGIONAL", "EDGE"],
            "Description": (
                "REGIONAL for MCP servers in or near this region (no CloudFront hop); "
                "EDGE for servers spread over the world."
            ),
        },
        "ApiThrottleBurstLimit": {
            "Type": "Number",
            "Default": 400,
            "MinValue": 1,
            "Description": "API Gateway burst capacity (requests), per method.",
        },
        "TenantRateLimit": {
            "Type": "Number",
            "Default": 50,
            "MinValue": 1,
            "Description": (
                "Requests per second one tenant may send, all its tokens together (its "
                "usage-plan key; `make tenant-limit` adds a tenant)."
            ),
        },
        "TenantBurstLimit": {
            "Type": "Number",
            "Default": 100,
            "MinValue": 1,
            "Description": "Burst capacity (requests) of one tenant, all its tokens together.",
        },
        "AddressRateLimitPerMinute": {
            "Type": "Number",
            "Default": 300,
            "MinValue": 10,
            "Description": (
                "Requests per minute one client address may send with a missing or "
                "malformed Authorization header (pages, junk, floods) before WAF answers 429."
            ),
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
        "ReserveApiConcurrency": {
            "Type": "String",
            "Default": "true",
            "AllowedValues": ["true", "false"],
            "Description": (
                "true: reserve executions for the API handler from ApiThrottleRateLimit x "
                "CheckP99Ms (see CheckP99Ms; the account needs that many plus 100 "
                "unreserved); false: reserve none."
            ),
        },
        "TokenRateLimitPerMinute": {
            "Type": "Number",
            "Default": 1200,
            "MinValue": 0,
            "Description": (
                "Requests per minute one bearer token may send before WAF answers it 429 "
                "(a tenth of a method's ApiThrottleRateLimit by default); 0: no web ACL."
            ),
        },
        "LatencyP99AlarmMs": {
            "Type": "Number",
            "Default": 1000,
            "MinValue": 1,
            "Description": "The API's p99 latency over 5 minutes that raises an alarm (ms).",
        },
        "HeartbeatMinutes": {
            "Type": "Number",
            "Default": 0,
            "MinValue": 0,
            "MaxValue": 1440,
            "Description": "Alarm when no request arrives for this many minutes; 0: no alarm.",
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
    """Runtime and logging for every function (Chalice 1.34 picks the building
    interpreter's runtime, and knows no LoggingConfig): JSON lines, and no START, END or
    REPORT line per invocation (system logs at WARN)."""
    return {"Properties": {"Runtime": runtime, "LoggingConfig": dict(LOGGING_CONFIG)}}


def canary(function: str, alarms: list[str]) -> Template:
    """A published alias the API calls, and CodeDeploy shifting it: 10 % for 5 minutes
    once the pre-traffic check passed, rolled back if any of `alarms` fires meanwhile."""
    return {
        "AutoPublishAlias": ALIAS,
        "DeploymentPreference": {
            "Type": DEPLOYMENT_TYPE,
            "Alarms": [{"Ref": name} for name in alarms],
            "Hooks": {"PreTraffic": {"Ref": PRE_TRAFFIC}},
        },
    }


def pre_traffic_hook(runtime: str, retention: int) -> Template:
    """CodeDeploy's PreTraffic hook (deploy/pre_traffic.py, inlined): invokes the new
    versions of the API handler and the authorizer before any traffic moves. Named
    `CodeDeployHook_*`: SAM's CodeDeploy role may invoke only such functions."""
    handler, authorizer = (lambda_names(name).function for name in CANARY_FUNCTIONS)
    groups = [f"{function}DeploymentGroup" for function in (handler, authorizer)]
    group_arn = (
        "arn:${AWS::Partition}:codedeploy:${AWS::Region}:${AWS::AccountId}:"
        "deploymentgroup:${ServerlessDeploymentApplication}/${%s}"
    )
    role = f"{PRE_TRAFFIC}Role"
    log_group = f"{PRE_TRAFFIC}LogGroup"
    statements = [
        {
            "Sid": "InvokeTheNewVersions",
            "Effect": "Allow",
            "Action": ["lambda:InvokeFunction"],
            "Resource": [{"Ref": f"{handler}.Version"}, {"Ref": f"{authorizer}.Version"}],
        },
        {
            "Sid": "ReportTheCheck",
            "Effect": "Allow",
            "Action": ["codedeploy:PutLifecycleEventHookExecutionStatus"],
            "Resource": [{"Fn::Sub": group_arn % group} for group in groups],
        },
        {
            "Sid": "WriteOwnLogGroup",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": [{"Fn::GetAtt": [log_group, "Arn"]}],
        },
    ]
    return {
        log_group: {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {"RetentionInDays": retention},
        },
        role: {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "lambda.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                },
                "Policies": [
                    {
                        "PolicyName": "pre-traffic-check",
                        "PolicyDocument": {"Version": "2012-10-17", "Statement": statements},
                    }
                ],
            },
        },
        PRE_TRAFFIC: {
            "Type": "AWS::Serverless::Function",
            "Properties": {
                "FunctionName": {"Fn::Sub": "CodeDeployHook_${AWS::StackName}"},
                "Description": "mcp-quota: checks a new version before CodeDeploy shifts to it",
                "InlineCode": (ROOT / "deploy" / "pre_traffic.py").read_text(),
                "Handler": "index.handler",
                "Runtime": runtime,
                "Architectures": ["arm64"],
                "MemorySize": 128,
                "Timeout": 60,  # two cold invocations at most
                "Role": {"Fn::GetAtt": [role, "Arn"]},
                "LoggingConfig": {**LOGGING_CONFIG, "LogGroup": {"Ref": log_group}},
                "Environment": {
                    "Variables": {
                        "API_VERSION": {"Ref": f"{handler}.Version"},
                        "AUTHORIZER_VERSION": {"Ref": f"{authorizer}.Version"},
                    }
                },
            },
        },
    }


def topics() -> Template:
    """The tenants' quota mail and the operators' alarms, each with its own address."""
    return {
        TOPIC: {"Type": "AWS::SNS::Topic", "Properties": {"DisplayName": "mcp-quota alerts"}},
        "AlertEmailSubscription": {
            "Type": "AWS::SNS::Subscription",
            "Properties": {
                "TopicArn": {"Ref": TOPIC},
                "Protocol": "email",
                "Endpoint": {"Ref": "AlertEmail"},
            },
        },
        OPS_TOPIC: {"Type": "AWS::SNS::Topic", "Properties": {"DisplayName": "mcp-quota ops"}},
        "OpsEmailSubscription": {
            "Type": "AWS::SNS::Subscription",
            "Properties": {
                "TopicArn": {"Ref": OPS_TOPIC},
                "Protocol": "email",
                "Endpoint": {"Ref": "OpsEmail"},
            },
        },
    }


def notification_queues(notifier_timeout: int) -> Template:
    """The refusals' emails wait here for the notifier; what it cannot send after
    NOTIFY_MAX_RECEIVES tries is kept 14 days in the dead-letter queue."""
    return {
        NOTIFY_QUEUE: {
            "Type": "AWS::SQS::Queue",
            "Properties": {
                "SqsManagedSseEnabled": True,
                "VisibilityTimeout": 6 * notifier_timeout,
                "RedrivePolicy": {
                    "deadLetterTargetArn": {"Fn::GetAtt": [DEAD_LETTERS, "Arn"]},
                    "maxReceiveCount": NOTIFY_MAX_RECEIVES,
                },
            },
        },
        DEAD_LETTERS: {
            "Type": "AWS::SQS::Queue",
            "Properties": {
                "SqsManagedSseEnabled": True,
                "MessageRetentionPeriod": DEAD_LETTER_RETENTION_SECONDS,
            },
        },
    }


def _throttle_action(body_key: str) -> Template:
    """WAF's 429 with Retry-After and one of the ACL's static bodies."""
    return {
        "Block": {
            "CustomResponse": {
                "ResponseCode": 429,
                "CustomResponseBodyKey": body_key,
                "ResponseHeaders": [{"Name": "Retry-After", "Value": str(RETRY_AFTER_SECONDS)}],
            }
        }
    }


def _transformations(*names: str) -> list[Template]:
    return [{"Priority": index, "Type": name} for index, name in enumerate(names)]


def token_rate_limit(api_stage: str) -> Template:
    """WAF on the stage: a token past TokenRateLimitPerMinute gets 429 with Retry-After,
    alone, however its header is spelled (the key folds case and whitespace, as the
    authorizer does); a client address past AddressRateLimitPerMinute with a missing or
    malformed Authorization header gets 429 too (junk tokens and floods are not each a
    bucket of their own). Tenants' own limits are the usage plan (`tenant_usage_plan`)."""
    visibility = {
        "SampledRequestsEnabled": True,
        "CloudWatchMetricsEnabled": True,
        "MetricName": "mcp-quota-token-rate",
    }
    per_token = {
        "Name": "per-token-rate",
        "Priority": 0,
        "Statement": {
            "RateBasedStatement": {
                "Limit": {"Ref": "TokenRateLimitPerMinute"},
                "EvaluationWindowSec": 60,
                "AggregateKeyType": "CUSTOM_KEYS",
                "CustomKeys": [
                    {
                        "Header": {
                            "Name": "authorization",
                            "TextTransformations": _transformations(*TOKEN_KEY_TRANSFORMATIONS),
                        }
                    }
                ],
            }
        },
        "Action": _throttle_action("throttled"),
        "VisibilityConfig": {**visibility, "MetricName": "mcp-quota-per-token"},
    }
    well_formed = {
        "RegexMatchStatement": {
            "RegexString": WELL_FORMED_AUTHORIZATION,
            "FieldToMatch": {"SingleHeader": {"Name": "authorization"}},
            "TextTransformations": _transformations("LOWERCASE"),
        }
    }
    per_address = {
        "Name": "per-address-rate",
        "Priority": 1,
        "Statement": {
            "RateBasedStatement": {
                "Limit": {"Ref": "AddressRateLimitPerMinute"},
                "EvaluationWindowSec": 60,
                "AggregateKeyType": "IP",
                # A missing header does not match the regex, so it is in scope too.
                "ScopeDownStatement": {"NotStatement": {"Statement": well_formed}},
            }
        },
        "Action": _throttle_action("address_throttled"),
        "VisibilityConfig": {**visibility, "MetricName": "mcp-quota-per-address"},
    }
    acl: Template = {
        "Type": "AWS::WAFv2::WebACL",
        "Condition": RATE_LIMIT_TOKENS,
        "Properties": {
            "Scope": "REGIONAL",  # API Gateway's, for EDGE endpoints too
            "DefaultAction": {"Allow": {}},
            "VisibilityConfig": visibility,
            "CustomResponseBodies": {
                "throttled": {"ContentType": "APPLICATION_JSON", "Content": THROTTLED_BODY},
                "address_throttled": {
                    "ContentType": "APPLICATION_JSON",
                    "Content": ADDRESS_THROTTLED_BODY,
                },
            },
            "Rules": [per_token, per_address],
        },
    }
    stage_arn = (
        "arn:${AWS::Partition}:apigateway:${AWS::Region}::"
        f"/restapis/${{{REST_API}}}/stages/{api_stage}"
    )
    association: Template = {
        "Type": "AWS::WAFv2::WebACLAssociation",
        "Condition": RATE_LIMIT_TOKENS,
        # SAM's logical id for the stage it makes of the API: the association needs it.
        "DependsOn": [f"{REST_API}{api_stage}Stage"],
        "Properties": {
            "ResourceArn": {"Fn::Sub": stage_arn},
            "WebACLArn": {"Fn::GetAtt": [TOKEN_RATE_ACL, "Arn"]},
        },
    }
    return {TOKEN_RATE_ACL: acl, "TokenRateLimitAssociation": association}


def tenant_usage_plan(api_stage: str) -> Template:
    """Each tenant's own request limit: one usage plan whose throttle applies per API key,
    and the authorizer naming the tenant's key (`apiKeySource: AUTHORIZER`, set by
    `finish`). Tenants' keys are added by `make tenant-limit` (deploy/tenant_limit.py);
    the stack holds the key of requests the authorizer could not attribute (the token
    store was down: the route answers them itself)."""
    stage = f"{REST_API}{api_stage}Stage"
    return {
        TENANT_PLAN: {
            "Type": "AWS::ApiGateway::UsagePlan",
            "DependsOn": [stage],
            "Properties": {
                "UsagePlanName": {"Fn::Sub": "${AWS::StackName}-tenants"},
                "Description": "mcp-quota: each tenant's request limit (one API key each)",
                "ApiStages": [{"ApiId": {"Ref": REST_API}, "Stage": api_stage}],
                "Throttle": {
                    "RateLimit": {"Ref": "TenantRateLimit"},
                    "BurstLimit": {"Ref": "TenantBurstLimit"},
                },
            },
        },
        UNVERIFIED_KEY: {
            "Type": "AWS::ApiGateway::ApiKey",
            "Properties": {
                "Name": {"Fn::Sub": f"${{AWS::StackName}}-{UNVERIFIED_USAGE_KEY}"},
                "Description": "mcp-quota: requests the authorizer could not attribute",
                "Enabled": True,
                "Value": {
                    "Fn::Sub": f"{USAGE_KEY_PREFIX}${{AWS::StackName}}-{UNVERIFIED_USAGE_KEY}"
                },
            },
        },
        f"{UNVERIFIED_KEY}InPlan": {
            "Type": "AWS::ApiGateway::UsagePlanKey",
            "Properties": {
                "KeyId": {"Ref": UNVERIFIED_KEY},
                "KeyType": "API_KEY",
                "UsagePlanId": {"Ref": TENANT_PLAN},
            },
        },
    }


def meter_tenants(definition: Template) -> Template:
    """`definition` (the API's swagger) with every method behind the token authorizer
    metered by the usage-plan key the authorizer names."""
    definition["x-amazon-apigateway-api-key-source"] = "AUTHORIZER"
    definition.setdefault("securityDefinitions", {})["api_key"] = {
        "type": "apiKey",
        "name": "x-api-key",
        "in": "header",
    }
    for methods in definition["paths"].values():
        for method in methods.values():
            security = method.get("security", []) if isinstance(method, dict) else []
            if {"bearer": []} in security and {"api_key": []} not in security:
                security.append({"api_key": []})  # as Chalice writes api_key_required
    return definition


def operational_alarms(
    functions: list[LambdaNames], api_stage: str, categories: list[str]
) -> Template:
    """Every alarm of the stack; each tells the operators' topic when it fires and clears."""
    alarms: Template = {ALARM: blocked_writes_alarm(ALARM_CATEGORY)}
    for names in functions:
        alarms.update(function_alarms(names.function))
    alarms["Api5xxAlarm"] = alarm(
        "The API answered 5XX (5XXError > 0 in 5 minutes): clients retry within their "
        "deadline, then fail closed on writes and open on reads.",
        metric_sum("AWS/ApiGateway", "5XXError", api_dimensions(api_stage)),
    )
    alarms["ApiLatencyP99Alarm"] = latency_alarm(api_stage)
    for spec in ALL_TABLES.values():
        alarms[f"{spec.logical_name}ThrottlesAlarm"] = alarm(
            f"DynamoDB throttled requests to {spec.logical_name} (> 0 in 5 minutes).",
            table_throttles(spec.logical_name),
        )
    alarms.update(fail_open_alarms(categories))
    # Every category: a suspension's mail goes out whatever the category's `notify`.
    alarms.update(delivery_alarms(categories))
    handler = lambda_names(API_HANDLER).function
    if any(names.function == handler for names in functions):
        alarms["ApiConcurrencyAlarm"] = concurrency_alarm(handler, capacity.reservation())
    alarms["HeartbeatAlarm"] = heartbeat_alarm(api_stage)
    return alarms


def function_resources(functions: list[LambdaNames], runtime: str, xray: bool) -> Template:
    """Each function's runtime, logging, log group and X-Ray grant; the canary of those
    the API calls; the API handler's reserved concurrency."""
    resources: Template = {}
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
    for name in CANARY_FUNCTIONS:
        function = lambda_names(name).function
        if function in resources:
            rollback = canary_alarms(function, ALIAS, faults=name == API_HANDLER)
            resources.update(rollback)
            resources[function]["Properties"].update(canary(function, list(rollback)))
    handler = lambda_names(API_HANDLER).function
    if handler in resources:
        # From the steady rate and a check's p99 (deploy/capacity.py), not the burst.
        resources[handler]["Properties"]["ReservedConcurrentExecutions"] = {
            "Fn::If": [RESERVE_CONCURRENCY, capacity.reservation(), {"Ref": "AWS::NoValue"}]
        }
    return resources


def notifier_resources(notifier: str, timeout: int) -> Template:
    """The queues, and the notifier's event source answering per message (`finish`
    points it at the stack's own queue)."""
    resources = notification_queues(timeout)
    resources[notifier] = {
        "Properties": {
            # Mail is a trickle: a cap keeps a flood of refusals from taking the account's
            # concurrency, and the event source never invokes past it (no throttles).
            "ReservedConcurrentExecutions": NOTIFIER_CONCURRENCY,
            "Events": {
                f"{notifier}SqsEventSource": {
                    "Properties": {
                        "FunctionResponseTypes": ["ReportBatchItemFailures"],
                        "ScalingConfig": {"MaximumConcurrency": NOTIFIER_CONCURRENCY},
                    }
                }
            },
        }
    }
    return resources


def alias_id(function: str) -> str:
    """SAM's logical id for a function's AutoPublishAlias. Named, not `Function.Alias`:
    cfn-lint does not resolve that inside an API's DefinitionBody; SAM does both."""
    return f"{function}Alias{ALIAS}"


def _aliased(value: Any, functions: list[str]) -> Any:
    """`value` with every `${Function.Arn}` of `functions` in a Fn::Sub made the alias."""
    if isinstance(value, dict):
        return {key: _aliased(item, functions) for key, item in value.items()}
    if isinstance(value, list):
        return [_aliased(item, functions) for item in value]
    if isinstance(value, str):
        for function in functions:
            value = value.replace(f"${{{function}.Arn}}", f"${{{alias_id(function)}}}")
    return value


def finish(sam: Template) -> Template:
    """What the merge cannot say, on Chalice's SAM output (a merge only adds to dicts):
    the API and its authorizer call the canary-shifted aliases, and API Gateway may
    invoke exactly those; the notifier reads the stack's own queue, not one by name."""
    resources = sam["Resources"]
    canaried = [lambda_names(name).function for name in CANARY_FUNCTIONS]
    canaried = [name for name in canaried if name in resources]
    api = resources[REST_API]["Properties"]
    api["DefinitionBody"] = meter_tenants(_aliased(api["DefinitionBody"], canaried))
    for function in canaried:
        permission = resources.get(f"{function}InvokePermission")
        if permission is not None:
            permission["Properties"]["FunctionName"] = {"Ref": alias_id(function)}
    notifier = lambda_names(NOTIFIER).function
    if notifier in resources:
        source = resources[notifier]["Properties"]["Events"][f"{notifier}SqsEventSource"]
        source["Properties"]["Queue"] = {"Fn::GetAtt": [NOTIFY_QUEUE, "Arn"]}
    return sam


def api_properties(xray: bool) -> Template:
    """The API's settings beyond Chalice's: its name, endpoint type, stage throttling,
    access log, and API Gateway's own errors in the service's shape."""
    properties: Template = {
        # Named per stack, so that its CloudWatch metrics (ApiName) are this stack's only.
        "Name": {"Ref": "AWS::StackName"},
        "EndpointConfiguration": {"Type": {"Ref": "EndpointType"}},
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
        properties["TracingEnabled"] = True
    return properties


def function_timeout(config: Template, stage: str, function: str) -> int:
    """A function's Lambda timeout in the stage (Chalice's default: 60 s)."""
    stage_config = config["stages"][stage]
    for scope in (stage_config, config):
        own = scope.get("lambda_functions", {}).get(function, {})
        if "lambda_timeout" in own:
            return int(own["lambda_timeout"])
    return int(stage_config.get("lambda_timeout", config.get("lambda_timeout", 60)))


def wiring_and_outputs(with_notifier: bool) -> tuple[Template, Template]:
    """The functions' environment (this stack's resources) and the stack's outputs."""
    variables: Template = {
        **{table_env_var(key): {"Ref": spec.logical_name} for key, spec in ALL_TABLES.items()},
        **sign_in.variables(),
    }
    variables["QUOTA_TOPIC_ARN"] = {"Ref": TOPIC}
    variables["QUOTA_LINK_SECRET_ARN"] = {"Ref": LINK_SECRET}
    variables["QUOTA_PUBLIC_URL"] = {"Ref": "PublicUrl"}
    variables["QUOTA_USAGE_KEY_SCOPE"] = {"Ref": "AWS::StackName"}  # the usage keys' names
    outputs: Template = {
        **{
            f"{spec.logical_name}Name": {"Value": {"Ref": spec.logical_name}}
            for spec in ALL_TABLES.values()
        },
        **sign_in.outputs(),
    }
    outputs["AlertTopicArn"] = {"Value": {"Ref": TOPIC}}
    outputs["OpsTopicArn"] = {"Value": {"Ref": OPS_TOPIC}}
    outputs["LinkSecretArn"] = {"Value": {"Ref": LINK_SECRET}}  # make rotate-link-key
    outputs["TenantUsagePlanId"] = {"Value": {"Ref": TENANT_PLAN}}  # make tenant-limit
    if with_notifier:
        variables["QUOTA_NOTIFY_QUEUE_URL"] = {"Ref": NOTIFY_QUEUE}
        outputs["NotificationDeadLetterQueueUrl"] = {"Value": {"Ref": DEAD_LETTERS}}
    return variables, outputs


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
    (env, *_) = stage_environments(config, stage)
    policy = load_policy(env.get("QUOTA_POLICY", "default.json"))
    categories = list(policy.categories)

    resources: Template = {
        spec.logical_name: table_resource(key, spec) for key, spec in ALL_TABLES.items()
    }
    resources.update(topics())
    # Signs the email's one-click links: generated by CloudFormation, never in the
    # template in clear; the API handler reads it once per container.
    resources[LINK_SECRET] = {
        "Type": "AWS::SecretsManager::Secret",
        "Properties": {
            "Description": "mcp-quota: HMAC key of the one-click links in alert emails",
            "GenerateSecretString": {"PasswordLength": 64, "ExcludePunctuation": True},
        },
    }
    resources.update(operational_alarms(functions, api_stage, categories))
    log_policies = [f"{names.role}Logs" for names in functions]
    for policy_name, names in zip(log_policies, functions, strict=True):
        resources[policy_name] = logs_policy(names)
    resources[ACCESS_LOG_GROUP] = {
        "Type": "AWS::Logs::LogGroup",
        "Properties": {"RetentionInDays": retention},
    }
    # The API is the only way in: it waits for the log grants, so no first request can
    # run before its function may log.
    resources[REST_API] = {"DependsOn": log_policies, "Properties": api_properties(xray)}
    resources.update(token_rate_limit(api_stage))
    resources.update(tenant_usage_plan(api_stage))
    resources.update(function_resources(functions, runtime, xray))
    canaried = [lambda_names(name).function for name in CANARY_FUNCTIONS]
    if all(function in resources for function in canaried):
        resources.update(pre_traffic_hook(runtime, retention))
    handler = lambda_names(API_HANDLER).function
    notifier = lambda_names(NOTIFIER).function
    if notifier in resources:
        wiring = notifier_resources(notifier, function_timeout(config, stage, NOTIFIER))
        resources[notifier]["Properties"].update(wiring.pop(notifier)["Properties"])
        resources.update(wiring)
    resources["Dashboard"] = dashboard(api_stage, handler, [names.function for names in functions])

    variables, outputs = wiring_and_outputs(notifier in resources)
    return {
        "Description": f"mcp-quota ({stage}): per-session tool-call quotas for MCP servers",
        "Parameters": {**parameters(), **capacity.parameters(), **sign_in.parameters()},
        "Mappings": capacity.mappings(),
        "Conditions": {
            RESERVE_CONCURRENCY: {"Fn::Equals": [{"Ref": "ReserveApiConcurrency"}, "true"]},
            RATE_LIMIT_TOKENS: {
                "Fn::Not": [{"Fn::Equals": [{"Ref": "TokenRateLimitPerMinute"}, 0]}]
            },
            HEARTBEAT: {"Fn::Not": [{"Fn::Equals": [{"Ref": "HeartbeatMinutes"}, 0]}]},
            **sign_in.conditions(),
        },
        "Globals": {
            "Function": {"Environment": {"Variables": variables}},
            "Api": {"OpenApiVersion": OPENAPI_VERSION},
        },
        # Every function that authenticates a caller (not the notifier) may find the client.
        "Resources": {
            **resources,
            **sign_in.resources(
                REST_API, api_stage, stage, [n.role for n in functions if n.function != notifier]
            ),
        },
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
