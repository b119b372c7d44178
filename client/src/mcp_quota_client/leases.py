"""Leased reads, client side: calls granted at once by the service, spent here without asking.

The client cannot tell a tool's category before the service has classified it, so it
learns `tool (+ the explicit category and readOnlyHint it sends) -> category` from the
answers. A call whose learned category has an unspent, unexpired lease in its session is
allowed here, with no request. Otherwise the check asks for a lease of an adaptive size:
2 at first, doubled each time a lease is spent in full, at most the service's
`lease_max`, and 1 again after a refusal. Writes are never leased (the service grants no
lease there), so they keep one check per call.

Unspent calls go back (best effort) when a session's lease has been idle for
`idle_seconds`, when a lease expires, and when the client closes; a refusal or
suspension empties the session's leases. Pure bookkeeping: no I/O, the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from mcp_quota_client.decision import CheckRequest, Decision, Outcome

FIRST_SIZE = 2
DEFAULT_LEASE_MAX = 10

_SUSPENDED = (Outcome.SESSION_SUSPENDED, Outcome.PRINCIPAL_SUSPENDED)


@dataclass(frozen=True)
class LeaseReturn:
    """Unspent calls of one lease, to give back to the service."""

    session_id: str
    lease_id: str
    unused: int


@dataclass(frozen=True)
class _Learned:
    category: str
    leasable: bool | None  # None: not known yet (only refusals seen)
    lease_max: int = DEFAULT_LEASE_MAX


@dataclass
class _Pool:
    """One lease's calls not yet spent."""

    lease_id: str
    left: int
    expires_at: float
    last_used: float
    granted_by: Decision  # what a call allowed from this lease reports


def _tool_key(request: CheckRequest) -> tuple[str, str | None, bool | None]:
    hint = request.annotations.get("readOnlyHint") if request.annotations else None
    return request.tool, request.category, hint


class LeaseBook:
    """What one client holds of leases: learned categories, pools and sizes per session."""

    def __init__(
        self, clock: Callable[[], float], idle_seconds: float, margin_seconds: float
    ) -> None:
        self._clock = clock
        self._idle = idle_seconds
        self._margin = margin_seconds
        self._learned: dict[tuple[str, str | None, bool | None], _Learned] = {}
        self._pools: dict[tuple[str, str], list[_Pool]] = {}
        self._sizes: dict[tuple[str, str], int] = {}

    def take(self, request: CheckRequest) -> Decision | None:
        """A decision allowing this call from a lease, or None (ask the service)."""
        learned = self._learned.get(_tool_key(request))
        if learned is None or not learned.leasable:
            return None
        key = (request.session_id, learned.category)
        now = self._clock()
        for pool in self._pools.get(key, []):
            if pool.left > 0 and now < pool.expires_at:
                pool.left -= 1
                pool.last_used = now
                if pool.left == 0:
                    self._pools[key].remove(pool)
                    self._sizes[key] = min(2 * self._size(key), learned.lease_max)
                return replace(
                    pool.granted_by,
                    tool=request.tool,
                    message=(
                        f"Allowed from a lease: {learned.category} calls of session "
                        f"{request.session_id} were counted at once by the quota service."
                    ),
                    duplicate=False,
                    from_lease=True,
                    http_status=None,
                    attempts=0,
                    raw={},
                )
        return None

    def size(self, request: CheckRequest) -> int | None:
        """The lease to ask for with this check; None when its category never leases."""
        learned = self._learned.get(_tool_key(request))
        if learned is None:
            return FIRST_SIZE
        if learned.leasable is False:
            return None
        return self._size((request.session_id, learned.category))

    def _size(self, key: tuple[str, str]) -> int:
        return self._sizes.get(key, FIRST_SIZE)

    def learn(self, request: CheckRequest, decision: Decision) -> list[LeaseReturn]:
        """Take in the service's answer: the category, a lease granted, a refusal. Returns
        the leases to give back (emptied by a refusal or suspension)."""
        if not decision.from_service or decision.category is None:
            return []
        category = decision.category
        tool = _tool_key(request)
        session = request.session_id
        key = (session, category)
        lease = decision.raw.get("lease")
        if decision.allowed and not decision.duplicate:
            grant = lease if isinstance(lease, dict) else None
            lease_max = _positive(grant.get("lease_max")) if grant else None
            self._learned[tool] = _Learned(
                category, grant is not None, lease_max or DEFAULT_LEASE_MAX
            )
            if grant is not None:
                self._add_pool(key, grant, decision)
            return []
        if decision.allowed:
            return []
        known = self._learned.get(tool)
        if known is None or known.category != category:
            self._learned[tool] = _Learned(category, None)
        if decision.outcome in _SUSPENDED:
            return self._drop(lambda k: k[0] == session)
        self._sizes[key] = 1
        return self._drop(lambda k: k == key)

    def _add_pool(self, key: tuple[str, str], grant: dict[str, Any], decision: Decision) -> None:
        granted = _positive(grant.get("granted")) or 1
        lease_id = grant.get("id")
        seconds = _positive(grant.get("lease_seconds")) or 0
        if granted < 2 or not isinstance(lease_id, str):
            return  # nothing left to spend after this call
        now = self._clock()
        pool = _Pool(lease_id, granted - 1, now + seconds - self._margin, now, decision)
        self._pools.setdefault(key, []).append(pool)

    def due(self) -> list[LeaseReturn]:
        """Leases to give back now: idle for `idle_seconds`, or expired unspent."""
        now = self._clock()
        out: list[LeaseReturn] = []
        for key, pools in list(self._pools.items()):
            for pool in list(pools):
                if now >= pool.expires_at or now - pool.last_used >= self._idle:
                    pools.remove(pool)
                    out.append(LeaseReturn(key[0], pool.lease_id, pool.left))
            if not pools:
                del self._pools[key]
        return out

    def drain(self) -> list[LeaseReturn]:
        """Every lease with calls left, emptied: the client is closing."""
        return self._drop(lambda _: True)

    def unspent(self) -> int:
        """Calls held in leases, not yet spent."""
        return sum(pool.left for pools in self._pools.values() for pool in pools)

    def _drop(self, which: Callable[[tuple[str, str]], bool]) -> list[LeaseReturn]:
        out: list[LeaseReturn] = []
        for key in [k for k in self._pools if which(k)]:
            for pool in self._pools.pop(key):
                if pool.left > 0:
                    out.append(LeaseReturn(key[0], pool.lease_id, pool.left))
        return out


def _positive(value: object) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None  # type: ignore[return-value]
