"""One call across retries, over a real MCP client: an MRTR retry (new JSON-RPC id, the
`requestState` we sealed) and a re-sent call with the same call id are counted once."""

from __future__ import annotations

from typing import Any

import mcp_types as mt
import pytest
from fastmcp import Client, FastMCP
from fastmcp.server.context import Context
from mcp_quota_client import META_CALL_ID_KEY
from mcp_quota_client.fastmcp import QuotaMiddleware

from tests.mcp.conftest import ClientFactory, FakeQuotaService

pytestmark = pytest.mark.anyio


def confirming_server(make_client: ClientFactory, ran: list[str]) -> FastMCP:
    """A server whose `delete_tag` asks the user to confirm first (an MRTR round)."""
    server = FastMCP("confirming")
    server.add_middleware(QuotaMiddleware(make_client()))

    @server.tool
    async def delete_tag(tag: str, ctx: Context) -> Any:
        if ctx.input_responses is None:
            return mt.InputRequiredResult(
                input_requests={
                    "confirm": mt.ElicitRequest(
                        params=mt.ElicitRequestFormParams(
                            message=f"Delete {tag}?",
                            requested_schema={"type": "object", "properties": {}},
                        )
                    )
                },
                request_state=f"asked:{tag}",
            )
        ran.append(f"{tag}:{ctx.request_state}")
        return f"deleted {tag}"

    return server


async def accept(message: str, response_type: Any, params: Any, context: Any) -> dict[str, Any]:
    return {}


async def test_an_mrtr_retry_is_the_same_call_and_counted_once(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    """Defect class: a retry with a new JSON-RPC id counted as a new call (MRTR)."""
    ran: list[str] = []
    server = confirming_server(make_client, ran)

    async with Client(server, elicitation_handler=accept) as client:
        result = await client.call_tool_mcp("delete_tag", {"tag": "ai"})

    assert result.is_error is False, result
    # The tool got its own state back, not our envelope.
    assert ran == ["ai:asked:ai"]
    checks = quota_service.bodies()
    assert len(checks) == 2
    assert checks[0]["call_id"] == checks[1]["call_id"]
    assert quota_service.used[(checks[0]["session_id"], "write")] == 1


async def test_a_call_re_sent_with_the_same_call_id_is_counted_once(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    server = FastMCP("plain")
    server.add_middleware(QuotaMiddleware(make_client()))

    @server.tool
    def delete_tag(tag: str) -> str:
        return f"deleted {tag}"

    meta = {META_CALL_ID_KEY: "call-7"}
    async with Client(server) as client:  # each call_tool_mcp is a new JSON-RPC id
        first = await client.call_tool_mcp("delete_tag", {"tag": "ai"}, meta=meta)
        again = await client.call_tool_mcp("delete_tag", {"tag": "ai"}, meta=meta)
        other = await client.call_tool_mcp("delete_tag", {"tag": "ai"})

    assert (first.is_error, again.is_error, other.is_error) == (False, False, False)
    session = quota_service.bodies()[0]["session_id"]
    assert quota_service.used[(session, "write")] == 2  # the re-send once; no id: again
