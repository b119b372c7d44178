"""What the model sees: a refused call as tool-error content, an allowed one as `_meta`."""

from __future__ import annotations

from typing import Any

from mcp_quota_client.decision import Decision, Outcome

_KINDS = {
    Outcome.QUOTA_EXCEEDED: "quota_exceeded",
    Outcome.SESSION_SUSPENDED: "session_suspended",
    Outcome.PRINCIPAL_SUSPENDED: "principal_suspended",
    Outcome.REPEATED_CALL: "repeated_call",
    Outcome.FAIL_CLOSED: "quota_service_unavailable",
    Outcome.REJECTED: "quota_check_rejected",
}


def refusal_text(decision: Decision) -> str:
    """The plain sentences returned as the tool result's text."""
    return decision.message


def refusal_structured(decision: Decision) -> dict[str, Any]:
    """`structuredContent` of a refused call: the same keys for every kind of refusal."""
    return {
        "kind": _KINDS.get(decision.outcome, decision.outcome.value),
        "scope": decision.scope,
        "category": decision.category,
        "used": decision.used,
        "limit": decision.limit,
        "retryAfterSeconds": decision.retry_after_seconds,
    }


def decision_meta(decision: Decision) -> dict[str, Any]:
    """The decision of an allowed call, for the result's `_meta`."""
    return {
        "outcome": decision.outcome.value,
        "sessionId": decision.session_id,
        "category": decision.category,
        "used": decision.used,
        "limit": decision.limit,
        "remaining": decision.remaining,
        "resetsAt": decision.resets_at.isoformat() if decision.resets_at else None,
        "duplicate": decision.duplicate,
        "fromLease": decision.from_lease,
    }
