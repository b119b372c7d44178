"""The guard on the official SDK's MCPServer, in process, against a fake quota service."""

from __future__ import annotations

from typing import cast

import pytest
from articles_library import Library
from articles_server_sdk import build_server
from mcp import Client
from mcp_quota_client import META_DECISION_KEY, META_SESSION_KEY
from mcp_types import RequestParamsMeta, TextContent

from tests.mcp.conftest import ClientFactory, FakeQuotaService

pytestmark = pytest.mark.anyio


async def test_a_refused_call_never_reaches_the_tool(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.limits["write"] = 2
    library = Library()
    server = build_server(make_client(), library)
    meta = cast(RequestParamsMeta, {META_SESSION_KEY: "sdk-agent"})

    async with Client(server) as client:
        allowed = [await client.call_tool("delete_tag", {"tag": "x"}, meta=meta) for _ in range(2)]
        refused = await client.call_tool("delete_tag", {"tag": "x"}, meta=meta)

    assert [result.is_error for result in allowed] == [False, False]
    assert refused.is_error is True
    [block] = refused.content
    assert isinstance(block, TextContent)
    assert "was NOT run" in block.text
    assert refused.structured_content == {
        "kind": "quota_exceeded",
        "scope": "session",
        "category": "write",
        "used": 2,
        "limit": 2,
        "retryAfterSeconds": 3600,
    }
    assert library.deletions == 2
    assert {body["session_id"] for body in quota_service.bodies()} == {"sdk-agent"}


async def test_annotations_come_from_the_servers_tool_list(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    server = build_server(make_client())

    async with Client(server) as client:
        search = await client.call_tool("search_articles", {"query": "ai"})

    [body] = quota_service.bodies()
    assert body["annotations"] == {"readOnlyHint": True, "title": "Search articles"}
    assert search.meta is not None
    assert search.meta[META_DECISION_KEY]["category"] == "read"


async def test_fail_modes_hold_on_the_sdk_too(dead_url: str, make_client: ClientFactory) -> None:
    library = Library()
    server = build_server(make_client(base_url=dead_url, max_attempts=1), library)

    async with Client(server) as client:
        delete = await client.call_tool("delete_tag", {"tag": "ai"})
        search = await client.call_tool("search_articles", {"query": "ai"})

    assert delete.is_error is True
    assert search.is_error is False
    assert (library.deletions, library.searches) == (0, 1)
