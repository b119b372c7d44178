"""The local refusal hold: during a refusal storm, answer the next calls of a refused
session and category here, with no request, and tell the service how many afterwards.

After the service refuses a call with nothing left (a spent budget or a suspension), the
same session's further calls in that category are refused here, with the service's own
message, for at most `seconds` (5 s at most, and never past the refusal's Retry-After)
and at most `calls` calls; then the service is asked again. The calls refused here go to
the service with that session's next check (`refused_locally`), each category's count
with the hold ticket of the refusal that started its hold: the service counts a report
only under its own ticket, once, so escalation, the session's record and the metrics see
every refused call; and since every `calls + 1`th call reaches the service, escalation is
at most `calls` refusals late. A raise or a resume reaches a held session within the hold.

A weighed call refused while its budget still has room does not start a hold: fewer
units may still fit. The category of a call is the one the service gave the same tool
(with the same explicit category and readOnlyHint) before; a tool the service has not
classified yet is always asked. Pure bookkeeping: no I/O, the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mcp_quota_client.decision import CheckRequest, Decision, Outcome

MAX_HOLD_SECONDS = 5.0
DEFAULT_HOLD_CALLS = 10
REFUSED_LOCALLY_FIELD = "refused_locally"
"""Check-body field reporting the calls refused here since the session's last check."""
_MAX_SESSIONS = 10_000


@dataclass(frozen=True)
class HeldReport:
    """Calls refused here in one category, not yet reported, and the ticket the service
    gave the refusal whose hold refused them (None: a service that gives none)."""

    count: int
    ticket: str | None = None

    def merged(self, older: HeldReport) -> HeldReport:
        """This report with an older one put back: the counts add, the newer ticket wins."""
        return HeldReport(self.count + older.count, self.ticket or older.ticket)


def report_body(report: Mapping[str, HeldReport]) -> dict[str, Any]:
    """The `refused_locally` field: `{"write": {"count": 4, "ticket": "..."}}`; a count
    without a ticket goes bare (a service from before tickets counts it; a newer one
    counts it nothing)."""
    return {
        category: held.count
        if held.ticket is None
        else {"count": held.count, "ticket": held.ticket}
        for category, held in report.items()
    }


@dataclass
class _Hold:
    """One refused session and category: until when, how many calls left, what to say."""

    refusal: Decision
    until: float
    left: int


@dataclass
class _Session:
    holds: dict[str, _Hold] = field(default_factory=dict)
    unreported: dict[str, HeldReport] = field(default_factory=dict)


def _tool_key(request: CheckRequest) -> tuple[str, str | None, bool | None]:
    hint = request.annotations.get("readOnlyHint") if request.annotations else None
    return request.tool, request.category, hint


class RefusalHold:
    """Which sessions and categories are refused here for now, and what to report."""

    def __init__(self, clock: Callable[[], float], seconds: float, calls: int) -> None:
        self._clock = clock
        self._seconds = min(seconds, MAX_HOLD_SECONDS)
        self._calls = calls
        self._categories: dict[tuple[str, str | None, bool | None], str] = {}
        self._sessions: dict[str, _Session] = {}

    def refuse(self, request: CheckRequest) -> Decision | None:
        """The refusal to answer here, without a request, or None: ask the service."""
        category = self._categories.get(_tool_key(request))
        session = self._sessions.get(request.session_id)
        if category is None or session is None:
            return None
        hold = session.holds.get(category)
        if hold is None:
            return None
        if hold.left < 1 or self._clock() >= hold.until:
            del session.holds[category]
            return None
        hold.left -= 1
        refusal = hold.refusal
        now = HeldReport(1, refusal.hold_ticket)
        earlier = session.unreported.get(category)
        session.unreported[category] = now if earlier is None else now.merged(earlier)
        # The service's words, about the tool asked now (another tool of the category).
        message = refusal.message.replace(f"'{refusal.tool}'", f"'{request.tool}'")
        return replace(
            refusal, tool=request.tool, message=message, refused_locally=True, attempts=0
        )

    def report(self, session_id: str) -> dict[str, HeldReport]:
        """Take out the calls refused here in this session, with their tickets, to send
        with its next check (give them back with `restore` if the service does not answer
        it; once it has, they and their tickets are gone)."""
        session = self._sessions.get(session_id)
        if session is None or not session.unreported:
            return {}
        taken, session.unreported = session.unreported, {}
        return taken

    def restore(self, session_id: str, report: Mapping[str, HeldReport]) -> None:
        """Put back a report the service did not take."""
        if not report:
            return
        unreported = self._session(session_id).unreported
        for category, older in report.items():
            newer = unreported.get(category)
            unreported[category] = older if newer is None else newer.merged(older)

    def learn(self, request: CheckRequest, decision: Decision) -> None:
        """Remember the category the service gave this tool; start a hold after a refusal
        with nothing left, end it after an allowed call."""
        category = decision.category
        if not decision.from_service or category is None:
            return
        if len(self._categories) > _MAX_SESSIONS:
            self._categories.clear()
        self._categories[_tool_key(request)] = category
        if decision.allowed:
            session = self._sessions.get(request.session_id)
            if session is not None:
                session.holds.pop(category, None)
            return
        if self._seconds <= 0 or self._calls < 1 or (decision.remaining or 0) > 0:
            return
        if decision.outcome is Outcome.REPEATED_CALL:
            return  # refuses one call (tool and arguments), not the category
        seconds = self._seconds
        if decision.retry_after_seconds is not None:
            seconds = min(seconds, float(decision.retry_after_seconds))
        hold = _Hold(decision, self._clock() + seconds, self._calls)
        self._session(request.session_id).holds[category] = hold

    def unreported(self) -> int:
        """Calls refused here and not yet reported, in every session."""
        return sum(h.count for s in self._sessions.values() for h in s.unreported.values())

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            if len(self._sessions) > _MAX_SESSIONS:
                # Drop sessions with nothing to report first; the rest are kept.
                for key in [k for k, s in self._sessions.items() if not s.unreported]:
                    del self._sessions[key]
            session = self._sessions[session_id] = _Session()
        return session
