"""One-click actions from the exhaustion email: the links it carries, and the pages that
confirm (GET, changes nothing: a mail scanner's prefetch is harmless) and perform (POST)
them; an approval email's approve and deny links are handed to `approval_links`. Each
link is single-use (a conditional write in the store), expires after 24 h, and every use
is audited with actor `email-link` and the link's id."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from chalicelib.admin.requests import RaiseRequest
from chalicelib.clock import Clock, iso_utc
from chalicelib.errors import Conflict, NotFound, QuotaServiceError
from chalicelib.links import outcomes
from chalicelib.links.pages import Page, facts, link, paragraph, render
from chalicelib.links.plans import (
    AlreadyDone,
    Change,
    Plan,
    plan_raise,
    plan_suspend,
    plan_suspend_principal,
)
from chalicelib.links.signing import (
    APPROVAL_ACTIONS,
    LINK_TTL_MS,
    LinkAction,
    LinkPayload,
    LinkProblem,
    LinkSigner,
    new_link_id,
)
from chalicelib.quota.answers import Refused
from chalicelib.quota.core import Attempt, BudgetKey, Scope, SessionState
from chalicelib.quota.events import AuditEvent, EventType
from chalicelib.quota.policy import Policy
from chalicelib.storage.ports import AuditFilter, LinkUse, LinkUses, StorageError

if TYPE_CHECKING:
    from chalicelib.admin.actions import AdminService
    from chalicelib.admin.budgets import BudgetAdmin
    from chalicelib.links.approval_links import ApprovalDesk


@dataclass(frozen=True)
class EmailLink:
    """One link of the email: what it does, and where it goes."""

    label: str
    url: str
    expires_ms: int | None = None  # an approval's links: when they expire with it


def console_url(base_url: str, session_id: str) -> str:
    """The console's page of one session (no token in it: the console asks for one)."""
    return f"{base_url}/console#/session/{quote(session_id, safe='')}"


class LinkMaker:
    """Signs the one-click links of an exhaustion email."""

    def __init__(self, signer: LinkSigner, base_url: str, policy: Policy) -> None:
        self._signer = signer
        self._base = base_url
        self._policy = policy

    def _url(self, payload: LinkPayload) -> str:
        return f"{self._base}/actions/{self._signer.sign(payload)}"

    def links(self, tenant: str, attempt: Attempt, decision: Refused) -> list[EmailLink]:
        """Raise this category by its base limit (when the session's budget refused),
        suspend the session, suspend the principal (where that scope exists), open the
        session in the console."""
        expires = decision.now_ms + LINK_TTL_MS
        session, category = decision.session_id, decision.category

        def payload(action: LinkAction, amount: int = 0) -> LinkPayload:
            return LinkPayload(
                tenant,
                session,
                action,
                category,
                amount,
                new_link_id(),
                expires,
                attempt.principal,
                limit=decision.limit,
                started_ms=decision.started_ms,
            )

        out: list[EmailLink] = []
        if decision.scope is Scope.SESSION and not decision.suspended and not decision.escalated:
            amount = attempt.base_limit
            out.append(
                EmailLink(
                    f"raise '{category}' by {amount} for this session",
                    self._url(payload(LinkAction.RAISE, amount)),
                )
            )
        out.append(EmailLink("suspend this session", self._url(payload(LinkAction.SUSPEND))))
        principal_scope = any(
            w.scope is Scope.PRINCIPAL for c in self._policy.categories.values() for w in c.windows
        )
        if attempt.principal is not None and principal_scope and not decision.escalated:
            out.append(
                EmailLink(
                    f"suspend principal '{attempt.principal}'",
                    self._url(payload(LinkAction.SUSPEND_PRINCIPAL)),
                )
            )
        out.append(EmailLink("open this session in the console", console_url(self._base, session)))
        return out


def _what(payload: LinkPayload) -> list[tuple[str, str | None]]:
    return [
        ("tenant", payload.tenant),
        ("session", payload.session_id),
        ("principal", payload.principal),
        ("category", payload.category if payload.action is LinkAction.RAISE else None),
        ("link expires", iso_utc(payload.expires_ms)),
    ]


