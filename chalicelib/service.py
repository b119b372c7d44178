"""The check: classify the call, count it against every budget that applies (session,
then principal, then tenant), all or nothing, and explain a refusal.

Counting order and compensation: the session first (one conditional update; a runaway
session is refused there and never touches the wider budgets), then each wider budget.
When a wider budget refuses, what the earlier steps took is given back. Every step is a
conditional increment that can never pass its limit, so no budget is over-admitted; a
crash between steps leaves a call counted that did not run (under-admission, never over).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import Protocol

from chalicelib.clock import Clock
from chalicelib.errors import CallIdConflict
from chalicelib.policy import Category, Policy, WindowLimit
from chalicelib.ports import BudgetCounters, Consumed, RecordChanged, SessionCounters, Taken
from chalicelib.quota import (
    Allowed,
    Attempt,
    BudgetKey,
    BudgetSnapshot,
    Decision,
    Lease,
    RefusalReason,
    Refused,
    Scope,
    ScopeUse,
    SessionKey,
    SessionSnapshot,
    Spend,
    Verdict,
    explain_refusal,
    fold_repeats,
    partial_units,
    with_call,
)
from chalicelib.validation import CheckRequest, LeaseReturn

# Each retry follows a change made by another writer (idle reset race, item deleted by
# an admin reset); more than a few in a row means the store is misbehaving.
MAX_ROUNDS = 4


class BlockListener(Protocol):
    """Told about every refused check, after it is recorded (audit, notification)."""

    def on_block(self, tenant: str, attempt: Attempt, decision: Refused) -> None:
        """Handle a refusal; must never raise."""


class LimitResolver(Protocol):
    """Limits for a call: the policy's, or a grant's if higher."""

    def base_limit(self, tenant: str, principal: str | None, category: str, now_ms: int) -> int:
        """The session limit, without a store request on the hot path."""

    def window_limit(
        self, tenant: str, principal: str | None, window: WindowLimit, category: str, now_ms: int
    ) -> int:
        """A wider scope's limit: grants lift the principal scope too."""


class PolicyLimits:
    """Limits straight from the policy (no grants)."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy

    def base_limit(self, tenant: str, principal: str | None, category: str, now_ms: int) -> int:
        return self._policy.categories[category].limit

    def window_limit(
        self, tenant: str, principal: str | None, window: WindowLimit, category: str, now_ms: int
    ) -> int:
        return window.limit


class QuietListener:
    """A listener that does nothing."""

    def on_block(self, tenant: str, attempt: Attempt, decision: Refused) -> None:
        return None


class PrincipalGate:
    """Which principals are suspended, cached per container for `cache_seconds`, so that
    a check of a category without a principal budget (reads, by default) pays no request
    for it. A suspension reaches such checks in other containers within that delay; a
    category with a principal budget sees it at once, in its conditional update."""

    def __init__(self, budgets: BudgetCounters, clock: Clock, cache_seconds: int = 30) -> None:
        self._budgets = budgets
        self._clock = clock
        self._cache_ms = cache_seconds * 1000
        self._cache: dict[BudgetKey, tuple[int, str | None]] = {}

    def suspension(self, key: BudgetKey) -> str | None:
        """The reason the principal is suspended, or None.

        Raises:
            StorageError: the store failed.
        """
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        snapshot = self._budgets.get(key)
        reason = snapshot.suspended_reason if snapshot else None
        self.learn(key, reason)
        return reason

    def learn(self, key: BudgetKey, reason: str | None) -> None:
        """Remember a principal's state seen or set here."""
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key] = (self._clock() + self._cache_ms, reason)


def new_check_id() -> str:
    """The service's own id of one check: 36 random bits, unique among a session's
    last calls, which is all it must be."""
    return secrets.token_urlsafe(6)[:6]


@dataclass(frozen=True)
class _Step:
    """One wider budget a check counts against."""

    key: BudgetKey
    window: WindowLimit
    spend: Spend


