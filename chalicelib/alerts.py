"""What happens around a refusal: the audit event with the last calls, and for
categories marked `notify`, one email per exhaustion to the administrators."""

from __future__ import annotations

from chalicelib import audit
from chalicelib.audit import AuditEvent, Auditor, EventType
from chalicelib.clock import iso_utc
from chalicelib.notify import Notification, NotificationFailed, Notifier
from chalicelib.observability import count
from chalicelib.policy import Policy
from chalicelib.quota import Attempt, CallRecord, Refused

CLI = "mcp-quota"


def _calls_table(calls: tuple[CallRecord, ...]) -> str:
    rows = [("time (UTC)", "tool", "category", "result")]
    rows += [
        (iso_utc(c.at_ms)[11:19], c.tool, c.category, "allowed" if c.allowed else "REFUSED")
        for c in calls
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join("    " + line.rstrip() for line in lines)


def exhaustion_email(tenant: str, attempt: Attempt, decision: Refused) -> Notification:
    """The email an administrator gets when a session first uses up a category."""
    session = decision.session_id
    subject = (
        f"[mcp-quota] {tenant}: session {session} used its {decision.category} quota "
        f"({decision.used}/{decision.limit})"
    )
    quoted = "'" + session.replace("'", "'\\''") + "'"
    body = f"""An AI agent session has used its whole '{decision.category}' quota, and its
further '{decision.category}' tool calls are being refused. Nothing was run past the limit.

    tenant:     {tenant}
    session:    {session}
    principal:  {attempt.principal or "(not given)"}
    category:   {decision.category} ({decision.used}/{decision.limit} calls used)
    blocked:    {decision.tool} at {iso_utc(decision.now_ms)}
    resets at:  {iso_utc(decision.resets_at_ms)} if the session stays idle until then

Last calls of the session:
{_calls_table(decision.last_calls)}

What you can do (the CLI reads MCP_QUOTA_URL and MCP_QUOTA_TOKEN):
    inspect:  {CLI} session show {quoted}
    raise:    {CLI} session raise {quoted} --category {decision.category} --add 10 --reason "..."
    suspend:  {CLI} session suspend {quoted} --reason "..."
    reset:    {CLI} session reset {quoted} --reason "..."
    audit:    {CLI} audit --session {quoted}

You get one message per exhaustion, however often the agent keeps trying.
"""
    attributes = {"tenant": tenant, "category": decision.category, "event": "quota_exceeded"}
    return Notification(subject, body, attributes)


class BlockReporter:
    """Audits each exhaustion once (with the last calls) and notifies where the policy says."""

    def __init__(self, policy: Policy, auditor: Auditor, notifier: Notifier) -> None:
        self._policy = policy
        self._auditor = auditor
        self._notifier = notifier

    def on_block(self, tenant: str, attempt: Attempt, decision: Refused) -> None:
        """Handle a refusal; never raises, so it can never turn a refusal into an allow."""
        if not decision.first_exhaustion:
            return
        self._auditor.record(
            AuditEvent(
                at_ms=decision.now_ms,
                type=EventType.QUOTA_EXCEEDED,
                tenant=tenant,
                session_id=decision.session_id,
                actor=audit.SERVICE_ACTOR,
                detail={
                    "category": decision.category,
                    "used": decision.used,
                    "limit": decision.limit,
                    "tool": decision.tool,
                    "principal": attempt.principal,
                    "last_calls": [c.to_json() for c in decision.last_calls],
                },
            )
        )
        if self._policy.categories[decision.category].notify:
            self._notify(tenant, attempt, decision)

    def _notify(self, tenant: str, attempt: Attempt, decision: Refused) -> None:
        note = exhaustion_email(tenant, attempt, decision)
        try:
            message_id = self._notifier.publish(note)
        except NotificationFailed as exc:
            count("NotificationFailed", decision.category)
            event_type, detail = EventType.NOTIFICATION_FAILED, {"error": str(exc)}
        else:
            count("NotificationSent", decision.category)
            event_type, detail = EventType.NOTIFICATION_SENT, {"message_id": message_id}
        detail.update({"category": decision.category, "subject": note.subject})
        self._auditor.record(
            AuditEvent(
                at_ms=decision.now_ms,
                type=event_type,
                tenant=tenant,
                session_id=decision.session_id,
                actor=audit.SERVICE_ACTOR,
                detail=detail,
            )
        )
