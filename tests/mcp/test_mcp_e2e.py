"""End to end with real parts: the quota service as `make run` starts it, the example MCP
servers over streamable HTTP on loopback, and real MCP clients (fastmcp and the SDK)."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import mcp
import mcp_types as mt
import pytest
from fastmcp import Client
from launch import (
    EXAMPLES,
    Running,
    free_port,
    healthy,
    service_and_server,
    spawn,
    spawn_articles_server,
    spawn_quota_service,
)
from mcp_quota_client import META_CALL_ID_KEY, META_DECISION_KEY, META_SESSION_KEY

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

STATS_URI = "stats://articles"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e-logs")


@pytest.fixture(scope="module")
def stack(logs: Path) -> Iterator[tuple[Running, Running, Running]]:
    """The quota service and both example servers, started side by side."""
    service = spawn_quota_service(logs)
    fastmcp_server = spawn_articles_server(service.url, logs)
    sdk_server = spawn_articles_server(service.url, logs, "articles_server_sdk.py")
    with healthy(service, fastmcp_server, sdk_server):
        yield service, fastmcp_server, sdk_server


@pytest.fixture
def fastmcp_server(stack: tuple[Running, Running, Running]) -> Running:
    return stack[1]


@pytest.fixture
def sdk_server(stack: tuple[Running, Running, Running]) -> Running:
    return stack[2]


def session_meta(**extra: str) -> dict[str, Any]:
    return {META_SESSION_KEY: f"e2e-{uuid.uuid4().hex[:12]}", **extra}


def text_of(result: mt.CallToolResult) -> str:
    [block] = result.content
    assert isinstance(block, mt.TextContent)
    return block.text


async def stats(client: Client[Any]) -> dict[str, int]:
    [contents] = await client.read_resource(STATS_URI)
    assert isinstance(contents, mt.TextResourceContents)
    loaded: dict[str, int] = json.loads(contents.text)
    return loaded


def decision(result: mt.CallToolResult) -> dict[str, Any]:
    assert result.meta is not None
    found: dict[str, Any] = result.meta[META_DECISION_KEY]
    return found


async def test_200_searches_run_and_the_201st_is_refused_with_the_explicit_text(
    fastmcp_server: Running,
) -> None:
    meta = session_meta()
    async with Client(f"{fastmcp_server.url}/mcp") as client:
        before = await stats(client)
        results = [
            await client.call_tool_mcp("search_articles", {"query": "ai"}, meta=meta)
            for _ in range(200)
        ]
        refused = await client.call_tool_mcp("search_articles", {"query": "ai"}, meta=meta)
        after = await stats(client)

    assert [r.is_error for r in results] == [False] * 200
    assert decision(results[-1])["used"] == 200
    assert refused.is_error is True
    text = text_of(refused)
    assert "NOT run" in text
    assert "'read'" in text
    assert "200/200" in text
    assert meta[META_SESSION_KEY] in text
    assert "administrator" in text
    assert refused.structured_content is not None
    assert refused.structured_content["kind"] == "quota_exceeded"
    assert refused.structured_content["scope"] == "session"
    assert refused.structured_content["used"] == 200
    assert refused.structured_content["limit"] == 200
    assert refused.structured_content["retryAfterSeconds"] > 0
    assert after["searches"] - before["searches"] == 200


async def test_15_deletes_run_the_16th_is_refused_and_exactly_15_happened(
    fastmcp_server: Running,
) -> None:
    meta = session_meta()
    async with Client(f"{fastmcp_server.url}/mcp") as client:
        before = await stats(client)
        results = [
            await client.call_tool_mcp("delete_tag", {"tag": f"tag-{i}"}, meta=meta)
            for i in range(20)
        ]
        after = await stats(client)

    assert [r.is_error for r in results] == [False] * 15 + [True] * 5
    refused = results[15]
    assert refused.structured_content is not None
    structured = refused.structured_content
    assert (structured["kind"], structured["category"]) == ("quota_exceeded", "write")
    assert (structured["used"], structured["limit"]) == (15, 15)
    assert structured["retryAfterSeconds"] > 0
    assert "'delete_tag' was NOT run" in text_of(refused)
    assert after["deletions"] - before["deletions"] == 15


async def test_a_retry_with_the_same_call_id_is_not_counted_twice(
    fastmcp_server: Running,
) -> None:
    meta = session_meta()
    retried = {**meta, META_CALL_ID_KEY: "delete-tag-ai-1"}
    async with Client(f"{fastmcp_server.url}/mcp") as client:
        first = await client.call_tool_mcp("delete_tag", {"tag": "ai"}, meta=retried)
        retry = await client.call_tool_mcp("delete_tag", {"tag": "ai"}, meta=retried)
        others = [
            await client.call_tool_mcp("delete_tag", {"tag": f"t{i}"}, meta=meta) for i in range(15)
        ]

    assert (decision(first)["used"], decision(first)["duplicate"]) == (1, False)
    assert (decision(retry)["used"], decision(retry)["duplicate"]) == (1, True)
    # Counted once, so 14 more distinct calls fit in the budget of 15, not 13.
    assert [r.is_error for r in others] == [False] * 14 + [True]
    assert decision(others[13])["used"] == 15


async def test_reconnecting_with_the_same_session_keeps_its_count(
    fastmcp_server: Running,
) -> None:
    # JSON-RPC ids restart on each connection; they must not be taken for retries. (Each
    # call deletes another tag: the same one again would meet the loop breaker.)
    meta = session_meta()
    url = f"{fastmcp_server.url}/mcp"
    async with Client(url) as first:
        early = [
            await first.call_tool_mcp("delete_tag", {"tag": f"x{i}"}, meta=meta) for i in range(10)
        ]
    async with Client(url) as second:
        late = [
            await second.call_tool_mcp("delete_tag", {"tag": f"w{i}"}, meta=meta) for i in range(6)
        ]

    assert [r.is_error for r in early] == [False] * 10
    assert [r.is_error for r in late] == [False] * 5 + [True]


async def test_without_a_meta_key_the_quota_still_trips(fastmcp_server: Running) -> None:
    # The 2026-07-28 client sends a new ctx.session_id with every request; the
    # middleware falls back to principal + connection, so the budget still holds.
    async with Client(f"{fastmcp_server.url}/mcp") as client:
        results = [await client.call_tool_mcp("delete_tag", {"tag": f"y{i}"}) for i in range(16)]

    assert [r.is_error for r in results] == [False] * 15 + [True]
    assert decision(results[0])["sessionId"].startswith("derived:")


async def test_official_sdk_client_on_a_handshake_session_is_not_keyed_by_mcp_session_id(
    fastmcp_server: Running,
) -> None:
    """Issue 31: a legacy `Mcp-Session-Id` is no budget boundary (the session is derived
    from who calls), so the agent's budget does not depend on how it connects."""
    async with mcp.Client(f"{fastmcp_server.url}/mcp", mode="legacy") as client:
        results = [await client.call_tool("delete_tag", {"tag": f"z{i}"}) for i in range(16)]

    assert [r.is_error for r in results] == [False] * 15 + [True]
    assert not decision(results[0])["sessionId"].startswith("mcp:")
    assert "was NOT run" in text_of(results[15])


