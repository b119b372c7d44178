"""Grants: a raise planned ahead for a principal (e.g. a content migration), applied to
every session whose checks carry that principal while the window is open.

Grants are read once per tenant per `cache_seconds` per container, never per check, so
an allowed check stays at one DynamoDB request. A new or deleted grant applies within
that delay in other containers (at once in the one that served the admin call).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chalicelib.clock import Clock, iso_utc
from chalicelib.quota.core import Scope
from chalicelib.quota.policy import Policy, WindowLimit

if TYPE_CHECKING:
    from chalicelib.api.schemas import GrantView


@dataclass(frozen=True)
class Grant:
    """A planned raise of one category's limit for one principal, in a time window."""

    grant_id: str
    tenant: str
    principal: str
    category: str
    limit: int
    starts_at_ms: int
    ends_at_ms: int
    reason: str
    created_by: str
    created_at_ms: int

    def applies(self, principal: str | None, category: str, now_ms: int) -> bool:
        """Whether this grant lifts `category` for `principal` at `now_ms`."""
        return (
            principal == self.principal
            and category == self.category
            and self.starts_at_ms <= now_ms < self.ends_at_ms
        )

    def to_json(self) -> GrantView:
        """The grant as the API shows it."""
        return {
            "grant_id": self.grant_id,
            "principal": self.principal,
            "category": self.category,
            "limit": self.limit,
            "starts_at": iso_utc(self.starts_at_ms),
            "ends_at": iso_utc(self.ends_at_ms),
            "reason": self.reason,
            "created_by": self.created_by,
            "created_at": iso_utc(self.created_at_ms),
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
        self._clock = clock
        self._cache_ms = cache_seconds * 1000
        self._cache: dict[str, tuple[int, list[Grant]]] = {}

    def grants(self, tenant: str) -> list[Grant]:
        """The tenant's grants, from the cache while it is fresh.

        Raises:
            QuotaServiceError: the store failed.
        """
        now = self._clock()
        cached = self._cache.get(tenant)
        if cached is not None and cached[0] > now:
            return cached[1]
        grants = self._load(tenant)
        self._cache[tenant] = (now + self._cache_ms, grants)
        return grants

    def forget(self, tenant: str) -> None:
        """Drop the cached grants of a tenant (after an admin changed them here)."""
        self._cache.pop(tenant, None)

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
