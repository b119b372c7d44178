"""Audit events: what happened, to which session, by whom, with before/after values.

The values only: where an event is kept (and under which key) is the storage's business
(`chalicelib/storage/records.py`), and recording one is `chalicelib/check/auditing.py`.
"""

from __future__ import annotations

import enum
import itertools
import secrets
from dataclasses import dataclass, field
from typing import Any

from chalicelib.clock import iso_utc


class EventType(enum.StrEnum):
    """What an audit event records."""

    QUOTA_EXCEEDED = "quota_exceeded"
    NOTIFICATION_SENT = "notification_sent"
    NOTIFICATION_FAILED = "notification_failed"
    SESSION_RAISED = "session_raised"
    SESSION_SUSPENDED = "session_suspended"
    SESSION_RESUMED = "session_resumed"
    SESSION_RESET = "session_reset"
    GRANT_CREATED = "grant_created"
    GRANT_DELETED = "grant_deleted"
    PRINCIPAL_SUSPENDED = "principal_suspended"
    PRINCIPAL_RESUMED = "principal_resumed"
    PRINCIPAL_RAISED = "principal_raised"
    PRINCIPAL_RESET = "principal_reset"
    SESSION_LOWERED = "session_lowered"
    TOKEN_CREATED = "token_created"
    TOKEN_REVOKED = "token_revoked"
    LINK_DECLINED = "link_declined"  # an emailed link whose action was already done
    SHADOW_REFUSAL = "shadow_refusal"  # shadow mode let a call over a limit run
    REPEATED_CALL = "repeated_call"  # the loop breaker refused a call (first of a run)
    APPROVAL_REQUESTED = "approval_requested"  # a call needs a human's approval (#32)
    APPROVAL_GRANTED = "approval_granted"
    APPROVAL_DENIED = "approval_denied"
    APPROVAL_USED = "approval_used"
    APPROVAL_EXPIRED = "approval_expired"


# The "session" of events that belong to no session. It holds a space, which no session
# id can (they are visible ASCII), so no session's events can land in it.
TENANT_SCOPE = " tenant"
SERVICE_ACTOR = "mcp-quota"


_SEQUENCE = itertools.count()


def _next_event_id() -> str:
    """Orders events of one container within the same millisecond; random across them."""
    return f"{next(_SEQUENCE) % 1_000_000:06d}{secrets.token_hex(3)}"


@dataclass(frozen=True)
class AuditEvent:
    """One entry of the append-only audit trail."""

    at_ms: int
    type: EventType
    tenant: str
    session_id: str
    actor: str
    reason: str | None = None
    before: Any = None
    after: Any = None
    detail: Any = None
    event_id: str = field(default_factory=_next_event_id)
    principal: str | None = None  # whom the agent acted for, where known
    server: str | None = None  # the MCP server that named itself, where known

    def to_json(self) -> dict[str, Any]:
        """The event as the API and the logs show it."""
        out: dict[str, Any] = {
            "at": iso_utc(self.at_ms),
            "type": str(self.type),
            "tenant": self.tenant,
            "session_id": None if self.session_id == TENANT_SCOPE else self.session_id,
            "actor": self.actor,
        }
        for name in ("principal", "server", "reason", "before", "after", "detail"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out
