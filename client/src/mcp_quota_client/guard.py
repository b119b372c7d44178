"""The framework-independent part of guarding a tool call: build the check, ask, decide."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from mcp_quota_client.client import QuotaClient
from mcp_quota_client.decision import CheckRequest, Decision, ToolAnnotations
from mcp_quota_client.session import (
    CallerInfo,
    SessionIdentity,
    SessionKeying,
    resolve_call_id,
    resolve_session,
)

PrincipalResolver = Callable[[], str | None]
"""Returns who the current request acts for, or None. Called inside the request."""

_HINTS = (
    ("read_only_hint", "readOnlyHint"),
    ("destructive_hint", "destructiveHint"),
    ("idempotent_hint", "idempotentHint"),
    ("open_world_hint", "openWorldHint"),
)


def annotations_from(model: object | None) -> ToolAnnotations | None:
    """Wire-named hints from an MCP `ToolAnnotations` model (fastmcp or the SDK)."""
    if model is None:
        return None
    result: ToolAnnotations = {}
    for attribute, wire in _HINTS:
        value = getattr(model, attribute, None)
        if isinstance(value, bool):
            result[wire] = value  # type: ignore[literal-required]
    title = getattr(model, "title", None)
    if isinstance(title, str) and title:
        result["title"] = title
    return result or None


@dataclass(frozen=True)
class GuardedCall:
    """A decided tool call and the session it was counted in."""

    decision: Decision
    identity: SessionIdentity


@dataclass
class ToolCallGuard:
    """Counts each tool call with the quota service before it runs."""

    client: QuotaClient
    keying: SessionKeying = SessionKeying.CLIENT
    categories: Mapping[str, str] = field(default_factory=dict)
    """Explicit category per tool name, sent as `category` (a policy rule still wins)."""

    async def decide(
        self,
        tool: str,
        annotations: ToolAnnotations | None,
        caller: CallerInfo,
    ) -> GuardedCall:
        """Resolve the session and call id, then ask the quota service."""
        identity = resolve_session(caller, self.keying)
        request = CheckRequest(
            session_id=identity.session_id,
            tool=tool,
            category=self.categories.get(tool),
            annotations=annotations,
            principal=caller.principal,
            call_id=resolve_call_id(caller),
        )
        return GuardedCall(await self.client.check(request), identity)
