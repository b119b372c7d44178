"""What the check service is given: who hears of a refusal, and where limits come from."""

from __future__ import annotations

from typing import Protocol

from chalicelib.quota.answers import Refused
from chalicelib.quota.core import Attempt
from chalicelib.quota.policy import Policy, WindowLimit


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
