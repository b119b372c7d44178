"""The answers a check gives, shaped from the attempt and the session as it stood: an
allowance (with its lease), a refusal by the session, a suspended principal's refusal."""

from __future__ import annotations

from dataclasses import replace

from chalicelib.quota.answers import Allowed, Refused
from chalicelib.quota.core import (
    Attempt,
    Lease,
    RefusalReason,
    Scope,
    ScopeUse,
    SessionSnapshot,
    fold_repeats,
    with_call,
)
from chalicelib.quota.policy import Category


def allowed_answer(
    attempt: Attempt,
    snapshot: SessionSnapshot,
    category: Category,
    keep: int,
    duplicate: bool = False,
) -> Allowed:
    """An allowance, with the session as counting it left it (`snapshot`)."""
    return Allowed(
        session_id=attempt.session_id,
        tool=attempt.tool,
        category=attempt.category,
        used=snapshot.counts.get(attempt.category, 0),
        limit=snapshot.limit_for(attempt.category, attempt.limit_basis, attempt.now_ms),
        now_ms=attempt.now_ms,
        resets_at_ms=attempt.resets_at_ms,
        duplicate=duplicate,
        last_calls=snapshot.calls[-keep:],
        lease=None if duplicate else lease_of(attempt, snapshot, category),
    )


def lease_of(attempt: Attempt, snapshot: SessionSnapshot, category: Category) -> Lease | None:
    """The lease an allowance grants, if the attempt asked for one."""
    if not attempt.leased:
        return None
    return Lease(
        category=attempt.category,
        check_id=attempt.check_id,
        granted=attempt.units,
        granted_ms=attempt.now_ms,
        started_ms=snapshot.started_ms,
        expires_at_ms=attempt.now_ms + category.lease_seconds * 1000,
        lease_max=category.lease_max,
        lease_seconds=category.lease_seconds,
        principal=attempt.principal,
    )


def refusal_of(
    attempt: Attempt,
    reason: RefusalReason,
    used: int,
    limit: int,
    resets_at_ms: int | None = None,
) -> Refused:
    """A refusal of the attempt's call by a budget that had `used` of `limit` calls and
    refills at `resets_at_ms` (the session's, unless given); callers add their evidence."""
    return Refused(
        session_id=attempt.session_id,
        tool=attempt.tool,
        category=attempt.category,
        used=used,
        limit=limit,
        now_ms=attempt.now_ms,
        resets_at_ms=attempt.resets_at_ms if resets_at_ms is None else resets_at_ms,
        reason=reason,
        principal=attempt.principal,
    )


def session_refusal(
    attempt: Attempt,
    seen: SessionSnapshot,
    limit: int,
    reason: RefusalReason,
    keep: int,
    first: bool = False,
    recorded: bool = False,
) -> Refused:
    """A refusal by the session itself, as it stood (`seen`) when it refused: its last
    calls with this refusal folded in, unless `seen` already holds it."""
    calls = seen.calls if recorded else with_call(seen.calls, attempt.record(allowed=False))
    return replace(
        refusal_of(attempt, reason, seen.counts.get(attempt.category, 0), limit),
        first_exhaustion=first,
        last_calls=calls[-keep:],
        started_ms=seen.started_ms,
        units=attempt.weight,
    )


def principal_suspended(attempt: Attempt) -> Refused:
    """The refusal of a call whose principal is suspended: nothing was touched."""
    refusal = refusal_of(attempt, RefusalReason.PRINCIPAL_SUSPENDED, used=0, limit=0)
    return replace(refusal, scope=Scope.PRINCIPAL)


def wider_refusal(
    attempt: Attempt,
    session: SessionSnapshot | None,
    scope: Scope,
    uses: tuple[ScopeUse, ...],
    reason: RefusalReason,
    first: bool,
    keep: int,
) -> Refused:
    """The refusal of a wider budget (`uses` ends with its own): nothing stays counted
    anywhere, so the session's record shows this call refused, not counted."""
    use = uses[-1]
    calls = () if session is None else session.calls
    calls = fold_repeats([c for c in calls if c.check_id != attempt.check_id or not c.allowed])
    return replace(
        refusal_of(attempt, reason, use.used, use.limit, use.resets_at_ms),
        scope=scope,
        first_exhaustion=first,
        last_calls=with_call(calls, attempt.record(allowed=False))[-keep:],
        scopes=uses,
        started_ms=None if session is None else session.started_ms,
        units=attempt.weight,
    )
