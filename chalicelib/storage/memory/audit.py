"""In-memory audit trail."""

from __future__ import annotations

import threading

from chalicelib.admin.audit import AuditEvent
from chalicelib.storage import page_tokens
from chalicelib.storage.ports import (
    AuditPage,
    StoreRejected,
)


class MemoryAuditLog:
    """The audit log port in a dict of time-ordered lists."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, str], dict[str, AuditEvent]] = {}
        self._lock = threading.Lock()

    def put(self, event: AuditEvent) -> None:
        """Append one event; never overwrites.

        Raises:
            StoreRejected: an event with this sort key exists.
        """
        with self._lock:
            events = self._events.setdefault((event.tenant, event.session_id), {})
            if event.sort_key in events:
                raise StoreRejected("writing the audit trail", "ConditionalCheckFailed")
            events[event.sort_key] = event

    def page(
        self,
        tenant: str,
        session_id: str,
        since_ms: int = 0,
        limit: int = 50,
        next_token: str | None = None,
    ) -> AuditPage:
        """Events of one session (or the tenant scope) from `since_ms`, oldest first.

        Raises:
            BadPageToken: the token is not one this listing issued.
        """
        after = f"{since_ms:013d}"
        inclusive = True
        if next_token is not None:
            after = max(after, page_tokens.decode(next_token, tenant, session_id))
            inclusive = False
        with self._lock:
            events = self._events.get((tenant, session_id), {})
            keys = sorted(k for k in events if k > after or (inclusive and k >= after))
            chosen = [events[k] for k in keys[:limit]]
        more = len(keys) > limit
        token = page_tokens.encode(tenant, session_id, keys[limit - 1]) if more else None
        return AuditPage(events=chosen, next_token=token)
