"""What happens around a refusal: the audit event with the last calls, and for
categories marked `notify`, one email per exhaustion to the administrators."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from chalicelib.check.auditing import Auditor
from chalicelib.clock import iso_utc
from chalicelib.notify import Notification, NotificationFailed, Publisher
from chalicelib.observability import count, logger
from chalicelib.quota import events as audit
from chalicelib.quota.answers import Allowed, Refused
from chalicelib.quota.core import Attempt, CallRecord, RefusalReason, Scope
from chalicelib.quota.events import AuditEvent, EventType
from chalicelib.quota.policy import Policy
from chalicelib.storage.ports import TroubleKind, TroubleMark

if TYPE_CHECKING:
    from chalicelib.links.actions import EmailLink, LinkMaker

CLI = "mcp-quota"


def _result(call: CallRecord) -> str:
    """A call's outcome; a replay (a retry of a call id already counted) is marked so, and
    a run of refusals of one tool shows as one line with a count (its time is the last
    attempt's)."""
    if call.replay:
        return "replay"
    if call.allowed:
        return "allowed"
    return f"refused \u00d7{call.repeats} in a row" if call.repeats > 1 else "refused"


def _calls_table(calls: tuple[CallRecord, ...]) -> str:
    rows = [("time (UTC)", "tool", "category", "result")]
    rows += [(iso_utc(c.at_ms)[11:19], c.tool, c.category, _result(c)) for c in calls]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join("    " + line.rstrip() for line in lines)


def _whose(decision: Refused) -> str:
    if decision.scope is Scope.PRINCIPAL:
        return f"principal {decision.principal}"
    if decision.scope is Scope.TENANT:
        return "the whole tenant"
    return f"session {decision.session_id}"


def _first_call(decision: Refused) -> str:
    return "(unknown)" if decision.started_ms is None else iso_utc(decision.started_ms)


def _refills(decision: Refused) -> str:
    if decision.escalated or decision.suspended:
        return "not by itself: only when an administrator resumes it"
    at = iso_utc(decision.resets_at_ms)
    if decision.scope is Scope.SESSION:
        return f"{at} if the session stays idle until then"
    return f"{at} (the end of the {decision.scope.value} budget's window)"


def _links_section(links: Sequence[EmailLink]) -> str:
    if not links:
        return ""
    rows = "\n".join(f"    {link.label}:\n      {link.url}\n" for link in links)
    return (
        f"\nOne click (each link asks you to confirm, works once, and expires in 24 hours):\n{rows}"
    )


def _scope_lines(decision: Refused, policy: Policy) -> str:
    """What refused: the budget; for a principal suspension, the suspension first, and
    then what refused the call that set it off."""
    if not decision.escalated:
        return f"    scope:      {decision.scope.value} (the budget that refused the call)"
    if decision.reason is RefusalReason.REPEATED_CALL:
        refused_by = "the loop breaker (the same call repeated)"
    elif decision.reason is RefusalReason.SESSION_SUSPENDED:
        refused_by = "the session's suspension"
    elif decision.scope is Scope.SESSION:
        refused_by = f"the session's '{decision.category}' budget"
    else:
        refused_by = f"the {decision.scope.value}'s '{decision.category}' budget"
    return (
        f"    suspended:  principal '{decision.principal}': its refused calls in a row "
        f"reached suspend_after_refusals ({policy.suspend_after_refusals})\n"
        f"    refused by: {refused_by} (the last of those calls)"
    )


def _commands(decision: Refused, quoted: str, policy: Policy) -> str:
    """The CLI commands that help, for the budget that refused: for a suspended principal
    its resume first, and a principal raise only where the category has a principal
    budget (elsewhere the CLI refuses it)."""
    principal = "'" + str(decision.principal).replace("'", "'\\''") + "'"
    category = policy.categories.get(decision.category)
    if decision.escalated or decision.scope is Scope.PRINCIPAL:
        lines = []
        if decision.escalated or decision.reason is RefusalReason.PRINCIPAL_SUSPENDED:
            lines.append(f'    resume:   {CLI} principal resume {principal} --reason "..."')
        lines.append(f"    inspect:  {CLI} principal show {principal}")
        if category is not None and category.principal is not None:
            lines.append(
                f"    raise:    {CLI} principal raise {principal} --category "
                f'{decision.category} --add 50 --reason "..."'
            )
        if decision.escalated:
            lines.append(f"    session:  {CLI} session show {quoted}")
    elif decision.scope is Scope.TENANT:
        lines = [f"    inspect:  {CLI} tenant show"]
    else:
        lines = [
            f"    inspect:  {CLI} session show {quoted}",
            f"    raise:    {CLI} session raise {quoted} --category {decision.category} "
            '--add 10 --reason "..."',
            f'    suspend:  {CLI} session suspend {quoted} --reason "..."',
            f'    reset:    {CLI} session reset {quoted} --reason "..."',
        ]
    lines.append(f"    audit:    {CLI} audit --session {quoted}")
    return "\n".join(lines) + "\n"


def exhaustion_email(
    tenant: str,
    attempt: Attempt,
    decision: Refused,
    policy: Policy,
    links: Sequence[EmailLink] = (),
) -> Notification:
    """The email an administrator gets when a budget (session, principal or the whole
    tenant) first runs out in a category, or when a principal is suspended for ignoring
    refusals."""
    session = decision.session_id
    whose = _whose(decision)
    # The server comes first, so that two servers' incidents differ in the inbox; cut
    # short, so that a long name leaves room for the session in 100 characters.
    server = attempt.server
    if server is not None and len(server) > 32:
        server = server[:31] + "…"
    where = tenant if server is None else f"{tenant}, server {server}"
    if decision.escalated:
        subject = f"[mcp-quota] {where}: principal {decision.principal} suspended"
        what = (
            f"An AI agent acting for principal '{decision.principal}' kept calling tools\n"
            "after being refused, so the principal has been SUSPENDED: every tool call made\n"
            "for it is now refused, in every session, until an administrator resumes it."
        )
    else:
        subject = (
            f"[mcp-quota] {where}: {whose} used its {decision.category} quota "
            f"({decision.used}/{decision.limit})"
        )
        what = (
            f"An AI agent has used the whole '{decision.category}' budget of {whose},\n"
            f"and further '{decision.category}' tool calls are being refused. Nothing was run\n"
            "past the limit."
        )
    quoted = "'" + session.replace("'", "'\\''") + "'"
    body = f"""{what}

    tenant:     {tenant}
    session:    {session}
    principal:  {attempt.principal or "(not given)"}
    server:     {attempt.server or "(not given)"}
    client:     {attempt.client.describe() if attempt.client else "(not given)"}
    first call: {_first_call(decision)}
    last call:  {iso_utc(decision.now_ms)}
{_scope_lines(decision, policy)}
    category:   {decision.category} ({decision.used}/{decision.limit} calls used)
    blocked:    {decision.tool} at {iso_utc(decision.now_ms)}
    refills at: {_refills(decision)}

Last calls of the session:
{_calls_table(decision.last_calls)}
{_links_section(links)}
What you can do (the CLI reads MCP_QUOTA_URL and MCP_QUOTA_ADMIN_TOKEN):
{_commands(decision, quoted, policy)}
You get one message per exhaustion, however often the agent keeps trying.
"""
    event = "principal_suspended" if decision.escalated else "quota_exceeded"
    attributes = {
        "tenant": tenant,
        "category": decision.category,
        "scope": decision.scope.value,
        "event": event,
    }
    return Notification(subject, body, attributes)


class DecisionReporter:
    """The effects of a decision, behind one guard each: audits each exhaustion once (with
    the last calls) and notifies where the policy says; marks a spent or refused session in
    the trouble index; audits what shadow mode let pass."""

    def __init__(
        self,
        policy: Policy,
        auditor: Auditor,
        notifier: Publisher,
        links: Callable[[], LinkMaker | None] | None = None,
        trouble: Callable[[TroubleMark], None] | None = None,
    ) -> None:
        self._policy = policy
        self._auditor = auditor
        self._notifier = notifier
        self._links = links  # built on first use: a container that only allows never signs
        self._trouble = trouble

    def _mark(
        self, tenant: str, attempt: Attempt, decision: Allowed | Refused, kind: TroubleKind
    ) -> None:
        if self._trouble is None:
            return
        mark = TroubleMark(
            tenant, decision.session_id, kind, attempt.real_ms, decision.category, attempt.principal
        )
        try:
            self._trouble(mark)
        except Exception:
            logger.exception("trouble index write failed; the session may miss the listing")

    def _record(
        self,
        tenant: str,
        attempt: Attempt,
        refused: Refused,
        kind: EventType,
        detail: dict[str, Any],
        reason: str | None = None,
        after: dict[str, Any] | None = None,
        principal: str | None = None,
    ) -> None:
        """Audit the service's event about one refusal (or shadow refusal) in its
        session's trail, with the call's server and principal (unless named)."""
        self._auditor.record(
            AuditEvent(
                at_ms=refused.now_ms,
                type=kind,
                tenant=tenant,
                session_id=refused.session_id,
                actor=audit.SERVICE_ACTOR,
                reason=reason,
                after=after,
                detail=detail,
                principal=principal or attempt.principal,
                server=attempt.server,
            )
        )

    def on_counted(self, tenant: str, attempt: Attempt, allowed: Allowed) -> None:
        """Mark the session this call spent (once per category: its retries spend nothing),
        so the listing shows it blocked before its first refused call. Never raises."""
        if allowed.spent:
            self._mark(tenant, attempt, allowed, TroubleKind.EXHAUSTED)

    def on_shadow(self, tenant: str, attempt: Attempt, would: Refused) -> None:
        """Audit a call shadow mode let run past a limit and count it per category
        (`ShadowRefusals`): no email and no escalation, nothing was refused. The event
        goes to the session's trail with its principal and server, so the tenant's
        trail finds it by type (`GET /v1/audit?type=shadow_refusal`). Never raises."""
        count("ShadowRefusals", would.category)
        detail = {
            "session_id": would.session_id,
            "code": str(would.reason),
            "scope": would.scope.value,
            "category": would.category,
            "tool": would.tool,
            "server": attempt.server,
            "principal": attempt.principal,
            "used": would.used,
            "limit": would.limit,
            "units": would.units,
        }
        self._record(tenant, attempt, would, EventType.SHADOW_REFUSAL, detail)

    def on_block(self, tenant: str, attempt: Attempt, decision: Refused) -> None:
        """Handle a refusal; never raises, so it can never turn a refusal into an allow."""
        if decision.escalated:
            self._record(
                tenant,
                attempt,
                decision,
                EventType.PRINCIPAL_SUSPENDED,
                {"scope": decision.scope.value, "category": decision.category},
                reason="refused calls in a row reached suspend_after_refusals",
                after={"principal": decision.principal, "state": "suspended"},
                principal=decision.principal,
            )
            self._mark(tenant, attempt, decision, TroubleKind.ESCALATED)
            self._notify(tenant, attempt, decision)
            return
        if decision.reason is RefusalReason.REPEATED_CALL:
            self._audit_repeat(tenant, attempt, decision)
            return
        if not decision.first_exhaustion:
            return
        self._mark(tenant, attempt, decision, TroubleKind.EXHAUSTED)
        detail = {
            "category": decision.category,
            "scope": decision.scope.value,
            "used": decision.used,
            "limit": decision.limit,
            "tool": decision.tool,
            "principal": attempt.principal,
            "last_calls": [c.to_json() for c in decision.last_calls],
        }
        self._record(tenant, attempt, decision, EventType.QUOTA_EXCEEDED, detail)
        if self._policy.categories[decision.category].notify:
            self._notify(tenant, attempt, decision)

    def _audit_repeat(self, tenant: str, attempt: Attempt, decision: Refused) -> None:
        """Audit the loop breaker's refusal that starts a run of them (the last calls fold
        the rest of the run into it), with the last calls."""
        last = decision.last_calls[-1] if decision.last_calls else None
        if last is not None and last.repeats > 1:
            return
        detail = {
            "category": decision.category,
            "tool": decision.tool,
            "repeat_limit": decision.repeat_limit,
            "window_seconds": decision.repeat_window_ms // 1000,
            "principal": attempt.principal,
            "last_calls": [c.to_json() for c in decision.last_calls],
        }
        self._record(tenant, attempt, decision, EventType.REPEATED_CALL, detail)

    def _email_links(self, tenant: str, attempt: Attempt, decision: Refused) -> list[EmailLink]:
        """The one-click links, or none if links are not set up or cannot be signed (the
        email still goes out, with the CLI commands)."""
        try:
            maker = self._links() if self._links is not None else None
            return [] if maker is None else maker.links(tenant, attempt, decision)
        except Exception:
            logger.exception("could not sign the email's links; sending it without them")
            return []

    def _notify(self, tenant: str, attempt: Attempt, decision: Refused) -> None:
        links = self._email_links(tenant, attempt, decision)
        note = exhaustion_email(tenant, attempt, decision, self._policy, links)
        try:
            message_id = self._notifier.publish(note)
        except NotificationFailed as exc:
            count("NotificationFailed", decision.category)
            event_type, detail = EventType.NOTIFICATION_FAILED, {"error": str(exc)}
        else:
            count("NotificationSent", decision.category)
            event_type, detail = EventType.NOTIFICATION_SENT, {"message_id": message_id}
        detail.update({"category": decision.category, "subject": note.subject})
        self._record(tenant, attempt, decision, event_type, detail)
