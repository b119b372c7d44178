"""Issue 20, "Who and where": the MCP client's name and version reach the session view.

In process: a real FastMCP server (and the official SDK's) with the middleware, a real
MCP client declaring its clientInfo at `initialize`, and the real quota service
(Chalice's test client on the memory backend) behind the HTTP client's transport."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import httpx2
import mcp_types as mt
import pytest
from articles_server import build_server
from articles_server_sdk import build_server as build_sdk_server
from fastmcp import Client
from mcp import Client as SdkClient
from mcp_quota_client import META_SESSION_KEY, QuotaClient, QuotaClientConfig
from mcp_quota_client.decision import ClientInfo
from mcp_quota_client.session import META_CLIENT_INFO_KEY, client_info
from mcp_types import RequestParamsMeta

from tests.api.conftest import Api, body, running_api
from tests.mcp.conftest import ClientFactory, FakeQuotaService
from tests.support import FixedClock

pytestmark = pytest.mark.anyio

CLAUDE = mt.Implementation(name="claude-code", version="1.0.71")
META = {META_SESSION_KEY: "who-0"}


@pytest.fixture
def api() -> Iterator[Api]:
    with running_api(FixedClock(), "memory") as api:
        yield api


def quota_client(api: Api) -> QuotaClient:
    def handle(request: httpx2.Request) -> httpx2.Response:
        headers = {
            "Authorization": request.headers["authorization"],
            "Content-Type": "application/json",
        }
        answer = api.client.http.request(
            request.method, request.url.path, headers=headers, body=request.content
        )
        return httpx2.Response(
            answer.status_code, headers=dict(answer.headers), content=answer.body
        )

    config = QuotaClientConfig(base_url="http://quota.test", token="dev-server-token")
    return QuotaClient(config, transport=httpx2.MockTransport(handle))


def session(api: Api, session_id: str) -> dict[str, Any]:
    view: dict[str, Any] = body(api.get(f"/v1/sessions/{session_id}"))
    return view


async def test_the_fastmcp_clients_name_and_version_are_shown_with_its_session(
    api: Api,
) -> None:
    server = build_server(quota_client(api), name="inventory")
    async with Client(server, client_info=CLAUDE) as client:
        result = await client.call_tool_mcp(
            "delete_tag", {"tag": "t1"}, meta={META_SESSION_KEY: "who-1"}
        )
        assert result.is_error is False

    view = session(api, "who-1")
    assert view["server"] == "inventory"
    assert view["client"] == {
        "name": "claude-code",
        "version": "1.0.71",
        "oauth_client_id": None,
    }


async def test_the_sdk_helper_sends_the_clients_name_and_version(api: Api) -> None:
    server = build_sdk_server(quota_client(api))
    meta = cast(RequestParamsMeta, {META_SESSION_KEY: "who-2"})
    async with SdkClient(server, client_info=CLAUDE) as client:
        result = await client.call_tool("delete_tag", {"tag": "t1"}, meta=meta)
        assert result.is_error is False

    client_view = session(api, "who-2")["client"]
    assert (client_view["name"], client_view["version"]) == ("claude-code", "1.0.71")


async def test_a_service_without_the_client_field_is_asked_again_without_it(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.accepts_client = False
    async with Client(build_server(make_client()), client_info=CLAUDE) as client:
        for tag in ("a", "b"):
            result = await client.call_tool_mcp("delete_tag", {"tag": tag}, meta=META)
            assert result.is_error is False
    assert ["client" in b for b in quota_service.bodies()] == [True, False, False]


def test_the_client_comes_from_initialize_else_from_the_requests_meta() -> None:
    params = SimpleNamespace(client_info=SimpleNamespace(name="cursor", version="2"))
    meta = {META_CLIENT_INFO_KEY: {"name": "zed", "version": "0.9"}}
    assert client_info(params, meta) == ClientInfo(name="cursor", version="2")
    assert client_info(None, meta, "app-7") == ClientInfo(
        name="zed", version="0.9", oauth_client_id="app-7"
    )
    assert client_info(None, {META_CLIENT_INFO_KEY: "zed"}) is None
    assert client_info(None, None) is None


def test_what_the_service_would_refuse_is_cleaned_not_sent() -> None:
    odd = ClientInfo(name=" evil\x1b[31m\u202ename ", version="v" * 100, oauth_client_id="\n")
    assert odd.to_json() == {"name": "evil[31mname", "version": "v" * 64}
