"""The tenant-wide audit trail and the index of sessions in trouble, on every backend
(memory, moto, dynalite), through the ports' public interface."""

from __future__ import annotations

import pytest

from chalicelib.quota.events import TENANT_SCOPE, AuditEvent, EventType
from chalicelib.storage.ports import (
    AuditFilter,
    AuditLog,
    BadPageToken,
    TroubleIndex,
    TroubleKind,
    TroubleMark,
)
from tests.support import FixedClock, Stores

DAY_MS = 86_400_000


def event(
    at_ms: int,
    session: str,
    kind: EventType = EventType.QUOTA_EXCEEDED,
    principal: str | None = None,
    server: str | None = None,
    tenant: str = "demo",
) -> AuditEvent:
    return AuditEvent(
        at_ms, kind, tenant, session, "me", principal=principal, server=server, detail={"n": 1}
    )


def every_page(audit: AuditLog, where: AuditFilter, limit: int) -> list[list[AuditEvent]]:
    pages, token = [], None
    while True:
        page = audit.feed("demo", where, limit, token)
        pages.append(page.events)
        if page.next_token is None:
            return pages
        token = page.next_token


def test_the_feed_holds_every_event_of_the_tenant_newest_first(
    stores: Stores, clock: FixedClock
) -> None:
    now = clock()
    events = [
        event(now + 1, "s1", EventType.QUOTA_EXCEEDED, "bot", "inventory"),
        event(now + 2, "s1", EventType.NOTIFICATION_SENT, "bot", "inventory"),
        event(now + 3, TENANT_SCOPE, EventType.TOKEN_CREATED),
        event(now + 4, "s2", EventType.SESSION_RAISED, "other", "billing"),
        event(now + 5, TENANT_SCOPE, EventType.PRINCIPAL_SUSPENDED, "bot"),
        event(now + 6, "s3", EventType.SESSION_SUSPENDED, None, "inventory"),
    ]
    for e in events:
        stores.audit.put(e)
    stores.audit.put(event(now + 7, "s1", tenant="elsewhere"))
    newest_first = events[::-1]
    assert [e for page in every_page(stores.audit, AuditFilter(), 2) for e in page] == newest_first
    assert stores.audit.feed("demo", AuditFilter()).events == newest_first
    # One facet at a time, and facets together; each keeps the order.
    assert stores.audit.feed("demo", AuditFilter(principal="bot")).events == [
        events[4],
        events[1],
        events[0],
    ]
    assert stores.audit.feed("demo", AuditFilter(server="inventory")).events == [
        events[5],
        events[1],
        events[0],
    ]
    by_type = AuditFilter(type=EventType.TOKEN_CREATED)
    assert stores.audit.feed("demo", by_type).events == [events[2]]
    both = AuditFilter(type=EventType.NOTIFICATION_SENT, principal="bot")
    assert [e for p in every_page(stores.audit, both, 1) for e in p] == [events[1]]
    # Time: from `since` to `until`, both inclusive.
    window = AuditFilter(since_ms=now + 2, until_ms=now + 4)
    assert stores.audit.feed("demo", window).events == [events[3], events[2], events[1]]
    # Principal and server come back as they went in.
    assert stores.audit.feed("demo", AuditFilter(), 1).events[0].server == "inventory"


@pytest.mark.parametrize("limit", [1, 2, 3, 5])
def test_feed_pages_cover_everything_once(stores: Stores, clock: FixedClock, limit: int) -> None:
    events = [event(clock() + i * 10, f"s{i % 3}") for i in range(5)]
    for e in events:
        stores.audit.put(e)
    pages = every_page(stores.audit, AuditFilter(), limit)
    assert [e for page in pages for e in page] == events[::-1]
    assert all(len(page) <= limit for page in pages)


def test_feed_tokens_are_bound_to_the_tenant_and_the_filter(
    stores: Stores, clock: FixedClock
) -> None:
    for i in range(3):
        stores.audit.put(event(clock() + i, "s1", principal="bot"))
    token = stores.audit.feed("demo", AuditFilter(), 1).next_token
    assert token is not None
    with pytest.raises(BadPageToken):
        stores.audit.feed("elsewhere", AuditFilter(), 1, token)
    with pytest.raises(BadPageToken):
        stores.audit.feed("demo", AuditFilter(principal="bot"), 1, token)
    with pytest.raises(BadPageToken):
        stores.audit.feed("demo", AuditFilter(), 1, "a1.garbage")


def mark(index: TroubleIndex, at_ms: int, session: str, tenant: str = "demo") -> TroubleMark:
    m = TroubleMark(tenant, session, TroubleKind.EXHAUSTED, at_ms, "write", "bot")
    index.mark(m)
    return m


def listed(index: TroubleIndex, since_ms: int, until_ms: int, limit: int) -> list[list[str]]:
    pages, token = [], None
    for _ in range(50):
        page = index.page("demo", since_ms, until_ms, limit, token)
        pages.append([m.session_id for m in page.marks])
        if page.next_token is None:
            return pages
        token = page.next_token
    raise AssertionError("the listing never ended")


def test_trouble_lists_a_days_entries_newest_first_day_by_day(
    stores: Stores, clock: FixedClock
) -> None:
    now = clock()
    mark(stores.trouble, now - 3 * DAY_MS, "old")
    mark(stores.trouble, now - DAY_MS - 5, "yesterday")
    for i in range(4):
        mark(stores.trouble, now - 100 + i, f"today-{i}")
    mark(stores.trouble, now - 2 * DAY_MS, "moved")
    mark(stores.trouble, now - 60, "moved")
    mark(stores.trouble, now - 50, "moved")  # the same day: overwrites the entry before
    mark(stores.trouble, now, "other-tenant", tenant="elsewhere")
    # A session marked on two days has an entry in each (the listing keeps the newest).
    expected = ["moved", "today-3", "today-2", "today-1", "today-0", "yesterday", "moved", "old"]
    for limit in (1, 2, 3, 10):
        pages = listed(stores.trouble, now - 4 * DAY_MS, now, limit)
        assert [s for page in pages for s in page] == expected, limit
        assert all(len(page) <= limit for page in pages)
    # The default window of the listing: the last 24 hours.
    day = [s for page in listed(stores.trouble, now - DAY_MS, now, 50) for s in page]
    assert day == expected[:5]
    with pytest.raises(BadPageToken):
        stores.trouble.page("demo", now - DAY_MS, now, 1, "k1.bW92ZWQ.0123456789abcdef")
