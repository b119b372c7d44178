"""The authorizer names the tenant's usage-plan key, so API Gateway meters each tenant
apart (`apiKeySource: AUTHORIZER`): the defect class is one tenant's flood spending a
limit every tenant shares."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from chalice.app import AuthRequest, ChaliceAuthorizer

import app as app_module
from chalicelib.auth.authorizer import usage_key
from tests.api.conftest import Api, running_api
from tests.support import FixedClock

ARN = "arn:aws:execute-api:us-east-1:123456789012:abcdef/api/POST/v1/check"


@pytest.fixture
def metered(clock: FixedClock) -> Iterator[Api]:
    with running_api(clock, "memory", usage_key_scope="mcp-quota-prod") as api:
        yield api


def authorize(header: str) -> dict[str, Any]:
    authorizer = app_module.app.routes["/v1/check"]["POST"].authorizer
    assert isinstance(authorizer, ChaliceAuthorizer)
    request = AuthRequest("TOKEN", header, ARN)
    answer: dict[str, Any] = authorizer.func(request).to_dict(request)
    return answer


def test_each_tenant_is_metered_under_its_own_key(metered: Api) -> None:
    _, acme = metered.token("acme", "server")
    _, globex = metered.token("globex", "admin")
    keys = {authorize(acme["Authorization"])["usageIdentifierKey"]}
    keys.add(authorize(globex["Authorization"])["usageIdentifierKey"])
    assert keys == {usage_key("mcp-quota-prod", "acme"), usage_key("mcp-quota-prod", "globex")}


def test_a_refused_token_gets_no_key_and_no_route(metered: Api) -> None:
    answer = authorize("Bearer mcpq_0123456789ab_nosuchtokennosuchtoken")
    assert "usageIdentifierKey" not in answer
    assert answer["policyDocument"]["Statement"][0]["Resource"] == []


def test_without_a_scope_no_key_is_named(api: Api) -> None:
    _, acme = api.token("acme", "server")
    assert "usageIdentifierKey" not in authorize(acme["Authorization"])
