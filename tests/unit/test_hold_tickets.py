"""Hold tickets (issue 28): a refusal's signed ticket, verified by signature, expiry and
what it binds, and redeemed once, up to its maximum, for the principal it names.
Defect class: what the client reports is trusted."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.check.requests import HeldReport
from chalicelib.check.tickets import (
    HOLD_MS,
    SLACK_MS,
    HoldTicket,
    HoldTickets,
    TicketProblem,
    TicketSigner,
    Vouched,
)
from chalicelib.links.signing import LinkAction, LinkPayload, LinkSigner
from chalicelib.quota.answers import Refused
from chalicelib.quota.core import Attempt, RefusalReason, SessionKey
from chalicelib.storage.memory.tables import MemoryLinkUses

T0 = 1_800_000_000_000
KEY = b"k" * 40
OLD_KEY = b"o" * 40
TICKET = HoldTicket("demo", "s1", "alice", "write", 6, T0 + 65_000, "id-1")


def attempt(session: str = "s1", principal: str | None = "bob", tenant: str = "demo") -> Attempt:
    return Attempt(
        session=SessionKey(tenant, session),
        tool="delete_tag",
        category="write",
        base_limit=3,
        now_ms=T0 + 1000,
        idle_ms=1_800_000,
        check_id="abc123",
        principal=principal,
    )


def test_a_signed_ticket_verifies_to_what_it_binds() -> None:
    signer = TicketSigner([KEY])
    token = signer.sign(TICKET)
    assert token.startswith("h1-")
    assert signer.verify(token, T0) == TICKET


def test_an_expired_ticket_is_refused() -> None:
    token = TicketSigner([KEY]).sign(TICKET)
    assert TicketSigner([KEY]).verify(token, TICKET.expires_ms) is TicketProblem.EXPIRED


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t.replace(".", ".x", 1),  # payload altered
        lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"),  # signature altered
        lambda t: "h1-00000000" + t[t.index(".") :],  # another key id
        lambda t: "v2" + t[2:],  # another version
        lambda t: t + ".more",
        lambda t: "é" + t,
        lambda t: t * 40,  # too long
    ],
)
def test_a_tampered_ticket_is_refused(tamper: object) -> None:
    token = TicketSigner([KEY]).sign(TICKET)
    assert callable(tamper)
    assert TicketSigner([KEY]).verify(tamper(token), T0) is TicketProblem.TAMPERED


def test_a_ticket_signed_by_another_key_is_refused_and_a_rotated_key_verifies() -> None:
    old = TicketSigner([OLD_KEY]).sign(TICKET)
    assert TicketSigner([KEY]).verify(old, T0) is TicketProblem.TAMPERED
    assert TicketSigner([KEY, OLD_KEY]).verify(old, T0) == TICKET  # during a rotation


def test_a_link_token_is_never_a_ticket() -> None:
    """Domain separation: the same key signs links and tickets, never each other's."""
    link = LinkSigner([KEY]).sign(
        LinkPayload("demo", "s1", LinkAction.SUSPEND, "write", 0, "l1", T0 + 60_000)
    )
    assert TicketSigner([KEY]).verify(link, T0) is TicketProblem.TAMPERED
    ticket = TicketSigner([KEY]).sign(TICKET)
    assert not isinstance(LinkSigner([KEY]).verify(ticket, T0), LinkPayload)


def refusal(remaining: int = 0, reason: RefusalReason = RefusalReason.QUOTA_EXCEEDED) -> Refused:
    return Refused(
        session_id="s1",
        tool="delete_tag",
        category="write",
        used=3 - remaining,
        limit=3,
        now_ms=T0,
        resets_at_ms=T0 + 1_800_000,
        reason=reason,
        principal="alice",
    )


def tickets(uses: MemoryLinkUses | None = None) -> HoldTickets:
    store = uses or MemoryLinkUses()
    return HoldTickets(lambda: TicketSigner([KEY]), lambda: store, 6)


def test_a_refusal_with_nothing_left_is_vouched_for() -> None:
    vouched = tickets().vouch("demo", refusal())
    assert vouched.hold_ticket is not None
    ticket = TicketSigner([KEY]).verify(vouched.hold_ticket, T0)
    assert isinstance(ticket, HoldTicket)
    assert (ticket.tenant, ticket.session_id, ticket.principal, ticket.category) == (
        "demo",
        "s1",
        "alice",
        "write",
    )
    assert (ticket.most, ticket.expires_ms) == (6, T0 + HOLD_MS + SLACK_MS)


def test_no_ticket_where_no_hold_starts_or_no_key_is_held() -> None:
    assert tickets().vouch("demo", refusal(remaining=2)).hold_ticket is None
    repeated = refusal(reason=RefusalReason.REPEATED_CALL)
    assert tickets().vouch("demo", repeated).hold_ticket is None
    keyless = HoldTickets(lambda: None, None, 6)
    assert keyless.vouch("demo", refusal()).hold_ticket is None


def test_a_report_counts_once_up_to_its_maximum_for_the_principal_the_ticket_names() -> None:
    uses = MemoryLinkUses()
    desk = tickets(uses)
    token = TicketSigner([KEY]).sign(TICKET)
    report = {"write": HeldReport(50, token)}
    assert desk.redeem(attempt(principal="bob"), report) == [Vouched("alice", "write", 6)]
    assert desk.redeem(attempt(principal="bob"), report) == []  # claimed: a replay
    assert tickets(uses).redeem(attempt(), report) == []  # another container, same store


@pytest.mark.parametrize(
    ("report", "caller"),
    [
        ({"write": HeldReport(5)}, attempt()),  # no ticket: the old shape
        ({"write": HeldReport(5, "h1-x.y.z")}, attempt()),  # forged
        ({"read": HeldReport(5, TicketSigner([KEY]).sign(TICKET))}, attempt()),  # category
        ({"write": HeldReport(5, TicketSigner([KEY]).sign(TICKET))}, attempt("s2")),
        ({"write": HeldReport(5, TicketSigner([KEY]).sign(TICKET))}, attempt(tenant="other")),
        (
            {"write": HeldReport(5, TicketSigner([KEY]).sign(replace(TICKET, expires_ms=T0)))},
            attempt(),
        ),
    ],
)
def test_a_report_the_service_did_not_vouch_for_counts_nothing(
    report: dict[str, HeldReport], caller: Attempt
) -> None:
    assert tickets().redeem(caller, report) == []


def test_without_a_key_no_report_counts() -> None:
    token = TicketSigner([KEY]).sign(TICKET)
    keyless = HoldTickets(lambda: None, MemoryLinkUses, 6)
    assert keyless.redeem(attempt(), {"write": HeldReport(5, token)}) == []
