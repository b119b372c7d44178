"""In-memory index of sessions in trouble."""

from __future__ import annotations

import threading

from chalicelib.storage import page_tokens
from chalicelib.storage.ports import TroubleMark, TroublePage

PAGE_SCOPE = "trouble"


def _at_key(mark: TroubleMark) -> str:
    return f"{mark.at_ms:013d}#{mark.session_id}"


class MemoryTroubleIndex:
    """The index of sessions in trouble in a dict, one entry per session."""

    def __init__(self) -> None:
        self._marks: dict[tuple[str, str], TroubleMark] = {}
        self._lock = threading.Lock()

    def mark(self, mark: TroubleMark) -> None:
        """Record a session's latest trouble."""
        with self._lock:
            self._marks[(mark.tenant, mark.session_id)] = mark

    def page(
        self, tenant: str, since_ms: int, until_ms: int, limit: int, next_token: str | None = None
    ) -> TroublePage:
        """Up to `limit` entries from `since_ms` to `until_ms`, newest first.

        Raises:
            BadPageToken: the page token is not one this listing issued.
        """
        before = None
        if next_token is not None:
            before = page_tokens.decode_key(next_token, tenant, PAGE_SCOPE)
        with self._lock:
            found = [
                m
                for m in self._marks.values()
                if m.tenant == tenant and since_ms <= m.at_ms <= until_ms
            ]
        kept = sorted(
            (m for m in found if before is None or _at_key(m) < before), key=_at_key, reverse=True
        )
        page = kept[:limit]
        more = len(kept) > limit
        token = page_tokens.encode_key(tenant, PAGE_SCOPE, _at_key(page[-1])) if more else None
        return TroublePage(page, token)
