"""One-click actions from the exhaustion email: the links it carries, and the pages that
confirm (GET, changes nothing: a mail scanner's prefetch is harmless) and perform (POST)
them. Each link is single-use (a conditional write in the store), expires after 24 h,
and every use is audited with actor `email-link` and the link's id."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from chalicelib.admin.requests import RaiseRequest
from chalicelib.clock import Clock, iso_utc
from chalicelib.errors import QuotaServiceError, from_storage
from chalicelib.links.pages import Page, confirm_form, facts, link, paragraph, render
from chalicelib.links.signing import (
    LINK_TTL_MS,
    LinkAction,
    LinkPayload,
    LinkProblem,
    LinkSigner,
    new_link_id,
)
from chalicelib.quota.core import Attempt, BudgetKey, Refused, Scope
from chalicelib.quota.policy import Policy
from chalicelib.storage.ports import LinkUse, LinkUses, StorageError

if TYPE_CHECKING:
    from chalicelib.admin.actions import AdminService
    from chalicelib.admin.budgets import BudgetAdmin


@dataclass(frozen=True)
class EmailLink:
    """One link of the email: what it does, and where it goes."""

    label: str
    url: str


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
    ) -> None:
        self._signer = signer
        self._uses = uses
        self._admin = admin
        self._budget_admin = budget_admin
        self._clock = clock
        self._base = base_url

    def _checked(self, token: str) -> LinkPayload | Page:
        verified = self._signer.verify(token, self._clock())
        if verified is LinkProblem.TAMPERED:
            return render(
                403,
                "This link is not valid",
                paragraph(
                    "The link was changed or was not issued by this service, so it does "
                    "nothing. Use the links of the email exactly as they are, or the console."
                ),
                "bad",
            )
        if verified is LinkProblem.EXPIRED:
            return render(
                410,
                "This link has expired",
                paragraph("Links in the email work for 24 hours. Act from the console or the CLI."),
                "bad",
            )
        assert isinstance(verified, LinkPayload)
        return verified

    def _used(self, payload: LinkPayload, use: LinkUse) -> Page:
        body = paragraph(
            f"This link was already used at {iso_utc(use.used_at_ms)}. It did: {use.did}"
        )
        body += facts(_what(payload)) + self._console(payload)
        return render(410, "This link was already used", body, "bad")

    def _console(self, payload: LinkPayload) -> str:
        if not self._base:
            return ""
        return link(console_url(self._base, payload.session_id), "Open the session in the console")

    def confirm(self, token: str) -> Page:
        """The confirmation page: what the link will do, and one button. Changes nothing.

        Raises:
            StorageError: the store failed.
        """
        checked = self._checked(token)
        if isinstance(checked, Page):
            return checked
        previous = self._uses.find(checked.tenant, checked.link_id)
        if previous is not None:
            return self._used(checked, previous)
        body = paragraph(checked.describe()) + facts(_what(checked))
        body += paragraph("Nothing happens until you press the button. The link works once.")
        return render(200, "Confirm this action", body + confirm_form("Confirm"))

    def perform(self, token: str) -> Page:
        """Take the link (once) and do what it says; the result page.

        Raises:
            StorageError: the store failed before the link was taken.
        """
        checked = self._checked(token)
        if isinstance(checked, Page):
            return checked
        now = self._clock()
        use = LinkUse(checked.tenant, checked.link_id, now, checked.describe(), checked.expires_ms)
        previous = self._uses.claim(use)
        if previous is not None:
            return self._used(checked, previous)
        try:
            outcome = self._do(checked)
        except (QuotaServiceError, StorageError) as exc:
            self._uses.release(checked.tenant, checked.link_id)
            error = from_storage(exc) if isinstance(exc, StorageError) else exc
            body = paragraph(f"Nothing was changed: {error.message}")
            body += paragraph("The link can be used again.") + self._console(checked)
            return render(error.STATUS_CODE, "The action could not be done", body, "bad")
        body = paragraph(f"Done: {checked.describe()}") + paragraph(outcome)
        body += facts(_what(checked)) + self._console(checked)
        return render(200, "Done", body, "ok")

    def _do(self, payload: LinkPayload) -> str:
        who = payload.identity()
        reason = f"one-click link {payload.link_id} from the exhaustion email"
        if payload.action is LinkAction.RAISE:
            request = RaiseRequest(payload.category, reason, add=payload.amount)
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
