"""Audit events: what happened, to which session, by whom, with before/after values.

Every event is written to the audit table and also emitted as a structured log line, so
a failed table write never loses the event: the log keeps it, and a metric counts it.
"""

from __future__ import annotations

import enum
import itertools
import secrets
from dataclasses import dataclass, field
from typing import Any, Protocol

from chalicelib.clock import iso_utc
from chalicelib.observability import count, logger


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
LINK_ROLE = "link"  # an emailed one-click link acting: audited as its actor, with its id


def actor_of(token_id: str, role: str) -> str:
    """The audit actor of an administrator's action: the token and its role, or the
    email link (`email-link`) for an action taken through one."""
    return token_id if role == LINK_ROLE else f"{token_id} ({role})"


def link_detail(role: str, name: str) -> dict[str, str] | None:
    """The audit detail naming the link an action was taken through (its id and
    action, `<link id>:<action>` in the link's identity), if any."""
    if role != LINK_ROLE:
        return None
    link_id, _, action = name.partition(":")
    return {"link_id": link_id, "link_action": action} if action else {"link_id": link_id}


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

    @property
    def sort_key(self) -> str:
        """Time-ordered and unique: zero-padded epoch ms, then a random suffix."""
        return f"{self.at_ms:013d}#{self.event_id}"

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


class AuditSink(Protocol):
    """Where audit events go (the audit log port)."""

    def put(self, event: AuditEvent) -> None:
        """Store one event.

        Raises:
            StorageError: the store failed.
        """


class Auditor:
    """Records events in the audit table and in the logs; a failed write is logged with
    the whole event and counted, never raised: an audit outage must not change a decision."""

    def __init__(self, sink: AuditSink) -> None:
        self._sink = sink

    def record(self, event: AuditEvent) -> bool:
        """Record one event; returns whether the table write succeeded."""
        logger.info("audit event", extra={"audit": event.to_json()})
        try:
            self._sink.put(event)
        except Exception as exc:
            logger.error(
                "audit write failed; the event above is the record",
                extra={"audit": event.to_json(), "error": f"{type(exc).__name__}: {exc}"},
            )
            count("AuditWriteFailed")
            return False
        return True
