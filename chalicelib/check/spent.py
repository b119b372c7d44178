"""Puts a session in the trouble index when an allowed call takes the last unit of its
budget in a category: from then on every view derives `blocked` for it, so the listing
shows it too, without waiting for the first refused call. The index write is made once
the call is counted at every scope (a call answered 503, or refused by a wider budget,
marks nothing of its own): a round trip of its own, once per session and category."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.check.service import CheckService
from chalicelib.observability import logger
from chalicelib.quota.answers import Allowed
from chalicelib.quota.core import Attempt
from chalicelib.storage.ports import TroubleKind, TroubleMark


class MarksSpentSessions(CheckService):
    """The check service, plus one index write on the call that spends a session's
    budget (at most once per category and counters; a retry of it writes nothing)."""

    def __init__(self, *args: Any, mark: Callable[[TroubleMark], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mark = mark

    def _counted(self, attempt: Attempt, allowed: Allowed) -> None:
        if not spent(allowed):
            return
        mark = TroubleMark(
            attempt.tenant,
            allowed.session_id,
            TroubleKind.EXHAUSTED,
            min(allowed.now_ms, self._clock()),  # its own clock: never ahead of now
            allowed.category,
            attempt.principal,
        )
        try:
            self._mark(mark)
        except Exception:
            logger.exception("trouble index write failed; the session may miss the listing")


def spent(decision: Allowed) -> bool:
    """Whether this allowed call took the last unit of its session's category: the
    session's next call there is refused (`SessionSnapshot.state` says blocked)."""
    return not decision.duplicate and decision.used >= decision.limit
