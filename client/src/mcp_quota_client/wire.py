"""The wire of `POST /v1/check`: the body's field names, and the service's answers read
into a `Decision` (or into what went wrong), whatever the transport."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx2

from mcp_quota_client.decision import CheckRequest, Decision, Outcome, ShadowNotice

TOKEN_REFUSED = {
    401: "the quota service got no usable token from this server (401): check MCP_QUOTA_TOKEN",
    403: "the quota service refused this server's token (403): check MCP_QUOTA_TOKEN",
}

FAIL_OPEN_FIELD = "fail_open"
"""Check-body field reporting the calls that ran uncounted since the last answered check."""
LEASE_FIELD = "lease"
"""Check-body field asking for calls reserved at once (leased reads)."""
CLIENT_FIELD = "client"
"""Check-body field naming the MCP client (name, version, OAuth client id)."""
CALL_IN_PROGRESS = "call_in_progress"
"""409 code: a copy of this call (same call id) is still being counted; ask again."""
CALL_ID_CONFLICT = "call_id_conflict"
"""409 code: the call id names another call (tool, arguments or principal)."""
APPROVAL_REQUIRED = "approval_required"
"""403 code: the call needs a person's approval; the answer's `approval` names it."""
APPROVAL_DENIED = "approval_denied"
"""403 code: an administrator denied this call."""
AGENT_CAUSED = frozenset(
    {
        CALL_ID_CONFLICT,
        "session_token_invalid",
        "session_token_other_principal",
        APPROVAL_REQUIRED,
        APPROVAL_DENIED,
    }
)
"""Rejections the agent's call caused (an id reused, a session token echoed wrong, a call
that needs a human's approval): the service's words say what to do; it is no
configuration problem of the server."""


BLOCKED_CODES = {
    "quota_exceeded": Outcome.QUOTA_EXCEEDED,
    "session_suspended": Outcome.SESSION_SUSPENDED,
    "principal_suspended": Outcome.PRINCIPAL_SUSPENDED,
    "repeated_call": Outcome.REPEATED_CALL,
}


def monotonic_now() -> float:
    # Deadlines are real time: the HTTP timeouts they cap are, whatever clock leases use.
    return time.monotonic()


def json_object(response: httpx2.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def retry_after_of(headers: httpx2.Headers, body: Mapping[str, Any]) -> int | None:
    from_body = int_or_none(body.get("retry_after_seconds"))
    if from_body is not None:
        return from_body
    header = headers.get("retry-after")
    if header is not None and header.strip().isdigit():
        return int(header.strip())
    return None


def service_decision(
    request: CheckRequest,
    status: int,
    headers: httpx2.Headers,
    body: Mapping[str, Any],
    attempt: int,
) -> Decision | None:
    allowed = body.get("allowed")
    if not isinstance(allowed, bool) or allowed != (status == 200):
        return None
    error = body.get("error")
    error = error if isinstance(error, Mapping) else {}
    code = str_or_none(error.get("code"))
    category = str_or_none(body.get("category"))
    used = int_or_none(body.get("used"))
    limit = int_or_none(body.get("limit"))
    resets_at = parse_time(body.get("resets_at"))
    if allowed:
        outcome = Outcome.ALLOWED
        message = f"Allowed: {used}/{limit} {category} calls used in session {request.session_id}."
        retry_after = None
    else:
        outcome = BLOCKED_CODES.get(code or "", Outcome.QUOTA_EXCEEDED)
        retry_after = retry_after_of(headers, body)
        message = str_or_none(error.get("message")) or (
            f"The {category} quota for session {request.session_id} is used up ({used}/{limit}); "
            f"the tool '{request.tool}' was NOT run. An administrator can raise the quota."
        )
    return Decision(
        allowed=allowed,
        outcome=outcome,
        session_id=str_or_none(body.get("session_id")) or request.session_id,
        tool=str_or_none(body.get("tool")) or request.tool,
        message=message,
        category=category,
        used=used,
        limit=limit,
        remaining=int_or_none(body.get("remaining")),
        resets_at=resets_at,
        retry_after_seconds=retry_after,
        duplicate=body.get("duplicate") is True,
        error_code=code,
        scope=str_or_none(error.get("scope")),
        http_status=status,
        attempts=attempt,
        shadow=shadow(body.get("shadow")) if allowed else None,
        hold_ticket=None if allowed else str_or_none(body.get("hold_ticket")),
        raw=dict(body),
    )


def shadow(value: object) -> ShadowNotice | None:
    """The `shadow` of an allowed answer: what the refusal would have said."""
    if not isinstance(value, Mapping):
        return None
    code, scope, message = (str_or_none(value.get(k)) for k in ("code", "scope", "message"))
    if code is None or message is None:
        return None
    return ShadowNotice(code, scope or "session", message)


def rejected_field(decision: Decision) -> str | None:
    """The request field a rejected check names, if any."""
    if decision.outcome is not Outcome.REJECTED:
        return None
    error = decision.raw.get("error")
    return str_or_none(error.get("field")) if isinstance(error, Mapping) else None


def error_code(body: Mapping[str, Any]) -> str | None:
    error = body.get("error")
    return str_or_none(error.get("code")) if isinstance(error, Mapping) else None


def rejected(request: CheckRequest, status: int, body: Mapping[str, Any], attempt: int) -> Decision:
    error = body.get("error")
    error = error if isinstance(error, Mapping) else {}
    code = str_or_none(error.get("code")) or f"http_{status}"
    field_name = str_or_none(error.get("field"))
    token_problem = TOKEN_REFUSED.get(status)
    if token_problem is not None:
        # The service's own words for a bad token are a gateway's ("Unauthorized"); what
        # the reader needs is which setting to fix.
        problem = token_problem
    else:
        where = f" (field '{field_name}')" if field_name else ""
        detail = str_or_none(error.get("message")) or "no detail given"
        problem = f"the quota service rejected the check with {status} {code}{where}: {detail}"
    if code in AGENT_CAUSED:
        # The agent's doing, not the server's configuration: the service's words say what.
        message = str_or_none(error.get("message")) or f"The tool '{request.tool}' was NOT run."
    else:
        message = (
            f"The tool '{request.tool}' was NOT run: {problem}. This is a configuration "
            "problem in the MCP server, not a used-up quota; an administrator must fix it."
        )
    return Decision(
        allowed=False,
        outcome=Outcome.REJECTED,
        session_id=request.session_id,
        tool=request.tool,
        category=request.category,
        message=message,
        error_code=code,
        scope=str_or_none(error.get("scope")),
        http_status=status,
        attempts=attempt,
        raw=dict(body),
    )


@dataclass(frozen=True)
class ApprovalAsked:
    """The approval a refused check names."""

    approval_id: str
    console_url: str
    expires_at: str | None


def approval_asked(decision: Decision) -> ApprovalAsked | None:
    """The approval an `approval_required` refusal names; None for any other answer (or
    one whose URL is not an http(s) URL: it is then refused as the service said)."""
    if decision.allowed or decision.error_code != APPROVAL_REQUIRED:
        return None
    raw = decision.raw.get("approval")
    if not isinstance(raw, Mapping):
        return None
    approval_id, url, expires = raw.get("id"), raw.get("console_url"), raw.get("expires_at")
    if not isinstance(approval_id, str) or not isinstance(url, str):
        return None
    if not url.startswith(("https://", "http://")):
        return None
    return ApprovalAsked(approval_id, url, expires if isinstance(expires, str) else None)
