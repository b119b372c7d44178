"""The same guard for the official `mcp` SDK (2.x `MCPServer`), as request middleware.

```python
from mcp.server.mcpserver import MCPServer
from mcp_quota_client.mcp_sdk import protect

server = MCPServer("articles")
protect(server)  # reads MCP_QUOTA_URL, MCP_QUOTA_TOKEN
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, InputRequiredResult, TextContent
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request

from mcp_quota_client.approval_answer import accepts_url_elicitation, approval_answer
from mcp_quota_client.client import QuotaClient
from mcp_quota_client.decision import ToolAnnotations
from mcp_quota_client.exactly_once import ExactlyOnce
from mcp_quota_client.guard import Cost, PrincipalResolver, ToolCallGuard, annotations_from
from mcp_quota_client.service_policy import ServicePolicy
from mcp_quota_client.session import (
    CallerInfo,
    SessionKeying,
    client_info,
    principal_from_token,
)
from mcp_quota_client.startup import client_from_env


def default_principal() -> str | None:
    """The authenticated principal of the current SDK request, if the server has auth."""
    token = get_access_token()
    if token is None:
        return None
    return principal_from_token(token.client_id, token.subject)


def oauth_client_id() -> str | None:
    """The OAuth client id of the current SDK request's access token, if any."""
    token = get_access_token()
    return None if token is None else token.client_id


