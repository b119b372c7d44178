"""What an emailed link would do now, decided from the state it was sent for and the
state now (an approve or deny link: the approval's): a change to make (shown on the
confirmation page, then made), or a sign that someone already did what it asks. Pure:
the caller reads the state and the audit trail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chalicelib.clock import iso_utc
from chalicelib.links.signing import LinkAction, LinkPayload
from chalicelib.quota.approvals import Approval, ApprovalState
from chalicelib.quota.core import SessionSnapshot
from chalicelib.quota.events import AuditEvent, EventType


@dataclass(frozen=True)
class Change:
    """What confirming the link does now: e.g. "write 25 → 40"."""

    summary: str
    facts: tuple[tuple[str, str], ...]
    new_limit: int | None = None  # a raise: the limit to set (never lowered)


@dataclass(frozen=True)
class AlreadyDone:
    """The link's action no longer makes sense: what happened since, by whom, when."""

    what: str
    by: str | None = None
    at_ms: int | None = None

    def sentence(self) -> str:
        """ "Already done by …" in one sentence."""
        who = f" by {self.by}" if self.by else ""
        when = f" at {iso_utc(self.at_ms)}" if self.at_ms is not None else ""
        return f"Already done{who}{when}: {self.what}."


Plan = Change | AlreadyDone


def _latest(events: Sequence[AuditEvent], *kinds: EventType) -> AuditEvent | None:
    found = [e for e in events if e.type in kinds]
    return max(found, key=lambda e: (e.at_ms, e.event_id)) if found else None


def _done(what: str, event: AuditEvent | None) -> AlreadyDone:
    """Done already: by the actor and at the time of `event`, where it is known."""
    return AlreadyDone(what) if event is None else AlreadyDone(what, event.actor, event.at_ms)


# What an administrator did since the email that settles a suspend link's question (the
# subject runs again by their choice), and how the page says it.
_LIFTED = {
    EventType.SESSION_RESUMED: "the session was resumed",
    EventType.SESSION_RESET: "the session's counters were reset",
    EventType.PRINCIPAL_RESUMED: "the principal was resumed",
    EventType.PRINCIPAL_RESET: "the principal's counters were reset",
}


def _lifted(since_sent: Sequence[AuditEvent]) -> AlreadyDone | None:
    """An administrator's latest resume or reset since the email, which settles a
    suspend link's question; None if there was none."""
    last = _latest(since_sent, *_LIFTED)
    return None if last is None else _done(f"{_LIFTED[last.type]} since this email was sent", last)


def plan_raise(
    payload: LinkPayload,
    seen: SessionSnapshot | None,
    current_limit: int,
    expired: bool,
    since_sent: Sequence[AuditEvent],
) -> Plan:
    """A raise link adds its amount to the limit the email was sent at: the target
    stays that, whatever happened since. It is done already if the session's counters
    started again (reset, or idle expiry), the limit reached the target, or an
    administrator suspended the session since (no link lifts a limit they stopped)."""
    category = payload.category
    sent_limit = current_limit if payload.limit is None else payload.limit
    target = sent_limit + payload.amount
    reset = _latest(since_sent, EventType.SESSION_RESET)
    if reset is not None:
        return _done("the session's counters were reset", reset)
    if seen is not None and seen.suspended:
        # A raise link is only sent for a session that was not suspended then.
        stopped = _latest(since_sent, EventType.SESSION_SUSPENDED)
        return _done("the session was suspended since this email was sent", stopped)
    restarted = seen is not None and payload.started_ms not in (None, seen.started_ms)
    if seen is None or expired or restarted:
        return AlreadyDone("the session's counters started again (it was idle)")
    if current_limit >= target:
        raised = _latest(since_sent, EventType.SESSION_RAISED)
        what = f"'{category}' was raised to {current_limit}, at or past this link's {target}"
        return _done(what, raised)
    used = seen.counts.get(category, 0)
    return Change(
        f"{category} {current_limit} \u2192 {target}",
        (
            ("current limit", f"{current_limit} ({category})"),
            ("used", f"{used} of {current_limit}"),
            ("after", f"{category} {current_limit} \u2192 {target}"),
        ),
        new_limit=target,
    )


def plan_suspend(
    payload: LinkPayload,
    seen: SessionSnapshot | None,
    state: str,
    current_limit: int,
    events: Sequence[AuditEvent],
    since_sent: Sequence[AuditEvent],
) -> Plan:
    """Suspend the session, unless it is suspended already, or an administrator resumed
    or reset it since the email (their later choice wins over the email's question)."""
    if seen is not None and seen.suspended:
        return _done("the session is suspended", _latest(events, EventType.SESSION_SUSPENDED))
    lifted = _lifted(since_sent)
    if lifted is not None:
        return lifted
    used = 0 if seen is None else seen.counts.get(payload.category, 0)
    return Change(
        f"session {state} \u2192 suspended",
        (
            ("state", state),
            ("used", f"{used} of {current_limit} ({payload.category})"),
            ("after", "suspended: every tool call of the session is refused"),
        ),
    )


def plan_suspend_principal(
    payload: LinkPayload,
    suspended: bool,
    last_suspension: AuditEvent | None,
    lifted_since_sent: Sequence[AuditEvent] = (),
) -> Plan:
    """Suspend the principal, unless it is suspended already, or an administrator
    resumed or reset it since the email (their later choice wins)."""
    if suspended:
        return _done(f"principal '{payload.principal}' is suspended", last_suspension)
    lifted = _lifted(lifted_since_sent)
    if lifted is not None:
        return lifted
    return Change(
        f"principal '{payload.principal}' active \u2192 suspended",
        (("after", "suspended: every tool call made for it is refused, in every session"),),
    )


# What became of an approval that is no longer pending, as an approve or deny link's
# page says it.
_SETTLED = {
    ApprovalState.APPROVED: "the call was approved",
    ApprovalState.DENIED: "the call was denied",
    ApprovalState.USED: "the call was approved, and has run",
}


def plan_decision(payload: LinkPayload, approval: Approval, now_ms: int) -> Plan:
    """Approve or deny the approval while it is pending; once decided (in the console,
    the CLI or by the email's other link), used or expired, say so: one decision."""
    state = approval.state_at(now_ms)
    if state is ApprovalState.EXPIRED:
        return AlreadyDone(f"the approval expired at {iso_utc(approval.expires_ms)}")
    if state is not ApprovalState.PENDING:
        return AlreadyDone(_SETTLED[state], approval.decided_by)
    after = "approved" if payload.action is LinkAction.APPROVE else "denied"
    return Change(
        f"{approval.approval_id} pending \u2192 {after}",
        (("after", _AFTER[payload.action]),),
    )


_AFTER = {
    LinkAction.APPROVE: "approved: the same call (tool, arguments, principal) runs once",
    LinkAction.DENY: "denied: the call is refused with approval_denied",
}


def subject(payload: LinkPayload) -> str:
    """What the link acts on, as the log and the pages name it."""
    if payload.action is LinkAction.SUSPEND_PRINCIPAL:
        return f"principal {payload.principal}"
    if payload.approval_id is not None:
        return f"approval {payload.approval_id}"
    return f"session {payload.session_id}"
