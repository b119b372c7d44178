"""Hold tickets: what makes a client's report of the refusals it answered itself count.

A refusal with nothing left starts the client's hold (it refuses that session's further
calls of the category itself, then reports how many). The service vouches for such a
hold: its answer carries a ticket, HMAC-signed, that binds tenant, session, principal,
category, the most refusals a report under it may count, an expiry (the longest hold plus
slack) and a ticket id. A report counts only with a genuine, unexpired ticket of the same
tenant, session and category; up to the ticket's maximum; to the principal the ticket
names; and once (the ticket id is claimed in the single-use store first).

The keys are the email links' keys (`links/signing.py`), each turned into a ticket key by
an HMAC of a fixed label, so no link token is ever a ticket and no ticket a link; a
rotation of the link key rotates these too (a ticket lives about a minute).
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from chalicelib.check.requests import HeldReport
from chalicelib.observability import count, logger
from chalicelib.quota.answers import Refused
from chalicelib.quota.core import Attempt, RefusalReason
from chalicelib.signed import PurposeSigner, purpose_key
from chalicelib.storage.ports import LinkUse, LinkUses, StorageError

HOLD_MS = 5_000  # the longest hold a client keeps (the client's MAX_HOLD_SECONDS)
SLACK_MS = 60_000  # the hold's report rides on the session's next check: later counts nothing
TICKET_VERSION = "h1"
_PURPOSE = b"mcp-quota hold ticket key"  # domain separation from the link tokens
_USE_PREFIX = "hold-ticket."  # a ticket's single use, beside the links' (hex ids) in one store
_USED_FOR = "hold ticket"


class TicketProblem(enum.StrEnum):
    """Why a report's ticket counts nothing."""

    ABSENT = "absent"  # no ticket (the old report shape), or no key to verify one with
    TAMPERED = "tampered"  # not signed by this service, or not a ticket
    EXPIRED = "expired"
    MISMATCH = "mismatch"  # another tenant, session or category
    USED = "used"  # its id was already claimed: a replay, a resend after a 409


@dataclass(frozen=True)
class HoldTicket:
    """What a hold ticket binds; the signature covers every field."""

    tenant: str
    session_id: str
    principal: str | None
    category: str
    most: int  # the most refusals a report under this ticket counts
    expires_ms: int
    ticket_id: str

    def to_compact(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "t": self.tenant,
            "s": self.session_id,
            "c": self.category,
            "n": self.most,
            "e": self.expires_ms,
            "i": self.ticket_id,
        }
        if self.principal is not None:
            out["p"] = self.principal
        return out

    @classmethod
    def from_compact(cls, raw: Any) -> HoldTicket | None:
        """The ticket, or None if it is not one this service writes."""
        if not isinstance(raw, dict):
            return None
        principal = raw.get("p")
        try:
            return cls(
                tenant=str(raw["t"]),
                session_id=str(raw["s"]),
                principal=None if principal is None else str(principal),
                category=str(raw["c"]),
                most=int(raw["n"]),
                expires_ms=int(raw["e"]),
                ticket_id=str(raw["i"]),
            )
        except (KeyError, ValueError, TypeError):
            return None

    def covers(self, attempt: Attempt, category: str) -> bool:
        """Whether a report of `category` sent with this check is the one it was issued for."""
        return (
            self.tenant == attempt.tenant
            and self.session_id == attempt.session_id
            and self.category == category
        )


@dataclass(frozen=True)
class Vouched:
    """Refusals a client held that the service vouched for: whose, of what, how many."""

    principal: str | None
    category: str
    refusals: int


def new_ticket_id() -> str:
    """A ticket's id: 96 random bits."""
    return secrets.token_urlsafe(12)


def ticket_key(link_key: bytes) -> bytes:
    """The ticket key made from one link key: an HMAC of a fixed label under it."""
    return purpose_key(link_key, _PURPOSE)


