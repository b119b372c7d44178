"""In-memory index of sessions in trouble."""

from __future__ import annotations

import threading

from chalicelib.storage.ports import (
    TroubleMark,
)


class MemoryTroubleIndex:
    """The index of sessions in trouble in a dict, one entry per session."""

    def __init__(self) -> None:
        self._marks: dict[tuple[str, str], TroubleMark] = {}
        self._lock = threading.Lock()

    def mark(self, mark: TroubleMark) -> None:
        """Record a session's latest trouble."""
        with self._lock:
            self._marks[(mark.tenant, mark.session_id)] = mark

    def marks(self, tenant: str, since_ms: int) -> list[TroubleMark]:
        """The tenant's entries from `since_ms`, newest first."""
        with self._lock:
            kept = [m for m in self._marks.values() if m.tenant == tenant and m.at_ms >= since_ms]
        return sorted(kept, key=lambda m: (m.at_ms, m.session_id), reverse=True)
