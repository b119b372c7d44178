"""Administrator levers on the budgets above the session: show a principal's or the
tenant's counters, and raise, reset, suspend or resume a principal. Audited like the
session actions."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from chalicelib.admin.audit import admin_event
from chalicelib.admin.requests import RaiseRequest
from chalicelib.auth.tokens import Identity
from chalicelib.check.auditing import Auditor
from chalicelib.check.escalation import DeferredStreaks, PrincipalGate
from chalicelib.check.hooks import LimitResolver
from chalicelib.check.parallel import in_parallel
from chalicelib.check.shards import shard_key, summed
from chalicelib.clock import Clock, iso_utc
from chalicelib.errors import Conflict, InvalidRequest, NotFound
from chalicelib.quota.core import BudgetKey, BudgetSnapshot, Scope
from chalicelib.quota.derived import left
from chalicelib.quota.events import TENANT_SCOPE, EventType
from chalicelib.quota.policy import Policy, WindowLimit
from chalicelib.storage.ports import BudgetCounters, RecordChanged, RecordNotFound

if TYPE_CHECKING:
    from chalicelib.api.schemas import (
        BudgetView,
        PrincipalChanged,
        PrincipalLimitChanged,
        WindowView,
    )

MAX_WINDOW_LIMIT = 1_000_000
ROUNDS = 4


class BudgetAdmin:
    """Backs `/v1/principals/{p}` and `/v1/tenant`; the tenant always comes from the token."""

    def __init__(
        self,
        policy: Policy,
        budgets: BudgetCounters,
        limits: LimitResolver,
        gate: PrincipalGate,
        auditor: Auditor,
        clock: Clock,
        streaks: DeferredStreaks | None = None,
    ) -> None:
        self._policy = policy
        # Refusals the check here answered from memory: what ends a stored streak ends them.
        self._streaks = streaks or DeferredStreaks()
        self._budgets = budgets
        self._limits = limits
        self._gate = gate
        self._auditor = auditor
        self._clock = clock

    def _windows(self, scope: Scope) -> list[tuple[str, WindowLimit]]:
        pairs = []
        for name, category in self._policy.categories.items():
            for window in category.windows:
                if window.scope is scope:
                    pairs.append((name, window))
        return pairs

    def view(self, key: BudgetKey, snapshot: BudgetSnapshot | None) -> BudgetView:
        """A budget as the API shows it: each category's current window."""
        now = self._clock()
        snapshot = snapshot or BudgetSnapshot()
        principal = key.subject if key.scope is Scope.PRINCIPAL else None
        categories: dict[str, WindowView] = {}
        for name, window in self._windows(key.scope):
            start = window.window_start_ms(now)
            base = self._limits.window_limit(key.tenant, principal, window, name, now)
            limit = snapshot.limit_for(name, base)
            used = snapshot.used(name, start)
            categories[name] = {
                "used": used,
                "limit": limit,
                "base_limit": base,
                "raised_limit": snapshot.raised.get(name),
                "remaining": left(used, limit, stopped=snapshot.suspended),
                "window_seconds": window.window_seconds,
                "window_started_at": iso_utc(start),
                "resets_at": iso_utc(window.window_end_ms(now)),
            }
        view: BudgetView = {
            "tenant": key.tenant,
            "scope": key.scope.value,
            "state": "suspended" if snapshot.suspended else "active",
            "suspended_reason": snapshot.suspended_reason,
            "refusals_in_a_row": snapshot.refusals_in_a_row,
            "streaks": {c: n for c, n in sorted(snapshot.streaks.items()) if n > 0},
            "suspend_after_refusals": self._policy.suspend_after_refusals,
            "categories": categories,
        }
        if principal is not None:
            view["principal"] = principal
        return view

    def show(self, key: BudgetKey) -> BudgetView:
        """Counters, limits, windows and state (a budget never used shows zeros); the
        tenant's summed over the shards its ceiling is split over, each one read.

        Raises:
            StorageError: the store failed.
        """
        shards = max((w.shards for _, w in self._windows(key.scope)), default=1)
        if shards == 1:
            return self.view(key, self._budgets.get(key))
        reads = [partial(self._budgets.get, shard_key(key, i)) for i in range(shards)]
        return self.view(key, summed(in_parallel(reads)))

    def _audit(
        self, who: Identity, event: EventType, key: BudgetKey, reason: str, before: Any, after: Any
    ) -> None:
        principal = key.subject if key.scope is Scope.PRINCIPAL else None
        self._auditor.record(
            admin_event(
                who,
                self._clock(),
                event,
                TENANT_SCOPE,
                reason,
                {"principal": key.subject, **before},
                {"principal": key.subject, **after},
                principal,
            )
        )

    def raise_limit(
        self, who: Identity, key: BudgetKey, request: RaiseRequest
    ) -> PrincipalLimitChanged:
        """Raise a principal's limit in one category (its windowed budget); never lowers.

        Raises:
            InvalidRequest: the category has no principal budget, or the limit is too high.
            Conflict: the new limit would be lower than the current one.
        """
        windows = dict(self._windows(key.scope))
        window = windows.get(request.category)
        if window is None:
            raise InvalidRequest(
                f"Category '{request.category}' has no {key.scope.value} budget in this "
                "policy; raise the session instead.",
                "category",
            )
        for _ in range(ROUNDS):
            now = self._clock()
            seen = self._budgets.get(key) or BudgetSnapshot()
            base = self._limits.window_limit(key.tenant, key.subject, window, request.category, now)
            current = seen.limit_for(request.category, base)
            new = request.new_limit(current)
            if new < current:
                raise Conflict(
                    f"A raise can never lower a limit: '{request.category}' is {current} for "
                    f"this {key.scope.value} and {new} would lower it. Use reset to zero "
                    "the counters of the current window."
                )
            if new > MAX_WINDOW_LIMIT:
                raise InvalidRequest(f"The limit may be at most {MAX_WINDOW_LIMIT}.", "limit")
            try:
                after = self._budgets.raise_limit(key, request.category, new)
            except RecordChanged:
                continue
            self._streaks.ended(key, request.category)
            self._audit(
                who,
                EventType.PRINCIPAL_RAISED,
                key,
                request.reason,
                {"category": request.category, "limit": current},
                {"category": request.category, "limit": new},
            )
            return {"principal": self.view(key, after), "before": current, "after": new}
        raise RecordChanged("raising a principal's budget")

    def suspend(self, who: Identity, key: BudgetKey, reason: str) -> PrincipalChanged:
        """Refuse every call made for this principal, in every session, until resumed."""
        after, newly = self._budgets.suspend(key, reason)
        self._gate.learn(key, reason)
        before_state = "active" if newly else "suspended"
        self._audit(
            who,
            EventType.PRINCIPAL_SUSPENDED,
            key,
            reason,
            {"state": before_state},
            {"state": "suspended"},
        )
        return {"principal": self.view(key, after)}

    def resume(self, who: Identity, key: BudgetKey, reason: str) -> PrincipalChanged:
        """Lift a principal's suspension (and its streak of refusals).

        Raises:
            NotFound: the principal was never seen.
        """
        before, after = self._change(key, self._budgets.resume)
        self._gate.learn(key, None)
        self._streaks.ended(key)
        state = {"state": "suspended" if before.suspended else "active"}
        self._audit(who, EventType.PRINCIPAL_RESUMED, key, reason, state, {"state": "active"})
        return {"principal": self.view(key, after)}

    def reset(self, who: Identity, key: BudgetKey, reason: str) -> PrincipalChanged:
        """Zero a principal's counters in every window; raises and suspension stay.

        Raises:
            NotFound: the principal was never seen.
        """
        before, after = self._change(key, self._budgets.reset)
        self._streaks.ended(key)
        used = {"used": {str(k): dict(v) for k, v in before.counts.items()}}
        self._audit(who, EventType.PRINCIPAL_RESET, key, reason, used, {"used": {}})
        return {"principal": self.view(key, after)}

    def _change(
        self, key: BudgetKey, action: Callable[[BudgetKey], BudgetSnapshot]
    ) -> tuple[BudgetSnapshot, BudgetSnapshot]:
        """The budget before, and after an action on it.

        Raises:
            NotFound: the principal was never seen.
        """
        before = self._existing(key)
        try:
            return before, action(key)
        except RecordNotFound as exc:
            raise NotFound(f"Principal {key.subject!r} has made no counted calls.") from exc

    def _existing(self, key: BudgetKey) -> BudgetSnapshot:
        snapshot = self._budgets.get(key)
        if snapshot is None:
            raise NotFound(f"Principal {key.subject!r} has made no counted calls.")
        return snapshot