class TicketSigner:
    """Signs hold tickets with the newest key and verifies them with any key held
    (`signed.PurposeSigner`: the one signing scheme)."""

    def __init__(self, link_keys: Sequence[bytes]) -> None:
        """`link_keys`, newest first (the email links' keys).

        Raises:
            ValueError: no key (a configuration fault).
        """
        self._signer = PurposeSigner(TICKET_VERSION, _PURPOSE, link_keys)

    def sign(self, ticket: HoldTicket) -> str:
        """The ticket as a client carries it: `h1-<key id>.<payload>.<signature>`."""
        return self._signer.sign(ticket.to_compact())

    def verify(self, token: str, now_ms: int) -> HoldTicket | TicketProblem:
        """The ticket of a genuine, unexpired token, or what is wrong with it."""
        ticket = HoldTicket.from_compact(self._signer.open(token))
        if ticket is None:
            return TicketProblem.TAMPERED
        if ticket.expires_ms <= now_ms:
            return TicketProblem.EXPIRED
        return ticket


class HoldTickets:
    """Issues the ticket of a refusal's hold, and redeems a client's report against it."""

    def __init__(
        self,
        signer: Callable[[], TicketSigner | None],
        uses: Callable[[], LinkUses] | None,
        most: int,
    ) -> None:
        """`signer`: the current signer, or None where no link key is configured (then
        no refusal carries a ticket and no report counts); `uses`: the single-use store;
        `most`: what one report may count (`suspend_after_refusals`)."""
        self._signer = signer
        self._uses = uses
        self._most = max(1, most)

    def _current(self) -> TicketSigner | None:
        try:
            return self._signer()
        except StorageError as exc:  # the keys could not be read: no ticket, no count
            logger.warning(
                "hold tickets: the link keys could not be read", extra={"error": exc.doing}
            )
            return None

    def vouch(self, tenant: str, decision: Refused) -> Refused:
        """The refusal with the ticket of the hold it starts at the client, if it starts
        one (nothing left; the loop breaker's refusal holds nothing)."""
        if decision.remaining > 0 or decision.reason is RefusalReason.REPEATED_CALL:
            return decision
        signer = self._current()
        if signer is None:
            return decision
        ticket = HoldTicket(
            tenant=tenant,
            session_id=decision.session_id,
            principal=decision.principal,
            category=decision.category,
            most=self._most,
            expires_ms=decision.now_ms + HOLD_MS + SLACK_MS,
            ticket_id=new_ticket_id(),
        )
        return replace(decision, hold_ticket=signer.sign(ticket))

    def redeem(self, attempt: Attempt, reports: Mapping[str, HeldReport]) -> list[Vouched]:
        """The reported refusals the service vouches for, each ticket claimed once; what
        it does not vouch for is counted in a metric only.

        Raises:
            StorageError: the single-use store failed.
        """
        vouched: list[Vouched] = []
        signer = None
        for category, report in reports.items():
            if report.refusals < 1:
                continue
            if report.ticket is not None and signer is None:
                signer = self._current()
            ticket: HoldTicket | TicketProblem = TicketProblem.ABSENT
            if report.ticket is not None and signer is not None:
                ticket = signer.verify(report.ticket, attempt.real_ms)
            if isinstance(ticket, HoldTicket) and not ticket.covers(attempt, category):
                ticket = TicketProblem.MISMATCH
            if isinstance(ticket, HoldTicket) and not self._claim(ticket, attempt.real_ms):
                ticket = TicketProblem.USED
            if isinstance(ticket, TicketProblem):
                count("RefusedLocallyUnverified", category, report.refusals)
                continue
            refusals = min(report.refusals, ticket.most)
            count("ChecksBlocked", category, refusals)
            count("RefusedLocally", category, refusals)
            vouched.append(Vouched(ticket.principal, category, refusals))
        return vouched

    def _claim(self, ticket: HoldTicket, now_ms: int) -> bool:
        """Take the ticket for this report: False if a report already took it.

        Raises:
            StorageError: the store failed.
        """
        if self._uses is None:
            return False
        use = LinkUse(
            tenant=ticket.tenant,
            link_id=f"{_USE_PREFIX}{ticket.ticket_id}",
            used_at_ms=now_ms,
            did=_USED_FOR,
            expires_ms=ticket.expires_ms,
        )
        return self._uses().claim(use) is None