class CheckService:
    """Answers `POST /v1/check`."""

    def __init__(
        self,
        policy: Policy,
        store: SessionCounters,
        clock: Clock,
        idle_timeout_seconds: int,
        limits: LimitResolver | None = None,
        listener: BlockListener | None = None,
        keep_calls: int = 10,
        budgets: BudgetCounters | None = None,
        gate: PrincipalGate | None = None,
    ) -> None:
        self._policy = policy
        self._store = store
        self._clock = clock
        self._idle_ms = idle_timeout_seconds * 1000
        self._limits = limits or PolicyLimits(policy)
        self._listener = listener or QuietListener()
        self._keep = keep_calls
        self._budgets = budgets
        self._gate = gate or (PrincipalGate(budgets, clock) if budgets else None)

    def attempt_for(self, tenant: str, request: CheckRequest) -> Attempt:
        """Classify the call and resolve its limit: everything decided before any write."""
        category = self._policy.classify(
            request.tool, request.category, request.read_only_hint
        ).category
        now_ms = self._clock()
        base_limit = self._limits.base_limit(tenant, request.principal, category.name, now_ms)
        leased = category.lease and request.lease is not None
        # Never more than the base limit at once: the store's condition for a lease
        # compares against `limit - units + 1`, which must stay positive.
        units = min(request.lease or 1, category.lease_max, base_limit) if leased else 1
        return Attempt(
            session=SessionKey(tenant, request.session_id),
            tool=request.tool,
            category=category.name,
            base_limit=base_limit,
            units=units,
            leased=leased,
            now_ms=now_ms,
            idle_ms=self._idle_ms,
            check_id=new_check_id(),
            principal=request.principal,
            call_id=request.call_id,
            server=request.server,
        )

    def check(self, tenant: str, request: CheckRequest) -> Decision:
        """Count the call against every budget that applies, or refuse it.

        Raises:
            StorageError: the store failed, or the session kept changing under us.
        """
        attempt = self.attempt_for(tenant, request)
        category = self._policy.categories[attempt.category]
        if self._gate is not None and attempt.principal is not None:
            key = BudgetKey.principal(tenant, attempt.principal)
            if self._gate.suspension(key) is not None:
                return self._principal_suspended(attempt)
        counted = self._count_session(attempt)
        if isinstance(counted, Refused):
            return counted
        # The attempt as counted: a lease at the end of the budget has fewer units.
        allowed, snapshot, attempt = counted
        steps = self._steps(attempt, category)
        if allowed.duplicate or not steps:
            return allowed
        decision = self._count_wider(attempt, allowed, snapshot, steps)
        if decision is None:
            # A wider budget had room for fewer calls than the lease: this call alone.
            return self.check(tenant, replace(request, lease=1))
        return decision

    # -- the session -------------------------------------------------------------------

    def _count_session(
        self, attempt: Attempt
    ) -> tuple[Allowed, SessionSnapshot, Attempt] | Refused:
        for _ in range(MAX_ROUNDS):
            result = self._store.consume(attempt)
            if isinstance(result, Consumed):
                return self._allowed(attempt, result.snapshot), result.snapshot, attempt
            snapshot = result.snapshot
            if snapshot is None:
                continue
            verdict = explain_refusal(snapshot, attempt)
            if verdict is Verdict.CALL_ID_CONFLICT:
                raise _conflict(attempt, snapshot)
            if verdict is Verdict.ALREADY_COUNTED:
                return self._allowed(attempt, snapshot), snapshot, attempt
            if verdict is Verdict.EXPIRED:
                reset = self._store.reset_expired(attempt, snapshot.last_seen_ms)
                if reset is not None:
                    return self._allowed(attempt, reset.snapshot), reset.snapshot, attempt
                continue
            if verdict is Verdict.DUPLICATE:
                if self._store.record_replay(attempt, snapshot):
                    return self._allowed(attempt, snapshot, duplicate=True), snapshot, attempt
                continue
            again = _try_again_as(attempt, snapshot, verdict)
            if again is not None:
                attempt = again
                continue
            decision = self._refuse(attempt, snapshot, verdict)
            if decision is not None:
                refusals = snapshot.refused.get(attempt.category, 0) + 1
                if verdict is Verdict.OVER_LIMIT and refusals >= self._escalate_after:
                    decision = replace(decision, escalated=self._escalate(attempt, refusals))
                self._listener.on_block(attempt.tenant, attempt, decision)
                return decision
        raise RecordChanged("counting a call")

    def _allowed(
        self, attempt: Attempt, snapshot: SessionSnapshot, duplicate: bool = False
    ) -> Allowed:
        return Allowed(
            session_id=attempt.session_id,
            tool=attempt.tool,
            category=attempt.category,
            used=snapshot.counts.get(attempt.category, 0),
            limit=snapshot.limit_for(attempt.category, attempt.base_limit, attempt.now_ms),
            now_ms=attempt.now_ms,
            resets_at_ms=attempt.resets_at_ms,
            duplicate=duplicate,
            last_calls=snapshot.calls[-self._keep :],
            lease=None if duplicate else self._lease(attempt, snapshot),
        )

    def _lease(self, attempt: Attempt, snapshot: SessionSnapshot) -> Lease | None:
        if not attempt.leased:
            return None
        category = self._policy.categories[attempt.category]
        return Lease(
            category=attempt.category,
            check_id=attempt.check_id,
            granted=attempt.units,
            granted_ms=attempt.now_ms,
            started_ms=snapshot.started_ms,
            expires_at_ms=attempt.now_ms + category.lease_seconds * 1000,
            lease_max=category.lease_max,
            lease_seconds=category.lease_seconds,
        )

    def _refuse(
        self, attempt: Attempt, snapshot: SessionSnapshot, verdict: Verdict
    ) -> Refused | None:
        suspended = verdict is Verdict.SUSPENDED
        limit = snapshot.limit_for(attempt.category, attempt.base_limit, attempt.now_ms)
        first = self._store.record_block(attempt, snapshot, limit, suspended)
        if first is None:
            return None
        return Refused(
            session_id=attempt.session_id,
            tool=attempt.tool,
            category=attempt.category,
            used=snapshot.counts.get(attempt.category, 0),
            limit=limit,
            now_ms=attempt.now_ms,
            resets_at_ms=attempt.resets_at_ms,
            reason=RefusalReason.SESSION_SUSPENDED if suspended else RefusalReason.QUOTA_EXCEEDED,
            first_exhaustion=first,
            last_calls=with_call(snapshot.calls, attempt.record(allowed=False))[-self._keep :],
            principal=attempt.principal,
            started_ms=snapshot.started_ms,
        )

    # -- the wider budgets ---------------------------------------------------------------

    @property
    def _escalate_after(self) -> int:
        return self._policy.suspend_after_refusals

    def _steps(self, attempt: Attempt, category: Category) -> list[_Step]:
        if self._budgets is None:
            return []
        steps = []
        for window in category.windows:
            if window.scope is Scope.PRINCIPAL:
                if attempt.principal is None:
                    continue
                key = BudgetKey.principal(attempt.tenant, attempt.principal)
            else:
                key = BudgetKey.whole_tenant(attempt.tenant)
            limit = self._limits.window_limit(
                attempt.tenant, attempt.principal, window, category.name, attempt.now_ms
            )
            spend = Spend(
                category.name,
                limit,
                window.window_start_ms(attempt.now_ms),
                window.window_end_ms(attempt.now_ms),
                attempt.now_ms,
                attempt.units,
            )
            steps.append(_Step(key, window, spend))
        return steps

    def _count_wider(
        self,
        attempt: Attempt,
        allowed: Allowed,
        session: SessionSnapshot,
        steps: list[_Step],
    ) -> Decision | None:
        """The decision, or None when a lease of several calls did not fit a wider budget
        (all given back: the caller asks again for this call alone)."""
        assert self._budgets is not None
        taken: list[_Step] = []
        uses: list[ScopeUse] = []
        for step in steps:
            result = self._budgets.take(step.key, step.spend)
            if isinstance(result, Taken):
                taken.append(step)
                uses.append(_use(step, result.snapshot))
                continue
            for done in reversed(taken):
                self._budgets.give_back(done.key, done.spend)
            self._store.uncount(attempt, session.started_ms)
            seen = result.snapshot
            shrink = attempt.units > 1 and seen is not None and not seen.suspended
            if shrink and seen is not None and _use(step, seen).remaining > 0:
                return None
            return self._refuse_wider(attempt, session, step, result.snapshot, uses)
        return replace(allowed, scopes=tuple(uses))

    def _refuse_wider(
        self,
        attempt: Attempt,
        session: SessionSnapshot,
        step: _Step,
        snapshot: BudgetSnapshot | None,
        uses: list[ScopeUse],
    ) -> Refused:
        assert self._budgets is not None
        use = _use(step, snapshot or BudgetSnapshot())
        suspended = snapshot is not None and snapshot.suspended
        if suspended and self._gate is not None:
            self._gate.learn(step.key, snapshot.suspended_reason if snapshot else None)
        streak, first = self._budgets.note_refusal(step.key, step.spend)
        calls = fold_repeats(
            [c for c in session.calls if c.check_id != attempt.check_id or not c.allowed]
        )
        decision = Refused(
            session_id=attempt.session_id,
            tool=attempt.tool,
            category=attempt.category,
            used=use.used,
            limit=use.limit,
            now_ms=attempt.now_ms,
            resets_at_ms=step.spend.window_end_ms,
            reason=RefusalReason.PRINCIPAL_SUSPENDED if suspended else RefusalReason.QUOTA_EXCEEDED,
            scope=step.window.scope,
            first_exhaustion=first and not suspended,
            last_calls=with_call(calls, attempt.record(allowed=False))[-self._keep :],
            scopes=(*uses, use),
            principal=attempt.principal,
            started_ms=session.started_ms,
        )
        if not suspended and streak >= self._escalate_after:
            decision = replace(decision, escalated=self._escalate(attempt, streak))
        self._listener.on_block(attempt.tenant, attempt, decision)
        return decision

    def _escalate(self, attempt: Attempt, refusals: int) -> bool:
        """Suspend the principal of a caller that keeps ignoring refusals; whether this
        check is the one that suspended it."""
        if self._budgets is None or attempt.principal is None:
            return False
        key = BudgetKey.principal(attempt.tenant, attempt.principal)
        reason = (
            f"automatic: {refusals} refused calls in a row (suspend_after_refusals is "
            f"{self._escalate_after}); an agent that ignores refusals is stopped"
        )
        _, newly = self._budgets.suspend(key, reason)
        if self._gate is not None:
            self._gate.learn(key, reason)
        return newly

    # -- returned leases -------------------------------------------------------------

    def return_lease(self, tenant: str, request: LeaseReturn) -> int:
        """Give back the calls of a lease that the client did not spend, best effort: to
        the session only if its counters are the generation that granted the lease, to a
        wider budget only in the window that granted it; a retried return applies once.
        Returns the calls given back to the session (0: nothing applied).

        Unverified by design: a server token is trusted to enforce quotas anyway (it
        could skip checks), so a return is capped at what the lease id says it granted,
        at the category's lease_max and at what the session has counted through leases;
        the session remembers the lease it last took back, so a retry is not applied
        twice.

        Raises:
            StorageError: the store failed.
        """
        lease = request.lease
        category = self._policy.categories.get(lease.category)
        if category is None or not category.lease or request.unused < 1:
            return 0
        unused = min(request.unused, lease.granted, category.lease_max)
        session = SessionKey(tenant, request.session_id)
        snapshot = self._store.return_lease(session, lease, unused)
        if snapshot is None:
            return 0
        if self._budgets is not None:
            now_ms = self._clock()
            principal = snapshot.principal
            for window in category.windows:
                if window.window_start_ms(now_ms) != window.window_start_ms(lease.granted_ms):
                    continue
                if window.scope is Scope.PRINCIPAL:
                    if principal is None:
                        continue
                    key = BudgetKey.principal(tenant, principal)
                else:
                    key = BudgetKey.whole_tenant(tenant)
                spend = Spend(
                    category.name,
                    window.limit,
                    window.window_start_ms(now_ms),
                    window.window_end_ms(now_ms),
                    now_ms,
                    unused,
                )
                self._budgets.give_back(key, spend)
        return unused

    def _principal_suspended(self, attempt: Attempt) -> Refused:
        return Refused(
            session_id=attempt.session_id,
            tool=attempt.tool,
            category=attempt.category,
            used=0,
            limit=0,
            now_ms=attempt.now_ms,
            resets_at_ms=attempt.resets_at_ms,
            reason=RefusalReason.PRINCIPAL_SUSPENDED,
            scope=Scope.PRINCIPAL,
            principal=attempt.principal,
        )


