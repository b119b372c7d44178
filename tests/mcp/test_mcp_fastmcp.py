"""The FastMCP middleware in process: a real fastmcp server and Client, a fake quota service."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as mt
import pytest
from articles_library import Library
from articles_server import STATS_URI, build_server
from fastmcp import Client
from mcp_quota_client import META_CALL_ID_KEY, META_DECISION_KEY, META_SESSION_KEY

from tests.mcp.conftest import ClientFactory, FakeQuotaService

pytestmark = pytest.mark.anyio


def text_of(result: mt.CallToolResult) -> str:
    [block] = result.content
    assert isinstance(block, mt.TextContent)
    return block.text


async def stats(client: Client[Any]) -> dict[str, int]:
    [contents] = await client.read_resource(STATS_URI)
    assert isinstance(contents, mt.TextResourceContents)
    loaded: dict[str, int] = json.loads(contents.text)
    return loaded


async def test_a_refused_call_is_a_tool_error_and_the_tool_never_runs(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.limits["write"] = 3
    library = Library()
    server = build_server(make_client(), library)
    meta = {META_SESSION_KEY: "agent-1"}

    async with Client(server) as client:
        allowed = [
            await client.call_tool_mcp("delete_tag", {"tag": f"t{i}"}, meta=meta) for i in range(3)
        ]
        refused = await client.call_tool_mcp("delete_tag", {"tag": "ai"}, meta=meta)

    assert [result.is_error for result in allowed] == [False, False, False]
    assert refused.is_error is True
    assert "was NOT run" in text_of(refused)
    assert "'write' quota (3/3 calls)" in text_of(refused)
    assert refused.structured_content == {
        "kind": "quota_exceeded",
        "scope": "session",
        "category": "write",
        "used": 3,
        "limit": 3,
        "retryAfterSeconds": 3600,
    }
    assert library.deletions == 3
    assert all("ai" in a["tags"] for a in library.articles if a["id"] in (1, 5))


async def test_the_servers_own_annotations_go_with_each_check(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    server = build_server(make_client())

    async with Client(server) as client:
        await client.call_tool_mcp("search_articles", {"query": "ai"})
        await client.call_tool_mcp("delete_tag", {"tag": "ai"})

    search, delete = quota_service.bodies()
    assert search["tool"] == "search_articles"
    assert search["annotations"] == {"readOnlyHint": True, "title": "Search articles"}
    assert delete["annotations"] == {"destructiveHint": True, "title": "Delete a tag"}
    assert "category" not in search
    assert quota_service.used[(search["session_id"], "read")] == 1
    assert quota_service.used[(delete["session_id"], "write")] == 1


async def test_the_meta_session_key_is_the_quota_session(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    server = build_server(make_client())

    async with Client(server) as client:
        await client.call_tool_mcp("search_articles", {"query": "a"}, meta={META_SESSION_KEY: "a"})
        await client.call_tool_mcp("search_articles", {"query": "b"}, meta={META_SESSION_KEY: "b"})
        await client.call_tool_mcp("search_articles", {"query": "a"}, meta={META_SESSION_KEY: "a"})

    assert [body["session_id"] for body in quota_service.bodies()] == ["a", "b", "a"]
    assert quota_service.used[("a", "read")] == 2


async def test_without_a_meta_session_calls_still_share_one_session(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    server = build_server(make_client())

    async with Client(server) as client:
        for _ in range(3):
            await client.call_tool_mcp("search_articles", {"query": "ai"})

    sessions = {body["session_id"] for body in quota_service.bodies()}
    assert len(sessions) == 1
    assert quota_service.used[(sessions.pop(), "read")] == 3


async def test_an_allowed_result_carries_the_decision_in_meta(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    server = build_server(make_client())

    async with Client(server) as client:
        result = await client.call_tool_mcp(
            "delete_tag", {"tag": "ai"}, meta={META_SESSION_KEY: "s"}
        )

    assert result.is_error is False
    assert result.meta is not None
    decision = result.meta[META_DECISION_KEY]
    assert decision["used"] == 1
    assert decision["limit"] == 15
    assert decision["remaining"] == 14
    assert decision["category"] == "write"
    assert decision["sessionId"] == "s"


async def test_a_retried_call_id_is_counted_once(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    server = build_server(make_client())
    meta = {META_SESSION_KEY: "s", META_CALL_ID_KEY: "call-7"}

    async with Client(server) as client:
        first = await client.call_tool_mcp("delete_tag", {"tag": "ai"}, meta=meta)
        retry = await client.call_tool_mcp("delete_tag", {"tag": "ai"}, meta=meta)

    assert first.meta is not None
    assert retry.meta is not None
    assert first.meta[META_DECISION_KEY]["duplicate"] is False
    assert retry.meta[META_DECISION_KEY]["duplicate"] is True
    assert retry.meta[META_DECISION_KEY]["used"] == 1
    assert quota_service.used[("s", "write")] == 1


async def test_with_the_service_down_writes_are_refused_and_reads_run_counted_as_fail_open(
    dead_url: str, make_client: ClientFactory
) -> None:
    library = Library()
    server = build_server(make_client(base_url=dead_url, max_attempts=2), library)

    async with Client(server) as client:
        delete = await client.call_tool_mcp("delete_tag", {"tag": "ai"})
        search = await client.call_tool_mcp("search_articles", {"query": "ai"})
        counters = await stats(client)

    assert delete.is_error is True
    assert delete.structured_content is not None
    assert delete.structured_content["kind"] == "quota_service_unavailable"
    assert "was NOT run" in text_of(delete)
    assert search.is_error is False
    assert library.deletions == 0
    assert library.searches == 1
    # The search, and the read of the stats resource: resources are checked reads too
    # (issue 31 item 5), run fail-open like any read.
    assert counters["quota_fail_open"] == 2
    assert counters["quota_fail_closed"] == 1


async def test_an_unknown_tool_is_not_counted(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    server = build_server(make_client())

    async with Client(server) as client:
        result = await client.call_tool_mcp("no_such_tool", {})

    assert result.is_error is True
    assert quota_service.seen == []
