"""Give-backs a check could not make before its deadline, or while the store was down:
kept in this container and made by a later check of the same session, never by a
request that already answered. Lost with the container (under-admission, never over: the
CompensationDeferred metric counts them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from chalicelib.check import deadline
from chalicelib.observability import logger
from chalicelib.quota.core import SessionKey
from chalicelib.storage.ports import StorageError

KEEP_S = 120.0  # a store that applies a request later than this is not DynamoDB
MAX_PENDING = 10_000


@dataclass
class _Repair:
    undo: Callable[[], object]
    until_s: float
    # Whether the undo can tell it is done (a give-back of what is known counted); one
    # of a count whose outcome is unknown is made again until it lapses, since the
    # count may land later than the first try.
    final: bool


class Repairs:
    """The give-backs this container owes, by session."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._pending: dict[SessionKey, list[_Repair]] = {}
        self._lock = threading.Lock()

    def add(self, session: SessionKey, undo: Callable[[], object], final: bool = True) -> None:
        """Owe `undo` to `session` (made by its next check here)."""
        with self._lock:
            if sum(len(r) for r in self._pending.values()) >= MAX_PENDING:
                return
            repair = _Repair(undo, self._clock() + KEEP_S, final)
            self._pending.setdefault(session, []).append(repair)

    def pending(self, session: SessionKey) -> int:
        """How many give-backs this container owes to `session`."""
        with self._lock:
            return len(self._pending.get(session, []))

    def run(self, session: SessionKey) -> None:
        """Make what is owed to `session`, as far as the deadline allows; what fails stays
        owed until it lapses. Never raises: the check goes on either way."""
        with self._lock:
            owed = self._pending.pop(session, [])
        now, kept = self._clock(), []
        for repair in owed:
            if repair.until_s < now:
                continue
            if not deadline.allows_step():
                kept.append(repair)
                continue
            try:
                repair.undo()
            except StorageError as exc:
                logger.warning("a give-back is still owed", extra={"error": exc.doing})
                kept.append(repair)
                continue
            if not repair.final:
                kept.append(repair)
        if kept:
            with self._lock:
                self._pending.setdefault(session, []).extend(kept)
