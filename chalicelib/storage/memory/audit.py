"""In-memory audit trail."""

from __future__ import annotations

import threading

from chalicelib.quota.events import AuditEvent
from chalicelib.storage import page_tokens
from chalicelib.storage.audit_port import AuditLog
from chalicelib.storage.ports import (
    AuditFilter,
    AuditPage,
    StoreRejected,
)
from chalicelib.storage.records import event_key


class MemoryAuditLog(AuditLog):
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
            if event_key(event) in events:
                raise StoreRejected("writing the audit trail", "ConditionalCheckFailed")
            events[event_key(event)] = event

    def _after(
        self, tenant: str, session_id: str, after: str, count: int
    ) -> tuple[list[AuditEvent], bool]:
        """`AuditLog._after` over the events in memory: all of them in one read."""
        with self._lock:
            events = self._events.get((tenant, session_id), {})
            return [events[k] for k in sorted(k for k in events if k > after)[:count]], False

    def feed(
        self, tenant: str, where: AuditFilter, limit: int = 50, next_token: str | None = None
    ) -> AuditPage:
        """The tenant's events that `where` holds, newest first.

        Raises:
            BadPageToken: the token is not one this listing issued.
        """
        scope = where.scope()
        before = None if next_token is None else page_tokens.decode(next_token, tenant, scope)
        until = None if where.until_ms is None else f"{where.until_ms:013d}#~"
        since = f"{where.since_ms:013d}"
        with self._lock:
            found = [
                event
                for (owner, _), events in self._events.items()
                if owner == tenant
                for event in events.values()
            ]
        kept = sorted(
            (
                e
                for e in found
                if event_key(e) >= since
                and (until is None or event_key(e) <= until)
                and (before is None or event_key(e) < before)
                and (where.type is None or e.type == where.type)
                and (where.principal is None or e.principal == where.principal)
                and (where.server is None or e.server == where.server)
            ),
            key=event_key,
            reverse=True,
        )
        page = kept[:limit]
        token = (
            page_tokens.encode(tenant, scope, event_key(page[-1])) if len(kept) > limit else None
        )
        return AuditPage(events=page, next_token=token)
