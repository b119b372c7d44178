"""Real MCP server processes: two servers never share a budget by accident (a
misconfigured server's one line is in test_config_messages.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import mcp_types as mt
import pytest
from fastmcp import Client
from launch import EXAMPLES, Running, free_port, healthy, spawn

from tests.mcp.conftest import TOKEN, FakeQuotaService

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


def articles_server(quota_url: str, log_dir: Path, name: str) -> Running:
    port = free_port()
    env = {"MCP_QUOTA_URL": quota_url, "MCP_QUOTA_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(EXAMPLES / "articles_server.py"), "--port", str(port)]
    return spawn(name, [*command, "--name", name], port, log_dir, env)


@pytest.fixture
def two_servers(
    quota_service: FakeQuotaService, tmp_path: Path
) -> Iterator[tuple[Running, Running]]:
    eu = articles_server(quota_service.url, tmp_path, "articles-eu")
    us = articles_server(quota_service.url, tmp_path, "articles-us")
    with healthy(eu, us):
        yield eu, us


async def deletes(server: Running, times: int) -> list[bool]:
    """Call delete_tag with no `_meta` session, as a plain fastmcp client does."""
    async with Client(f"{server.url}/mcp") as client:
        results: list[mt.CallToolResult] = [
            await client.call_tool_mcp("delete_tag", {"tag": f"t{i}"}) for i in range(times)
        ]
    return [result.is_error for result in results]


async def test_two_servers_with_one_token_and_one_caller_have_two_budgets(
    quota_service: FakeQuotaService, two_servers: tuple[Running, Running]
) -> None:
    quota_service.limits["write"] = 2
    eu, us = two_servers

    assert await deletes(eu, 3) == [False, False, True]
    assert await deletes(us, 3) == [False, False, True]

    sessions = [body["session_id"] for body in quota_service.bodies()]
    assert all(session.startswith("derived:") for session in sessions)
    assert len(set(sessions[:3])) == len(set(sessions[3:])) == 1
    assert sessions[0] != sessions[3]
