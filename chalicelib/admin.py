"""Administrator actions: inspect, raise, suspend, resume and reset sessions; grants;
the audit trail. Every change is audited with the admin's identity, reason, before/after."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from typing import Any

from chalicelib import audit
from chalicelib.audit import TENANT_SCOPE, AuditEvent, Auditor
from chalicelib.clock import Clock, iso_utc, parse_iso_utc
from chalicelib.errors import Conflict, InvalidRequest, NotFound, StoreUnavailable
from chalicelib.grants import Grant, GrantLimits
from chalicelib.policy import Policy
from chalicelib.quota import SessionSnapshot
from chalicelib.storage.audit import AuditPage, AuditStore
from chalicelib.storage.counters import CounterStore, SessionChanged
from chalicelib.storage.grants import GrantStore
from chalicelib.tokens import Identity
from chalicelib.validation import reason_field as _reason
from chalicelib.validation import reject_unknown, session_id_param, text_field

ACTIVE = "active"
IDLE = "idle"
SUSPENDED = "suspended"
ROUNDS = 4
EARLIEST_MS = 946_684_800_000  # 2000-01-01T00:00:00Z
LATEST_MS = 32_503_680_000_000  # 3000-01-01T00:00:00Z
GRANT_ID = re.compile(r"g-[0-9a-f]{12}")
AUDIT_PAGE = re.compile(r"[0-9]{1,3}")


def _int_field(body: dict[str, Any], name: str, minimum: int = 1) -> int:
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidRequest(f"Field '{name}' must be an integer >= {minimum}.", name)
    return value


def _time_field(body: dict[str, Any], name: str) -> int:
    value = body.get(name)
    if not isinstance(value, str):
        raise InvalidRequest(f"Field '{name}' must be an ISO-8601 time with a zone.", name)
    try:
        parsed = parse_iso_utc(value)
    except (ValueError, OverflowError) as exc:
        raise InvalidRequest(
            f"Field '{name}' must be an ISO-8601 time with a zone, like 2026-12-24T08:00:00Z.",
            name,
        ) from exc
    if not EARLIEST_MS <= parsed < LATEST_MS:
        raise InvalidRequest(f"Field '{name}' must be a time in the years 2000 to 2999.", name)
    return parsed


class AdminService:
    """Backs the admin endpoints; tenant-scoped: the tenant always comes from the token."""

    def __init__(
        self,
        policy: Policy,
        counters: CounterStore,
        grants: GrantStore,
        limits: GrantLimits,
        audit_store: AuditStore,
        auditor: Auditor,
        clock: Clock,
        idle_timeout_seconds: int,
    ) -> None:
        self._policy = policy
        self._counters = counters
        self._grants = grants
        self._limits = limits
        self._audit_store = audit_store
        self._auditor = auditor
        self._clock = clock
        self._idle_ms = idle_timeout_seconds * 1000
        self._categories = tuple(policy.categories)

    # -- sessions ------------------------------------------------------------------

    def view(self, tenant: str, session_id: str, snapshot: SessionSnapshot) -> dict[str, Any]:
        """A session as the API shows it: the state the next check would see."""
        now = self._clock()
        state = self._state(snapshot)
        fresh = state == IDLE  # the next check starts the counters again
        categories: dict[str, Any] = {}
        for name in self._categories:
            base = self._limits.base_limit(tenant, snapshot.principal, name, now)
            raised = None if fresh else snapshot.raised.get(name)
            limit = max(base, raised or 0)
            used = 0 if fresh else snapshot.counts.get(name, 0)
            categories[name] = {
                "used": used,
                "limit": limit,
                "base_limit": base,
                "raised_limit": raised,
                "remaining": max(0, limit - used),
                "refused": 0 if fresh else snapshot.refused.get(name, 0),
                "state": state,
            }
        return {
            "tenant": tenant,
            "session_id": session_id,
            "state": state,
            "principal": snapshot.principal,
            "started_at": iso_utc(snapshot.started_ms),
            "last_seen_at": iso_utc(snapshot.last_seen_ms),
            "resets_at": None
            if state == SUSPENDED
            else iso_utc(snapshot.last_seen_ms + self._idle_ms),
            "suspended_reason": snapshot.suspended_reason,
            "categories": categories,
            "last_calls": [c.to_json() for c in snapshot.calls],
        }

    def _get(self, tenant: str, session_id: str) -> SessionSnapshot:
        snapshot = self._counters.get(f"{tenant}#{session_id}")
        if snapshot is None:
            raise NotFound(f"Session {session_id!r} has made no checks in this tenant.")
        return snapshot

    def show(self, tenant: str, session_id: str) -> dict[str, Any]:
        """The session's counters, limits, state and last calls.

        Raises:
            NotFound: the session was never seen.
        """
        return self.view(tenant, session_id, self._get(tenant, session_id))

    def _category(self, body: dict[str, Any]) -> str:
        name = body.get("category")
        if name not in self._policy.categories:
            known = ", ".join(self._categories)
            raise InvalidRequest(f"Field 'category' must be one of {known}.", "category")
        return str(name)

    def _audit(
        self,
        who: Identity,
        event_type: str,
        session_id: str,
        reason: str | None,
        before: Any = None,
        after: Any = None,
        detail: Any = None,
    ) -> bool:
        return self._auditor.record(
            AuditEvent(
                at_ms=self._clock(),
                type=event_type,
                tenant=who.tenant,
                session_id=session_id,
                actor=f"{who.token_id} ({who.role})",
                reason=reason,
                before=before,
                after=after,
                detail=detail,
            )
        )

    def raise_limit(self, who: Identity, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Raise a session's limit in one category, at once; never lowers it.

        Raises:
            InvalidRequest: bad fields, or above the policy's maximum.
            Conflict: the new limit would be lower than the current one.
        """
        reject_unknown(body, frozenset({"category", "limit", "add", "reason"}))
        category = self._category(body)
        reason = _reason(body)
        if ("limit" in body) == ("add" in body):
            raise InvalidRequest("Give exactly one of 'limit' or 'add'.", "limit")
        maximum = self._policy.categories[category].max_limit
        key = f"{who.tenant}#{session_id}"
        for _ in range(ROUNDS):
            now = self._clock()
            seen = self._counters.get(key)
            current = self._current_limit(who.tenant, category, seen, now)
            new = (
                _int_field(body, "limit") if "limit" in body else current + _int_field(body, "add")
            )
            if new < current:
                raise Conflict(
                    f"A raise can never lower a limit: '{category}' is {current} for this "
                    f"session and {new} would lower it. Use reset to zero the counters."
                )
            if new > maximum:
                raise InvalidRequest(
                    f"The policy caps '{category}' at {maximum} calls per session; "
                    f"{new} is above that.",
                    "limit",
                )
            try:
                after = self._counters.raise_limit(
                    key, category, new, now, self._idle_ms, self._categories, seen
                )
            except SessionChanged:
                continue
            view = self.view(who.tenant, session_id, after)
            self._audit(
                who,
                audit.SESSION_RAISED,
                session_id,
                reason,
                before={"category": category, "limit": current},
                after={"category": category, "limit": new},
            )
            return {"session": view, "category": category, "before": current, "after": new}
        raise StoreUnavailable("The session kept changing during the raise; retry.", 1)

    def _current_limit(
        self, tenant: str, category: str, seen: SessionSnapshot | None, now: int
    ) -> int:
        principal = seen.principal if seen else None
        base = self._limits.base_limit(tenant, principal, category, now)
        if seen is None or (not seen.suspended and seen.is_idle(now, self._idle_ms)):
            return base
        return seen.limit_for(category, base)

    def suspend(self, who: Identity, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Kill switch: refuse every check of the session until resumed."""
        reject_unknown(body, frozenset({"reason"}))
        reason = _reason(body)
        key = f"{who.tenant}#{session_id}"
        before = self._counters.get(key)
        after = self._counters.suspend(key, reason, self._clock())
        self._audit(
            who,
            audit.SESSION_SUSPENDED,
            session_id,
            reason,
            before={"state": self._state(before)},
            after={"state": SUSPENDED},
        )
        return {"session": self.view(who.tenant, session_id, after)}

    def resume(self, who: Identity, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Lift a suspension.

        Raises:
            NotFound: the session was never seen.
        """
        reject_unknown(body, frozenset({"reason"}))
        reason = _reason(body)
        before, after = self._retrying(
            who.tenant,
            session_id,
            lambda seen: self._counters.resume(f"{who.tenant}#{session_id}", seen, self._idle_ms),
        )
        view = self.view(who.tenant, session_id, after)
        self._audit(
            who,
            audit.SESSION_RESUMED,
            session_id,
            reason,
            before={"state": self._state(before)},
            after={"state": view["state"]},
        )
        return {"session": view}

    def reset(self, who: Identity, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Zero the session's counters.

        Raises:
            NotFound: the session was never seen.
        """
        reject_unknown(body, frozenset({"reason"}))
        reason = _reason(body)
        before, after = self._retrying(
            who.tenant,
            session_id,
            lambda seen: self._counters.reset(
                f"{who.tenant}#{session_id}", seen, self._clock(), self._idle_ms, self._categories
            ),
        )
        self._audit(
            who,
            audit.SESSION_RESET,
            session_id,
            reason,
            before={"used": dict(before.counts)},
            after={"used": dict(after.counts)},
        )
        return {"session": self.view(who.tenant, session_id, after)}

    def _retrying(
        self,
        tenant: str,
        session_id: str,
        action: Callable[[SessionSnapshot], SessionSnapshot],
    ) -> tuple[SessionSnapshot, SessionSnapshot]:
        """Read the session, apply an update conditioned on what was read; read again
        if a check changed it meanwhile.

        Raises:
            NotFound: the session was never seen.
            StoreUnavailable: it kept changing.
        """
        for _ in range(ROUNDS):
            before = self._get(tenant, session_id)
            try:
                return before, action(before)
            except SessionChanged:
                continue
        raise StoreUnavailable("The session kept changing during the update; retry.", 1)

    def _state(self, snapshot: SessionSnapshot | None) -> str:
        if snapshot is None:
            return "unseen"
        if snapshot.suspended:
            return SUSPENDED
        return IDLE if snapshot.is_idle(self._clock(), self._idle_ms) else ACTIVE

    # -- grants ----------------------------------------------------------------------

    def add_grant(self, who: Identity, body: dict[str, Any]) -> dict[str, Any]:
        """Plan a raise for a principal in a time window.

        Raises:
            InvalidRequest: bad fields, a window that is empty or already over, or a
                limit that is not above the policy's or is above its maximum.
        """
        reject_unknown(
            body, frozenset({"principal", "category", "limit", "starts_at", "ends_at", "reason"})
        )
        principal = text_field(body, "principal", 256)
        assert principal is not None
        category = self._category(body)
        limit = _int_field(body, "limit")
        starts, ends = _time_field(body, "starts_at"), _time_field(body, "ends_at")
        reason = _reason(body)
        now = self._clock()
        spec = self._policy.categories[category]
        if ends <= starts:
            raise InvalidRequest("Field 'ends_at' must be after 'starts_at'.", "ends_at")
        if ends <= now:
            raise InvalidRequest("Field 'ends_at' is in the past.", "ends_at")
        if limit <= spec.limit:
            raise InvalidRequest(
                f"A grant can only raise: '{category}' is already {spec.limit}.", "limit"
            )
        if limit > spec.max_limit:
            raise InvalidRequest(
                f"The policy caps '{category}' at {spec.max_limit} calls per session.", "limit"
            )
        grant = Grant(
            grant_id=f"g-{secrets.token_hex(6)}",
            tenant=who.tenant,
            principal=principal,
            category=category,
            limit=limit,
            starts_at_ms=starts,
            ends_at_ms=ends,
            reason=reason,
            created_by=who.token_id,
            created_at_ms=now,
        )
        shown = grant.to_json()
        self._grants.put(grant)
        self._limits.forget(who.tenant)
        self._audit(who, audit.GRANT_CREATED, TENANT_SCOPE, reason, after=shown)
        return {"grant": shown}

    def list_grants(self, who: Identity) -> dict[str, Any]:
        """The tenant's grants."""
        return {"grants": [g.to_json() for g in self._grants.list(who.tenant)]}

    def delete_grant(self, who: Identity, grant_id: str) -> dict[str, Any]:
        """Delete a grant.

        Raises:
            NotFound: no such grant in this tenant.
        """
        if not GRANT_ID.fullmatch(grant_id):
            raise NotFound(f"No grant {grant_id[:40]!r} in this tenant.")
        grant = self._grants.delete(who.tenant, grant_id)
        self._limits.forget(who.tenant)
        self._audit(who, audit.GRANT_DELETED, TENANT_SCOPE, None, before=grant.to_json())
        return {"grant": grant.to_json()}

    # -- audit -----------------------------------------------------------------------

    def audit_page(self, who: Identity, params: dict[str, str]) -> dict[str, Any]:
        """A page of the audit trail of one session (or of the tenant's own events).

        Raises:
            InvalidRequest: bad query parameters.
        """
        reject_unknown(params, frozenset({"session_id", "since", "limit", "next"}))
        session_id = params.get("session_id")
        scope = TENANT_SCOPE if session_id is None else session_id_param(session_id)
        since = _time_field(params, "since") if "since" in params else 0
        raw_limit = params.get("limit", "50")
        if not AUDIT_PAGE.fullmatch(raw_limit) or not 1 <= int(raw_limit) <= 500:
            raise InvalidRequest("Parameter 'limit' must be an integer from 1 to 500.", "limit")
        page: AuditPage = self._audit_store.page(
            who.tenant, scope, since, int(raw_limit), params.get("next")
        )
        return {"events": [e.to_json() for e in page.events], "next": page.next_token}
