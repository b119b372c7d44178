"""Who and where: the adapters send the MCP server's name with every check."""

from __future__ import annotations

from typing import cast

import pytest
from articles_server import build_server as build_fastmcp
from articles_server_sdk import build_server as build_sdk
from fastmcp import Client as FastMCPClient
from mcp import Client as SDKClient
from mcp_quota_client import META_SESSION_KEY
from mcp_types import RequestParamsMeta

from tests.mcp.conftest import ClientFactory, FakeQuotaService

pytestmark = pytest.mark.anyio


async def test_the_fastmcp_middleware_sends_the_servers_name(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    server = build_fastmcp(make_client(), name="inventory")
    async with FastMCPClient(server) as client:
        for tool, args in (("search_articles", {"query": "ai"}), ("delete_tag", {"tag": "x"})):
            result = await client.call_tool_mcp(tool, args, meta={META_SESSION_KEY: "s-1"})
            assert result.is_error is False

    bodies = quota_service.bodies()
    assert len(bodies) == 2
    assert [body.get("server") for body in bodies] == ["inventory", "inventory"]


async def test_the_sdk_helper_sends_the_servers_name(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    server = build_sdk(make_client())
    meta = cast(RequestParamsMeta, {META_SESSION_KEY: "s-2"})
    async with SDKClient(server) as client:
        result = await client.call_tool("delete_tag", {"tag": "x"}, meta=meta)
        assert result.is_error is False

    [body] = quota_service.bodies()
    assert body.get("server") == server.name


async def test_a_name_the_service_would_refuse_is_sent_in_printable_ascii(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    server = build_fastmcp(make_client(), name="Inventário " + "x" * 200)
    async with FastMCPClient(server) as client:
        result = await client.call_tool_mcp("delete_tag", {"tag": "x"})
        assert result.is_error is False

    [body] = quota_service.bodies()
    assert body["server"].startswith("Invent?rio x") and len(body["server"]) == 128
