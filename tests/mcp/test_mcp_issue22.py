"""Issue 22 through real MCP servers (FastMCP and the SDK's) and their real clients, in
process, against the fake quota service: calls weighed by a cost per tool, the
arguments' digest, the shadow notice in `_meta`, and the local refusal hold."""

from __future__ import annotations

import hashlib
from typing import Any, cast

import mcp_types as mt
import pytest
from articles_library import Library
from articles_server import build_server
from articles_server_sdk import build_server as build_sdk_server
from fastmcp import Client
from mcp import Client as SdkClient
from mcp_quota_client import META_SESSION_KEY, META_SHADOW_KEY
from mcp_quota_client.guard import args_digest
from mcp_types import RequestParamsMeta

from tests.mcp.conftest import ClientFactory, FakeQuotaService, Scripted

pytestmark = pytest.mark.anyio
META = {META_SESSION_KEY: "agent-22"}


def text_of(result: mt.CallToolResult) -> str:
    [block] = result.content
    assert isinstance(block, mt.TextContent)
    return block.text


async def test_a_bulk_tool_weighs_one_unit_per_tag(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.limits["write"] = 5
    library = Library()
    async with Client(build_server(make_client(), library)) as client:
        first = await client.call_tool_mcp("delete_tags", {"tags": ["a", "b", "c"]}, meta=META)
        too_many = await client.call_tool_mcp("delete_tags", {"tags": ["d", "e", "f"]}, meta=META)
        fits = await client.call_tool_mcp("delete_tags", {"tags": ["d", "e"]}, meta=META)
    assert first.is_error is False and fits.is_error is False
    assert too_many.is_error is True and "NOT run" in text_of(too_many)
    assert [b.get("units") for b in quota_service.bodies()] == [3, 3, 2]
    assert library.deletions == 5  # the refused call deleted nothing


async def test_the_sdk_guard_weighs_calls_too(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    library = Library()
    meta = cast(RequestParamsMeta, META)
    async with SdkClient(build_sdk_server(make_client(), library)) as client:
        result = await client.call_tool("delete_tags", {"tags": ["a", "b"]}, meta=meta)
    assert result.is_error is False
    [body] = quota_service.bodies()
    assert body["units"] == 2 and library.deletions == 2


async def test_each_check_carries_the_digest_of_its_arguments_not_the_arguments(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    async with Client(build_server(make_client())) as client:
        await client.call_tool_mcp("search_articles", {"query": "ai", "limit": 2}, meta=META)
        await client.call_tool_mcp("search_articles", {"limit": 2, "query": "ai"}, meta=META)
    first, second = quota_service.bodies()
    canonical = '{"limit":2,"query":"ai"}'
    assert first["args_digest"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert second["args_digest"] == first["args_digest"]
    assert "ai" not in str({k: v for k, v in first.items() if k != "tool"})
    assert args_digest({"x": float("nan")}) is None  # not JSON: no digest


async def test_a_service_without_the_digest_is_asked_again_without_it(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.accepts_issue_22 = False
    async with Client(build_server(make_client())) as client:
        first = await client.call_tool_mcp("delete_tag", {"tag": "a"}, meta=META)
        second = await client.call_tool_mcp("delete_tag", {"tag": "b"}, meta=META)
    assert first.is_error is False and second.is_error is False
    assert ["args_digest" in b for b in quota_service.bodies()] == [True, False, False]


async def test_a_shadowed_call_runs_and_its_result_carries_the_notice(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    notice = {"code": "quota_exceeded", "scope": "session", "message": "would be refused"}
    answer = {
        "allowed": True,
        "session_id": "agent-22",
        "tool": "delete_tag",
        "category": "write",
        "used": 16,
        "limit": 15,
        "remaining": 0,
        "resets_at": "2026-12-02T13:00:00Z",
        "duplicate": False,
        "shadow": notice,
    }
    quota_service.script.append(Scripted(200, answer))
    library = Library()
    async with Client(build_server(make_client(), library)) as client:
        result = await client.call_tool_mcp("delete_tag", {"tag": "ai"}, meta=META)
    assert result.is_error is False and library.deletions == 1
    assert result.meta is not None and result.meta[META_SHADOW_KEY] == notice


async def test_each_report_carries_its_own_hold_ticket_once(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    """Defect class: what the client reports is trusted. The service counts a report only
    under the ticket of the refusal that started the hold, once: the client sends each
    hold's count with that hold's ticket, and never a reported ticket again."""
    quota_service.limits["write"] = 1
    quota = make_client(hold_calls=2)
    async with Client(build_server(quota, Library())) as client:
        for i in range(8):
            await client.call_tool_mcp("delete_tag", {"tag": f"t{i}"}, meta=META)
    reports = [b.get("refused_locally") for b in quota_service.bodies()]
    # allowed, refused (ticket-1), 2 held; reported (refused: ticket-2), 2 held; reported.
    assert reports == [
        None,
        None,
        {"write": {"count": 2, "ticket": "ticket-1"}},
        {"write": {"count": 2, "ticket": "ticket-2"}},
    ]


async def test_refusals_are_held_locally_then_reported(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.limits["write"] = 2
    library = Library()
    quota = make_client(hold_calls=4)
    async with Client(build_server(quota, library)) as client:
        calls = [
            await client.call_tool_mcp("delete_tag", {"tag": f"t{i}"}, meta=META) for i in range(8)
        ]
    refused = calls[2:]
    assert all(r.is_error for r in refused) and library.deletions == 2
    assert {text_of(r) for r in refused} == {text_of(refused[0])}  # the service's words
    bodies: list[dict[str, Any]] = quota_service.bodies()
    # 2 allowed, the refusal that starts the hold, 4 held here, then the service again
    # with the count; then a new hold.
    assert len(bodies) == 4
    assert "refused_locally" not in bodies[2]
    # The count goes with the ticket of the refusal that started the hold (issue 28).
    assert bodies[3]["refused_locally"] == {"write": {"count": 4, "ticket": "ticket-1"}}
    stats = quota.stats()
    assert stats.refused_locally == 4 and stats.refused_locally_unreported == 0
