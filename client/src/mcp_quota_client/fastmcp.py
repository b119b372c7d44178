"""FastMCP middleware: every `tools/call` is counted by the quota service before it runs.

```python
from fastmcp import FastMCP
from mcp_quota_client.fastmcp import QuotaMiddleware

mcp = FastMCP("articles")
mcp.add_middleware(QuotaMiddleware())  # reads MCP_QUOTA_URL, MCP_QUOTA_TOKEN
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import mcp_types as mt
from fastmcp.server.context import Context
from fastmcp.server.dependencies import get_access_token
from fastmcp.server.middleware import CallNext, MiddlewareContext
from fastmcp.tools.base import InputRequiredToolResult, ToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_quota_client.approval_answer import accepts_url_elicitation, approval_answer
from mcp_quota_client.client import QuotaClient
from mcp_quota_client.content_checks import ContentQuotaHooks
from mcp_quota_client.exactly_once import ExactlyOnce
from mcp_quota_client.guard import Cost, PrincipalResolver, ToolCallGuard, annotations_from
from mcp_quota_client.session import (
    CallerInfo,
    SessionKeying,
    client_info,
    principal_from_token,
)
from mcp_quota_client.startup import client_from_env


def default_principal() -> str | None:
    """The authenticated principal of the current FastMCP request, if the server has auth."""
    token = get_access_token()
    if token is None:
        return None
    return principal_from_token(token.client_id, token.subject)


def oauth_client_id() -> str | None:
    """The OAuth client id of the current FastMCP request's access token, if any."""
    token = get_access_token()
    if token is None:
        return None
    if token.claims:
        # A JWT: FastMCP's `client_id` falls back to the subject (a person, not a
        # client) or "unknown"; only the token's own client claims name the client.
        named = token.claims.get("client_id") or token.claims.get("azp")
        return named if isinstance(named, str) else None
    return token.client_id or None


def _replace_request_state(ctx: Context, inner: str | None) -> None:
    """Hand the tool (or the proxied upstream) its own `requestState` back: FastMCP reads
    `ctx.request_state` from the request's params, which the SDK's boundary copied for
    this request alone, so replacing it there changes nothing else."""
    rc = ctx.request_context
    params = rc._srctx.params if rc is not None else None
    if not isinstance(params, dict):
        return
    if inner is None:
        params.pop("requestState", None)
    else:
        params["requestState"] = inner


def _url_elicitation(ctx: Context) -> bool:
    """Whether this request's client takes a URL elicitation in an `input_required`."""
    rc = ctx.request_context
    if rc is None:
        return False
    return accepts_url_elicitation(rc.protocol_version, rc.session.client_capabilities)


def _tool_result(answer: mt.CallToolResult | mt.InputRequiredResult) -> ToolResult:
    if isinstance(answer, mt.InputRequiredResult):
        return InputRequiredToolResult(answer)
    return ToolResult.from_mcp_result(answer)


def _call_result(result: ToolResult) -> mt.CallToolResult | None:
    """A tool's result as the client gets it (to keep for its retries); None if it is
    no plain result (an `input_required` leg) or cannot be one."""
    if isinstance(result, InputRequiredToolResult):
        return None
    try:
        return mt.CallToolResult(
            content=result.content,
            structured_content=result.structured_content,
            is_error=result.is_error,
            _meta=result.meta,
        )
    except ValueError:
        return None


