"""What every view, the service, shadow mode and the runaway cache read off a budget: the
calls left, whether it is spent, and the limit in force. Named once, here."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chalicelib.quota.core import Attempt, SessionSnapshot


def left(used: int, limit: int, *, stopped: bool = False) -> int:
    """Calls left before the limit: none while the budget is stopped (suspended)."""
    return 0 if stopped else max(0, limit - used)


def spent(used: int, limit: int) -> bool:
    """Whether a budget is used up to its limit: its next call is refused."""
    return used >= limit


def limit_in_force(
    seen: SessionSnapshot | None, category: str, base_limit: int, now_ms: int, idle_ms: int
) -> int:
    """The limit the session's next check applies in a category: the base (the policy's,
    or a grant's) for a session unseen or idle, else the base or a raise still in force."""
    if seen is None or seen.is_idle(now_ms, idle_ms):
        return base_limit
    return seen.limit_for(category, base_limit, now_ms)


def oversized_basis(seen: SessionSnapshot | None, attempt: Attempt) -> SessionSnapshot | None:
    """For a call weighing more units than its base limit (it fits only under a session
    raise): the session it is refused on, or None when it may fit (or the session is
    suspended: the usual way answers that). An unseen or idle session is a fresh one."""
    from chalicelib.quota.core import SessionSnapshot  # noqa: PLC0415 - core imports this
    from chalicelib.quota.facts import within  # noqa: PLC0415

    live = seen is not None and not seen.is_idle(attempt.now_ms, attempt.idle_ms)
    if seen is None or not live:
        return SessionSnapshot(last_seen_ms=attempt.now_ms, started_ms=attempt.now_ms)
    if seen.suspended:
        return None
    limit = seen.limit_for(attempt.category, attempt.base_limit, attempt.now_ms)
    return None if within(0, attempt.units, limit) else seen