class LinkDesk:
    """Answers `GET` and `POST /actions/{token}` with HTML pages."""

    def __init__(
        self,
        signer: LinkSigner,
        uses: LinkUses,
        admin: Callable[[], AdminService],
        budget_admin: Callable[[], BudgetAdmin],
        clock: Clock,
        base_url: str,
        approval_desk: Callable[[], ApprovalDesk] | None = None,
    ) -> None:
        self._signer = signer
        self._uses = uses
        self._admin = admin
        self._budget_admin = budget_admin
        self._clock = clock
        self._base = base_url
        self._approval_desk = approval_desk

    def _approvals(self) -> ApprovalDesk:
        """The desk of approve and deny links.

        Raises:
            NotFound: approvals are not wired in this deployment.
        """
        if self._approval_desk is None:
            raise NotFound("Approval links are not set up in this deployment.")
        return self._approval_desk()

    def _checked(self, token: str) -> LinkPayload | Page:
        now = self._clock()
        verified = self._signer.verify(token, now)
        if verified is LinkProblem.TAMPERED:
            return render(
                403,
                "This link is not valid",
                paragraph(
                    "The link was changed, was not issued by this service, or its signing "
                    "key was withdrawn, so it does nothing. Use the links of the email "
                    "exactly as they are, or the console."
                ),
                "bad",
            )
        if verified is LinkProblem.RETIRED:
            return render(
                410,
                "This link no longer works",
                paragraph(
                    "It comes from an email sent by an earlier version of the service, whose "
                    "links are retired. Act from the console or the CLI."
                ),
                "bad",
            )
        if verified is LinkProblem.EXPIRED:
            expired = self._signer.read(token, now)
            if isinstance(expired, LinkPayload) and expired.action in APPROVAL_ACTIONS:
                return self._approvals().expired(expired)
            return render(
                410,
                "This link has expired",
                paragraph("Links in the email work for 24 hours. Act from the console or the CLI."),
                "bad",
            )
        assert isinstance(verified, LinkPayload)
        return verified

    def _used(self, payload: LinkPayload, use: LinkUse) -> Page:
        return outcomes.used_page(use, facts(_what(payload)) + self._console(payload))

    def _console(self, payload: LinkPayload) -> str:
        if not self._base:
            return ""
        return link(console_url(self._base, payload.session_id), "Open the session in the console")

    def _plan(self, payload: LinkPayload) -> Plan:
        """What the link would do now, from the state it was sent for.

        Raises:
            StorageError: the store failed.
        """
        admin = self._admin()
        if payload.action is LinkAction.SUSPEND_PRINCIPAL:
            assert payload.principal is not None
            key = BudgetKey.principal(payload.tenant, payload.principal)
            suspended = self._budget_admin().show(key)["state"] == "suspended"
            where = AuditFilter(type=EventType.PRINCIPAL_SUSPENDED, principal=payload.principal)
            last = admin.latest_event(payload.tenant, where) if suspended else None
            lifted = [] if suspended else self._lifted_principal(payload)
            return plan_suspend_principal(payload, suspended, last, lifted)
        seen, limit, state = admin.now_for_link(
            payload.tenant, payload.session_id, payload.category
        )
        since = admin.session_events(payload.tenant, payload.session_id, payload.sent_ms)
        if payload.action is LinkAction.RAISE:
            expired = state is SessionState.EXPIRED
            return plan_raise(payload, seen, limit, expired, since)
        events = admin.session_events(payload.tenant, payload.session_id, 0)
        return plan_suspend(payload, seen, str(state), limit, events, since)

    def _lifted_principal(self, payload: LinkPayload) -> list[AuditEvent]:
        """The principal's latest resume and reset since the link was sent, if any.

        Raises:
            StorageError: the store failed.
        """
        found: list[AuditEvent] = []
        for kind in (EventType.PRINCIPAL_RESUMED, EventType.PRINCIPAL_RESET):
            where = AuditFilter(type=kind, principal=payload.principal, since_ms=payload.sent_ms)
            event = self._admin().latest_event(payload.tenant, where)
            if event is not None:
                found.append(event)
        return found

    def _declined(self, payload: LinkPayload, done: AlreadyDone, pressed: bool) -> Page:
        """The page of a link whose action someone already took; audited when pressed."""
        if pressed:
            self._admin().record(outcomes.declined_event(payload, done, self._clock()))
        body = (
            outcomes.declined_text(payload, done) + facts(_what(payload)) + self._console(payload)
        )
        return render(409, "Already done", body, "ok")

    def _open(self, token: str, pressed: bool) -> tuple[LinkPayload, Change] | Page:
        """The link and what it does now (taken, once `pressed`); or the page already
        answered: a link that is not valid, used before, or whose action someone already
        took, or an approval's link (its desk's page).

        Raises:
            StorageError: the store failed.
        """
        checked = self._checked(token)
        if isinstance(checked, Page):
            return checked
        if checked.action in APPROVAL_ACTIONS:
            desk = self._approvals()
            return desk.perform(checked) if pressed else desk.confirm(checked)
        previous = self._uses.find(checked.tenant, checked.link_id)
        if previous is not None:
            return self._used(checked, previous)
        plan = self._plan(checked)
        if isinstance(plan, AlreadyDone):
            return self._declined(checked, plan, pressed)
        if pressed:
            previous = outcomes.take(self._uses, checked, plan.summary, self._clock())
            if previous is not None:
                return self._used(checked, previous)
        return checked, plan

    def confirm(self, token: str) -> Page:
        """The confirmation page: what the link will do now, and one button. Changes
        nothing.

        Raises:
            StorageError: the store failed.
        """
        opened = self._open(token, pressed=False)
        if isinstance(opened, Page):
            return opened
        checked, plan = opened
        shown = [*plan.facts, *_what(checked)]
        return outcomes.confirm_page(checked, plan, shown, "Confirm this action", "Confirm")

    def perform(self, token: str) -> Page:
        """Take the link (once) and do what it says, relative to the state it was sent
        for; the result page.

        Raises:
            StorageError: the store failed before the link was taken.
        """
        opened = self._open(token, pressed=True)
        if isinstance(opened, Page):
            return opened
        checked, plan = opened
        try:
            outcome = self._do(checked, plan)
        except Conflict:
            # Raised past the target meanwhile: say by whom, as if it had been so before.
            self._uses.release(checked.tenant, checked.link_id)
            again = self._plan(checked)
            if isinstance(again, AlreadyDone):
                return self._declined(checked, again, pressed=True)
            raise
        except (QuotaServiceError, StorageError) as exc:
            nothing, title = "Nothing was changed", "The action could not be done"
            console = self._console(checked)
            return outcomes.failed_page(self._uses, checked, exc, nothing, title, console)
        outcomes.log_link("email link used", checked, plan.summary)
        body = paragraph(f"Done: {plan.summary}") + paragraph(outcome)
        body += facts(_what(checked)) + self._console(checked)
        return render(200, "Done", body, "ok")

    def _do(self, payload: LinkPayload, plan: Change) -> str:
        who = payload.identity()
        reason = f"one-click link {payload.link_id} from the exhaustion email"
        if payload.action is LinkAction.RAISE:
            assert plan.new_limit is not None
            request = RaiseRequest(payload.category, reason, limit=plan.new_limit)
            result = self._admin().raise_limit(who, payload.session_id, request)
            return (
                f"The '{payload.category}' limit of the session went from {result['before']} "
                f"to {result['after']} calls."
            )
        if payload.action is LinkAction.SUSPEND:
            self._admin().suspend(who, payload.session_id, reason)
            return (
                "Every tool call of the session is now refused, until an administrator resumes it."
            )
        assert payload.principal is not None
        key = BudgetKey.principal(payload.tenant, payload.principal)
        self._budget_admin().suspend(who, key, reason)
        return "Every tool call made for the principal is now refused, until it is resumed."
