"""Administrator actions on sessions, the audit log, grants and tokens, on every backend
(memory, moto, dynalite), through the ports' public interface."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.quota.core import RefusalReason, SessionKey, SessionState
from chalicelib.quota.events import AuditEvent, EventType
from chalicelib.quota.grants import Grant
from chalicelib.storage.ports import BadPageToken, RecordChanged, RecordNotFound, StorageError
from chalicelib.storage.records import TokenRecord
from tests.integration.test_counter_store import (
    IDLE,
    IDLE_MS,
    READS,
    S1,
    allowed,
    change,
    checks,
    read,
    refused,
    write,
)
from tests.support import FixedClock, Stores

# -- raise -----------------------------------------------------------------------------


def test_raise_on_an_active_session_lifts_the_limit_in_place(
    stores: Stores, clock: FixedClock
) -> None:
    service, counters = checks(stores.counters, clock), stores.counters
    for _ in range(16):
        service.check("demo", write())
    after = counters.raise_limit(S1, change(clock, 20), counters.get(S1))
    assert after.raised == {"write": 20} and after.counts == {"write": 15}
    answers = [service.check("demo", write()) for _ in range(6)]
    assert [a.allowed for a in answers] == [True] * 5 + [False]
    assert answers[-1].used == 20 and answers[-1].limit == 20


def test_raise_never_lowers_a_limit(stores: Stores, clock: FixedClock) -> None:
    service, counters = checks(stores.counters, clock), stores.counters
    service.check("demo", write())
    seen = counters.get(S1)
    counters.raise_limit(S1, change(clock, 40), seen)
    with pytest.raises(RecordChanged):
        counters.raise_limit(S1, change(clock, 30), seen)
    assert counters.raise_limit(S1, change(clock, 40), seen).raised == {"write": 40}
    stored = counters.get(S1)
    assert stored is not None and stored.raised == {"write": 40}
    assert service.check("demo", write()).limit == 40


def test_raise_on_an_idle_session_starts_fresh_counters(stores: Stores, clock: FixedClock) -> None:
    service, counters = checks(stores.counters, clock), stores.counters
    for _ in range(20):
        service.check("demo", read())
        service.check("demo", write())
    counters.raise_limit(S1, change(clock, 100, "read"), counters.get(S1))
    clock.advance(IDLE + 5)
    seen = counters.get(S1)
    assert seen is not None and seen.state(clock(), IDLE_MS) is SessionState.EXPIRED
    after = counters.raise_limit(S1, change(clock, 30), seen)
    assert after.counts == {} and after.raised == {"write": 30} and after.refused == {}
    assert after.state(clock(), IDLE_MS) is SessionState.ACTIVE
    first = allowed(service.check("demo", write()))
    assert first.used == 1 and first.limit == 30
    assert service.check("demo", read()).limit == READS  # the earlier raise went with the rest


def test_raise_on_an_idle_suspended_session_keeps_the_raise_for_the_counters_after(
    stores: Stores, clock: FixedClock
) -> None:
    # Idle expiry holds while suspended: the raise applies to the counters that start
    # now, and survives the next (refused) attempt and the resume.
    service, counters = checks(stores.counters, clock), stores.counters
    for _ in range(16):
        service.check("demo", write())
    counters.suspend(S1, "look first", clock())
    clock.advance(IDLE + 5)
    after = counters.raise_limit(S1, change(clock, 30), counters.get(S1))
    assert after.suspended and after.counts == {} and after.raised == {"write": 30}
    assert refused(service.check("demo", write())).reason is RefusalReason.SESSION_SUSPENDED
    counters.resume(S1, clock(), IDLE_MS)
    first = allowed(service.check("demo", write()))
    assert first.used == 1 and first.limit == 30


def test_raise_on_an_idle_session_touched_meanwhile_is_refused(
    stores: Stores, clock: FixedClock
) -> None:
    service, counters = checks(stores.counters, clock), stores.counters
    service.check("demo", write())
    clock.advance(IDLE + 5)
    seen = counters.get(S1)
    service.check("demo", write())  # the counters started again in between
    with pytest.raises(RecordChanged):
        counters.raise_limit(S1, change(clock, 30), seen)


def test_raise_ahead_of_an_unseen_session(stores: Stores, clock: FixedClock) -> None:
    service, counters = checks(stores.counters, clock), stores.counters
    later = SessionKey("demo", "later")
    created = counters.raise_limit(later, change(clock, 25), None)
    assert created.raised == {"write": 25} and created.counts == {}
    with pytest.raises(RecordChanged):  # it is no longer unseen
        counters.raise_limit(later, change(clock, 30), None)
    answers = [service.check("demo", write("later")) for _ in range(26)]
    assert [a.allowed for a in answers].count(True) == 25 and answers[-1].limit == 25


# -- suspend and resume ----------------------------------------------------------------


def test_a_suspended_session_refuses_everything_whatever_the_idle_time(
    stores: Stores, clock: FixedClock
) -> None:
    service, counters = checks(stores.counters, clock), stores.counters
    service.check("demo", read())
    suspended = counters.suspend(S1, "runaway", clock())
    assert suspended.suspended and suspended.suspended_reason == "runaway"
    for request in (read(), write(), write(call_id="rpc-1")):
        answer = refused(service.check("demo", request))
        assert answer.reason is RefusalReason.SESSION_SUSPENDED and not answer.first_exhaustion
        assert answer.remaining == 0 and "NOT run" in answer.message
    clock.advance(IDLE * 3)  # suspension survives idle expiry; the counters do not
    assert refused(service.check("demo", read())).reason is RefusalReason.SESSION_SUSPENDED
    clock.advance(IDLE * 3)
    stored = counters.get(S1)
    assert stored is not None and stored.state(clock(), IDLE_MS) is SessionState.SUSPENDED
    assert stored.counts == {} and [c.allowed for c in stored.calls] == [False]


def test_suspending_an_unseen_session_refuses_its_first_check(
    stores: Stores, clock: FixedClock
) -> None:
    service, counters = checks(stores.counters, clock), stores.counters
    ahead = SessionKey("demo", "ahead")
    assert counters.suspend(ahead, "pre-emptive", clock()).suspended
    answer = refused(service.check("demo", read("ahead")))
    assert answer.reason is RefusalReason.SESSION_SUSPENDED


def test_resume_lifts_the_suspension_and_keeps_the_counters(
    stores: Stores, clock: FixedClock
) -> None:
    service, counters = checks(stores.counters, clock), stores.counters
    for _ in range(15):
        service.check("demo", write())
    counters.suspend(S1, "looping", clock())
    assert not service.check("demo", read()).allowed
    resumed = counters.resume(S1, clock(), IDLE_MS)
    assert not resumed.suspended and resumed.suspended_reason is None
    assert resumed.counts == {"write": 15}
    assert refused(service.check("demo", write())).reason is RefusalReason.QUOTA_EXCEEDED
    assert service.check("demo", read()).used == 1
    with pytest.raises(RecordNotFound):
        counters.resume(SessionKey("demo", "nobody"), clock(), IDLE_MS)


def test_resume_keeps_the_idle_clock_so_stale_counters_start_again(
    stores: Stores, clock: FixedClock
) -> None:
    service, counters = checks(stores.counters, clock), stores.counters
    for _ in range(16):
        service.check("demo", write())
    counters.suspend(S1, "looping", clock())
    clock.advance(IDLE + 10)
    resumed = counters.resume(S1, clock(), IDLE_MS)
    assert resumed.state(clock(), IDLE_MS) is SessionState.EXPIRED
    assert service.check("demo", write()).used == 1


# -- reset -----------------------------------------------------------------------------


def test_reset_zeroes_the_counters_and_keeps_raises_suspension_and_last_calls(
    stores: Stores, clock: FixedClock
) -> None:
    service, counters = checks(stores.counters, clock), stores.counters
    for _ in range(16):
        service.check("demo", write())
    counters.raise_limit(S1, change(clock, 20), counters.get(S1))
    counters.suspend(S1, "looping", clock())
    before = counters.get(S1)
    clock.advance(1)
    after = counters.reset(S1, clock(), IDLE_MS)
    assert after.counts == {} and after.refused == {} and after.raised == {"write": 20}
    assert after.suspended and after.suspended_reason == "looping"
    assert before is not None and after.calls == before.calls  # the evidence stays
    assert refused(service.check("demo", write())).reason is RefusalReason.SESSION_SUSPENDED
    clock.advance(1)
    counters.resume(S1, clock(), IDLE_MS)
    clock.advance(1)
    counters.reset(S1, clock(), IDLE_MS)
    first = allowed(service.check("demo", write()))
    assert first.used == 1 and first.limit == 20  # the raise stayed through both resets
    counters.suspend(S1, "again", clock())
    clock.advance(IDLE * 2)  # idle expiry while suspended: counters and raise go
    assert refused(service.check("demo", write())).reason is RefusalReason.SESSION_SUSPENDED
    counters.resume(S1, clock(), IDLE_MS)
    assert allowed(service.check("demo", write())).limit == 15


def test_reset_of_an_active_session_counts_again_from_zero(
    stores: Stores, clock: FixedClock
) -> None:
    service, counters = checks(stores.counters, clock), stores.counters
    answers = [service.check("demo", write()) for _ in range(17)]
    assert refused(answers[15]).first_exhaustion
    after = counters.reset(S1, clock(), IDLE_MS)  # in the same millisecond as the checks
    assert after.counts == {} and after.state(clock(), IDLE_MS) is SessionState.ACTIVE
    again = [service.check("demo", write()) for _ in range(17)]
    assert [a.used for a in again[:15]] == list(range(1, 16))
    assert refused(again[15]).first_exhaustion  # the next exhaustion is news again
    assert counters.reset(S1, clock(), IDLE_MS).counts == {}  # twice in one millisecond
    with pytest.raises(RecordNotFound):
        counters.reset(SessionKey("demo", "nobody"), clock(), IDLE_MS)


# -- audit -----------------------------------------------------------------------------


def event(at_ms: int, reason: str, session: str = "s1", tenant: str = "demo") -> AuditEvent:
    return AuditEvent(
        at_ms,
        EventType.SESSION_RESET,
        tenant,
        session,
        "me",
        reason=reason,
        before={"used": {"write": int(reason[1:])}},
    )


def test_audit_pages_in_time_order(stores: Stores, clock: FixedClock) -> None:
    audit = stores.audit
    events = [event(clock() + i * 1000, f"r{i}") for i in range(7)]
    for e in (events[3], events[0], events[6], events[1], events[5], events[2], events[4]):
        audit.put(e)
    first = audit.page("demo", "s1", limit=3)
    assert first.events == events[:3] and first.next_token
    second = audit.page("demo", "s1", limit=3, next_token=first.next_token)
    assert second.events == events[3:6] and second.next_token
    third = audit.page("demo", "s1", limit=3, next_token=second.next_token)
    assert third.events == events[6:] and third.next_token is None
    assert audit.page("demo", "s1").events == events
    assert audit.page("demo", "s1").next_token is None


@pytest.mark.parametrize("limit", [1, 2, 3, 6])
def test_audit_gives_a_next_token_only_when_more_events_follow(
    stores: Stores, clock: FixedClock, limit: int
) -> None:
    audit = stores.audit
    events = [event(clock() + i, f"r{i}") for i in range(6)]
    for e in events:
        audit.put(e)
    pages = [audit.page("demo", "s1", limit=limit)]
    while pages[-1].next_token is not None:
        pages.append(audit.page("demo", "s1", limit=limit, next_token=pages[-1].next_token))
    assert [p.events for p in pages] == [events[i : i + limit] for i in range(0, 6, limit)]


def test_audit_pages_from_a_time(stores: Stores, clock: FixedClock) -> None:
    audit = stores.audit
    for i in range(5):
        audit.put(event(clock() + i * 1000, f"r{i}"))
    since = audit.page("demo", "s1", since_ms=clock() + 3000)
    assert [e.reason for e in since.events] == ["r3", "r4"] and since.next_token is None
    head = audit.page("demo", "s1", since_ms=clock() + 1000, limit=2)
    assert [e.reason for e in head.events] == ["r1", "r2"]
    rest = audit.page("demo", "s1", since_ms=clock() + 1000, limit=2, next_token=head.next_token)
    assert [e.reason for e in rest.events] == ["r3", "r4"]
    assert audit.page("demo", "s1", since_ms=clock() + 9000).events == []


def test_audit_keeps_sessions_and_tenants_apart(stores: Stores, clock: FixedClock) -> None:
    audit = stores.audit
    audit.put(event(clock(), "r1"))
    audit.put(event(clock(), "r2", session="s2"))
    audit.put(event(clock(), "r3", tenant="other"))
    assert [e.reason for e in audit.page("demo", "s1").events] == ["r1"]
    assert [e.reason for e in audit.page("demo", "s2").events] == ["r2"]
    assert [e.reason for e in audit.page("other", "s1").events] == ["r3"]
    assert audit.page("other", "s2").events == []


def test_audit_refuses_page_tokens_it_did_not_issue(stores: Stores, clock: FixedClock) -> None:
    audit = stores.audit
    for i in range(3):
        audit.put(event(clock() + i, f"r{i}"))
        audit.put(event(clock() + i, f"r{i}", tenant="other"))
    token = audit.page("demo", "s1", limit=1).next_token
    assert token is not None
    for tenant, session in (("demo", "s2"), ("other", "s1")):
        with pytest.raises(BadPageToken):
            audit.page(tenant, session, next_token=token)
    for garbage in ("not-a-token", "", "e30=", token[:-4], "AAAA" + token):
        with pytest.raises(BadPageToken):
            audit.page("demo", "s1", next_token=garbage)


def test_audit_events_are_never_overwritten(stores: Stores, clock: FixedClock) -> None:
    audit = stores.audit
    original = event(clock(), "r1")
    audit.put(original)
    audit.put(event(clock(), "r2"))  # the same millisecond is another event
    forged = AuditEvent(
        original.at_ms, EventType.SESSION_RAISED, "demo", "s1", "mallory", "r9",
        event_id=original.event_id,
    )  # fmt: skip
    with pytest.raises(StorageError):
        audit.put(forged)
    events = audit.page("demo", "s1").events
    assert sorted(e.reason or "" for e in events) == ["r1", "r2"] and original in events


# -- grants ----------------------------------------------------------------------------


def grant(grant_id: str, clock: FixedClock, tenant: str = "demo", limit: int = 50) -> Grant:
    now = clock()
    return Grant(grant_id, tenant, "bot", "write", limit, now, now + 1000, "why", "me", now)


def test_grants_put_list_delete(stores: Stores, clock: FixedClock) -> None:
    grants = stores.grants
    g2, g1, other = grant("g-2", clock), grant("g-1", clock, limit=60), grant("g-1", clock, "x")
    for g in (g2, g1, other):
        grants.put(g)
    assert grants.list("demo") == [g1, g2]  # in id order
    assert grants.list("x") == [other] and grants.list("nobody") == []
    with pytest.raises(StorageError):
        grants.put(grant("g-1", clock, limit=99))  # an id is never reused
    assert grants.delete("demo", "g-1") == g1
    assert grants.list("demo") == [g2] and grants.list("x") == [other]
    with pytest.raises(RecordNotFound):
        grants.delete("demo", "g-1")
    with pytest.raises(RecordNotFound):
        grants.delete("nobody", "g-2")  # another tenant's id is not found
    assert grants.list("demo") == [g2]


# -- tokens ----------------------------------------------------------------------------


def token(token_id: str, tenant: str, created_at_ms: int, role: str = "server") -> TokenRecord:
    return TokenRecord(token_id, f"hash-{token_id}", tenant, role, f"n-{token_id}", created_at_ms)


def test_tokens_put_get_list(stores: Stores, clock: FixedClock) -> None:
    tokens = stores.tokens
    t1, t2 = token("aaa111", "demo", clock() + 2), token("bbb222", "demo", clock() + 1, "admin")
    t3 = token("ccc333", "other", clock())
    for t in (t1, t2, t3):
        tokens.put(t)
    assert tokens.get("aaa111") == t1 and tokens.get("nope") is None
    with pytest.raises(StorageError):
        tokens.put(token("aaa111", "other", clock()))  # an id is never reused
    assert tokens.get("aaa111") == t1
    assert tokens.list() == [t3, t2, t1]  # oldest first
    assert tokens.list("demo") == [t2, t1] and tokens.list("nobody") == []


def test_revoking_a_token_keeps_the_first_time(stores: Stores, clock: FixedClock) -> None:
    tokens = stores.tokens
    tokens.put(token("aaa111", "demo", clock()))
    first = tokens.revoke("aaa111", clock() + 5)
    assert first.revoked and first.revoked_at_ms == clock() + 5
    again = tokens.revoke("aaa111", clock() + 99)
    assert again.revoked_at_ms == clock() + 5
    stored = tokens.get("aaa111")
    assert stored is not None and stored.revoked_at_ms == clock() + 5
    assert [t.revoked for t in tokens.list("demo")] == [True]
    with pytest.raises(RecordNotFound):
        tokens.revoke("nope", clock())
    assert tokens.get("nope") is None


def test_a_tokens_principals_are_kept_in_order_through_get_list_and_revoke(
    stores: Stores, clock: FixedClock
) -> None:
    tokens = stores.tokens
    bound = replace(token("aaa111", "demo", clock()), principals=("zed", "bot-*", "a?c[0-9]"))
    tokens.put(bound)
    tokens.put(token("bbb222", "demo", clock() + 1))
    assert tokens.get("aaa111") == bound
    assert [t.principals for t in tokens.list("demo")] == [bound.principals, ()]
    assert tokens.revoke("aaa111", clock() + 5).principals == bound.principals
