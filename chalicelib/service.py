"""The check: classify the call, count it in one conditional update, explain a refusal."""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from chalicelib.clock import Clock
from chalicelib.errors import StoreUnavailable
from chalicelib.policy import Policy
from chalicelib.quota import (
    QUOTA_EXCEEDED,
    SESSION_SUSPENDED,
    Attempt,
    Decision,
    Refusal,
    SessionSnapshot,
    explain_refusal,
)
from chalicelib.storage.counters import Consumed, CounterStore
from chalicelib.validation import CheckRequest

# Each retry follows a change made by another writer (idle reset race, item deleted by
# an admin reset); more than a few in a row means the store is misbehaving.
MAX_ROUNDS = 4


class BlockListener(Protocol):
    """Told about every refused check, after it is recorded (audit, notification)."""

    def on_block(self, tenant: str, attempt: Attempt, decision: Decision) -> None:
        """Handle a refusal; must never raise."""


class LimitResolver(Protocol):
    """The base limit of a category for a call: the policy's, or a grant's if higher."""

    def base_limit(self, tenant: str, principal: str | None, category: str, now_ms: int) -> int:
        """Resolve the base limit without a store request on the hot path."""


class PolicyLimits:
    """Base limits straight from the policy (no grants)."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy

    def base_limit(self, tenant: str, principal: str | None, category: str, now_ms: int) -> int:
        return self._policy.categories[category].limit


class QuietListener:
    """A listener that does nothing."""

    def on_block(self, tenant: str, attempt: Attempt, decision: Decision) -> None:
        return None


class CheckService:
    """Answers `POST /v1/check`."""

    def __init__(
        self,
        policy: Policy,
        store: CounterStore,
        clock: Clock,
        idle_timeout_seconds: int,
        limits: LimitResolver | None = None,
        listener: BlockListener | None = None,
    ) -> None:
        self._policy = policy
        self._store = store
        self._clock = clock
        self._idle_ms = idle_timeout_seconds * 1000
        self._limits = limits or PolicyLimits(policy)
        self._listener = listener or QuietListener()
        self._categories = tuple(policy.categories)

    def attempt_for(self, tenant: str, request: CheckRequest) -> Attempt:
        """Classify the call and resolve its limit: everything decided before any write."""
        category = self._policy.classify(
            request.tool, request.category, request.read_only_hint
        ).category
        now_ms = self._clock()
        return Attempt(
            tenant=tenant,
            session_id=request.session_id,
            tool=request.tool,
            category=category.name,
            base_limit=self._limits.base_limit(tenant, request.principal, category.name, now_ms),
            now_ms=now_ms,
            idle_ms=self._idle_ms,
            all_categories=self._categories,
            principal=request.principal,
            call_id=request.call_id,
        )

    def check(self, tenant: str, request: CheckRequest) -> Decision:
        """Count the call if the session's budget allows it, else refuse it.

        Raises:
            QuotaServiceError: the store failed or kept changing under us.
        """
        attempt = self.attempt_for(tenant, request)
        for _ in range(MAX_ROUNDS):
            result = self._store.consume(attempt)
            if isinstance(result, Consumed):
                return self._allowed(attempt, result.snapshot)
            snapshot = result.snapshot
            if snapshot is None:
                continue
            refusal = explain_refusal(snapshot, attempt)
            if refusal is Refusal.EXPIRED:
                reset = self._store.reset_expired(attempt, snapshot.last_seen_ms)
                if reset is not None:
                    return self._allowed(attempt, reset.snapshot)
                continue
            if refusal is Refusal.DUPLICATE:
                if self._store.record_replay(attempt, snapshot):
                    return self._allowed(attempt, snapshot, duplicate=True)
                continue
            if refusal is Refusal.REUSED_CALL_ID:
                attempt = replace(attempt, dedupe=False)
                continue
            if refusal is Refusal.STALE:
                continue
            decision = self._refuse(attempt, snapshot, refusal)
            if decision is not None:
                self._listener.on_block(tenant, attempt, decision)
                return decision
        raise StoreUnavailable("The quota store kept changing during the check; retry.", 1)

    def _allowed(
        self, attempt: Attempt, snapshot: SessionSnapshot, duplicate: bool = False
    ) -> Decision:
        return Decision(
            allowed=True,
            session_id=attempt.session_id,
            tool=attempt.tool,
            category=attempt.category,
            used=snapshot.counts.get(attempt.category, 0),
            limit=snapshot.limit_for(attempt.category, attempt.base_limit),
            now_ms=attempt.now_ms,
            resets_at_ms=attempt.resets_at_ms,
            duplicate=duplicate,
            last_calls=snapshot.calls,
        )

    def _refuse(
        self, attempt: Attempt, snapshot: SessionSnapshot, refusal: Refusal
    ) -> Decision | None:
        suspended = refusal is Refusal.SUSPENDED
        limit = snapshot.limit_for(attempt.category, attempt.base_limit)
        first = self._store.record_block(attempt, snapshot, limit, suspended)
        if first is None:
            return None
        return Decision(
            allowed=False,
            session_id=attempt.session_id,
            tool=attempt.tool,
            category=attempt.category,
            used=snapshot.counts.get(attempt.category, 0),
            limit=limit,
            now_ms=attempt.now_ms,
            resets_at_ms=attempt.resets_at_ms,
            reason=SESSION_SUSPENDED if suspended else QUOTA_EXCEEDED,
            first_exhaustion=first,
            last_calls=(*snapshot.calls, attempt.record(allowed=False)),
        )
