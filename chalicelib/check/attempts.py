"""A check's `Attempt`: the call classified, its limit resolved, its units, lease, shadow
ceiling and loop-breaker key, everything decided before any write."""

from __future__ import annotations

import secrets

from chalicelib.check.hooks import LimitResolver
from chalicelib.check.repeats import with_repeat
from chalicelib.check.requests import CheckRequest
from chalicelib.check.shadow import SHADOW_CEILING
from chalicelib.quota.core import Attempt, SessionKey
from chalicelib.quota.policy import Policy


def new_check_id() -> str:
    """The service's own id of one check: 36 random bits, unique among a session's
    last calls, which is all it must be."""
    return secrets.token_urlsafe(6)[:6]


def attempt_of(
    policy: Policy,
    limits: LimitResolver,
    tenant: str,
    request: CheckRequest,
    now_ms: int,
    idle_ms: int,
) -> Attempt:
    """Classify the call and resolve its limit at `now_ms`."""
    category = policy.classify(request.tool, request.category, request.read_only_hint).category
    base_limit = limits.base_limit(tenant, request.principal, category.name, now_ms)
    # A lease reserves calls of one unit each: a weighed call is never leased.
    leased = category.lease and request.lease is not None and request.units == 1
    if not category.enforce:
        base_limit, shadow_limit = SHADOW_CEILING, base_limit
    else:
        shadow_limit = None
    # Never more than the base limit at once: the store's condition for a lease
    # compares against `limit - units + 1`, which must stay positive.
    units = min(request.lease or 1, category.lease_max, base_limit) if leased else 1
    units = units if leased else request.units
    attempt = Attempt(
        session=SessionKey(tenant, request.session_id),
        tool=request.tool,
        category=category.name,
        base_limit=base_limit,
        units=units,
        leased=leased,
        asked=(request.asked or request.lease or 1) if leased else units,
        now_ms=now_ms,
        idle_ms=idle_ms,
        check_id=new_check_id(),
        principal=request.principal,
        call_id=request.call_id,
        server=request.server,
        client=request.client,
        shadow_limit=shadow_limit,
        args_digest=request.args_digest,
        transport_session=request.transport_session_id,
    )
    return with_repeat(attempt, category, request.args_digest)
