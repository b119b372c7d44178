"""The approval email's one-click links (issue 32): approve and deny one pending
approval. Like the exhaustion email's links: signed by the same signer, single use in the
same store, a confirmation page on GET (a mail scanner's prefetch decides nothing) and
the decision on POST. The decision is the admin API's own (`Approvals.decide`: one
conditional write from pending, audited `approval_granted` or `approval_denied`), with
the link as its actor. The links expire with the approval (within LINK_TTL_MS)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from chalicelib.admin.audit import actor_of, link_detail
from chalicelib.clock import Clock, iso_utc
from chalicelib.errors import Conflict, NotFound, QuotaServiceError
from chalicelib.links import outcomes
from chalicelib.links.actions import EmailLink
from chalicelib.links.pages import Page, facts, link, paragraph, render
from chalicelib.links.plans import AlreadyDone, Change, plan_decision
from chalicelib.links.signing import LINK_TTL_MS, LinkAction, LinkPayload, LinkSigner, new_link_id
from chalicelib.quota.approvals import Approval, ApprovalState
from chalicelib.quota.events import TENANT_SCOPE, AuditEvent
from chalicelib.storage.ports import LinkUse, LinkUses, StorageError

if TYPE_CHECKING:
    from chalicelib.check.approvals import Approvals

_VERB = {LinkAction.APPROVE: "Approve", LinkAction.DENY: "Deny"}


class ApprovalLinkMaker:
    """Signs the approve and deny links of one approval's email."""

    def __init__(self, signer: LinkSigner, base_url: str) -> None:
        self._signer = signer
        self._base = base_url

    def links(self, approval: Approval) -> list[EmailLink]:
        """Approve, then deny: each its own single-use link, both expiring with the
        approval (or after LINK_TTL_MS, whichever is first: key rotation's promise)."""
        expires = min(approval.expires_ms, approval.created_ms + LINK_TTL_MS)
        key = approval.key

        def url(action: LinkAction) -> str:
            payload = LinkPayload(
                key.tenant,
                approval.session_id or TENANT_SCOPE,
                action,
                "",
                0,
                new_link_id(),
                expires,
                key.principal,
                approval_id=approval.approval_id,
            )
            return f"{self._base}/actions/{self._signer.sign(payload)}"

        return [
            EmailLink("approve this call (it then runs once)", url(LinkAction.APPROVE), expires),
            EmailLink("deny this call", url(LinkAction.DENY), expires),
        ]


def _call_facts(approval: Approval) -> list[tuple[str, str | None]]:
    key = approval.key
    return [
        ("tool", key.tool),
        ("arguments", approval.arguments_preview or "(not sent)"),
        ("digest", key.args_digest),
        ("principal", key.principal),
        ("session", approval.session_id),
        ("server", approval.server),
        ("approval", approval.approval_id),
        ("expires", iso_utc(approval.expires_ms)),
    ]


def _link_facts(payload: LinkPayload) -> list[tuple[str, str | None]]:
    return [
        ("approval", payload.approval_id),
        ("principal", payload.principal),
        ("link expires", iso_utc(payload.expires_ms)),
    ]


