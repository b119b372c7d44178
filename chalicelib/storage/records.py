"""What the ports return: the records and results the adapters hand back, as plain
values (`storage.ports` names them for its callers)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chalicelib.quota.core import BudgetSnapshot, SessionSnapshot
    from chalicelib.quota.events import AuditEvent, EventType


def event_key(event: AuditEvent) -> str:
    """An audit event's sort key in the audit table: time-ordered and unique
    (zero-padded epoch ms, then the event's random suffix)."""
    return f"{event.at_ms:013d}#{event.event_id}"


# -- records -------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenRecord:
    """A stored token: its public id, the hash of the secret, and its grants."""

    token_id: str
    secret_hash: str
    tenant: str
    role: str
    name: str
    created_at_ms: int
    revoked_at_ms: int | None = None
    principals: tuple[str, ...] = ()
    expires_at_ms: int | None = None  # None: the token never expires

    @property
    def revoked(self) -> bool:
        """Whether the token has been revoked."""
        return self.revoked_at_ms is not None

    def expired(self, now_ms: int) -> bool:
        """Whether the token's optional expiry has passed."""
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms


# -- results -------------------------------------------------------------------------


@dataclass(frozen=True)
class Consumed:
    """The call was counted; the session as it is now."""

    snapshot: SessionSnapshot


@dataclass(frozen=True)
class NotConsumed:
    """The condition failed; the session as it was (None if it vanished meanwhile)."""

    snapshot: SessionSnapshot | None


@dataclass(frozen=True)
class Taken:
    """The call was counted in a budget above the session; the budget as it is now."""

    snapshot: BudgetSnapshot


@dataclass(frozen=True)
class NotTaken:
    """The budget is spent or suspended; as it was (None if it vanished meanwhile)."""

    snapshot: BudgetSnapshot | None


@dataclass(frozen=True)
class AuditPage:
    """One page of events, in the listing's order, and the token for the next page."""

    events: list[AuditEvent]
    next_token: str | None


@dataclass(frozen=True)
class AuditFilter:
    """Which of a tenant's events a tenant-wide listing holds: every one by default."""

    type: EventType | None = None
    principal: str | None = None
    server: str | None = None
    since_ms: int = 0
    until_ms: int | None = None  # inclusive; None: up to now

    def scope(self) -> str:
        """What a page token of this listing is bound to."""
        parts = (self.type, self.principal, self.server, self.since_ms, self.until_ms)
        return "feed\n" + "\n".join("" if p is None else str(p) for p in parts)


@dataclass(frozen=True)
class LimitChange:
    """An administrator's raise of one category's limit for one session."""

    category: str
    new_limit: int
    now_ms: int
    idle_ms: int
    until_ms: int | None = None  # the raise lapses then; None: it lasts as long as the counters


@dataclass(frozen=True)
class LinkUse:
    """The one use of an emailed action link: when, and what it did."""

    tenant: str
    link_id: str
    used_at_ms: int
    did: str
    expires_ms: int  # the link's own expiry: the record is of no use after it


class TroubleKind(enum.StrEnum):
    """Why a session is in the tenant's index of sessions in trouble."""

    EXHAUSTED = "exhausted"  # a budget first ran out for it
    SUSPENDED = "suspended"  # an administrator (or a link) suspended it
    ESCALATED = "escalated"  # its principal was suspended for ignoring refusals


@dataclass(frozen=True)
class TroubleMark:
    """A session's latest entry in the index of blocked or suspended sessions."""

    tenant: str
    session_id: str
    kind: TroubleKind
    at_ms: int
    category: str | None = None
    principal: str | None = None


@dataclass(frozen=True)
class TroublePage:
    """Marks newest first, and where the next page starts (None: no more)."""

    marks: list[TroubleMark]
    next_token: str | None
