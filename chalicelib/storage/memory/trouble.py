"""In-memory index of sessions in trouble: an entry per session per UTC day, read a day
at a time, as the DynamoDB adapter does."""

from __future__ import annotations

import threading

from chalicelib.storage import page_tokens
from chalicelib.storage.ports import TroubleMark, TroublePage

PAGE_SCOPE = "trouble"
DAY_MS = 86_400_000
_END_OF_MS = "#~"


def _key(mark: TroubleMark) -> str:
    return f"{mark.at_ms:013d}#{mark.session_id}"


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
        """Up to `limit` entries from `since_ms` to `until_ms`, newest first, from one
        day; at the day's end the token goes on with the day before.

        Raises:
            BadPageToken: the page token is not one this listing issued.
        """
        high = f"{until_ms:013d}{_END_OF_MS}"
        if next_token is not None:
            high = min(high, page_tokens.decode_key(next_token, tenant, PAGE_SCOPE))
        high_ms = int(high[:13])
        if high_ms < since_ms:
            return TroublePage([], None)
        with self._lock:
            day = [
                m
                for (owner, day_index, _), m in self._marks.items()
                if owner == tenant and day_index == high_ms // DAY_MS
            ]
        newest = sorted(
            (m for m in day if m.at_ms >= since_ms and _key(m) < high), key=_key, reverse=True
        )
        kept = newest[:limit]
        day_start = high_ms - high_ms % DAY_MS
        if len(newest) > limit:
            token: str | None = page_tokens.encode_key(tenant, PAGE_SCOPE, _key(kept[-1]))
        elif day_start > since_ms:
            token = page_tokens.encode_key(tenant, PAGE_SCOPE, f"{day_start - 1:013d}{_END_OF_MS}")
        else:
            token = None
        return TroublePage(kept, token)