class ApprovalDesk:
    """Answers the pages of approve and deny links (the desk of `/actions/{token}`
    hands them here once the signature is checked)."""

    def __init__(
        self,
        approvals: Approvals,
        uses: LinkUses,
        clock: Clock,
        record: Callable[[AuditEvent], object],
    ) -> None:
        self._approvals = approvals
        self._uses = uses
        self._clock = clock
        self._record = record

    def _console(self, payload: LinkPayload) -> str:
        assert payload.approval_id is not None
        url = self._approvals.console_url(payload.approval_id)
        return link(url, "Open the approval in the console")

    def expired(self, payload: LinkPayload) -> Page:
        """The page of a link past its expiry: nothing was decided by it."""
        body = paragraph(
            f"The links of an approval email work as long as the approval does; this one "
            f"expired at {iso_utc(payload.expires_ms)} with approval {payload.approval_id}, "
            "and decided nothing. If the agent still needs the call, its next try asks for "
            "a new approval, and a new email is sent."
        )
        body += facts(_link_facts(payload)) + self._console(payload)
        return render(410, "This link has expired", body, "bad")

    def _used(self, payload: LinkPayload, use: LinkUse) -> Page:
        return outcomes.used_page(use, facts(_link_facts(payload)) + self._console(payload))

    def _approval(self, payload: LinkPayload) -> Approval | Page:
        """The approval the link decides, or the page saying it is gone.

        Raises:
            StorageError: the store failed.
        """
        assert payload.approval_id is not None
        try:
            return self._approvals.get(payload.tenant, payload.approval_id)
        except NotFound:
            body = paragraph(
                f"Approval {payload.approval_id} is no longer kept, so this link does nothing."
            )
            return render(410, "This approval is gone", body + self._console(payload), "bad")

    def _declined(self, payload: LinkPayload, approval: Approval, done: AlreadyDone) -> Page:
        body = outcomes.declined_text(payload, done) + facts(_call_facts(approval))
        body += self._console(payload)
        if approval.state_at(self._clock()) is ApprovalState.EXPIRED:
            return render(410, "This approval has expired", body, "bad")
        return render(409, "Already done", body, "ok")

    def _audit_declined(self, payload: LinkPayload, approval: Approval, done: AlreadyDone) -> None:
        self._record(outcomes.declined_event(payload, done, self._clock(), approval.server))

    def _open(self, payload: LinkPayload, pressed: bool) -> tuple[Approval, Change] | Page:
        """The approval the link decides and what deciding it does (the link taken, once
        `pressed`); or the page of a link used before, of an approval gone, or of one
        someone already decided (audited when pressed).

        Raises:
            StorageError: the store failed.
        """
        previous = self._uses.find(payload.tenant, payload.link_id)
        if previous is not None:
            return self._used(payload, previous)
        approval = self._approval(payload)
        if isinstance(approval, Page):
            return approval
        plan = plan_decision(payload, approval, self._clock())
        if isinstance(plan, AlreadyDone):
            if pressed:
                self._audit_declined(payload, approval, plan)
            return self._declined(payload, approval, plan)
        if pressed:
            previous = outcomes.take(self._uses, payload, plan.summary, self._clock())
            if previous is not None:
                return self._used(payload, previous)
        return approval, plan

    def confirm(self, payload: LinkPayload) -> Page:
        """The confirmation page: the call, and one button. Decides nothing.

        Raises:
            StorageError: the store failed.
        """
        opened = self._open(payload, pressed=False)
        if isinstance(opened, Page):
            return opened
        approval, plan = opened
        verb = _VERB[payload.action]
        shown = [*_call_facts(approval), *plan.facts]
        return outcomes.confirm_page(payload, plan, shown, f"{verb} this call", verb)

    def perform(self, payload: LinkPayload) -> Page:
        """Take the link (once) and decide the approval as the admin API does.

        Raises:
            StorageError: the store failed before the link was taken.
        """
        opened = self._open(payload, pressed=True)
        if isinstance(opened, Page):
            return opened
        approval, plan = opened
        who = payload.identity()
        approve = payload.action is LinkAction.APPROVE
        try:
            decided = self._approvals.decide(
                payload.tenant,
                approval.approval_id,
                approve,
                actor_of(who.token_id, who.role),
                None,
                link_detail(who.role, who.name),
            )
        except Conflict:
            # Decided meanwhile (the other link, the console): say by whom.
            self._uses.release(payload.tenant, payload.link_id)
            again = self._approvals.get(payload.tenant, approval.approval_id)
            settled = plan_decision(payload, again, self._clock())
            if not isinstance(settled, AlreadyDone):
                raise
            self._audit_declined(payload, again, settled)
            return self._declined(payload, again, settled)
        except (QuotaServiceError, StorageError) as exc:
            nothing, title = "Nothing was decided", "The decision could not be made"
            console = self._console(payload)
            return outcomes.failed_page(self._uses, payload, exc, nothing, title, console)
        outcomes.log_link("email link used", payload, plan.summary)
        outcome = (
            "Approved: the same call (tool, arguments, principal) runs once, on its next "
            f"try before {iso_utc(decided.expires_ms)}."
            if approve
            else "Denied: the call is refused with approval_denied; the agent is told not "
            "to retry it."
        )
        body = paragraph(outcome) + facts(_call_facts(decided)) + self._console(payload)
        return render(200, "Approved" if approve else "Denied", body, "ok")
