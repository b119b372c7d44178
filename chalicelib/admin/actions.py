"""Administrator actions: raise, suspend, resume and reset sessions; grants; the audit
trail. Every change is audited with the admin's identity, reason, before and after."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chalicelib.admin import listing
from chalicelib.admin.audit import admin_event
from chalicelib.admin.grants import GrantLimits, grant_view
from chalicelib.admin.requests import (
    AuditQuery,
    GrantRequest,
    LowerRequest,
    RaiseRequest,
    SessionsQuery,
)
from chalicelib.admin.views import SessionViews
from chalicelib.auth.tokens import Identity
from chalicelib.check.auditing import Auditor
from chalicelib.clock import Clock, iso_utc
from chalicelib.errors import Conflict, InvalidRequest, NotFound
from chalicelib.observability import logger
from chalicelib.quota.core import SessionKey, SessionSnapshot, SessionState
from chalicelib.quota.events import TENANT_SCOPE, AuditEvent, EventType
from chalicelib.quota.grants import Grant
from chalicelib.quota.policy import Policy
from chalicelib.storage.ports import (
    AuditFilter,
    AuditLog,
    GrantRepository,
    LimitChange,
    RecordChanged,
    RecordNotFound,
    SessionCounters,
    StorageError,
    TroubleIndex,
    TroubleKind,
    TroubleMark,
)

if TYPE_CHECKING:
    from chalicelib.api.schemas import (
        AuditPage,
        GrantAnswer,
        GrantList,
        SessionChanged,
        SessionLimitChanged,
        SessionListing,
        SessionView,
        ShadowView,
    )

ROUNDS = 4


def raised_after(category: str, limit: int, until_ms: int | None) -> dict[str, Any]:
    """A raise as audited: with when it lapses, if it does."""
    after: dict[str, Any] = {"category": category, "limit": limit}
    if until_ms is not None:
        after["until"] = iso_utc(until_ms)
    return after


@dataclass(frozen=True, eq=False)
class AdminService:
    """Backs the admin endpoints; tenant-scoped: the tenant always comes from the token."""

    policy: Policy
    counters: SessionCounters
    grants: GrantRepository
    limits: GrantLimits
    audit_log: AuditLog
    auditor: Auditor
    views: SessionViews
    clock: Clock
    idle_timeout_seconds: int
    trouble: TroubleIndex | None = None

    @property
    def idle_ms(self) -> int:
        """How long a session may go unseen before it is idle-expired."""
        return self.idle_timeout_seconds * 1000

    # -- sessions ------------------------------------------------------------------

    def _get(self, session: SessionKey) -> SessionSnapshot:
        snapshot = self.counters.get(session)
        if snapshot is None:
            raise NotFound(f"Session {session.session_id!r} has made no checks in this tenant.")
        return snapshot

    def _view(self, session: SessionKey, snapshot: SessionSnapshot) -> SessionView:
        return self.views.session(session.tenant, session.session_id, snapshot)

    def show(self, session: SessionKey) -> SessionView:
        """The session's counters, limits, state and last calls.

        Raises:
            NotFound: the session was never seen.
        """
        return self._view(session, self._get(session))

    def _audit(
        self,
        who: Identity,
        event_type: EventType,
        session_id: str,
        reason: str | None,
        before: Any = None,
        after: Any = None,
        seen: SessionSnapshot | None = None,
        principal: str | None = None,
    ) -> bool:
        if seen is not None:
            principal, server = seen.principal, seen.server
        else:
            server = None
        at = self.clock()
        event = admin_event(
            who, at, event_type, session_id, reason, before, after, principal, server
        )
        return self.auditor.record(event)

    def raise_limit(
        self, who: Identity, session_id: str, request: RaiseRequest
    ) -> SessionLimitChanged:
        """Raise a session's limit in one category, at once; never lowers it.

        Raises:
            InvalidRequest: above the policy's maximum.
            Conflict: the new limit would be lower than the current one.
            RecordChanged: the session kept changing.
        """
        category = request.category
        maximum = self.policy.categories[category].max_limit
        session = SessionKey(who.tenant, session_id)
        for _ in range(ROUNDS):
            seen = self.counters.get(session)
            current = self.views.current_limit(who.tenant, category, seen)
            new = request.new_limit(current)
            if new < current:
                raise Conflict(
                    f"A raise can never lower a limit: '{category}' is {current} for this "
                    f"session and {new} would lower it. To bring a raised limit back to the "
                    f"base, lower it (`mcp-quota session lower {session_id} --category "
                    f"{category}`, or the console's Lower to base button); a reset zeroes "
                    "the counters and keeps the raise."
                )
            if new > maximum:
                raise InvalidRequest(
                    f"The policy caps '{category}' at {maximum} calls per session; "
                    f"{new} is above that.",
                    "limit",
                )
            now = self.clock()
            seconds = request.expires_in_seconds
            until = None if seconds is None else now + seconds * 1000
            change = LimitChange(category, new, now, self.idle_ms, until)
            try:
                after = self.counters.raise_limit(session, change, seen)
            except RecordChanged:
                continue
            self._audit(
                who,
                EventType.SESSION_RAISED,
                session_id,
                request.reason,
                before={"category": category, "limit": current},
                after=raised_after(category, new, until),
                seen=after,
            )
            view = self._view(session, after)
            return {"session": view, "category": category, "before": current, "after": new}
        raise RecordChanged("raising a limit")

    def lower(self, who: Identity, session_id: str, request: LowerRequest) -> SessionLimitChanged:
        """Bring a category's raised limit back down to the base (policy or grant).

        Raises:
            NotFound: the session was never seen.
            Conflict: the category has no raise in force.
        """
        session = SessionKey(who.tenant, session_id)
        category = request.category
        seen = self._get(session)
        current = self.views.current_limit(who.tenant, category, seen)
        if seen.raise_for(category, self.clock()) is None:
            raise Conflict(
                f"'{category}' has no raise in force for this session: its limit is the "
                f"base, {current}. Nothing to lower."
            )
        _, after = self._change(
            session, lambda key, _now, _idle: self.counters.lower(key, category)
        )
        new = self.views.current_limit(who.tenant, category, after)
        self._audit(
            who,
            EventType.SESSION_LOWERED,
            session_id,
            request.reason,
            before={"category": category, "limit": current},
            after={"category": category, "limit": new},
            seen=after,
        )
        return {
            "session": self._view(session, after),
            "category": category,
            "before": current,
            "after": new,
        }

    def suspend(self, who: Identity, session_id: str, reason: str) -> SessionChanged:
        """Kill switch: refuse every check of the session until resumed."""
        session = SessionKey(who.tenant, session_id)
        before = self.counters.get(session)
        now = self.clock()
        after = self.counters.suspend(session, reason, now)
        self.note_trouble(
            TroubleMark(
                who.tenant, session_id, TroubleKind.SUSPENDED, now, principal=after.principal
            )
        )
        self._audit(
            who,
            EventType.SESSION_SUSPENDED,
            session_id,
            reason,
            before={"state": str(self.views.state(session.tenant, before))},
            after={"state": str(SessionState.SUSPENDED)},
            seen=after,
        )
        return {"session": self._view(session, after)}

    def resume(self, who: Identity, session_id: str, reason: str) -> SessionChanged:
        """Lift a suspension.

        Raises:
            NotFound: the session was never seen.
        """
        session = SessionKey(who.tenant, session_id)
        before, after = self._change(session, self.counters.resume)
        view = self._view(session, after)
        before_state = {"state": str(self.views.state(session.tenant, before))}
        after_state = {"state": view["state"]}
        self._audit(
            who, EventType.SESSION_RESUMED, session_id, reason, before_state, after_state, after
        )
        return {"session": view}

    def reset(self, who: Identity, session_id: str, reason: str) -> SessionChanged:
        """Zero the session's counters.

        Raises:
            NotFound: the session was never seen.
        """
        session = SessionKey(who.tenant, session_id)
        before, after = self._change(session, self.counters.reset)
        used_before, used_after = {"used": dict(before.counts)}, {"used": dict(after.counts)}
        self._audit(
            who, EventType.SESSION_RESET, session_id, reason, used_before, used_after, after
        )
        return {"session": self._view(session, after)}

    def _change(
        self, session: SessionKey, action: Callable[[SessionKey, int, int], SessionSnapshot]
    ) -> tuple[SessionSnapshot, SessionSnapshot]:
        """The session before, and after an action that concurrent checks never defeat.

        Raises:
            NotFound: the session was never seen.
        """
        before = self._get(session)
        try:
            return before, action(session, self.clock(), self.idle_ms)
        except RecordNotFound as exc:
            raise NotFound(
                f"Session {session.session_id!r} has made no checks in this tenant."
            ) from exc

    def note_trouble(self, mark: TroubleMark) -> None:
        """Index a session in trouble; a failure is logged, never raised: the listing
        may miss it, the action it follows stands."""
        if self.trouble is None:
            return
        try:
            self.trouble.mark(mark)
        except StorageError as exc:
            logger.warning("trouble index write failed", extra={"error": exc.doing})

    def list_sessions(self, who: Identity, query: SessionsQuery) -> SessionListing:
        """A page of the sessions blocked or suspended since `query.since_ms`, newest
        first, each with its counters as the next check would see them."""
        if self.trouble is None:
            return {"sessions": [], "next": None}
        return listing.list_sessions(
            who.tenant, query, self.trouble, self.counters, self._view, self.clock()
        )

    # -- grants ----------------------------------------------------------------------

    def add_grant(self, who: Identity, request: GrantRequest) -> GrantAnswer:
        """Plan a raise for a principal in a time window."""
        grant = Grant(
            grant_id=f"g-{secrets.token_hex(6)}",
            tenant=who.tenant,
            principal=request.principal,
            category=request.category,
            limit=request.limit,
            starts_at_ms=request.starts_at_ms,
            ends_at_ms=request.ends_at_ms,
            reason=request.reason,
            created_by=who.token_id,
            created_at_ms=self.clock(),
        )
        shown = grant_view(grant)
        self.grants.put(grant)
        self.limits.forget(who.tenant)
        self._audit(
            who,
            EventType.GRANT_CREATED,
            TENANT_SCOPE,
            request.reason,
            after=shown,
            principal=grant.principal,
        )
        return {"grant": shown}

    def list_grants(self, who: Identity) -> GrantList:
        """The tenant's grants."""
        return {"grants": [grant_view(g) for g in self.grants.list(who.tenant)]}

    def delete_grant(self, who: Identity, grant_id: str) -> GrantAnswer:
        """Delete a grant.

        Raises:
            NotFound: no such grant in this tenant.
        """
        try:
            grant = self.grants.delete(who.tenant, grant_id)
        except RecordNotFound as exc:
            raise NotFound(f"No grant {grant_id!r} in this tenant.") from exc
        self.limits.forget(who.tenant)
        self._audit(
            who,
            EventType.GRANT_DELETED,
            TENANT_SCOPE,
            None,
            before=grant_view(grant),
            principal=grant.principal,
        )
        return {"grant": grant_view(grant)}

    # -- what an emailed link finds --------------------------------------------------

    def now_for_link(
        self, tenant: str, session_id: str, category: str
    ) -> tuple[SessionSnapshot | None, int, SessionState]:
        """The session as stored, the category's limit the next check would apply, and
        the state every view derives."""
        seen = self.counters.get(SessionKey(tenant, session_id))
        limit = self.views.current_limit(tenant, category, seen)
        return seen, limit, self.views.state(tenant, seen)

    def session_events(self, tenant: str, session_id: str, since_ms: int) -> list[AuditEvent]:
        """The session's audit events from `since_ms` (the first page: a link needs the
        few since its email)."""
        return self.audit_log.page(tenant, session_id, since_ms, limit=100).events

    def latest_event(self, tenant: str, where: AuditFilter) -> AuditEvent | None:
        """The tenant's newest event that `where` holds."""
        events = self.audit_log.feed(tenant, where, limit=1).events
        return events[0] if events else None

    def record(self, event: AuditEvent) -> None:
        """Audit an event that is no administrator's change (a declined link)."""
        self.auditor.record(event)

    # -- audit -----------------------------------------------------------------------

    def audit_page(self, who: Identity, query: AuditQuery) -> AuditPage:
        """A page of the audit trail of one session (oldest first), or of every event of
        the tenant (newest first)."""
        if query.session_id is None:
            page = self.audit_log.feed(who.tenant, query.where, query.limit, query.next_token)
        else:
            page = self.audit_log.page(
                who.tenant, query.session_id, query.since_ms, query.limit, query.next_token
            )
        return {"events": [e.to_json() for e in page.events], "next": page.next_token}

    def shadow_view(self, who: Identity, since_ms: int) -> ShadowView:
        """What shadow mode would have refused, by server, principal and tool."""
        from chalicelib.admin.shadow_view import shadow_view  # noqa: PLC0415 - rarely used

        return shadow_view(self.audit_log, who.tenant, since_ms)
