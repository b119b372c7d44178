"""Generate the CloudFormation template that `chalice package --merge-template` merges
into Chalice's SAM output: the tables (from `chalicelib.schema`, the one definition),
the alert topic and its email subscription, the blocked-write alarm, API Gateway stage
throttling, the environment wiring, and the Lambda log permissions.

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
from chalicelib.schema import ALL_TABLES, TableSpec  # noqa: E402

Template = dict[str, Any]

LOCAL_STAGE = "local"
TOPIC = "AlertTopic"
ALARM = "BlockedWritesAlarm"
REST_API = "RestAPI"  # Chalice's logical id for the API
API_HANDLER = "api_handler"  # Chalice's name for the function behind every route
ALARM_CATEGORY = "write"
# Audit records are the evidence behind every block and admin action: the table refuses
# deletion, and CloudFormation keeps it if the stack is deleted or the table replaced.
PROTECTED_TABLES = frozenset({"audit"})
XRAY_POLICY = "arn:${AWS::Partition}:iam::aws:policy/AWSXrayWriteOnlyAccess"


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
    }


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


def build_merge_template(stage: str, config: Template, function_names: list[str]) -> Template:
    """The merge template for `stage`, given `.chalice/config.json` and the function names.

    Raises:
        SystemExit: the stage is the local one, unknown, or lacks log retention.
    """
    stages = config.get("stages", {})
    if stage == LOCAL_STAGE:
        raise SystemExit("the local stage runs only under `make run`; package a real stage")
    if stage not in stages:
        raise SystemExit(f"unknown stage {stage!r}; stages: {', '.join(sorted(stages))}")
    stage_config = stages[stage]
    if not stage_config.get("log_retention_in_days", config.get("log_retention_in_days")):
        raise SystemExit(f"stage {stage!r} needs log_retention_in_days: its log groups are ours")
    xray = bool(stage_config.get("xray", config.get("xray", False)))
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
    resources[ALARM] = alarm_resource()
    log_policies = [f"{names.role}Logs" for names in functions]
    for policy, names in zip(log_policies, functions, strict=True):
        resources[policy] = logs_policy(names)
    api_properties: Template = {
        "MethodSettings": [
            {
                "ResourcePath": "/*",
                "HttpMethod": "*",
                "ThrottlingRateLimit": {"Ref": "ApiThrottleRateLimit"},
                "ThrottlingBurstLimit": {"Ref": "ApiThrottleBurstLimit"},
            }
        ]
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
        if xray:
            resources[names.role] = {
                "Properties": {"ManagedPolicyArns": [{"Fn::Sub": XRAY_POLICY}]}
            }

    variables: Template = {
        table_env_var(key): {"Ref": spec.logical_name} for key, spec in ALL_TABLES.items()
    }
    variables["QUOTA_TOPIC_ARN"] = {"Ref": TOPIC}
    outputs: Template = {
        f"{spec.logical_name}Name": {"Value": {"Ref": spec.logical_name}}
        for spec in ALL_TABLES.values()
    }
    outputs["AlertTopicArn"] = {"Value": {"Ref": TOPIC}}

    return {
        "Description": f"mcp-quota ({stage}): per-session tool-call quotas for MCP servers",
        "Parameters": parameters(),
        "Globals": {"Function": {"Environment": {"Variables": variables}}},
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
