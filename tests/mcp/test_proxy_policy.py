"""Issue 31 items 4 and 5 through the proxy, with real MCP clients: the service's policy
is the only one (a bulk delete weighs its ids with no `--policy` file), and resources
are checked like tools (`resource:<uri>` in the read category)."""

from __future__ import annotations

import json
import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path

import mcp_types as mt
import pytest
from fastmcp import Client
from launch import SERVER_TOKEN, Running, spawn_quota_service, wait_healthy
from mcp.shared.exceptions import MCPError
from mcp_quota_client import META_DECISION_KEY, META_SESSION_KEY

from tests.mcp.proxy_support import deletions, spawn_proxy, tags_command

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

READ_LIMIT = 6
POLICY = {
    "version": 1,
    "categories": {
        "read": {"limit": READ_LIMIT, "max_limit": 100, "notify": False, "lease": False},
        "write": {"limit": 15, "max_limit": 100, "notify": True},
    },
    "rules": [
        {"tools": ["delete_tags"], "category": "write", "units_from": "tags"},
        {"pattern": "delete_*", "category": "write"},
    ],
}


@pytest.fixture(scope="module")
def proxy_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    logs = tmp_path_factory.mktemp("proxy-policy")
    policy = logs / "policy.json"
    policy.write_text(json.dumps(POLICY))
    record = logs / "deletions.jsonl"
    started: list[Running] = []
    try:
        service = spawn_quota_service(logs, str(policy))
        started.append(service)
        wait_healthy(service, timeout=120.0)
        upstream = ["--upstream-command", shlex.join(tags_command(record))]
        proxy = spawn_proxy(upstream, service.url, SERVER_TOKEN, logs, name="proxy-policy")
        started.append(proxy)
        wait_healthy(proxy, timeout=120.0)
        yield f"{proxy.url}/mcp", record
    finally:
        for running in reversed(started):
            running.stop()


def new_session() -> str:
    return f"policy-{uuid.uuid4().hex[:12]}"


async def test_a_bulk_delete_of_4_ids_counts_4_units_by_the_services_rule(
    proxy_url: tuple[str, Path],
) -> None:
    """Defect class: two policies (units_from read only from the proxy's own file)."""
    url, record = proxy_url
    session = new_session()
    tags = [f"{session}-{i}" for i in range(4)]
    async with Client(url) as client:
        result = await client.call_tool_mcp(
            "delete_tags", {"tags": tags}, meta={META_SESSION_KEY: session}
        )

    assert result.is_error is not True
    assert result.meta is not None
    assert result.meta[META_DECISION_KEY]["used"] == 4
    assert [e["tag"] for e in deletions(record) if e["tag"].startswith(session)] == tags


async def test_10_resource_reads_against_a_read_limit_of_6_serve_6_and_refuse_4(
    proxy_url: tuple[str, Path],
) -> None:
    """Defect class: resources/read passed uncounted."""
    url, _ = proxy_url
    meta = {META_SESSION_KEY: new_session()}
    served, refused = 0, []
    async with Client(url) as client:
        for _ in range(10):
            try:
                await client.read_resource_mcp("tags://deletions", meta=meta)
                served += 1
            except MCPError as exc:
                refused.append(exc)

    assert (served, len(refused)) == (READ_LIMIT, 4)
    assert "resource:tags://deletions" in refused[0].message
    assert "NOT run" in refused[0].message


async def test_a_refusal_through_the_proxy_carries_the_minted_session(
    proxy_url: tuple[str, Path],
) -> None:
    """Defect class: a session that depends on how the call ended. A refused result
    through the proxy dropped the session the service minted (the middleware kept it),
    so a client that echoes it lost its session at the first refusal."""
    url, _ = proxy_url
    info = mt.Implementation(name=f"agent-{uuid.uuid4().hex[:8]}", version="1.0")
    async with Client(url, client_info=info) as client:
        results = [await client.call_tool_mcp("list_deletions", {}) for _ in range(READ_LIMIT + 1)]
    refused = results[-1]
    assert refused.is_error is True
    assert [r.is_error for r in results[:-1]] == [False] * READ_LIMIT
    assert refused.meta is not None
    assert str(refused.meta[META_SESSION_KEY]).startswith("mqs1-")
