"""The client's settings: where the quota service is, how patiently to ask it, and what
to do when it cannot answer (`QuotaClientConfig.from_env` reads `MCP_QUOTA_*`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from mcp_quota_client.decision import READ, WRITE, FailMode
from mcp_quota_client.hold import DEFAULT_HOLD_CALLS, MAX_HOLD_SECONDS

DEFAULT_FAIL_MODES: Mapping[str, FailMode] = MappingProxyType(
    {READ: FailMode.OPEN, WRITE: FailMode.CLOSED}
)
"""Reads keep working through an outage; writes (and anything unknown) are refused."""

REQUIRED = {
    "MCP_QUOTA_URL": "the quota service's base URL, e.g. http://127.0.0.1:8000 for `make run`",
    "MCP_QUOTA_TOKEN": "a bearer token with role `server` (dev-server-token for `make run`)",
}

OFF = frozenset({"off", "0", "false", "no"})


class QuotaConfigError(ValueError):
    """The client is not configured: the message is one line that says what to set."""


@dataclass(frozen=True, kw_only=True)
class QuotaClientConfig:
    """Where the quota service is and how patiently to ask it."""

    base_url: str
    token: str
    deadline: float = 5.0
    """Seconds one check may take in all, retries included; then the fail mode applies.
    Longer than the service's store budget (docs/operations.md), so it sees the 503."""
    connect_timeout: float = 1.0
    read_timeout: float = 5.0
    """Cap of one attempt; each attempt also stops at the deadline."""
    max_attempts: int = 3
    """Tries per check, counting the first, within the deadline. Connection errors,
    timeouts, any 5xx and a 429 without a decision (the gateway's throttle) retry."""
    backoff_base: float = 0.05
    backoff_max: float = 0.5
    fail_modes: Mapping[str, FailMode] = field(default_factory=lambda: dict(DEFAULT_FAIL_MODES))
    default_fail_mode: FailMode = FailMode.CLOSED
    """For a category not named in `fail_modes`: unknown means refuse."""
    lease: bool = True
    """Ask for leased reads: one check reserves several calls of a category the service
    leases (reads by default), spent here without asking."""
    lease_idle_seconds: float = 30.0
    """A session's lease unused this long goes back to the service (checked at each call)."""
    lease_margin_seconds: float = 1.0
    """Stop spending a lease this long before the service's `lease_seconds` run out."""
    hold_seconds: float = MAX_HOLD_SECONDS
    """After a refusal with nothing left, refuse the session's further calls of that
    category here for this long (at most 5 s, never past Retry-After); 0 turns it off."""
    hold_calls: int = DEFAULT_HOLD_CALLS
    """At most this many calls refused here per hold: the service then sees the next
    one, with the count (`refused_locally`), so escalation is never later than that."""

    def __post_init__(self) -> None:
        if not self.base_url:
            raise QuotaConfigError("mcp-quota: base_url is required")
        if not self.token:
            raise QuotaConfigError("mcp-quota: token is required")
        if self.max_attempts < 1:
            raise QuotaConfigError("mcp-quota: max_attempts must be at least 1")
        if self.deadline <= 0 or self.read_timeout <= 0 or self.connect_timeout <= 0:
            raise QuotaConfigError("mcp-quota: deadline and timeouts must be positive")
        if self.lease_idle_seconds <= 0 or self.lease_margin_seconds < 0:
            raise QuotaConfigError("mcp-quota: lease_idle_seconds must be positive")
        if not 0 <= self.hold_seconds <= MAX_HOLD_SECONDS or self.hold_calls < 1:
            raise QuotaConfigError(
                f"mcp-quota: hold_seconds must be from 0 to {MAX_HOLD_SECONDS:g} and "
                "hold_calls at least 1"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> QuotaClientConfig:
        """Read `MCP_QUOTA_URL`, `MCP_QUOTA_TOKEN` and the optional tuning variables.

        `MCP_QUOTA_FAIL_OPEN` / `MCP_QUOTA_FAIL_CLOSED` are comma-separated
        categories that override the defaults (read open, write closed).
        `MCP_QUOTA_LEASE=off` turns leased reads off; `MCP_QUOTA_LEASE_IDLE_SECONDS` sets
        how long an unused lease is kept before its calls go back.
        `MCP_QUOTA_DEADLINE` is the seconds a check may take in all, retries included.
        `MCP_QUOTA_HOLD_SECONDS` (0 to 5, 0: off) and `MCP_QUOTA_HOLD_CALLS` set the
        local refusal hold.

        Raises:
            QuotaConfigError: a required variable is missing or a number is malformed.
        """
        env = os.environ if environ is None else environ
        for variable, meaning in REQUIRED.items():
            if not env.get(variable, "").strip():
                raise QuotaConfigError(f"mcp-quota: {variable} is not set: set it to {meaning}")
        base_url = env["MCP_QUOTA_URL"].strip()
        token = env["MCP_QUOTA_TOKEN"].strip()
        modes: dict[str, FailMode] = dict(DEFAULT_FAIL_MODES)
        for variable, mode in (
            ("MCP_QUOTA_FAIL_OPEN", FailMode.OPEN),
            ("MCP_QUOTA_FAIL_CLOSED", FailMode.CLOSED),
        ):
            for category in env.get(variable, "").split(","):
                if category.strip():
                    modes[category.strip()] = mode
        try:
            connect_timeout = float(env.get("MCP_QUOTA_CONNECT_TIMEOUT", "1.0"))
            read_timeout = float(env.get("MCP_QUOTA_READ_TIMEOUT", "5.0"))
            deadline = float(env.get("MCP_QUOTA_DEADLINE", "5.0"))
            max_attempts = int(env.get("MCP_QUOTA_MAX_ATTEMPTS", "3"))
            lease_idle = float(env.get("MCP_QUOTA_LEASE_IDLE_SECONDS", "30"))
            hold_seconds = float(env.get("MCP_QUOTA_HOLD_SECONDS", str(MAX_HOLD_SECONDS)))
            hold_calls = int(env.get("MCP_QUOTA_HOLD_CALLS", str(DEFAULT_HOLD_CALLS)))
        except ValueError as exc:
            raise QuotaConfigError(f"mcp-quota: a MCP_QUOTA_* number is malformed: {exc}") from exc
        return cls(
            base_url=base_url,
            token=token,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            deadline=deadline,
            max_attempts=max_attempts,
            fail_modes=modes,
            lease=env.get("MCP_QUOTA_LEASE", "on").strip().lower() not in OFF,
            lease_idle_seconds=lease_idle,
            hold_seconds=hold_seconds,
            hold_calls=hold_calls,
        )

    def fail_mode_for(self, category: str | None) -> FailMode:
        """The configured fail mode for a category, or the default for an unknown one."""
        if category is None:
            return self.default_fail_mode
        return self.fail_modes.get(category, self.default_fail_mode)
