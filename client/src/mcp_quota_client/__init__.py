"""Put the mcp-quota service in front of every MCP tool call.

The framework adapters live in `mcp_quota_client.fastmcp` and
`mcp_quota_client.mcp_sdk`, so importing this package pulls in neither framework.
"""

from __future__ import annotations

from mcp_quota_client.client import ClientStats, QuotaClient
from mcp_quota_client.config import QuotaClientConfig, QuotaConfigError
from mcp_quota_client.decision import (
    CheckRequest,
    Decision,
    FailMode,
    Outcome,
    ShadowNotice,
    ToolAnnotations,
)
from mcp_quota_client.session import (
    META_CALL_ID_KEY,
    META_DECISION_KEY,
    META_SESSION_KEY,
    META_SHADOW_KEY,
    CallerInfo,
    SessionIdentity,
    SessionKeying,
    SessionSource,
    resolve_call_id,
    resolve_session,
)

__all__ = [
    "META_CALL_ID_KEY",
    "META_DECISION_KEY",
    "META_SESSION_KEY",
    "META_SHADOW_KEY",
    "CallerInfo",
    "CheckRequest",
    "ClientStats",
    "Decision",
    "FailMode",
    "Outcome",
    "QuotaClient",
    "QuotaClientConfig",
    "QuotaConfigError",
    "SessionIdentity",
    "SessionKeying",
    "SessionSource",
    "ShadowNotice",
    "ToolAnnotations",
    "resolve_call_id",
    "resolve_session",
]
