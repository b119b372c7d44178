"""The use of one link, as every link's page tells it: taken once, already used, given
back after its action failed, or declined because someone did it first; and the log line
and audit event that go with each."""

from __future__ import annotations

from chalicelib.clock import iso_utc
from chalicelib.errors import QuotaServiceError, from_storage
from chalicelib.links.pages import Page, confirm_form, facts, paragraph, render
from chalicelib.links.plans import AlreadyDone, Change, subject
from chalicelib.links.signing import LINK_ACTOR, LinkPayload
from chalicelib.observability import logger
from chalicelib.quota.events import AuditEvent, EventType
from chalicelib.storage.ports import LinkUse, LinkUses, StorageError


def log_link(message: str, payload: LinkPayload, outcome: str) -> None:
    """One log line naming the link: its id, action, subject and actor (never its token)."""
    logger.info(
        message,
        extra={
            "tenant": payload.tenant,
            "link_id": payload.link_id,
            "link_action": payload.action.value,
            "subject": subject(payload),
            "actor": LINK_ACTOR,
            "outcome": outcome,
        },
    )


def take(uses: LinkUses, payload: LinkPayload, summary: str, now_ms: int) -> LinkUse | None:
    """Take the link for what it is about to do; the earlier use if it was taken first."""
    did = f"{payload.describe()} ({summary})"
    return uses.claim(LinkUse(payload.tenant, payload.link_id, now_ms, did, payload.expires_ms))


def confirm_page(
    payload: LinkPayload, plan: Change, shown: list[tuple[str, str | None]], title: str, label: str
) -> Page:
    """The confirmation page: what the link will do, `shown` as facts, and one button
    (`label`) that does it. Changes nothing."""
    body = paragraph(payload.describe()) + paragraph(f"Result: {plan.summary}") + facts(shown)
    body += paragraph("Nothing happens until you press the button. The link works once.")
    return render(200, title, body + confirm_form(label))


def used_page(use: LinkUse, shown: str) -> Page:
    """The page of a link used before: when, and what it did; `shown` follows."""
    body = paragraph(f"This link was already used at {iso_utc(use.used_at_ms)}. It did: {use.did}")
    return render(410, "This link was already used", body + shown, "bad")


def failed_page(
    uses: LinkUses,
    payload: LinkPayload,
    exc: QuotaServiceError | StorageError,
    nothing: str,
    title: str,
    console: str,
) -> Page:
    """Give the link back after its action failed (`nothing` says what did not happen),
    and say so: it can be used again."""
    uses.release(payload.tenant, payload.link_id)
    error = from_storage(exc) if isinstance(exc, StorageError) else exc
    log_link("email link failed", payload, error.message)
    body = paragraph(f"{nothing}: {error.message}")
    body += paragraph("The link can be used again.") + console
    return render(error.STATUS_CODE, title, body, "bad")


def declined_text(payload: LinkPayload, done: AlreadyDone) -> str:
    """What a link whose action someone already took says: by whom, and that it did not."""
    asked = f"The link asked to: {payload.describe()} Nothing was changed."
    return paragraph(done.sentence()) + paragraph(asked)


def declined_event(
    payload: LinkPayload, done: AlreadyDone, at_ms: int, server: str | None = None
) -> AuditEvent:
    """The audit event of a pressed link declined (logged too), of the session and
    principal the link was sent for (an approval's link: the approval's, and `server`)."""
    log_link("email link declined", payload, done.sentence())
    detail = {
        "link_id": payload.link_id,
        "link_action": payload.action.value,
        "subject": subject(payload),
        "done_by": done.by,
    }
    if payload.approval_id is not None:
        detail["approval_id"] = payload.approval_id
    return AuditEvent(
        at_ms=at_ms,
        type=EventType.LINK_DECLINED,
        tenant=payload.tenant,
        session_id=payload.session_id,
        actor=LINK_ACTOR,
        reason=done.sentence(),
        detail=detail,
        principal=payload.principal,
        server=server,
    )
