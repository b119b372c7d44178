"""The email asking the approvers to approve or deny one call (issue 32): sent through
the notifier (the queue, off the request path, where one is configured)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from chalicelib.clock import iso_utc
from chalicelib.notify import Notification, Publisher, clean_subject
from chalicelib.observability import count, logger
from chalicelib.quota.approvals import Approval

if TYPE_CHECKING:
    from chalicelib.links.actions import EmailLink
    from chalicelib.links.approval_links import ApprovalLinkMaker


def plain(text: str | None) -> str:
    """The agent's text made safe for a plain-text email: no control or format
    characters (each shown as its code), so nothing reorders or hides what is read."""
    if text is None:
        return "(not sent)"
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)


def _links_section(links: Sequence[EmailLink]) -> str:
    if not links:
        return ""
    rows = "\n".join(f"    {link.label}:\n      {link.url}\n" for link in links)
    ends = [link.expires_ms for link in links if link.expires_ms is not None]
    until = f" at {iso_utc(min(ends))}" if ends else ""
    return (
        "One click (each link asks you to confirm and works once; the links expire with "
        f"the approval{until}):\n{rows}\n"
    )


def approval_notification(
    approval: Approval, console_url: str, links: Sequence[EmailLink] = ()
) -> Notification:
    """The approvers' email for a new pending approval: the call, the one-click approve
    and deny links (where links are set up), the console and the CLI."""
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

{_links_section(links)}Or in the console (operator or admin): {console_url}
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

    def __init__(
        self,
        notifier: Callable[[], Publisher],
        links: Callable[[], ApprovalLinkMaker | None] | None = None,
    ) -> None:
        self._notifier = notifier
        self._links = links  # built on first use: only a refusal for approval signs

    def _email_links(self, approval: Approval) -> list[EmailLink]:
        """The one-click links, or none if links are not set up or cannot be signed (the
        email still goes out, with the console and the CLI)."""
        try:
            maker = self._links() if self._links is not None else None
            return [] if maker is None else maker.links(approval)
        except Exception:
            logger.exception("could not sign the approval email's links; sending it without")
            return []

    def __call__(self, approval: Approval, console_url: str) -> None:
        try:
            notifier = self._notifier()
            if notifier.enabled:
                links = self._email_links(approval)
                notifier.publish(approval_notification(approval, console_url, links))
        except Exception:
            logger.exception("the approval email could not be sent")
            count("NotificationFailed")
