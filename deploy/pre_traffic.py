"""The CodeDeploy PreTraffic hook of the canaried functions: before CodeDeploy shifts any
traffic to a new version, invoke that version of the API handler with `GET /health` and
that version of the authorizer with a token that is not one (no store access either
way), and tell CodeDeploy whether both answered as they should. A version that cannot
import, route or authorize never takes a request; one that fails later is the canary
alarms' (deploy/monitoring.py).

`deploy/build_template.py` inlines this file as the hook's code (the function is named
`CodeDeployHook_*`, as SAM's CodeDeploy role requires); it runs on boto3 alone."""

from __future__ import annotations

import json
import os
from typing import Any

HEALTH_EVENT: dict[str, Any] = {
    "resource": "/health",
    "path": "/health",
    "httpMethod": "GET",
    "headers": {"Host": "pre-traffic.invalid"},
    "multiValueHeaders": {"Host": ["pre-traffic.invalid"]},
    "queryStringParameters": None,
    "multiValueQueryStringParameters": None,
    "pathParameters": None,
    "stageVariables": None,
    "requestContext": {
        "resourcePath": "/health",
        "httpMethod": "GET",
        "path": "/health",
        "stage": "pre-traffic",
        "requestId": "pre-traffic",
    },
    "body": None,
    "isBase64Encoded": False,
}
AUTHORIZER_EVENT: dict[str, Any] = {
    "type": "TOKEN",
    "authorizationToken": "Bearer pre-traffic-not-a-token",
    "methodArn": "arn:aws:execute-api:us-east-1:000000000000:pretraffic/api/POST/v1/check",
}


def invoke(client: Any, target: str, event: dict[str, Any]) -> Any:
    """One synchronous invocation's answer.

    Raises:
        RuntimeError: the function raised (FunctionError).
    """
    raw = client.invoke(FunctionName=target, Payload=json.dumps(event).encode("utf-8"))
    payload = json.loads(raw["Payload"].read())
    if raw.get("FunctionError"):
        raise RuntimeError(f"{target} failed: {payload}")
    return payload


def answers_health(answer: Any) -> bool:
    """Whether an API handler's answer is `/health`'s 200."""
    if not isinstance(answer, dict) or answer.get("statusCode") != 200:
        return False
    return bool(json.loads(answer.get("body") or "{}").get("status") == "ok")


def refuses_junk(answer: Any) -> bool:
    """Whether an authorizer's answer to a junk token allows nothing."""
    if not isinstance(answer, dict) or answer.get("principalId") != "anonymous":
        return False
    statements = answer.get("policyDocument", {}).get("Statement", [])
    return all(not statement.get("Resource") for statement in statements)


def healthy(client: Any, api_version: str, authorizer_version: str) -> bool:
    """Whether both new versions answer as they should."""
    try:
        api = invoke(client, api_version, HEALTH_EVENT)
        auth = invoke(client, authorizer_version, AUTHORIZER_EVENT)
    except Exception as exc:
        print(json.dumps({"pre_traffic": "failed", "error": str(exc)[:500]}))
        return False
    ok = answers_health(api) and refuses_junk(auth)
    print(json.dumps({"pre_traffic": "passed" if ok else "failed", "api": api, "auth": auth}))
    return ok


def handler(event: dict[str, Any], context: Any) -> None:
    """CodeDeploy's PreTraffic hook: report Succeeded or Failed for this deployment."""
    import boto3  # noqa: PLC0415

    ok = healthy(
        boto3.client("lambda"), os.environ["API_VERSION"], os.environ["AUTHORIZER_VERSION"]
    )
    boto3.client("codedeploy").put_lifecycle_event_hook_execution_status(
        deploymentId=event["DeploymentId"],
        lifecycleEventHookExecutionId=event["LifecycleEventHookExecutionId"],
        status="Succeeded" if ok else "Failed",
    )
