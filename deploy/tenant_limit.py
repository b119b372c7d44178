"""`make tenant-limit STACK=mcp-quota-prod TENANT=acme`: give a tenant its own request
limit on a stack. API Gateway meters each tenant under an API key the authorizer names
(`apiKeySource: AUTHORIZER`); this creates that key and puts it in the stack's
`TenantUsagePlan` (TenantRateLimit / TenantBurstLimit per key). Idempotent. Until it has
run for a tenant, that tenant's authenticated requests are refused 403 by the gateway.
Runs with the operator's credentials (`apigateway:GET` and `apigateway:POST` on the API
keys and the usage plan, `cloudformation:DescribeStacks`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from botocore.exceptions import ClientError  # noqa: E402

from chalicelib.auth.authorizer import usage_key  # noqa: E402
from chalicelib.auth.roles import TENANT_NAME  # noqa: E402

OUTPUT = "TenantUsagePlanId"
MAX_KEY_LENGTH = 128  # API Gateway's bound on an API key's value


def plan_of_stack(cloudformation: Any, stack: str) -> str:
    """The stack's tenant usage plan id, from its outputs.

    Raises:
        SystemExit: the stack has no such output (deployed before tenant limits).
    """
    (described,) = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    for output in described.get("Outputs", []):
        if output["OutputKey"] == OUTPUT:
            return str(output["OutputValue"])
    raise SystemExit(f"stack {stack!r} has no {OUTPUT} output: deploy a current release first")


def add_tenant(apigateway: Any, plan_id: str, stack: str, tenant: str) -> str:
    """Create (or find) the tenant's usage key and put it in the plan; returns its id.

    Raises:
        SystemExit: the tenant's name is not one a token can carry, or the key's value
            would pass API Gateway's length bound (a stack name over about 90 characters).
    """
    if not TENANT_NAME.fullmatch(tenant):
        raise SystemExit(f"{tenant!r} is not a tenant name (a-z, 0-9, '-', at most 63)")
    value = usage_key(stack, tenant)
    if len(value) > MAX_KEY_LENGTH:
        raise SystemExit(f"the usage key of {tenant!r} on {stack!r} is too long for API Gateway")
    name = f"{stack}-tenant-{tenant}"
    found = apigateway.get_api_keys(nameQuery=name, includeValues=True).get("items", [])
    key = next((item for item in found if item.get("value") == value), None)
    if key is None:
        key = apigateway.create_api_key(
            name=name,
            value=value,
            enabled=True,
            description=f"mcp-quota: tenant {tenant}'s request limit (not a secret)",
        )
    try:
        apigateway.create_usage_plan_key(usagePlanId=plan_id, keyId=key["id"], keyType="API_KEY")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConflictException":
            raise  # ConflictException: already in the plan
    return str(key["id"])


def main(argv: list[str] | None = None) -> int:
    import boto3  # noqa: PLC0415

    parser = argparse.ArgumentParser(description="Give tenants their own request limit.")
    parser.add_argument("--stack", required=True, help="the stack's name")
    parser.add_argument("--tenant", required=True, action="append", help="repeatable")
    args = parser.parse_args(argv)
    plan = plan_of_stack(boto3.client("cloudformation"), args.stack)
    apigateway = boto3.client("apigateway")
    for tenant in args.tenant:
        key_id = add_tenant(apigateway, plan, args.stack, tenant)
        print(f"tenant {tenant}: usage key {key_id} in plan {plan}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
