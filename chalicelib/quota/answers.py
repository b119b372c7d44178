"""The answer to a check: allowed (it may run) or refused (it must not), with the words
the agent and its supervisor read. A refusal is a value, not an exception."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from chalicelib.clock import iso_utc
from chalicelib.quota.calls import CallRecord
from chalicelib.quota.core import RefusalReason, Scope, ScopeUse, spoken_window
from chalicelib.quota.derived import left, spent
from chalicelib.quota.leases import Lease


@dataclass(frozen=True)
class _Answer:
    """What every answer to a check says: the call, its budget and when it resets."""

    session_id: str
    tool: str
    category: str
    used: int
    limit: int
    now_ms: int
    resets_at_ms: int


@dataclass(frozen=True)
class Allowed(_Answer):
    """The call was counted (or is a retry of one that was): it may run."""

    duplicate: bool = False
    scopes: tuple[ScopeUse, ...] = ()  # the budgets above the session it was counted in
    last_calls: tuple[CallRecord, ...] = ()
    lease: Lease | None = None  # calls granted at once (this one included), if leased
    shadow: Refused | None = None  # shadow mode: the refusal an enforcing policy would give

    @property
    def allowed(self) -> bool:
        """Always True: lets callers read `decision.allowed` on either kind."""
        return True

    @property
    def remaining(self) -> int:
        """Calls left in this category before the limit."""
        return left(self.used, self.limit)

    @property
    def spent(self) -> bool:
        """Whether this call took the last unit of its session's category: the session's
        next call there is refused (`SessionSnapshot.state` says blocked). A retry's
        answer spends nothing of its own."""
        return not self.duplicate and spent(self.used, self.limit)


@dataclass(frozen=True)
class Refused(_Answer):
    """The call was refused, not run: why, and the evidence."""

    reason: RefusalReason
    scope: Scope = Scope.SESSION
    first_exhaustion: bool = False
    last_calls: tuple[CallRecord, ...] = ()
    scopes: tuple[ScopeUse, ...] = ()
    principal: str | None = None
    escalated: bool = False  # this refusal suspended the principal
    started_ms: int | None = None  # when the session's counters started: its first call
    units: int = 1  # the units the call asked for at once, all or nothing
    repeat_limit: int = 0  # a repeated call: the calls its window allowed
    repeat_window_ms: int = 0
    hold_ticket: str | None = None  # vouches for the refusals the client holds after it

    @property
    def allowed(self) -> bool:
        """Always False: lets callers read `decision.allowed` on either kind."""
        return False

    @property
    def suspended(self) -> bool:
        """Whether a suspension refused it (waiting does not help)."""
        return self.reason in (
            RefusalReason.SESSION_SUSPENDED,
            RefusalReason.PRINCIPAL_SUSPENDED,
        )

    @property
    def remaining(self) -> int:
        """Calls left before the limit: none while suspended, whatever the counters say."""
        return left(self.used, self.limit, stopped=self.suspended)

    @property
    def retry_after_seconds(self) -> int:
        """Seconds until the refusing budget refills (a session's, if it stays idle)."""
        return max(1, -(-(self.resets_at_ms - self.now_ms) // 1000))

    @property
    def message(self) -> str:
        """Why the call was refused, in one or two plain sentences for a model and a human."""
        return refusal_sentence(self.tool, self.why)

    @property
    def why(self) -> str:
        """What the message says after naming the tool: why it was refused and what to do
        next. Every wording of a refusal (the answer, shadow mode's, the MCP side's
        held refusal of another tool) puts a tool in front of these words."""
        if self.reason is RefusalReason.PRINCIPAL_SUSPENDED:
            return (
                f"principal '{self.principal}' has been "
                "suspended, and every tool call made for it is refused, in every session, "
                "until an administrator resumes it. Stop calling tools and tell the user."
            )
        if self.reason is RefusalReason.REPEATED_CALL:
            # The loop breaker's windows are fixed and aligned to UTC, not sliding: name
            # this one and its end (`resets_at_ms`), not "the last 10 minutes".
            return (
                f"it was already called with the same "
                f"arguments {self.repeat_limit} times in this "
                f"{spoken_window(self.repeat_window_ms)} window, which ends at "
                f"{_window_end(self.resets_at_ms, self.repeat_window_ms)}. Repeating it "
                "will not help: stop and tell the user."
            )
        if self.suspended:
            return (
                f"session '{self.session_id}' has been "
                "suspended by an administrator, and every tool call in it is refused until "
                "an administrator resumes it. Stop calling tools and tell the user."
            )
        resets = iso_utc(self.resets_at_ms)
        if self.units > 1 and self.remaining > 0:
            return self._units_message(resets)
        if self.scope is not Scope.SESSION:
            whose = (
                f"principal '{self.principal}'"
                if self.scope is Scope.PRINCIPAL
                else "this whole site (the tenant ceiling over all its servers and agents)"
            )
            return (
                f"{whose} has used its '{self.category}' "
                f"budget for this window ({self.used}/{self.limit} calls), whatever the "
                f"session. Stop calling '{self.category}' tools and tell the user; the "
                f"budget refills at {resets}, or sooner if an administrator raises it."
            )
        idle_minutes = max(1, round((self.resets_at_ms - self.now_ms) / 60000))
        return (
            f"session '{self.session_id}' has used its "
            f"'{self.category}' quota ({self.used}/{self.limit} calls). Stop calling "
            f"'{self.category}' tools and tell the user; the counter resets at {resets} "
            f"only if the session makes no calls for {idle_minutes} minutes (every attempt, "
            "even a refused one, restarts that wait), or sooner if an administrator "
            "raises the quota."
        )

    def _units_message(self, resets: str) -> str:
        """A weighed call that does not fit while the budget still has room: nothing was
        counted, and fewer units may still run."""
        whose = {
            Scope.SESSION: f"session '{self.session_id}'",
            Scope.PRINCIPAL: f"principal '{self.principal}'",
            Scope.TENANT: "this whole site (the tenant ceiling)",
        }[self.scope]
        left = self.remaining
        return (
            f"it asks for {self.units} '{self.category}' "
            f"units at once, and {whose} has {left} unit{'s' if left != 1 else ''} left "
            f"({self.used}/{self.limit} used). Nothing was counted. A call is counted whole "
            f"or not at all: ask for at most {left} at once, or stop and tell the user; the "
            f"budget refills at {resets}, or sooner if an administrator raises it."
        )


def refusal_sentence(tool: str, why: str, *, ran: bool = False) -> str:
    """A refusal's words: the tool that was not run (or, in shadow mode, that ran but
    would not have under enforcement), then why and what to do next."""
    verb = "would NOT have run under enforcement" if ran else "was NOT run"
    return f"The tool '{tool}' {verb}: {why}"


def _window_end(end_ms: int, window_ms: int) -> str:
    """When a window ends, as a message says it: "12:10 UTC" (seconds only if any), with
    the day for windows of a day or more ("2026-12-03 00:00 UTC")."""
    moment = datetime.fromtimestamp(end_ms / 1000, tz=UTC)
    text = moment.strftime("%H:%M:%S" if moment.second else "%H:%M")
    if window_ms >= 86_400_000:
        text = f"{moment.year:04d}-{moment.strftime('%m-%d')} {text}"  # %Y does not pad
    return f"{text} UTC"


Decision = Allowed | Refused
