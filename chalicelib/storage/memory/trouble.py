"""In-memory index of sessions in trouble: an entry per session per UTC day, read a day
at a time, as the DynamoDB adapter does."""

from __future__ import annotations

import threading
from functools import partial

from chalicelib.storage.ports import TroubleMark, TroublePage
from chalicelib.storage.trouble_pages import DAY_MS, day_page


class MemoryTroubleIndex:
    """The index of sessions in trouble in a dict."""

    def __init__(self) -> None:
        self._marks: dict[tuple[str, int, str], TroubleMark] = {}
        self._lock = threading.Lock()

    def mark(self, mark: TroubleMark) -> None:
        """Record a session's latest trouble (overwrites its entry of that day)."""
        with self._lock:
            self._marks[(mark.tenant, mark.at_ms // DAY_MS, mark.session_id)] = mark

    def page(
        self, tenant: str, since_ms: int, until_ms: int, limit: int, next_token: str | None = None
    ) -> TroublePage:
        """`TroubleIndex.page` (`trouble_pages.day_page`) over the marks in memory.

        Raises:
            BadPageToken: the page token is not one this listing issued.
        """
        return day_page(tenant, since_ms, until_ms, limit, next_token, partial(self._day, tenant))

    def _day(self, tenant: str, day_ms: int) -> list[TroubleMark]:
        """The tenant's marks of the UTC day of `day_ms`."""
        with self._lock:
            return [
                m
                for (owner, day_index, _), m in self._marks.items()
                if owner == tenant and day_index == day_ms // DAY_MS
            ]
