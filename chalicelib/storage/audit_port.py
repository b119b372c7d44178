"""The audit log port (`ports.AuditLog`), apart from `ports` to keep each module to one
job: an abstract class, since a session's page is the same on every backend (oldest first
from `since_ms`, the token going on after the page's last event). An adapter appends,
reads the tenant's feed, and reads a session's events after a sort key
(`records.event_key`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from chalicelib.storage import page_tokens
from chalicelib.storage.records import AuditPage, event_key

if TYPE_CHECKING:
    from chalicelib.quota.events import AuditEvent
    from chalicelib.storage.records import AuditFilter


class AuditLog(ABC):
    """The append-only audit trail."""

    @abstractmethod
    def put(self, event: AuditEvent) -> None:
        """Append one event; never overwrites.

        Raises:
            StorageError: the store failed.
        """

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
            BadPageToken: `next_token` is not one this listing issued.
            StorageError: the store failed.
        """
        # A key of no event: it sorts before every "<ms>#<event id>" of that millisecond.
        after = f"{since_ms:013d}"
        if next_token is not None:
            after = max(after, page_tokens.decode(next_token, tenant, session_id))
        # One more than asked, so that the last page says there is no next one.
        events, more = self._after(tenant, session_id, after, limit + 1)
        kept = events[:limit]
        token = None
        if (more or len(events) > limit) and kept:
            token = page_tokens.encode(tenant, session_id, event_key(kept[-1]))
        return AuditPage(events=kept, next_token=token)

    @abstractmethod
    def feed(
        self, tenant: str, where: AuditFilter, limit: int = 50, next_token: str | None = None
    ) -> AuditPage:
        """Every event of the tenant that `where` holds, of every session and none, newest
        first, in one read of one index whatever the tenant's history. A page may hold
        fewer than `limit` events when more follow (`next_token`) if `where` combines
        filters.

        Raises:
            BadPageToken: `next_token` is not one this listing issued.
            StorageError: the store failed.
        """

    @abstractmethod
    def _after(
        self, tenant: str, session_id: str, after: str, count: int
    ) -> tuple[list[AuditEvent], bool]:
        """Up to `count` of the session's events whose sort key is above `after`, oldest
        first, and whether the read stopped short of the end (more may follow).

        Raises:
            StorageError: the store failed.
        """
