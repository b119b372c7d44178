"""The email asking the approvers to approve or deny one call (issue 32): sent through
the notifier (the queue, off the request path, where one is configured)."""

from __future__ import annotations

from collections.abc import Callable

from chalicelib.clock import iso_utc
from chalicelib.notify import Notification, Publisher, clean_subject
from chalicelib.observability import count, logger
from chalicelib.quota.approvals import Approval


def plain(text: str | None) -> str:
    """The agent's text made safe for a plain-text email: no control or format
    characters (each shown as its code), so nothing reorders or hides what is read."""
    if text is None:
        return "(not sent)"
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)


def approval_notification(approval: Approval, console_url: str) -> Notification:
    """The approvers' email for a new pending approval."""
    key = approval.key
    subject = clean_subject(f"[mcp-quota] approve {key.tool} for {key.principal}?")
    body = f"""An agent asks to run a tool that needs an administrator's approval of each call.

Tool:       {plain(key.tool)}
Arguments:  {plain(approval.arguments_preview)}
Digest:     {key.args_digest}
Principal:  {plain(key.principal)}
Session:    {plain(approval.session_id)}
Server:     {plain(approval.server)}
Approval:   {approval.approval_id} (usable until {iso_utc(approval.expires_ms)})

Approve or deny it (operator or admin): {console_url}
or with the CLI:
  mcp-quota approvals approve {approval.approval_id} --reason "..."
  mcp-quota approvals deny {approval.approval_id} --reason "..."

Approved, the same call (same tool, arguments and principal) runs once.
"""
    attributes = {"tenant": key.tenant, "event": "approval_requested"}
    return Notification(subject, body, attributes)


class Emailer:
    """Emails the approvers about each new approval; never raises (the check's answer
    names the approval either way, and the console lists it)."""

    def __init__(self, notifier: Callable[[], Publisher]) -> None:
        self._notifier = notifier

    def __call__(self, approval: Approval, console_url: str) -> None:
        try:
            notifier = self._notifier()
            if notifier.enabled:
                notifier.publish(approval_notification(approval, console_url))
        except Exception:
            logger.exception("the approval email could not be sent")
            count("NotificationFailed")
