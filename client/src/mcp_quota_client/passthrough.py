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
from typing import Any

import mcp_types as mt
from fastmcp.server.dependencies import bind_request_context
from fastmcp.server.providers.proxy import FastMCPProxy, ProxyClient
from mcp.server.context import ServerRequestContext

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