async def test_official_sdk_client_against_the_sdk_example_server(sdk_server: Running) -> None:
    meta = cast(mt.RequestParamsMeta, session_meta())
    async with mcp.Client(f"{sdk_server.url}/mcp") as client:
        results = [
            await client.call_tool("delete_tag", {"tag": f"q{i}"}, meta=meta) for i in range(16)
        ]
        search = await client.call_tool("search_articles", {"query": "ai"}, meta=meta)

    assert [r.is_error for r in results] == [False] * 15 + [True]
    assert results[15].structured_content is not None
    assert results[15].structured_content["kind"] == "quota_exceeded"
    assert search.is_error is False


async def test_with_the_quota_service_stopped_deletes_are_refused_and_searches_run(
    logs: Path,
) -> None:
    with service_and_server(logs) as (own_service, server):
        meta = session_meta()
        async with Client(f"{server.url}/mcp") as client:
            assert (
                await client.call_tool_mcp("delete_tag", {"tag": "a"}, meta=meta)
            ).is_error is False
            own_service.stop()
            before = await stats(client)
            delete = await client.call_tool_mcp("delete_tag", {"tag": "ai"}, meta=meta)
            search = await client.call_tool_mcp("search_articles", {"query": "ai"}, meta=meta)
            after = await stats(client)

    assert delete.is_error is True
    assert delete.structured_content is not None
    assert delete.structured_content["kind"] == "quota_service_unavailable"
    assert "was NOT run" in text_of(delete)
    assert search.is_error is False
    assert decision(search)["outcome"] == "fail_open"
    assert after["deletions"] == before["deletions"]
    assert after["searches"] - before["searches"] == 1
    # The search, and the read of the stats resource itself: resources are checked
    # reads too (issue 31 item 5), run fail-open like any read.
    assert after["quota_fail_open"] - before["quota_fail_open"] == 2


async def test_a_wrong_token_is_named_in_plain_words_to_the_agent_and_in_the_log(
    stack: tuple[Running, Running, Running], logs: Path
) -> None:
    port = free_port()
    env = {"MCP_QUOTA_URL": stack[0].url, "MCP_QUOTA_TOKEN": "not-a-token", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(EXAMPLES / "articles_server.py"), "--port", str(port)]
    server = spawn("wrong-token", command, port, logs, env)
    expected = "the quota service refused this server's token (403): check MCP_QUOTA_TOKEN"
    with healthy(server):
        async with Client(f"{server.url}/mcp") as client:
            result = await client.call_tool_mcp("search_articles", {"query": "ai"})

    assert result.is_error is True
    assert expected in text_of(result)
    assert "no detail" not in text_of(result)
    assert expected in server.output()