class QuotaGuard:
    """`ServerMiddleware` that counts each `tools/call` before the handler runs it.

    A refused call never reaches the tool: the middleware answers with a
    `CallToolResult` (`isError: true`, the service's message, structured details).
    """

    def __init__(
        self,
        server: MCPServer[Any],
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
        session keys) to the server's name; `costs` weighs a tool's calls in units from
        their arguments (`{"delete_tags": lambda a: len(a["tags"])}`).

        Raises:
            QuotaConfigError: no client given and `MCP_QUOTA_URL`/`MCP_QUOTA_TOKEN` unset
                or invalid (a `ValueError`; uncaught, it prints one line).
        """
        self.server = server
        self.guard = ToolCallGuard.create(
            client if client is not None else client_from_env(),
            keying=keying,
            categories=categories,
            principal_resolver=principal_resolver,
            default_principal=default_principal,
            attach_decision_meta=attach_decision_meta,
            server_name=server_name if server_name is not None else server.name,
            costs=costs,
        )
        self.client = self.guard.client
        self.once = ExactlyOnce(self.guard)
        self._policy = ServicePolicy(self.client)  # which results to keep, which to preview
        self._annotations: dict[str, ToolAnnotations | None] = {}

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "tools/call" or ctx.request_id is None or ctx.params is None:
            return await call_next(ctx)
        name = ctx.params.get("name")
        if not isinstance(name, str) or not await self._known(name):
            # Malformed or unknown: the SDK answers with its own error, nothing runs.
            return await call_next(ctx)
        raw_args = ctx.params.get("arguments")
        arguments = raw_args if isinstance(raw_args, Mapping) else None
        caller = self._caller(ctx)
        # An MRTR retry: the SDK's boundary (outside this middleware) has unsealed the
        # wire state; ours is inside it, and the tool gets its own state back.
        opened = self.guard.open_state(caller, arguments, ctx.params.get("requestState"))
        if opened is not None:
            params = {k: v for k, v in ctx.params.items() if k != "requestState"}
            if opened.inner is not None:
                params["requestState"] = opened.inner
            ctx = replace(ctx, params=params)
            caller = replace(caller, state_call_id=opened.call_id)
        self.guard.needs_approval = (await self._policy.costs()).needs_approval
        annotations = self._annotations[name]
        guarded = await self.guard.decide(name, annotations, caller, arguments)
        url_elicitation = accepts_url_elicitation(
            ctx.protocol_version, ctx.session.client_capabilities
        )
        responses = (ctx.params or {}).get("inputResponses")
        approval = approval_answer(
            self.guard,
            guarded,
            url_elicitation,
            responses if isinstance(responses, Mapping) else None,
        )
        if approval is not None:
            return approval
        refusal = guarded.refusal
        if refusal is not None:
            return CallToolResult(
                content=[TextContent(type="text", text=refusal.text)],
                structured_content=refusal.structured,
                is_error=True,
                _meta=dict(guarded.meta) if guarded.meta is not None else None,
            )
        continuing = opened is not None
        replayed = await self.once.answer(guarded, continuing)
        if replayed is not None:
            return replayed  # a retry of a call that already ran: the tool does not run
        result = await call_next(ctx)
        ran = _call_result(result)
        if ran is not None:
            await self.once.keep(guarded, self._policy, ran, continuing)
        if isinstance(result, InputRequiredResult):
            sealed = self.guard.seal_state(guarded, result.request_state)
            return result.model_copy(update={"request_state": sealed})
        if isinstance(result, Mapping) and result.get("resultType") == "input_required":
            state = result.get("requestState")
            sealed = self.guard.seal_state(guarded, state if isinstance(state, str) else None)
            return {**result, "requestState": sealed}
        return _with_meta(result, guarded.meta)

    async def _known(self, name: str) -> bool:
        # The server's own tool list is the source of annotations; it is read
        # again only when a name is not cached (a tool added after start-up).
        if name not in self._annotations:
            self._annotations = {
                tool.name: annotations_from(tool.annotations)
                for tool in await self.server.list_tools()
            }
        return name in self._annotations

    def _caller(self, ctx: ServerRequestContext[Any, Any]) -> CallerInfo:
        raw_meta = ctx.params.get("_meta") if ctx.params is not None else None
        meta = raw_meta if isinstance(raw_meta, Mapping) else None
        request = ctx.request if isinstance(ctx.request, Request) else None
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        transport_session = (
            request.headers.get("mcp-session-id") if request is not None and not modern else None
        )
        return CallerInfo(
            meta=meta,
            transport_session_id=transport_session,
            principal=self.guard.principal(),
            transport="streamable-http" if request is not None else None,
            peer=request.client.host if request is not None and request.client else None,
            request_id=ctx.request_id,
            client=client_info(ctx.session.client_params, meta, oauth_client_id()),
        )


def _with_meta(result: HandlerResult, entry: Mapping[str, Any] | None) -> HandlerResult:
    """A tool's result with the decision's `_meta` entries added."""
    if entry is None:
        return result
    # The runner hands back the wire form (a dict); a model is possible too.
    if isinstance(result, CallToolResult):
        return result.model_copy(update={"meta": {**(result.meta or {}), **entry}})
    if isinstance(result, dict) and "content" in result:
        existing = result.get("_meta")
        return {
            **result,
            "_meta": {**(existing if isinstance(existing, dict) else {}), **entry},
        }
    return result


def _call_result(result: object) -> CallToolResult | None:
    """A tool's plain result, as a model (the runner hands back a model or the wire
    form), to keep for its retries; None for anything else."""
    if isinstance(result, CallToolResult):
        return result
    if isinstance(result, Mapping) and "content" in result:
        try:
            return CallToolResult.model_validate(dict(result))
        except ValueError:
            return None
    return None


def protect(
    server: MCPServer[Any],
    client: QuotaClient | None = None,
    *,
    keying: SessionKeying | None = None,
    categories: Mapping[str, str] | None = None,
    principal_resolver: PrincipalResolver | None = None,
    server_name: str | None = None,
    costs: Mapping[str, Cost] | None = None,
) -> QuotaGuard:
    """Install a `QuotaGuard` as the innermost request middleware of `server`.

    Raises:
        QuotaConfigError: no client given and `MCP_QUOTA_URL`/`MCP_QUOTA_TOKEN` unset
            (a `ValueError`).
    """
    guard = QuotaGuard(
        server,
        client,
        keying=keying,
        categories=categories,
        principal_resolver=principal_resolver,
        server_name=server_name,
        costs=costs,
    )
    server.middleware.append(guard)
    return guard
