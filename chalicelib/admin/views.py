"""What the admin API shows: a session's counters, limits, state and last calls; a
token's public fields."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chalicelib.check.hooks import LimitResolver
from chalicelib.clock import Clock, iso_utc
from chalicelib.quota.core import ClientInfo, SessionSnapshot, SessionState
from chalicelib.quota.derived import left, limit_in_force, spent
from chalicelib.quota.policy import Policy
from chalicelib.storage.records import TokenRecord

if TYPE_CHECKING:
    from chalicelib.api.schemas import CategoryView, ClientView, SessionView, TokenView

STORED_EMPTY_NAME = "-"  # how the token stores keep a token created without a name


def token_view(record: TokenRecord) -> TokenView:
    """A token as the API shows it: never its secret or hash."""
    return {
        "token_id": record.token_id,
        "tenant": record.tenant,
        "role": record.role,
        "name": "" if record.name == STORED_EMPTY_NAME else record.name,
        "principals": list(record.principals),
        "created_at": iso_utc(record.created_at_ms),
        "revoked_at": None if record.revoked_at_ms is None else iso_utc(record.revoked_at_ms),
    }


class SessionViews:
    """Turns a stored session into the JSON the admin API returns."""

    def __init__(
        self,
        policy: Policy,
        limits: LimitResolver,
        clock: Clock,
        idle_timeout_seconds: int,
        keep_calls: int,
    ) -> None:
        self._categories = tuple(policy.categories)
        # Shadow categories never refuse, so they never make a session blocked.
        self._enforced = tuple(n for n, c in policy.categories.items() if c.enforce)
        self._limits = limits
        self._clock = clock
        self._idle_ms = idle_timeout_seconds * 1000
        self._keep = keep_calls

    def base_limits(self, tenant: str, snapshot: SessionSnapshot | None) -> dict[str, int]:
        """Each enforced category's base limit (policy or grant) for the session's
        principal: the limits that can make it blocked (a shadow category refuses nothing)."""
        now = self._clock()
        principal = snapshot.principal if snapshot else None
        return {c: self._limits.base_limit(tenant, principal, c, now) for c in self._enforced}

    def state(self, tenant: str, snapshot: SessionSnapshot | None) -> SessionState:
        """The state the next check would see: the one derivation every view shows."""
        if snapshot is None:
            return SessionState.UNSEEN
        return snapshot.state(self._clock(), self._idle_ms, self.base_limits(tenant, snapshot))

    def current_limit(self, tenant: str, category: str, seen: SessionSnapshot | None) -> int:
        """The limit the next check would apply in a category."""
        now = self._clock()
        principal = seen.principal if seen else None
        base = self._limits.base_limit(tenant, principal, category, now)
        return limit_in_force(seen, category, base, now, self._idle_ms)

    def session(self, tenant: str, session_id: str, snapshot: SessionSnapshot) -> SessionView:
        """A session as the API shows it: the state the next check would see."""
        now = self._clock()
        state = self.state(tenant, snapshot)
        fresh = state is SessionState.EXPIRED  # the next check starts the counters again
        categories: dict[str, CategoryView] = {}
        for name in self._categories:
            base = self._limits.base_limit(tenant, snapshot.principal, name, now)
            raised = None if fresh else snapshot.raise_for(name, now)
            until = snapshot.raised_until.get(name) if raised is not None else None
            limit = max(base, raised or 0)
            used = 0 if fresh else snapshot.counts.get(name, 0)
            categories[name] = {
                "used": used,
                "leased": 0 if fresh else snapshot.leased.get(name, 0),
                "limit": limit,
                "base_limit": base,
                "raised_limit": raised,
                "raised_until": None if until is None else iso_utc(until),
                "remaining": left(used, limit, stopped=state is SessionState.SUSPENDED),
                "refused": 0 if fresh else snapshot.refused.get(name, 0),
                "refused_held": 0 if fresh else snapshot.refused_held.get(name, 0),
                "state": str(_category_state(state, used, limit, name in self._enforced)),
            }
        suspended = state is SessionState.SUSPENDED
        return {
            "tenant": tenant,
            "session_id": session_id,
            "state": str(state),
            "principal": snapshot.principal,
            "server": snapshot.server,
            "client": None if snapshot.client is None else _client_view(snapshot.client),
            "first_call_at": iso_utc(snapshot.started_ms),
            "last_call_at": iso_utc(snapshot.last_seen_ms),
            "started_at": iso_utc(snapshot.started_ms),
            "last_seen_at": iso_utc(snapshot.last_seen_ms),
            "resets_at": None if suspended else iso_utc(snapshot.last_seen_ms + self._idle_ms),
            "suspended_reason": snapshot.suspended_reason,
            "categories": categories,
            "last_calls": [c.to_json() for c in snapshot.calls[-self._keep :]],
        }


def _client_view(client: ClientInfo) -> ClientView:
    return {
        "name": client.name,
        "version": client.version,
        "oauth_client_id": client.oauth_client_id,
    }


def _category_state(session: SessionState, used: int, limit: int, enforced: bool) -> SessionState:
    """A category's state: the session's when it is suspended or expired, else blocked
    at the limit if enforced, else active (the session is blocked if any category is)."""
    if session in (SessionState.SUSPENDED, SessionState.EXPIRED):
        return session
    return SessionState.BLOCKED if enforced and spent(used, limit) else SessionState.ACTIVE