def _conflict(attempt: Attempt, snapshot: SessionSnapshot) -> CallIdConflict:
    original = snapshot.find_call(attempt.call_id or "")
    was = f" for the tool '{original.tool}' ({original.category})" if original else ""
    return CallIdConflict(
        f"The tool '{attempt.tool}' was NOT run: call id {attempt.call_id!r} was already "
        f"counted in session '{attempt.session_id}'{was}. A call id names one call; a "
        "retry must repeat that call exactly, and a new call needs a new id."
    )


def _try_again_as(attempt: Attempt, snapshot: SessionSnapshot, verdict: Verdict) -> Attempt | None:
    """The attempt to make next for a verdict that is no answer yet, or None."""
    if verdict is Verdict.REUSED_CALL_ID:
        return replace(attempt, dedupe=False)
    if verdict is Verdict.STALE:
        return attempt
    if verdict is Verdict.OVER_LIMIT and partial_units(snapshot, attempt) > 0:
        # The end of a budget: a lease gets the calls that remain, in one more write.
        return replace(attempt, units=partial_units(snapshot, attempt))
    return None


def _use(step: _Step, snapshot: BudgetSnapshot) -> ScopeUse:
    spend = step.spend
    return ScopeUse(
        scope=step.window.scope,
        used=snapshot.used(spend.category, spend.window_start_ms),
        limit=snapshot.limit_for(spend.category, spend.limit),
        window_seconds=step.window.window_seconds,
        resets_at_ms=spend.window_end_ms,
    )
