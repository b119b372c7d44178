"""The stack's alarms and dashboard: every alarm tells the operators' topic (`OpsTopic`)
when it fires and when it clears; the tenants' quota mail has a topic of its own.

Each alarm here is named in docs/operations.md with what to do when it fires.
"""

from __future__ import annotations

import json
from typing import Any

from chalice.utils import to_cfn_resource_name

from chalicelib.observability import FAULT_METRIC, NAMESPACE, SERVICE

Template = dict[str, Any]

OPS_TOPIC = "OpsTopic"
NOTIFY_QUEUE = "NotificationQueue"
DEAD_LETTERS = "NotificationDeadLetterQueue"
ALARM_PERIOD_SECONDS = 300
# A canary's rollback alarms: one-minute sums of the new version's own figures, so that
# a fault in the 5-minute canary window fires within about two minutes of it.
CANARY_PERIOD_SECONDS = 60
RESERVE_CONCURRENCY = "ReserveApiConcurrency"
HEARTBEAT = "HeartbeatEnabled"
# Of the reservation, the share of concurrent executions that raises the alarm (percent).
CONCURRENCY_ALARM_PERCENT = 80
# ThrottledRequests exists only per table *and* operation: the alarm sums these.
THROTTLE_OPERATIONS = ("GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan")


def alarm(description: str, metric: Template, threshold: Any = 0) -> Template:
    """An alarm on one 5-minute figure that tells the operators' topic when it goes over
    `threshold` and when it comes back."""
    comparison = "GreaterThanThreshold" if threshold == 0 else "GreaterThanOrEqualToThreshold"
    properties: Template = {
        "AlarmDescription": description,
        **metric,
        "EvaluationPeriods": 1,
        "Threshold": threshold,
        "ComparisonOperator": comparison,
        "TreatMissingData": "notBreaching",
        "AlarmActions": [{"Ref": OPS_TOPIC}],
        "OKActions": [{"Ref": OPS_TOPIC}],
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


def summed(metrics: list[Template], label: str) -> Template:
    """The alarm properties for the sum of several metrics (missing ones count as 0)."""
    queries: list[Template] = [
        {
            "Id": f"m{index}",
            "ReturnData": False,
            "MetricStat": {"Metric": metric, "Period": ALARM_PERIOD_SECONDS, "Stat": "Sum"},
        }
        for index, metric in enumerate(metrics)
    ]
    queries.append(
        {"Id": "total", "Expression": "SUM(FILL(METRICS(), 0))", "Label": label, "ReturnData": True}
    )
    return {"Metrics": queries}


def table_throttles(table: str) -> Template:
    """The alarm properties for a table's throttled requests, summed over operations."""
    return summed(
        [
            {
                "Namespace": "AWS/DynamoDB",
                "MetricName": "ThrottledRequests",
                "Dimensions": [
                    {"Name": "TableName", "Value": {"Ref": table}},
                    {"Name": "Operation", "Value": operation},
                ],
            }
            for operation in THROTTLE_OPERATIONS
        ],
        "ThrottledRequests, all operations",
    )


def notification_failures(categories: list[str]) -> Template:
    """NotificationFailed as the service emits it: per category from a refusing request
    (the enqueue failed) or from the notifier (SNS refused), and without a category for a
    queued message that was not a notification."""
    service = {"Name": "service", "Value": SERVICE}
    metrics = [
        {
            "Namespace": NAMESPACE,
            "MetricName": "NotificationFailed",
            "Dimensions": [service, {"Name": "category", "Value": category}],
        }
        for category in categories
    ]
    metrics.append(
        {"Namespace": NAMESPACE, "MetricName": "NotificationFailed", "Dimensions": [service]}
    )
    return summed(metrics, "NotificationFailed, all categories")


def delivery_alarms(categories: list[str]) -> Template:
    """Alarms on the emails: a failed enqueue or publish, and messages given up on."""
    return {
        "NotificationFailedAlarm": alarm(
            "A quota email could not be queued or published (NotificationFailed > 0 in 5 "
            "minutes); SQS retries a failed publish, then dead-letters it.",
            notification_failures(categories),
        ),
        "NotificationDeadLettersAlarm": alarm(
            "Quota emails were given up on after their retries and wait in the dead-letter "
            "queue (messages visible > 0).",
            {
                "Namespace": "AWS/SQS",
                "MetricName": "ApproximateNumberOfMessagesVisible",
                "Dimensions": [
                    {"Name": "QueueName", "Value": {"Fn::GetAtt": [DEAD_LETTERS, "QueueName"]}}
                ],
                "Statistic": "Maximum",
                "Period": ALARM_PERIOD_SECONDS,
            },
        ),
    }


def api_dimensions(api_stage: str) -> dict[str, Any]:
    """API Gateway's metric dimensions for this stack's stage."""
    return {"ApiName": {"Ref": "AWS::StackName"}, "Stage": api_stage}


def latency_alarm(api_stage: str) -> Template:
    """p99 of the API's latency over 5 minutes, against the LatencyP99AlarmMs parameter."""
    resource = alarm(
        "The API's p99 latency over 5 minutes reached LatencyP99AlarmMs: clients near "
        "their deadline fail open on reads and closed on writes.",
        {
            "Namespace": "AWS/ApiGateway",
            "MetricName": "Latency",
            "Dimensions": [
                {"Name": key, "Value": value} for key, value in api_dimensions(api_stage).items()
            ],
            "ExtendedStatistic": "p99",
            "Period": ALARM_PERIOD_SECONDS,
        },
        threshold={"Ref": "LatencyP99AlarmMs"},
    )
    return resource


def concurrency_alarm(handler: str, reservation: Template) -> Template:
    """The API handler's concurrent executions near its `reservation` (an intrinsic)."""
    expression = ["100 * peak / ${Reserved}", {"Reserved": reservation}]
    resource = alarm(
        f"The API handler ran at {CONCURRENCY_ALARM_PERCENT} % or more of its reserved "
        "concurrency (the method's rate x a check's p99, x2): more load is answered "
        "with Lambda throttles.",
        {
            "Metrics": [
                {
                    "Id": "peak",
                    "ReturnData": False,
                    "MetricStat": {
                        "Metric": {
                            "Namespace": "AWS/Lambda",
                            "MetricName": "ConcurrentExecutions",
                            "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": handler}}],
                        },
                        "Period": 60,
                        "Stat": "Maximum",
                    },
                },
                {
                    "Id": "share",
                    "Expression": {"Fn::Sub": expression},
                    "Label": "Percent of reserved concurrency",
                    "ReturnData": True,
                },
            ]
        },
        threshold=CONCURRENCY_ALARM_PERCENT,
    )
    resource["Condition"] = RESERVE_CONCURRENCY
    return resource


