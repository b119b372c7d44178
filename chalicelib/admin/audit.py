"""Who an administrator's audited action names as its actor, and the event it makes."""

from __future__ import annotations

from typing import Any

from chalicelib.auth.tokens import Identity
from chalicelib.quota.events import AuditEvent, EventType

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


def admin_event(
    who: Identity,
    at_ms: int,
    event_type: EventType,
    session_id: str,
    reason: str | None,
    before: Any,
    after: Any,
    principal: str | None = None,
    server: str | None = None,
) -> AuditEvent:
    """The audit event of an administrator's action (or a link's, acting as one)."""
    return AuditEvent(
        at_ms=at_ms,
        type=event_type,
        tenant=who.tenant,
        session_id=session_id,
        actor=actor_of(who.token_id, who.role),
        reason=reason,
        before=before,
        after=after,
        detail=link_detail(who.role, who.name),
        principal=principal,
        server=server,
    )
