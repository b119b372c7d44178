"""What makes `mcp-quota-proxy` transparent: the lists are the upstream's, and so is its name.

FastMCP's proxy rebuilds each tool, resource and prompt as a component of its own and
lists those: a tool gains a `title` and `_meta.fastmcp.tags`, and `serverInfo` is
FastMCP's (issue 31 item 3). Here the list methods of the proxy's low-level MCP server
(the SDK's `Server`, whose handlers FastMCP registers) answer with the upstream's own
result, and the server's identity is the upstream's. Calls still go through FastMCP's
proxy, behind `QuotaMiddleware`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import mcp_types as mt
from fastmcp.server.context import Context
from fastmcp.server.dependencies import bind_request_context
from fastmcp.server.providers.proxy import FastMCPProxy, ProxyClient
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_quota_client.approval_answer import accepts_url_elicitation, approval_answer
from mcp_quota_client.fastmcp import QuotaMiddleware
from mcp_quota_client.guard import annotations_from

ClientFactory = Callable[[], Awaitable[ProxyClient[Any]]]
"""The upstream client of one request (`Upstream.client`)."""


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


def pass_lists_through(proxy: FastMCPProxy, upstream: ClientFactory) -> None:
    """Answer `tools/list`, `resources/list`, `resources/templates/list` and
    `prompts/list` with the upstream's results, unchanged."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListToolsResult:
        with bind_request_context(ctx):  # `--forward-authorization` reads the request
            client = await upstream()
        async with client:
            return await client.list_tools_mcp(cursor=_cursor(params), cache_mode="refresh")

    async def list_resources(
        ctx: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListResourcesResult:
        with bind_request_context(ctx):  # `--forward-authorization` reads the request
            client = await upstream()
        async with client:
            return await client.list_resources_mcp(cursor=_cursor(params), cache_mode="refresh")

    async def list_templates(
        ctx: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListResourceTemplatesResult:
        with bind_request_context(ctx):  # `--forward-authorization` reads the request
            client = await upstream()
        async with client:
            return await client.list_resource_templates_mcp(
                cursor=_cursor(params), cache_mode="refresh"
            )

    async def list_prompts(
        ctx: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListPromptsResult:
        with bind_request_context(ctx):  # `--forward-authorization` reads the request
            client = await upstream()
        async with client:
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

    def __init__(self, upstream: ClientFactory) -> None:
        self._upstream = upstream
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


def pass_calls_through(
    proxy: FastMCPProxy, upstream: ClientFactory, quota: QuotaMiddleware
) -> None:
    """Answer `tools/call` in the low-level server: the check, then the upstream's own
    result (its `_meta` with the decision added). FastMCP's proxy would look the tool up
    upstream again and rebuild its result on every call: the hop this saves is the
    proxy's own latency (issue 29 item 5). A modern upstream keeps FastMCP's path, which
    relays a multi-round-trip `input_required` answer."""
    book = ToolBook(upstream)
    fastmcp_call = proxy._mcp_server.get_request_handler("tools/call")
    assert fastmcp_call is not None  # FastMCP registers every core method

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mt.CallToolRequestParams
    ) -> mt.CallToolResult | mt.InputRequiredResult | Any:
        with bind_request_context(ctx):
            caller = quota._caller(Context(fastmcp=proxy))
            client = await upstream()
        async with client:
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                return await fastmcp_call.handler(ctx, params)
            tool = await book.find(client, params.name)
            if tool is None:
                # Nothing will run: the upstream answers "unknown tool" itself, uncounted.
                return await client.call_tool_mcp(params.name, params.arguments or {})
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
                )
            replayed = await quota.once.answer(
                guarded,
                lambda: quota.guard.decide(params.name, annotations, caller, params.arguments),
                opened is not None,
            )
            if replayed is not None:
                return replayed  # a retry of a call that already ran: not sent upstream
            meta = {k: v for k, v in (ctx.meta or {}).items() if k not in _CONNECTION_META_KEYS}
            try:
                result = await client.call_tool_mcp(
                    params.name, params.arguments or {}, meta=meta or None
                )
            except Exception as exc:  # the upstream's transport failed: a tool error
                result = mt.CallToolResult(
                    content=[
                        mt.TextContent(
                            type="text", text=f"Error calling tool {params.name!r}: {exc}"
                        )
                    ],
                    is_error=True,
                )
        await quota.once.keep(guarded, quota._service_policy, result, opened is not None)
        if guarded.meta is not None:
            result.meta = {**(result.meta or {}), **guarded.meta}
        return result

    server = proxy._mcp_server
    server.add_request_handler("tools/call", mt.CallToolRequestParams, call_tool)
