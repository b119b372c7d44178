"""A session the service mints, end to end (issue 31): the quota service as `make run`
starts it, the FastMCP example server with the middleware over streamable HTTP, and
fastmcp's own client. A call that names no session gets a signed session back in its
result's `_meta["io.mcp-quota/session"]`; a client that echoes it over a fresh connection
(under another client name, so it derives another session) keeps the budget; a forged
one is refused with the service's words."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as mt
import pytest
from fastmcp import Client
from launch import Running, healthy, spawn_articles_server, spawn_quota_service
from mcp_quota_client import META_CALL_ID_KEY, META_DECISION_KEY, META_SESSION_KEY
from mcp_quota_client.results import REPLAYED_META

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    logs: Path = tmp_path_factory.mktemp("minted-logs")
    service = spawn_quota_service(logs)
    articles = spawn_articles_server(service.url, logs)
    with healthy(service, articles):
        yield articles


def client(server: Running, name: str) -> Client[Any]:
    """A fresh connection of an MCP client that names itself `name`."""
    info = mt.Implementation(name=name, version="1.0")
    return Client(f"{server.url}/mcp", client_info=info)


async def delete(client: Client[Any], tag: str, meta: dict[str, Any] | None = None) -> Any:
    return await client.call_tool_mcp("delete_tag", {"tag": tag}, meta=meta)


def used(result: Any) -> int:
    assert result.meta is not None, result
    return int(result.meta[META_DECISION_KEY]["used"])


async def test_a_session_echoed_back_keeps_the_budget_across_a_fresh_connection(
    server: Running,
) -> None:
    """Defect class: a session that lives as long as one connection or one client name."""
    async with client(server, "agent-first") as first:
        await delete(first, "a")
        result = await delete(first, "b")
    token = result.meta[META_SESSION_KEY]
    assert token.startswith("mqs1-")
    assert used(result) == 2

    async with client(server, "agent-second") as second:
        echoed = await delete(second, "c", {META_SESSION_KEY: token})
        unnamed = await delete(second, "d")
    assert echoed.is_error is False
    assert used(echoed) == 3  # the first connection's session
    same = result.meta[META_DECISION_KEY]["sessionId"]
    assert echoed.meta[META_DECISION_KEY]["sessionId"] == same
    assert echoed.meta[META_SESSION_KEY].startswith("mqs1-")  # renewed
    assert used(unnamed) == 1  # what the second client derives is a session of its own


async def test_a_forged_session_is_refused_with_the_services_words(server: Running) -> None:
    async with client(server, "agent-forger") as forger:
        result = await delete(forger, "x", {META_SESSION_KEY: "mqs1-0000.e30.forged"})
    assert result.is_error is True
    [block] = result.content
    assert isinstance(block, mt.TextContent)
    assert "was NOT run" in block.text
    assert "not a session this service minted" in block.text
    assert "configuration problem" not in block.text  # the client's doing, not the server's


async def test_a_call_re_sent_under_its_call_id_is_counted_once_and_not_run_again(
    server: Running,
) -> None:
    """Defect class: a retry counted twice (issue 31, item 2), over a real MCP client and
    the real service: each `call_tool_mcp` is a new JSON-RPC request with a new id; the
    same `_meta` call id makes it the same call, answered with the first run's result."""
    call_id = {META_CALL_ID_KEY: f"resend-{uuid.uuid4().hex[:8]}"}
    async with client(server, "agent-resender") as resender:
        first = await delete(resender, "r", call_id)
        again = await delete(resender, "r", call_id)
        other = await delete(resender, "r")  # no call id: another call
    assert (first.is_error, again.is_error, other.is_error) == (False, False, False)
    assert used(first) == 1 and used(other) == 2
    assert again.meta[REPLAYED_META] is True  # the kept result; the tool did not run
    assert again.content == first.content
