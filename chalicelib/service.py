"""The check: classify the call, count it in one conditional update, explain a refusal."""

from __future__ import annotations

import secrets
from dataclasses import replace
from typing import Protocol

from chalicelib.clock import Clock
from chalicelib.policy import Policy
from chalicelib.ports import Consumed, RecordChanged, SessionCounters
from chalicelib.quota import (
    Allowed,
    Attempt,
    Decision,
    RefusalReason,
    Refused,
    SessionKey,
    SessionSnapshot,
    Verdict,
    explain_refusal,
)
from chalicelib.validation import CheckRequest

# Each retry follows a change made by another writer (idle reset race, item deleted by
# an admin reset); more than a few in a row means the store is misbehaving.
MAX_ROUNDS = 4


class BlockListener(Protocol):
    """Told about every refused check, after it is recorded (audit, notification)."""

    def on_block(self, tenant: str, attempt: Attempt, decision: Refused) -> None:
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

    def on_block(self, tenant: str, attempt: Attempt, decision: Refused) -> None:
        return None


def new_check_id() -> str:
    """The service's own id of one check: 36 random bits, unique among a session's
    last calls, which is all it must be."""
    return secrets.token_urlsafe(6)[:6]


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
    ) -> None:
        self._policy = policy
        self._store = store
        self._clock = clock
        self._idle_ms = idle_timeout_seconds * 1000
        self._limits = limits or PolicyLimits(policy)
        self._listener = listener or QuietListener()
        self._keep = keep_calls

    def attempt_for(self, tenant: str, request: CheckRequest) -> Attempt:
        """Classify the call and resolve its limit: everything decided before any write."""
        category = self._policy.classify(
            request.tool, request.category, request.read_only_hint
        ).category
        now_ms = self._clock()
        return Attempt(
            session=SessionKey(tenant, request.session_id),
            tool=request.tool,
            category=category.name,
            base_limit=self._limits.base_limit(tenant, request.principal, category.name, now_ms),
            now_ms=now_ms,
            idle_ms=self._idle_ms,
            check_id=new_check_id(),
            principal=request.principal,
            call_id=request.call_id,
        )

    def check(self, tenant: str, request: CheckRequest) -> Decision:
        """Count the call if the session's budget allows it, else refuse it.

        Raises:
            StorageError: the store failed, or the session kept changing under us.
        """
        attempt = self.attempt_for(tenant, request)
        for _ in range(MAX_ROUNDS):
            result = self._store.consume(attempt)
            if isinstance(result, Consumed):
                return self._allowed(attempt, result.snapshot)
            snapshot = result.snapshot
            if snapshot is None:
                continue
            verdict = explain_refusal(snapshot, attempt)
            if verdict is Verdict.ALREADY_COUNTED:
                return self._allowed(attempt, snapshot)
            if verdict is Verdict.EXPIRED:
                reset = self._store.reset_expired(attempt, snapshot.last_seen_ms)
                if reset is not None:
                    return self._allowed(attempt, reset.snapshot)
                continue
            if verdict is Verdict.DUPLICATE:
                if self._store.record_replay(attempt, snapshot):
                    return self._allowed(attempt, snapshot, duplicate=True)
                continue
            if verdict is Verdict.REUSED_CALL_ID:
                attempt = replace(attempt, dedupe=False)
                continue
            if verdict is Verdict.STALE:
                continue
            decision = self._refuse(attempt, snapshot, verdict)
            if decision is not None:
                self._listener.on_block(tenant, attempt, decision)
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
            limit=snapshot.limit_for(attempt.category, attempt.base_limit),
            now_ms=attempt.now_ms,
            resets_at_ms=attempt.resets_at_ms,
            duplicate=duplicate,
            last_calls=snapshot.calls[-self._keep :],
        )

    def _refuse(
        self, attempt: Attempt, snapshot: SessionSnapshot, verdict: Verdict
    ) -> Refused | None:
        suspended = verdict is Verdict.SUSPENDED
        limit = snapshot.limit_for(attempt.category, attempt.base_limit)
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
            last_calls=(*snapshot.calls, attempt.record(allowed=False))[-self._keep :],
        )