def heartbeat_alarm(api_stage: str) -> Template:
    """No request at all for HeartbeatMinutes minutes in a row (optional: 0 is off)."""
    dims = [{"Name": key, "Value": value} for key, value in api_dimensions(api_stage).items()]
    resource = alarm(
        "No request reached the API for HeartbeatMinutes minutes: the MCP servers may "
        "have lost their way to it (DNS, network, a wrong MCP_QUOTA_URL).",
        {
            "Namespace": "AWS/ApiGateway",
            "MetricName": "Count",
            "Dimensions": dims,
            "Statistic": "Sum",
            "Period": 60,
        },
    )
    properties = resource["Properties"]
    properties.update(
        {
            "EvaluationPeriods": {"Ref": "HeartbeatMinutes"},
            "DatapointsToAlarm": {"Ref": "HeartbeatMinutes"},
            "Threshold": 1,
            "ComparisonOperator": "LessThanThreshold",
            "TreatMissingData": "breaching",  # no datapoint is what silence looks like
        }
    )
    resource["Condition"] = HEARTBEAT
    return resource


def blocked_writes_alarm(category: str) -> Template:
    """Alarm on the blocked-write metric the service emits."""
    resource = alarm(
        "MCP tool calls in the write category were refused by mcp-quota: an agent "
        "exhausted its write budget. See the audit trail.",
        metric_sum(NAMESPACE, "ChecksBlocked", {"service": SERVICE, "category": category}),
        threshold={"Ref": "BlockedWritesAlarmThreshold"},
    )
    return resource


def function_alarms(function: str) -> Template:
    """Errors and throttles of one Lambda function."""
    dims = {"FunctionName": {"Ref": function}}
    return {
        f"{function}ErrorsAlarm": alarm(
            f"The {function} Lambda function failed (Errors > 0 in 5 minutes).",
            metric_sum("AWS/Lambda", "Errors", dims),
        ),
        f"{function}ThrottlesAlarm": alarm(
            f"The {function} Lambda function was throttled (Throttles > 0 in 5 minutes).",
            metric_sum("AWS/Lambda", "Throttles", dims),
        ),
    }


def new_version(function: str) -> Template:
    """The version number the current deploy published (SAM's `Function.Version`)."""
    return {"Fn::GetAtt": [f"{function}.Version", "Version"]}


