"""What the service needs from storage, keyed by domain values (no key, expression or TTL).
Sessions and budgets: written once (`storage.sessions`, `storage.budgets`) on each backend's
narrow pair (`record_port`); a session's audit page once (`audit_port`); the DynamoDB and
in-memory adapters implement the others."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from chalicelib.storage.audit_port import AuditLog
from chalicelib.storage.errors import (
    BadPageToken,
    RecordChanged,
    RecordNotFound,
    StorageError,
    StoreMisconfigured,
    StoreRejected,
    StoreUnavailable,
    WriteUncertain,
)
from chalicelib.storage.records import (
    AuditFilter,
    AuditPage,
    Consumed,
    LimitChange,
    LinkUse,
    NotConsumed,
    NotTaken,
    Taken,
    TroubleKind,
    TroubleMark,
    TroublePage,
)

# The records the ports return, what every port raises (`storage.errors`), and the ports
# kept apart (`audit_port`), named here for their callers.
__all__ = [
    "AuditFilter",
    "AuditLog",
    "AuditPage",
    "BadPageToken",
    "Consumed",
    "LimitChange",
    "LinkUse",
    "NotConsumed",
    "NotTaken",
    "RecordChanged",
    "RecordNotFound",
    "StorageError",
    "StoreMisconfigured",
    "StoreRejected",
    "StoreUnavailable",
    "Taken",
    "TroubleKind",
    "TroubleMark",
    "TroublePage",
    "WriteUncertain",
]

if TYPE_CHECKING:
    from chalicelib.quota.core import (
        Attempt,
        BudgetKey,
        BudgetSnapshot,
        CallLife,
        LeaseId,
        SessionKey,
        SessionSnapshot,
        Spend,
    )
    from chalicelib.quota.grants import Grant
    from chalicelib.quota.results import CallResults
    from chalicelib.quota.writes import WriteId
    from chalicelib.storage.approval_port import ApprovalStore
    from chalicelib.storage.records import TokenRecord

# -- ports ---------------------------------------------------------------------------


class SessionReads(Protocol):
    """A session as stored: both the check and the administrator read it."""

    def get(self, session: SessionKey) -> SessionSnapshot | None:
        """The session as stored (strongly consistent), or None.

        Raises:
            StorageError: the store failed.
        """


class SessionChecks(SessionReads, Protocol):
    """A session's counters, state and last calls as a check writes them: one conditional
    write per call counted (the rule: `quota.rules.session_consume`)."""

    def consume(self, attempt: Attempt) -> Consumed | NotConsumed:
        """Count the call if `rules.session_consume` holds on the session as stored;
        atomically.

        Raises:
            StorageError: the store failed.
        """

    def reset_expired(self, attempt: Attempt, seen: SessionSnapshot) -> Consumed | None:
        """Start idle-expired counters again with this call counted; None if another
        attempt touched the session since `seen` was read.

        Raises:
            StorageError: the store failed.
        """

    def restart_suspended(self, attempt: Attempt, seen: SessionSnapshot) -> SessionSnapshot | None:
        """Refuse a suspended session's first attempt after idle expiry: its counters
        start again (raises, refusals and leases go), with this refusal as their first
        record; it stays suspended. None if another attempt touched it since
        `seen` was read.

        Raises:
            StorageError: the store failed.
        """

    def record_block(
        self,
        attempt: Attempt,
        seen: SessionSnapshot,
        limit: int,
        suspended: bool,
        *,
        expected: bool = False,
        marks: bool = True,
    ) -> bool | None:
        """Record a refused attempt, refresh the idle clock: whether it is the first refusal
        at `limit` of these counters (False while suspended), None if `seen` changed.
        Idempotent per `attempt.check_id`. `expected`: no check was made (the session was
        seen spent at `limit`); one write that holds only while it still is, else None.
        `marks`: False for a refusal that says nothing about the limit (a repeated call):
        it is never the first at `limit`, and leaves the first one's mark alone.

        Raises:
            StorageError: the store failed.
        """

    def admit(self, attempt: Attempt, life: CallLife) -> bool:
        """Admit a call that every wider budget counted: its call id's life goes from in
        progress to admitted if it is still `life`; False if not.

        Raises:
            StorageError: the store failed.
        """

    def record_replay(self, attempt: Attempt, seen: SessionSnapshot) -> bool:
        """Record a replayed call id, refresh the idle clock; False if `seen` changed
        (or, for a call with a life, if another duplicate moved it on first).

        Raises:
            StorageError: the store failed.
        """

    def uncount(self, attempt: Attempt, started_ms: int | None) -> None:
        """Take back a call `consume` counted (a wider budget refused it): the count goes
        down if the counters are still those of `started_ms`; the call shows as refused.
        `started_ms` None: whether `consume` applied is unknown (the store timed out);
        only a count the session records as this check's is taken back
        (`rules.take_back_recorded`), else nothing is written.

        Raises:
            StorageError: the store failed.
        """

    def return_lease(
        self, session: SessionKey, lease: LeaseId, unused: int, cutoff_ms: int
    ) -> SessionSnapshot | None:
        """Give back `unused` calls of a lease: the count and the leased count go down, if
        the counters are still the generation that granted it (`lease.started_ms`), hold
        that many leased calls, and it is the category's last lease, exactly as granted,
        not yet returned. Returns the session after, or None if nothing was given back.

        Raises:
            StorageError: the store failed.
        """


class SessionAdmin(SessionReads, Protocol):
    """A session as an administrator changes it: none of these compares the idle clock or
    the counters, which every check rewrites."""

    def raise_limit(
        self, session: SessionKey, change: LimitChange, seen: SessionSnapshot | None
    ) -> SessionSnapshot:
        """Set a raised limit, never below a raised limit set meanwhile. On an idle (or
        unseen) session the counters start again, as the next check would.

        Raises:
            RecordChanged: the session changed since `seen`; read and retry.
            StorageError: the store failed.
        """

    def suspend(self, session: SessionKey, reason: str, now_ms: int) -> SessionSnapshot:
        """Suspend a session, creating it if unseen; concurrent checks never defeat it.

        Raises:
            StorageError: the store failed.
        """

    def resume(self, session: SessionKey, now_ms: int, idle_ms: int) -> SessionSnapshot:
        """Lift a suspension; concurrent checks never defeat it.

        Raises:
            RecordNotFound: the session does not exist.
            StorageError: the store failed.
        """

    def reset(self, session: SessionKey, now_ms: int, idle_ms: int) -> SessionSnapshot:
        """Zero every counter (raises, suspension, last calls stay); checks never defeat it.

        Raises:
            RecordNotFound: the session does not exist.
            StorageError: the store failed.
        """

    def lower(self, session: SessionKey, category: str) -> SessionSnapshot:
        """Drop a category's raise (and its expiry): the limit is the base again.

        Raises:
            RecordNotFound: the session does not exist.
            StorageError: the store failed.
        """


class SessionCounters(SessionChecks, SessionAdmin, Protocol):
    """Both callers' writes, written once (`storage.sessions.Sessions`) on a backend's pair."""


class BudgetCounters(Protocol):
    """Budgets above the session, in fixed windows: a principal's, the tenant's. A
    refusal or a failure of one step gives back what the others took: no budget is ever
    over-admitted (a crash between steps can only leave counted a call that never ran)."""

    def take(self, key: BudgetKey, spend: Spend) -> Taken | NotTaken:
        """Count `spend.units` calls if the budget is not suspended and they fit under its
        (raised) limit in the current window; atomically.

        Raises:
            WriteUncertain: no answer came; the take may stand (`give_back_if_taken`).
            StorageError: the store failed.
        """

    def give_back(self, key: BudgetKey, spend: Spend, again: WriteId | None = None) -> None:
        """Undo `spend.units` calls of this window (a later scope refused the call, or a
        lease came back unspent); nothing if fewer are counted; `again`: sent again.

        Raises:
            WriteUncertain: no answer came; send it again under the error's `write`.
            StorageError: the store failed.
        """

    def give_back_if_taken(self, key: BudgetKey, spend: Spend, take: WriteId) -> None:
        """Undo a take whose answer never came (`WriteUncertain`) if the store applied
        it, else make sure it never will; applied once, however often sent. Raises
        StorageError: the store failed."""

    def note_refusal(self, key: BudgetKey, spend: Spend) -> bool:
        """Record that this budget refused a call: whether it is the first refusal at this
        window and limit (one notification per exhaustion).

        Raises:
            StorageError: the store failed.
        """

    def note_streak(
        self,
        key: BudgetKey,
        category: str,
        now_ms: int,
        allowed_since_ms: int,
        spend: Spend | None = None,
        refusals: int = 1,
    ) -> tuple[int, bool]:
        """Count `refusals` (one, or those a client held) in this principal's streak in
        `category`, in one write; returns that streak and, when `spend` says this budget
        itself refused, whether that is its first refusal at this window and limit (as
        `note_refusal`, in the same write). The streak starts again at `refusals` if the
        principal's last refusal in the category came before `allowed_since_ms` (an
        allowed call in the category of the refused session since); `end_streak`, and an
        administrator's resume, reset or raise (of that category), end it. Each category
        keeps its own streak.

        Raises:
            StorageError: the store failed.
        """

    def end_streak(self, key: BudgetKey, category: str, now_ms: int) -> None:
        """End the principal's streak of refusals in `category`: a call of it there was
        allowed at every scope at `now_ms` (a refusal there recorded after that keeps
        its streak; other categories' streaks stand).

        Raises:
            StorageError: the store failed.
        """

    def get(self, key: BudgetKey) -> BudgetSnapshot | None:
        """The budget as stored, or None.

        Raises:
            StorageError: the store failed.
        """

    def raise_limit(self, key: BudgetKey, category: str, new_limit: int) -> BudgetSnapshot:
        """Raise a category's limit, never below a raise set meanwhile; the category's
        refusal streak ends.

        Raises:
            RecordChanged: a higher raise was set meanwhile.
            StorageError: the store failed.
        """

    def suspend(self, key: BudgetKey, reason: str) -> tuple[BudgetSnapshot, bool]:
        """Suspend (creating the budget if unseen); returns it and whether it was newly
        suspended. Concurrent checks never defeat it.

        Raises:
            StorageError: the store failed.
        """

    def resume(self, key: BudgetKey) -> BudgetSnapshot:
        """Lift a suspension and every category's refusal streak.

        Raises:
            RecordNotFound: the budget does not exist.
            StorageError: the store failed.
        """

    def reset(self, key: BudgetKey) -> BudgetSnapshot:
        """Zero the counters of every window and every refusal streak; raises and
        suspension stay.

        Raises:
            RecordNotFound: the budget does not exist.
            StorageError: the store failed.
        """


class GrantRepository(Protocol):
    """Grants: planned raises for a principal in a time window."""

    def put(self, grant: Grant) -> None:
        """Store a new grant.

        Raises:
            StorageError: the store failed.
        """

    def list(self, tenant: str) -> list[Grant]:
        """All grants of a tenant, in id order.

        Raises:
            StorageError: the store failed.
        """

    def delete(self, tenant: str, grant_id: str) -> Grant:
        """Delete a grant; returns it.

        Raises:
            RecordNotFound: no such grant in this tenant.
            StorageError: the store failed.
        """


class TokenRepository(Protocol):
    """Bearer tokens, stored as hashes."""

    def put(self, record: TokenRecord) -> None:
        """Store a new token.

        Raises:
            StorageError: the store failed or the id is taken.
        """

    def get(self, token_id: str) -> TokenRecord | None:
        """A token by its public id.

        Raises:
            StorageError: the store failed.
        """

    def revoke(self, token_id: str, now_ms: int) -> TokenRecord:
        """Mark a token revoked; the first revocation time is kept.

        Raises:
            RecordNotFound: no such token.
            StorageError: the store failed.
        """

    def list(self, tenant: str | None = None) -> list[TokenRecord]:
        """All tokens, optionally of one tenant, oldest first.

        Raises:
            StorageError: the store failed.
        """


class LinkUses(Protocol):
    """The single use of emailed action links."""

    def claim(self, use: LinkUse) -> LinkUse | None:
        """Take the link for this use, atomically: None if it is now ours, or the use
        that took it first.

        Raises:
            StorageError: the store failed.
        """

    def find(self, tenant: str, link_id: str) -> LinkUse | None:
        """The use that took the link, if any.

        Raises:
            StorageError: the store failed.
        """

    def release(self, tenant: str, link_id: str) -> None:
        """Give a claimed link back (its action failed), so it may be used again.

        Raises:
            StorageError: the store failed.
        """


class TroubleIndex(Protocol):
    """The tenant's sessions that were blocked or suspended: written only on those paths,
    never by an allowed check."""

    def mark(self, mark: TroubleMark) -> None:
        """Record a session's latest trouble (one entry per session).

        Raises:
            StorageError: the store failed.
        """

    def page(
        self, tenant: str, since_ms: int, until_ms: int, limit: int, next_token: str | None = None
    ) -> TroublePage:
        """Up to `limit` of the tenant's entries from `since_ms` to `until_ms`, newest
        first, in one read of one day whatever the number of entries: a page may end
        early, at the end of a day, with a `next_token` for the day before.

        Raises:
            BadPageToken: `next_token` is not one this listing issued.
            StorageError: the store failed.
        """


class Stores(Protocol):
    """Every port of one backend, each opened on first use (`storage.dynamodb` and
    `storage.memory` each have one `open_stores()` that returns this)."""

    @property
    def counters(self) -> SessionCounters: ...
    @property
    def budgets(self) -> BudgetCounters: ...
    @property
    def tokens(self) -> TokenRepository: ...
    @property
    def audit_log(self) -> AuditLog: ...
    @property
    def grants(self) -> GrantRepository: ...
    @property
    def link_uses(self) -> LinkUses: ...
    @property
    def trouble(self) -> TroubleIndex: ...
    @property
    def approvals(self) -> ApprovalStore: ...
    @property
    def results(self) -> CallResults: ...
