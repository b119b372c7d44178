"""Resources and prompts are checked like tools: `resources/read` as the tool name
`resource:<uri>`, `prompts/get` as `prompt:<name>`, in the read category unless a policy
rule names them (issue 31 item 5).

A refusal is an MCP error (resources and prompts have no error result the way tools
do) whose message says why and whose `data` is the refusal's structured content. The
FastMCP middleware gets the checks from `ContentQuotaHooks`; the proxy through it.
"""

from __future__ import annotations

import hashlib
import re
from collections import ChainMap
from collections.abc import Mapping
from typing import Any

import mcp_types as mt
from fastmcp.prompts.base import PromptResult
from fastmcp.resources.base import ResourceResult
from fastmcp.server.context import Context
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from mcp.shared.exceptions import MCPError

from mcp_quota_client.decision import ToolAnnotations
from mcp_quota_client.guard import Cost, ToolCallGuard
from mcp_quota_client.service_policy import ServicePolicy
from mcp_quota_client.session import CallerInfo

RESOURCE_PREFIX = "resource:"
PROMPT_PREFIX = "prompt:"
MAX_NAME = 128
"""The longest tool name the service takes."""
REFUSED_CODE = mt.INVALID_REQUEST
"""The JSON-RPC code of a refused read or prompt (the legacy -32000 range is avoided)."""
READ_ONLY: ToolAnnotations = {"readOnlyHint": True}
"""What classifies a resource or prompt as a read when no policy rule names it."""
_UNSAFE = re.compile(r"[^A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]")


def checked_name(prefix: str, name: str) -> str:
    """The tool name a resource URI or prompt name is checked as: `prefix` + `name`,
    characters outside URI syntax as `%XX`, and one too long for the service cut with a
    digest of the whole so two long names never share a budget."""
    safe = _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), name)
    full = prefix + safe
    if len(full) <= MAX_NAME:
        return full
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
    return f"{full[: MAX_NAME - 17]}~{digest}"


def resource_name(uri: object) -> str:
    """The tool name `resources/read` of `uri` is checked as."""
    return checked_name(RESOURCE_PREFIX, str(uri))


def prompt_name(name: str) -> str:
    """The tool name `prompts/get` of `name` is checked as."""
    return checked_name(PROMPT_PREFIX, name)


async def check_or_raise(
    guard: ToolCallGuard, name: str, caller: CallerInfo, arguments: dict[str, Any] | None
) -> None:
    """Count one read of a resource or prompt; return when it may be served.

    Raises:
        MCPError: the check refused it; the message says why, `data` is structured.
    """
    guarded = await guard.decide(name, READ_ONLY, caller, arguments)
    refusal = guarded.refusal
    if refusal is not None:
        raise MCPError(code=REFUSED_CODE, message=refusal.text, data=refusal.structured)


class ContentQuotaHooks(Middleware):
    """`on_read_resource` and `on_get_prompt` for a middleware that has a guard and a
    way to describe the caller (`QuotaMiddleware`); and, before each `tools/call`, the
    costs of the service's policy (`units_from`, `GET /v1/policy`) under the costs the
    middleware was given, which win tool by tool."""

    guard: ToolCallGuard
    _given_costs: Mapping[str, Cost] | None = None
    _service_policy: ServicePolicy | None = None

    def _caller(self, ctx: Context) -> CallerInfo:
        raise NotImplementedError

    async def on_request(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]
    ) -> Any:
        if context.method == "tools/call":
            await self._weigh_by_service_policy()
        return await call_next(context)

    async def _weigh_by_service_policy(self) -> None:
        if self._service_policy is None:
            self._given_costs = dict(self.guard.costs)
            self._service_policy = ServicePolicy(self.guard.client)
        service = await self._service_policy.costs()
        self.guard.costs = ChainMap(dict(self._given_costs or {}), service)  # type: ignore[arg-type]
        self.guard.needs_approval = service.needs_approval

    async def on_read_resource(
        self,
        context: MiddlewareContext[mt.ReadResourceRequestParams],
        call_next: CallNext[mt.ReadResourceRequestParams, ResourceResult],
    ) -> ResourceResult:
        ctx = context.fastmcp_context
        if ctx is not None:
            await check_or_raise(
                self.guard, resource_name(context.message.uri), self._caller(ctx), None
            )
        return await call_next(context)

    async def on_get_prompt(
        self,
        context: MiddlewareContext[mt.GetPromptRequestParams],
        call_next: CallNext[mt.GetPromptRequestParams, PromptResult],
    ) -> PromptResult:
        ctx = context.fastmcp_context
        if ctx is not None:
            arguments = dict(context.message.arguments or {})
            await check_or_raise(
                self.guard, prompt_name(context.message.name), self._caller(ctx), arguments
            )
        return await call_next(context)
