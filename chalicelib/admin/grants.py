"""Grants: a raise planned ahead for a principal (e.g. a content migration), applied to
every session whose checks carry that principal while the window is open.

Grants are read once per tenant per `cache_seconds` per container, never per check, so
an allowed check stays at one DynamoDB request. A new or deleted grant applies within
that delay in other containers (at once in the one that served the admin call).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from chalicelib.clock import Clock, Expiring, iso_utc
from chalicelib.quota.core import Scope
from chalicelib.quota.grants import Grant
from chalicelib.quota.policy import Policy, WindowLimit

if TYPE_CHECKING:
    from chalicelib.api.schemas import GrantView


def grant_view(grant: Grant) -> GrantView:
    """A grant as the API shows it."""
    return {
        "grant_id": grant.grant_id,
        "principal": grant.principal,
        "category": grant.category,
        "limit": grant.limit,
        "starts_at": iso_utc(grant.starts_at_ms),
        "ends_at": iso_utc(grant.ends_at_ms),
        "reason": grant.reason,
        "created_by": grant.created_by,
        "created_at": iso_utc(grant.created_at_ms),
    }


class GrantLimits:
    """A `LimitResolver`: the policy's limit, or an open grant's if higher."""

    def __init__(
        self,
        policy: Policy,
        load: Callable[[str], list[Grant]],
        clock: Clock,
        cache_seconds: int = 30,
    ) -> None:
        self._policy = policy
        self._load = load
        self._cache: Expiring[str, list[Grant]] = Expiring(clock, cache_seconds * 1000)

    def grants(self, tenant: str) -> list[Grant]:
        """The tenant's grants, from the cache while it is fresh.

        Raises:
            QuotaServiceError: the store failed.
        """
        return self._cache.get(tenant, self._load)

    def forget(self, tenant: str) -> None:
        """Drop the cached grants of a tenant (after an admin changed them here)."""
        self._cache.drop(tenant)

    def base_limit(self, tenant: str, principal: str | None, category: str, now_ms: int) -> int:
        """The policy limit, lifted by the highest open grant for this principal."""
        limit = self._policy.categories[category].limit
        if principal is None:
            return limit
        for grant in self.grants(tenant):
            if grant.applies(principal, category, now_ms):
                limit = max(limit, grant.limit)
        return limit

    def window_limit(
        self, tenant: str, principal: str | None, window: WindowLimit, category: str, now_ms: int
    ) -> int:
        """A wider scope's limit: an open grant for the principal lifts its budget too."""
        if window.scope is not Scope.PRINCIPAL or principal is None:
            return window.limit
        return max(window.limit, self.base_limit(tenant, principal, category, now_ms))
