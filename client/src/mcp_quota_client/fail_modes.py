"""What a check answers when the quota service gave no decision within the deadline:
the category's fail mode (reads open, writes closed by default), in words that say what
happened and what to do."""

from __future__ import annotations

import logging

from mcp_quota_client.decision import CheckRequest, Decision, FailMode, Outcome

logger = logging.getLogger("mcp_quota_client")


def unavailable(
    request: CheckRequest,
    mode: FailMode,
    reason: str,
    status: int | None,
    attempts: int,
    fail_open_total: int,
) -> Decision:
    """The decision of the fail mode `mode` for a check the service did not answer
    (`reason`, after `attempts`); `fail_open_total` counts this call if it fails open."""
    category = request.local_category()
    label = category or "unknown"
    if mode is FailMode.OPEN:
        message = (
            f"The quota service {reason} after {attempts} attempt(s); the tool "
            f"'{request.tool}' ran without being counted because category '{label}' "
            "fails open."
        )
        logger.warning(
            "mcp-quota: FAIL-OPEN tool=%s category=%s session=%s reason=%s attempts=%d "
            "fail_open_total=%d",
            request.tool,
            label,
            request.session_id,
            reason,
            attempts,
            fail_open_total,
        )
        outcome = Outcome.FAIL_OPEN
    else:
        message = (
            f"The quota service {reason} after {attempts} attempt(s), so the tool "
            f"'{request.tool}' was NOT run: calls in category '{label}' are refused "
            "while the quota cannot be checked. Try again in a moment; read-only tools "
            "may still work. If this persists, an administrator should check the quota "
            "service."
        )
        logger.error(
            "mcp-quota: FAIL-CLOSED tool=%s category=%s session=%s reason=%s attempts=%d",
            request.tool,
            label,
            request.session_id,
            reason,
            attempts,
        )
        outcome = Outcome.FAIL_CLOSED
    return Decision(
        allowed=mode is FailMode.OPEN,
        outcome=outcome,
        session_id=request.session_id,
        tool=request.tool,
        category=category,
        message=message,
        error_code="quota_service_unavailable",
        http_status=status,
        attempts=attempts,
    )