class QuotaMiddleware(ContentQuotaHooks):
    """Refuses a tool call, without running it, when its session's quota is used up.

    A refusal is a `CallToolResult` with `isError: true`, the service's message as
    text and `{"kind", "category", "used", "limit", "retryAfterSeconds"}` as
    `structuredContent`: feedback the model can act on, not a protocol error.
    The tool's own annotations (from this server's tool list) go with each check,
    so read-only tools are classified without configuration. `resources/read` and
    `prompts/get` are checked too (`content_checks`).
    """

    def __init__(
        self,
        client: QuotaClient | None = None,
        *,
        keying: SessionKeying | None = None,
        categories: Mapping[str, str] | None = None,
        principal_resolver: PrincipalResolver | None = None,
        attach_decision_meta: bool = True,
        server_name: str | None = None,
        costs: Mapping[str, Cost] | None = None,
    ) -> None:
        """Args: `client` defaults to `QuotaClient.from_env()`; `server_name` (in derived
        session keys) to the FastMCP server's name; `costs` weighs a tool's calls in
        units from their arguments (`{"delete_tags": lambda a: len(a["tags"])}`).

        Raises:
            QuotaConfigError: no client given and `MCP_QUOTA_URL`/`MCP_QUOTA_TOKEN` unset
                or invalid (a `ValueError`; uncaught, it prints one line).
        """
        self.guard = ToolCallGuard.create(
            client if client is not None else client_from_env(),
            keying=keying,
            categories=categories,
            principal_resolver=principal_resolver,
            default_principal=default_principal,
            attach_decision_meta=attach_decision_meta,
            server_name=server_name,
            costs=costs,
        )
        self.client = self.guard.client
        self.once = ExactlyOnce(self.guard)

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        ctx = context.fastmcp_context
        name = context.message.name
        tool = await ctx.fastmcp.get_tool(name) if ctx is not None else None
        if ctx is None or tool is None:
            # Nothing will run: the server answers "unknown tool" itself.
            return await call_next(context)
        arguments = context.message.arguments
        caller = self._caller(ctx)
        # An MRTR retry: the SDK's boundary has unsealed the wire state; ours is inside.
        opened = self.guard.open_state(caller, arguments, context.message.request_state)
        if opened is not None:
            _replace_request_state(ctx, opened.inner)
            caller = replace(caller, state_call_id=opened.call_id)
        annotations = annotations_from(tool.annotations)
        guarded = await self.guard.decide(name, annotations, caller, arguments)
        approval = approval_answer(
            self.guard, guarded, _url_elicitation(ctx), context.message.input_responses
        )
        if approval is not None:
            return _tool_result(approval)
        refusal = guarded.refusal
        if refusal is not None:
            return ToolResult(
                content=[mt.TextContent(type="text", text=refusal.text)],
                structured_content=refusal.structured,
                is_error=True,
                meta=dict(guarded.meta) if guarded.meta is not None else None,
            )
        # A retry of a call that already ran: its kept result, and the tool does not run.
        continuing = opened is not None
        replayed = await self.once.answer(guarded, continuing)
        if replayed is not None:
            return ToolResult.from_mcp_result(replayed)
        result = await call_next(context)
        if isinstance(result, InputRequiredToolResult):
            asked = result.input_required
            sealed = self.guard.seal_state(guarded, asked.request_state)
            return InputRequiredToolResult(asked.model_copy(update={"request_state": sealed}))
        ran = _call_result(result)
        if ran is not None:
            await self.once.keep(guarded, self._service_policy, ran, continuing)
        if guarded.meta is not None and type(result) is ToolResult:
            result.meta = {**(result.meta or {}), **guarded.meta}
        return result

    def _caller(self, ctx: Context) -> CallerInfo:
        rc = ctx.request_context
        server = ctx.fastmcp.name
        if rc is None:
            return CallerInfo(
                principal=self.guard.principal(),
                transport=ctx.transport,
                server_name=server,
                client=client_info(None, None, oauth_client_id()),
            )
        # On 2026-07-28 connections every request is its own connection and
        # ctx.session_id is a fresh UUID each time: never a session key there.
        modern = rc.protocol_version in MODERN_PROTOCOL_VERSIONS
        request = rc.request
        peer = request.client.host if request is not None and request.client else None
        return CallerInfo(
            meta=rc.meta,
            transport_session_id=None if modern else ctx.session_id,
            principal=self.guard.principal(),
            transport=ctx.transport,
            peer=peer,
            request_id=rc.request_id,
            server_name=server,
            client=client_info(rc.session.client_params, rc.meta, oauth_client_id()),
        )
