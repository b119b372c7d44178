"""What makes `mcp-quota-proxy` transparent: the lists are the upstream's, and so is its name.

FastMCP's proxy rebuilds each tool, resource and prompt as a component of its own and
lists those: a tool gains a `title` and `_meta.fastmcp.tags`, and `serverInfo` is
FastMCP's (issue 31 item 3). Here the list methods of the proxy's low-level MCP server
(the SDK's `Server`, whose handlers FastMCP registers) answer with the upstream's own
result, and the server's identity is the upstream's. `tools/call` is answered there too:
the check, then the request sent on the held upstream session and its result passed
back as the upstream sent it (issue 29 item 5).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import mcp_types as mt
from fastmcp.server.context import Context
from fastmcp.server.dependencies import bind_request_context
from fastmcp.server.providers.proxy import FastMCPProxy, ProxyClient
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter

from mcp_quota_client.approval_answer import accepts_url_elicitation, approval_answer
from mcp_quota_client.fastmcp import QuotaMiddleware
from mcp_quota_client.guard import annotations_from
from mcp_quota_client.upstream import Upstream, connection_lost

_AS_SENT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
"""An upstream's result as it sent it: the SDK checks it against the protocol, and it
is not rebuilt as a model only to be dumped again."""


def show_upstream_identity(proxy: FastMCPProxy, info: mt.Implementation) -> None:
    """Make the proxy's `serverInfo` the upstream's (name, version, title, ...)."""
    server = proxy._mcp_server
    server.name = info.name
    server.version = info.version
    server.title = info.title
    server.description = info.description
    server.website_url = info.website_url
    server.icons = info.icons
    # The stamp is cached on first use; none has been made before serving starts.
    server.__dict__.pop("_server_info_stamp_source", None)


def pass_lists_through(proxy: FastMCPProxy, upstream: Upstream) -> None:
    """Answer `tools/list`, `resources/list`, `resources/templates/list` and
    `prompts/list` with the upstream's results, unchanged."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListToolsResult:
        with bind_request_context(ctx):  # `--forward-authorization` reads the request
            client = await upstream.client()
        async with upstream.opened(client), _dropped_on_loss(upstream, client):
            return await client.list_tools_mcp(cursor=_cursor(params), cache_mode="refresh")

    async def list_resources(
        ctx: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListResourcesResult:
        with bind_request_context(ctx):  # `--forward-authorization` reads the request
            client = await upstream.client()
        async with upstream.opened(client), _dropped_on_loss(upstream, client):
            return await client.list_resources_mcp(cursor=_cursor(params), cache_mode="refresh")

    async def list_templates(
        ctx: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListResourceTemplatesResult:
        with bind_request_context(ctx):  # `--forward-authorization` reads the request
            client = await upstream.client()
        async with upstream.opened(client), _dropped_on_loss(upstream, client):
            return await client.list_resource_templates_mcp(
                cursor=_cursor(params), cache_mode="refresh"
            )

    async def list_prompts(
        ctx: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListPromptsResult:
        with bind_request_context(ctx):  # `--forward-authorization` reads the request
            client = await upstream.client()
        async with upstream.opened(client), _dropped_on_loss(upstream, client):
            return await client.list_prompts_mcp(cursor=_cursor(params), cache_mode="refresh")

    server = proxy._mcp_server
    paginated = mt.PaginatedRequestParams
    server.add_request_handler("tools/list", paginated, list_tools)
    server.add_request_handler("resources/list", paginated, list_resources)
    server.add_request_handler("resources/templates/list", paginated, list_templates)
    server.add_request_handler("prompts/list", paginated, list_prompts)


def _cursor(params: mt.PaginatedRequestParams | None) -> str | None:
    return params.cursor if params is not None else None


_CONNECTION_META_KEYS = frozenset(
    {
        mt.PROTOCOL_VERSION_META_KEY,
        mt.CLIENT_INFO_META_KEY,
        mt.CLIENT_CAPABILITIES_META_KEY,
    }
)
"""Request `_meta` keys that describe the caller's own connection: never sent upstream."""


class ToolBook:
    """The upstream's tools by name, for their annotations: listed once, and again when a
    call names a tool not seen yet (so a tool the upstream adds is found)."""

    def __init__(self) -> None:
        self._tools: dict[str, mt.Tool] = {}

    async def find(self, client: ProxyClient[Any], name: str) -> mt.Tool | None:
        """The tool `name` as the upstream lists it, or None if it lists none such."""
        if name not in self._tools:
            tools: dict[str, mt.Tool] = {}
            cursor: str | None = None
            while True:
                page = await client.list_tools_mcp(cursor=cursor, cache_mode="refresh")
                tools.update({tool.name: tool for tool in page.tools})
                cursor = page.next_cursor
                if not cursor:
                    break
            self._tools = tools
        return self._tools.get(name)


def pass_calls_through(proxy: FastMCPProxy, upstream: Upstream, quota: QuotaMiddleware) -> None:
    """Answer `tools/call` in the low-level server: the check, then the request sent on
    the upstream session and its result as the upstream sent it (its `_meta` with the
    decision added). FastMCP's proxy would look the tool up upstream again and rebuild
    its result on every call: the hop this saves is the proxy's own latency (issue 29
    item 5). A modern upstream keeps FastMCP's path, which relays a multi-round-trip
    `input_required` answer."""
    book = ToolBook()
    fastmcp_call = proxy._mcp_server.get_request_handler("tools/call")
    assert fastmcp_call is not None  # FastMCP registers every core method

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mt.CallToolRequestParams
    ) -> mt.CallToolResult | mt.InputRequiredResult | dict[str, Any] | Any:
        with bind_request_context(ctx):
            caller = quota._caller(Context(fastmcp=proxy))
            client = await upstream.client()
        async with upstream.opened(client):
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                return await fastmcp_call.handler(ctx, params)
            async with _dropped_on_loss(upstream, client):
                tool = await book.find(client, params.name)
            if tool is None:
                # Nothing will run: the upstream answers "unknown tool" itself, uncounted.
                return await _forward(client, params, None)
            await quota._weigh_by_service_policy()
            # The retry of an approval's `input_required`: the same call id.
            opened = quota.guard.open_state(caller, params.arguments, params.request_state)
            if opened is not None:
                caller = replace(caller, state_call_id=opened.call_id)
            annotations = annotations_from(tool.annotations)
            guarded = await quota.guard.decide(params.name, annotations, caller, params.arguments)
            capabilities = ctx.session.client_capabilities
            url_elicitation = accepts_url_elicitation(ctx.protocol_version, capabilities)
            approval = approval_answer(
                quota.guard, guarded, url_elicitation, params.input_responses
            )
            if approval is not None:
                return approval
            refusal = guarded.refusal
            if refusal is not None:
                return mt.CallToolResult(
                    content=[mt.TextContent(type="text", text=refusal.text)],
                    structured_content=refusal.structured,
                    is_error=True,
                    # The decision and the session the service minted, as on an allowed call.
                    _meta=dict(guarded.meta) if guarded.meta is not None else None,
                )
            replayed = await quota.once.answer(guarded, opened is not None)
            if replayed is not None:
                return replayed  # a retry of a call that already ran: not sent upstream
            meta = {k: v for k, v in (ctx.meta or {}).items() if k not in _CONNECTION_META_KEYS}
            try:
                result = await _forward(client, params, meta or None)
            except Exception as exc:  # the upstream's transport failed: a tool error
                if connection_lost(exc):
                    await upstream.drop(client)
                result = {
                    "content": [
                        {"type": "text", "text": f"Error calling tool {params.name!r}: {exc}"}
                    ],
                    "isError": True,
                    "resultType": "complete",
                }
        await quota.once.keep(guarded, quota._service_policy, result, opened is not None)
        if guarded.meta is not None:
            result["_meta"] = {**(result.get("_meta") or {}), **guarded.meta}
        return result

    server = proxy._mcp_server
    server.add_request_handler("tools/call", mt.CallToolRequestParams, call_tool)


async def _forward(
    client: ProxyClient[Any], params: mt.CallToolRequestParams, meta: dict[str, Any] | None
) -> dict[str, Any]:
    """`tools/call` on the upstream session, its result as the upstream sent it.

    Raises:
        MCPError: the upstream answered with a JSON-RPC error, or its connection closed.
    """
    request = mt.CallToolRequest(
        params=mt.CallToolRequestParams(
            name=params.name,
            arguments=params.arguments or {},
            _meta=meta,  # type: ignore[arg-type]
        )
    )
    # FastMCP's own call passes the client's progress handler (the proxy's relay).
    relay = client._progress_handler
    # The SDK's signature asks for a model; it validates with any `TypeAdapter` alike.
    as_sent: Any = _AS_SENT
    result: dict[str, Any] = await client.session.send_request(
        request, as_sent, progress_callback=relay
    )
    # A result with no `resultType` is complete (the bridge from pre-2026 servers).
    result.setdefault("resultType", "complete")
    return result


@asynccontextmanager
async def _dropped_on_loss(upstream: Upstream, client: ProxyClient[Any]) -> AsyncIterator[None]:
    """Drop the held upstream session when a request on it finds its connection gone."""
    try:
        yield
    except Exception as exc:
        if connection_lost(exc):
            await upstream.drop(client)
        raise