def canary_alarms(function: str, alias: str, faults: bool) -> Template:
    """The rollback alarms of one canaried function: errors of the version being shifted
    to, through the alias (Lambda's Resource and ExecutedVersion dimensions), and, where
    the function answers its own 500s (`faults`), the service's UnhandledError of that
    version. Never the old version's figures, nor the stage's."""
    version = new_version(function)
    errors = alarm(
        f"The new version of {function} failed during its canary (Errors > 0 in a minute): "
        "CodeDeploy rolls it back.",
        {
            "Namespace": "AWS/Lambda",
            "MetricName": "Errors",
            "Dimensions": [
                {"Name": "FunctionName", "Value": {"Ref": function}},
                {"Name": "Resource", "Value": {"Fn::Sub": f"${{{function}}}:{alias}"}},
                {"Name": "ExecutedVersion", "Value": version},
            ],
            "Statistic": "Sum",
            "Period": CANARY_PERIOD_SECONDS,
        },
    )
    alarms = {f"{function}CanaryErrorsAlarm": errors}
    if faults:
        alarms[f"{function}CanaryFaultsAlarm"] = alarm(
            f"The new version of {function} answered 500 for an unexpected exception during "
            "its canary (UnhandledError > 0 in a minute): CodeDeploy rolls it back.",
            {
                "Namespace": NAMESPACE,
                "MetricName": FAULT_METRIC,
                "Dimensions": [
                    {"Name": "service", "Value": SERVICE},
                    {"Name": "version", "Value": version},
                ],
                "Statistic": "Sum",
                "Period": CANARY_PERIOD_SECONDS,
            },
        )
    return alarms


def fail_open_alarms(categories: list[str]) -> Template:
    """One alarm per policy category on the calls clients ran uncounted."""
    return {
        f"ClientFailOpen{to_cfn_resource_name(category)}Alarm": alarm(
            f"MCP servers ran '{category}' tool calls uncounted because they could not "
            "reach mcp-quota (ClientFailOpen > 0 in 5 minutes).",
            metric_sum(NAMESPACE, "ClientFailOpen", {"service": SERVICE, "category": category}),
        )
        for category in categories
    }


def _search(metric: str, stat: str = "Sum") -> list[Any]:
    """A dashboard query over every category (and scope) the service emits."""
    query = f"SEARCH('{{{NAMESPACE},service,category}} MetricName=\"{metric}\"', '{stat}', 300)"
    return [{"expression": query, "label": metric, "id": metric.lower()}]


def dashboard(api_stage: str, handler: str, functions: list[str]) -> Template:
    """One CloudWatch dashboard: checks, refusals by category, fail-open reports,
    latency, notifications and the dead-letter queue, the functions' health."""
    api = ["AWS/ApiGateway", "Count", "ApiName", "${AWS::StackName}", "Stage", api_stage]
    latency = ["AWS/ApiGateway", "Latency", "ApiName", "${AWS::StackName}", "Stage", api_stage]
    errors = ["AWS/ApiGateway", "5XXError", "ApiName", "${AWS::StackName}", "Stage", api_stage]
    throttled = ["AWS/ApiGateway", "4XXError", "ApiName", "${AWS::StackName}", "Stage", api_stage]

    def widget(title: str, metrics: list[Any], stat: str = "Sum", x: int = 0, y: int = 0) -> Any:
        return {
            "type": "metric",
            "x": x,
            "y": y,
            "width": 12,
            "height": 6,
            "properties": {
                "title": title,
                "region": "${AWS::Region}",
                "stat": stat,
                "period": 300,
                "view": "timeSeries",
                "metrics": metrics,
            },
        }

    lambda_metrics = [
        ["AWS/Lambda", name, "FunctionName", f"${{{function}}}"]
        for function in functions
        for name in ("Errors", "Throttles")
    ]
    widgets = [
        widget("Checks (API requests) and 5XX", [api, errors], x=0, y=0),
        widget("Refusals by category (ChecksBlocked)", [_search("ChecksBlocked")], x=12, y=0),
        widget("Fail-open reports by category", [_search("ClientFailOpen")], x=0, y=6),
        widget(
            "API latency (p50, p99), handler p99 Duration, 4XX (includes throttles)",
            [
                [*latency, {"stat": "p50", "label": "p50"}],
                [*latency, {"stat": "p99", "label": "p99"}],
                # What CheckP99Ms should say (the reservation: deploy/capacity.py).
                [
                    "AWS/Lambda",
                    "Duration",
                    "FunctionName",
                    f"${{{handler}}}",
                    {"stat": "p99", "label": "handler p99 Duration"},
                ],
                [*throttled, {"stat": "Sum", "yAxis": "right"}],
            ],
            stat="p99",
            x=12,
            y=6,
        ),
        widget(
            "Notifications: failed, dead letters",
            [
                *_search("NotificationFailed"),
                [
                    "AWS/SQS",
                    "ApproximateNumberOfMessagesVisible",
                    "QueueName",
                    f"${{{DEAD_LETTERS}.QueueName}}",
                    {"stat": "Maximum"},
                ],
            ],
            x=0,
            y=12,
        ),
        widget(
            "Lambda errors, throttles, handler concurrency",
            [
                *lambda_metrics,
                [
                    "AWS/Lambda",
                    "ConcurrentExecutions",
                    "FunctionName",
                    f"${{{handler}}}",
                    {"stat": "Maximum", "yAxis": "right"},
                ],
            ],
            x=12,
            y=12,
        ),
    ]
    body = json.dumps({"widgets": widgets}, separators=(",", ":"))
    return {
        "Type": "AWS::CloudWatch::Dashboard",
        "Properties": {"DashboardBody": {"Fn::Sub": body}},
    }
