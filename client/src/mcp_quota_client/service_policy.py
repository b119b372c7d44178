"""The policy's rules as the service serves them (`GET /v1/policy`): one policy, so the
proxy and the middleware weigh calls (`units_from`) with no file of their own.

Read at the first call and again after the service's `max_age_seconds`; while the
service cannot be reached the last rules read stay in force (none before the first).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from typing import Any

import httpx2

from mcp_quota_client.client import QuotaClient
from mcp_quota_client.guard import Cost

POLICY_PATH = "/v1/policy"
DEFAULT_MAX_AGE = 60.0
"""Seconds the rules are kept when the service names no `max_age_seconds`."""
RETRY_AFTER_FAILURE = 5.0
"""Seconds before asking again after the service could not answer."""

logger = logging.getLogger("mcp_quota_client")


def units_of(argument: str) -> Cost:
    """A call's weight: the length of its list argument `argument`, else 1."""

    def cost(arguments: Mapping[str, Any]) -> int:
        value = arguments.get(argument)
        return len(value) if isinstance(value, list) else 1

    return cost


class RuleCosts(Mapping[str, Cost]):
    """The cost of each tool under the policy's rules: the rule that classifies the tool
    (an exact name first, else the first pattern that matches) and its `units_from`."""

    def __init__(self, rules: list[Mapping[str, Any]]) -> None:
        self._rules = [r for r in rules if isinstance(r, Mapping)]
        self._known: dict[str, Cost | None] = {}

    def _rule_for(self, tool: str) -> Mapping[str, Any] | None:
        exact = [r for r in self._rules if tool in (r.get("tools") or [])]
        for rule in exact or self._rules:
            pattern = rule.get("pattern")
            if rule in exact or (isinstance(pattern, str) and fnmatchcase(tool, pattern)):
                return rule
        return None

    def _cost(self, tool: str) -> Cost | None:
        if tool not in self._known:
            rule = self._rule_for(tool)
            argument = rule.get("units_from") if rule is not None else None
            self._known[tool] = units_of(argument) if isinstance(argument, str) else None
        return self._known[tool]

    def needs_approval(self, tool: str) -> bool:
        """Whether the rule that classifies `tool` asks for an approval of each call."""
        rule = self._rule_for(tool)
        return rule is not None and rule.get("approval") is True

    def __getitem__(self, tool: str) -> Cost:
        cost = self._cost(tool)
        if cost is None:
            raise KeyError(tool)
        return cost

    def __contains__(self, tool: object) -> bool:
        return isinstance(tool, str) and self._cost(tool) is not None

    def __iter__(self) -> Any:
        return iter(t for r in self._rules if r.get("units_from") for t in (r.get("tools") or []))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class ServicePolicy:
    """The service's rules, read with the server token and kept for a short time."""

    def __init__(self, client: QuotaClient, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._costs: RuleCosts = RuleCosts([])
        self._replaying: frozenset[str] = frozenset()
        self._until = 0.0

    async def costs(self) -> RuleCosts:
        """The rules' costs, read again from the service when they are stale."""
        await self._refresh()
        return self._costs

    async def replays(self, category: str | None) -> bool:
        """Whether the service keeps the results of this category's calls for their
        retries (`replay`; none before the policy was first read, or from a service
        from before exactly-once writes)."""
        await self._refresh()
        return category is not None and category in self._replaying

    async def _refresh(self) -> None:
        if self._clock() < self._until:
            return
        try:
            response = await self._client._client().get(POLICY_PATH)
            response.raise_for_status()
            document = response.json()
            rules = document.get("rules") if isinstance(document, dict) else None
            if not isinstance(rules, list):
                raise ValueError("no list of rules")
            age = document.get("max_age_seconds", DEFAULT_MAX_AGE)
            self._costs = RuleCosts(rules)
            replay = document.get("replay")
            self._replaying = frozenset(
                c for c in (replay if isinstance(replay, list) else []) if isinstance(c, str)
            )
            self._until = self._clock() + float(age if isinstance(age, int) else DEFAULT_MAX_AGE)
        except (httpx2.HTTPError, ValueError) as exc:
            logger.warning("mcp-quota: could not read the service's policy: %s", exc)
            self._until = self._clock() + RETRY_AFTER_FAILURE
