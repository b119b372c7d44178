"""`make run`'s readable log: one line per refused check and per admin action.

`scripts/local_gateway.py` calls `log_line` for each request it answers and prints what
it returns with `emit`: one line, whatever the client sent.
"""

from __future__ import annotations

import json
import sys
from http import HTTPStatus
from typing import Any

LOG_BODY_BYTES = 64 * 1024
"""Bodies past this size are not parsed for the log line (the app refuses them anyway)."""

_ADMIN_PREFIXES = (
    "/v1/sessions/",
    "/v1/grants",
    "/v1/principals/",
    "/v1/tokens",
    "/v1/approvals/",
    "/actions/",
)
_APPROVAL_CODES = ("approval_required", "approval_denied")


def _json(raw: bytes | str | None) -> dict[str, Any]:
    if raw is not None and len(raw) > LOG_BODY_BYTES:
        return {}
    try:
        parsed = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def log_line(
    method: str, path: str, status: int, request: bytes | None, response: Any
) -> str | None:
    """The one line the default log shows for a request, or None for most requests.

    A refused check (over a budget, or waiting for or denied a person's approval) and an
    admin action (any POST or DELETE on the admin routes: an approval's approve and deny
    too) get a line; everything else is visible with `VERBOSE=1`.
    """
    if method == "POST" and path == "/v1/check" and status == HTTPStatus.TOO_MANY_REQUESTS:
        body = _json(response)
        return (
            f"refused  {body.get('tool')} in session {body.get('session_id')!r}: "
            f"{body.get('category')} {body.get('used')}/{body.get('limit')} "
            f"({_code(body)})"
        )
    if method == "POST" and path == "/v1/check" and status == HTTPStatus.FORBIDDEN:
        body = _json(response)
        code = _code(body)
        if code not in _APPROVAL_CODES:
            return None
        # The 403 names no call: the request does.
        asked = _json(request)
        approval = body.get("approval")
        why = "denied by an administrator"
        if isinstance(approval, dict):
            why = f"needs approval {approval.get('id')} at {approval.get('console_url')}"
        return (
            f"refused  {asked.get('tool')} in session {asked.get('session_id')!r}: {why} ({code})"
        )
    if method in ("POST", "DELETE") and path.startswith(_ADMIN_PREFIXES):
        reason = _json(request).get("reason")
        why = f" reason={reason!r}" if isinstance(reason, str) else ""
        return f"admin    {method} {path} -> {status}{why}"
    return None


def _code(body: dict[str, Any]) -> object:
    error = body.get("error")
    return error.get("code") if isinstance(error, dict) else None


# Every character a log reader may take for a line break or a terminal command: C0 and C1
# controls, DEL, and Unicode's line and paragraph separators.
_UNSAFE = [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]
_ESCAPED = str.maketrans({c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _UNSAFE})


def one_line(text: str) -> str:
    """`text` with every control character escaped (CR as the four characters `\\x0d`):
    one log line."""
    return text.translate(_ESCAPED)


def emit(line: str) -> None:
    sys.stdout.write(one_line(line) + "\n")
    sys.stdout.flush()
