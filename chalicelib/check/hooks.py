"""What the check service is given: who hears of its decisions, and where limits come from."""

from __future__ import annotations

from typing import Protocol

from chalicelib.quota.answers import Allowed, Refused
from chalicelib.quota.core import Attempt
from chalicelib.quota.policy import Policy, WindowLimit


class DecisionListener(Protocol):
    """The one place effects hang off a decision, once it is recorded (audit, email, the
    trouble index, metrics). Each method must never raise: the answer is given."""

    def on_block(self, tenant: str, attempt: Attempt, decision: Refused) -> None:
        """A refused check."""

    def on_counted(self, tenant: str, attempt: Attempt, allowed: Allowed) -> None:
        """A call counted at every scope that applies."""

    def on_shadow(self, tenant: str, attempt: Attempt, would: Refused) -> None:
        """A call shadow mode let run past a limit: what an enforcing policy would say."""


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

    def on_counted(self, tenant: str, attempt: Attempt, allowed: Allowed) -> None:
        return None

    def on_shadow(self, tenant: str, attempt: Attempt, would: Refused) -> None:
        return None
