"""Issue 33, item 1, on the packaged stack: one token is one WAF bucket however its
header is spelled, requests without a well-formed token are counted by address, and
each tenant has its own limit (a usage plan keyed by the authorizer). The defect class:
a rate limit one caller escapes by respelling, or spends for every other tenant."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from chalicelib.auth.authorizer import bearer_token, usage_key
from deploy.tenant_limit import add_tenant
from tests.deploy.conftest import Packaged

TOKEN = "mcpq_0123456789ab_AbCdEfGhIjKlMnOpQrStUvWxYz"
# What AWS WAF's COMPRESS_WHITE_SPACE turns into a space before compressing runs of it.
WAF_WHITE_SPACE = "\f\t\n\r\v\u00a0"


def waf_transform(value: str, transformations: list[dict[str, Any]]) -> str:
    """The value after WAF's text transformations, in priority order (the two used)."""
    for step in sorted(transformations, key=lambda t: t["Priority"]):
        if step["Type"] == "LOWERCASE":
            value = "".join(c.lower() if "A" <= c <= "Z" else c for c in value)
        elif step["Type"] == "COMPRESS_WHITE_SPACE":
            value = re.sub(" {2,}", " ", "".join(" " if c in WAF_WHITE_SPACE else c for c in value))
        elif step["Type"] != "NONE":
            raise AssertionError(f"model the transformation {step['Type']} first")
    return value


def spellings() -> Iterator[str]:
    """Every case of the scheme, with every separator a client might send."""
    for letters in itertools.product(*[(c.lower(), c.upper()) for c in "bearer"]):
        for separator in (" ", "  ", "\t", " \t "):
            yield "".join(letters) + separator + TOKEN


def rule(packaged: Packaged, name: str) -> dict[str, Any]:
    rules = packaged.resources["TokenRateLimitAcl"]["Properties"]["Rules"]
    (found,) = [r for r in rules if r["Name"] == name]
    statement: dict[str, Any] = found["Statement"]["RateBasedStatement"]
    return statement


def test_every_spelling_of_one_token_is_one_bucket(packaged: Packaged) -> None:
    statement = rule(packaged, "per-token-rate")
    (key,) = statement["CustomKeys"]
    assert key["Header"]["Name"] == "authorization"
    transformations = key["Header"]["TextTransformations"]
    assert {t["Type"] for t in transformations} == {"LOWERCASE", "COMPRESS_WHITE_SPACE"}
    headers = list(spellings())
    accepted = [h for h in headers if bearer_token(h) == TOKEN]
    assert len(accepted) == 64  # the authorizer takes each case of "Bearer", one space
    assert len({waf_transform(h, transformations) for h in accepted}) == 1
    # The spellings it refuses fall in the same bucket too, and so cost the same limit.
    assert len({waf_transform(h, transformations) for h in headers}) == 1
    # The raw header, as before: one bucket per spelling.
    assert len({waf_transform(h, [{"Priority": 0, "Type": "NONE"}]) for h in accepted}) == 64


def test_requests_without_a_well_formed_token_are_counted_by_address(packaged: Packaged) -> None:
    statement = rule(packaged, "per-address-rate")
    assert statement["AggregateKeyType"] == "IP"
    assert statement["Limit"] == {"Ref": "AddressRateLimitPerMinute"}
    match = statement["ScopeDownStatement"]["NotStatement"]["Statement"]["RegexMatchStatement"]
    assert match["FieldToMatch"] == {"SingleHeader": {"Name": "authorization"}}
    regex = re.compile(match["RegexString"])
    samples = [
        *spellings(),
        "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",  # a JWT: well formed
        f"Bearer {TOKEN} x",
        f"Basic {TOKEN}",
        "Bearer",
        "junk",
    ]
    for header in samples:
        well_formed = regex.search(waf_transform(header, match["TextTransformations"]))
        assert bool(well_formed) == (bearer_token(header) is not None), header
    # A missing header matches no regex: the NOT puts it in the address rule's scope.
    acl = packaged.resources["TokenRateLimitAcl"]["Properties"]
    parameters = packaged.template["Parameters"]
    assert parameters["AddressRateLimitPerMinute"]["Default"] >= 10
    per_address = next(r for r in acl["Rules"] if r["Name"] == "per-address-rate")
    assert per_address["Action"]["Block"]["CustomResponse"]["ResponseCode"] == 429


def test_each_tenant_has_its_own_limit_below_the_methods(packaged: Packaged) -> None:
    plan = packaged.resources["TenantUsagePlan"]
    assert plan["Type"] == "AWS::ApiGateway::UsagePlan"
    assert plan["Properties"]["Throttle"] == {
        "RateLimit": {"Ref": "TenantRateLimit"},
        "BurstLimit": {"Ref": "TenantBurstLimit"},
    }
    assert plan["Properties"]["ApiStages"] == [{"ApiId": {"Ref": "RestAPI"}, "Stage": "api"}]
    parameters = {k: v.get("Default") for k, v in packaged.template["Parameters"].items()}
    method_per_minute = parameters["ApiThrottleRateLimit"] * 60
    # Well below a method's bucket: a handful of tokens or tenants cannot fill it.
    assert parameters["TokenRateLimitPerMinute"] * 5 <= method_per_minute
    assert parameters["TenantRateLimit"] * 2 <= parameters["ApiThrottleRateLimit"]
    assert parameters["TenantBurstLimit"] * 2 <= parameters["ApiThrottleBurstLimit"]
    # Requests the authorizer cannot attribute (store down) have a key in the plan too.
    unverified = packaged.resources["UnverifiedUsageKey"]["Properties"]["Value"]["Fn::Sub"]
    assert unverified == usage_key("${AWS::StackName}", None)
    in_plan = packaged.resources["UnverifiedUsageKeyInPlan"]["Properties"]
    assert in_plan["UsagePlanId"] == {"Ref": "TenantUsagePlan"}
    variables = packaged.template["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["QUOTA_USAGE_KEY_SCOPE"] == {"Ref": "AWS::StackName"}


def test_the_authorizer_names_the_key_of_every_authorized_method(
    deployed: dict[str, Any],
) -> None:
    (api,) = [r for r in deployed["Resources"].values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    body = api["Properties"]["Body"]
    assert body["x-amazon-apigateway-api-key-source"] == "AUTHORIZER"
    for path, methods in body["paths"].items():
        for verb, method in methods.items():
            security = method.get("security", [])
            if {"bearer": []} in security:
                assert {"api_key": []} in security, (path, verb)
            else:  # pages, health and the console's files: no tenant to meter
                assert {"api_key": []} not in security, (path, verb)
    assert {"api_key": []} in body["paths"]["/v1/check"]["post"]["security"]


@pytest.fixture
def apigateway() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("apigateway", region_name="us-east-1")


def test_make_tenant_limit_adds_the_tenants_key_once(apigateway: Any) -> None:
    plan = apigateway.create_usage_plan(name="mcp-quota-prod-tenants")["id"]
    first = add_tenant(apigateway, plan, "mcp-quota-prod", "acme")
    again = add_tenant(apigateway, plan, "mcp-quota-prod", "acme")
    assert first == again
    (key,) = apigateway.get_usage_plan_keys(usagePlanId=plan)["items"]
    assert key["value"] == usage_key("mcp-quota-prod", "acme")
    with pytest.raises(SystemExit, match="not a tenant name"):
        add_tenant(apigateway, plan, "mcp-quota-prod", "Acme Corp")
