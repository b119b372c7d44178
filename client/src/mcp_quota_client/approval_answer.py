"""A call that needs a person's approval (issue 32), answered as the client supports it.

The check of a tool whose policy rule says `"approval": true` answers 403
`approval_required` with `approval: {id, expires_at, console_url}` (docs/approvals.md).
A client that declared URL-mode elicitation on a 2026-07-28 request gets an
`input_required` result: a URL elicitation to the console page, and a `requestState`
sealed with the call id (`call_state`), so that its retry is the same call. Any other
client gets an `isError` result whose text tells the agent to ask its user to approve at
that URL and then retry the same call. The model cannot approve: the page needs an
administrator's sign-in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as mt
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_quota_client.guard import GuardedCall, ToolCallGuard
from mcp_quota_client.wire import APPROVAL_DENIED, APPROVAL_REQUIRED, ApprovalAsked, approval_asked

INPUT_KEY = "io.mcp-quota/approval"
"""The key of the URL elicitation in an `input_required` result's `inputRequests`."""


def accepts_url_elicitation(
    protocol_version: str | None, capabilities: mt.ClientCapabilities | None
) -> bool:
    """Whether this request may be answered `input_required` with a URL elicitation:
    a 2026-07-28 request from a client that declared `elicitation.url`."""
    if protocol_version not in MODERN_PROTOCOL_VERSIONS or capabilities is None:
        return False
    elicitation = capabilities.elicitation
    return elicitation is not None and elicitation.url is not None


def declined(input_responses: Mapping[str, Any] | None) -> bool:
    """Whether the client's answer to our URL elicitation was decline or cancel: the
    user would not open the page, so the call is not asked about again this round."""
    answer = (input_responses or {}).get(INPUT_KEY)
    action = getattr(answer, "action", None)
    if isinstance(answer, Mapping):
        action = answer.get("action")
    return action in ("decline", "cancel")


def approval_text(tool: str, asked: ApprovalAsked) -> str:
    """What the agent is told when its client cannot open the page itself."""
    before = f", before {asked.expires_at}" if asked.expires_at else ""
    return (
        f"The tool '{tool}' was NOT run: this exact call (these arguments) needs a person's "
        f"approval. Ask your user to approve it at {asked.console_url} (approval "
        f"{asked.approval_id}{before}); an administrator signs in there, and you cannot "
        "approve it yourself. Once it is approved, retry the same call with the same "
        "arguments: it then runs once."
    )


def _structured(kind: str, asked: ApprovalAsked | None) -> dict[str, Any]:
    if asked is None:
        return {"kind": kind}
    return {
        "kind": kind,
        "approvalId": asked.approval_id,
        "url": asked.console_url,
        "expiresAt": asked.expires_at,
    }


def approval_error(tool: str, asked: ApprovalAsked) -> mt.CallToolResult:
    """The `isError` result for a client without URL elicitation."""
    return mt.CallToolResult(
        content=[mt.TextContent(type="text", text=approval_text(tool, asked))],
        structured_content=_structured(APPROVAL_REQUIRED, asked),
        is_error=True,
    )


def approval_input_required(
    tool: str, asked: ApprovalAsked, request_state: str | None
) -> mt.InputRequiredResult:
    """The `input_required` result: a URL elicitation to the approval page."""
    message = (
        f"The tool '{tool}' needs an administrator's approval of this exact call "
        f"(approval {asked.approval_id}). Open the page to approve or deny it; the call "
        "runs when it is approved."
    )
    params = mt.ElicitRequestURLParams(message=message, url=asked.console_url)
    return mt.InputRequiredResult(
        input_requests={INPUT_KEY: mt.ElicitRequest(params=params)},
        request_state=request_state,
    )


def approval_answer(
    guard: ToolCallGuard,
    guarded: GuardedCall,
    url_elicitation: bool,
    input_responses: Mapping[str, Any] | None = None,
) -> mt.CallToolResult | mt.InputRequiredResult | None:
    """The answer to a call refused for want of an approval (or denied one), as the
    client supports it; None for any other decision."""
    decision = guarded.decision
    if not decision.allowed and decision.error_code == APPROVAL_DENIED:
        return mt.CallToolResult(
            content=[mt.TextContent(type="text", text=decision.message)],
            structured_content=_structured(APPROVAL_DENIED, None),
            is_error=True,
        )
    asked = approval_asked(decision)
    if asked is None:
        return None
    if url_elicitation and guarded.call_id is not None and not declined(input_responses):
        sealed = guard.seal_state(guarded, None)
        return approval_input_required(decision.tool, asked, sealed)
    return approval_error(decision.tool, asked)
