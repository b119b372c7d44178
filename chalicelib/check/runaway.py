"""The sessions a container last saw spent: a runaway loop's next call is refused in one
guarded write instead of a failed count and a refusal record. A hint, never a decision:
the guarded write holds only while the session is still spent as remembered."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace

from chalicelib.quota.core import Attempt, SessionKey, SessionSnapshot, with_call

SPENT_SESSIONS = 4096  # spent sessions a container remembers (least recently used go)


class SpentSessions:
    """Per session: the category it was spent in, and the session as it stood after its
    last refusal there."""

    def __init__(self, keep_calls: int) -> None:
        self._keep = keep_calls
        self._spent: OrderedDict[SessionKey, tuple[str, SessionSnapshot]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session: SessionKey) -> tuple[str, SessionSnapshot] | None:
        return self._spent.get(session)

    def forget(self, session: SessionKey) -> None:
        with self._lock:
            self._spent.pop(session, None)

    def remember(self, attempt: Attempt, seen: SessionSnapshot) -> None:
        """Keep the session as it stands after this refusal, for the loop's next call."""
        key = attempt.session
        refused = dict(seen.refused)
        refused[attempt.category] = refused.get(attempt.category, 0) + 1
        calls = with_call(seen.calls, attempt.record(allowed=False))[-self._keep :]
        with self._lock:
            self._spent[key] = (
                attempt.category,
                replace(seen, calls=calls, refused=refused, last_seen_ms=attempt.now_ms),
            )
            self._spent.move_to_end(key)
            if len(self._spent) > SPENT_SESSIONS:
                self._spent.popitem(last=False)
