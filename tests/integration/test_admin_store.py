"""Admin updates, audit and grants on moto and on dynalite (which validates expressions
the way DynamoDB does)."""

from __future__ import annotations

import pytest

from chalicelib.audit import AuditEvent
from chalicelib.errors import NotFound
from chalicelib.grants import Grant
from chalicelib.storage.audit import AuditStore
from chalicelib.storage.counters import CounterStore, SessionChanged
from chalicelib.storage.grants import GrantStore
from tests.integration.test_counter_store import IDLE, item, make_service, read, write
from tests.support import Backend, FixedClock

CATS = ("read", "write")
IDLE_MS = IDLE * 1000


def store(backend: Backend) -> CounterStore:
    return CounterStore(backend.client, backend.settings.counters_table)


def test_raise_on_an_active_session_lifts_the_limit_at_once(
    backend: Backend, clock: FixedClock
) -> None:
    service, counters = make_service(backend, clock), store(backend)
    for _ in range(16):
        service.check("demo", write())
    seen = counters.get("demo#s1")
    after = counters.raise_limit("demo#s1", "write", 20, clock(), IDLE_MS, CATS, seen)
    assert after.raised == {"write": 20} and after.counts["write"] == 15
    allowed = [service.check("demo", write()).allowed for _ in range(6)]
    assert allowed == [True] * 5 + [False]


def test_a_concurrent_higher_raise_is_never_lowered(backend: Backend, clock: FixedClock) -> None:
    service, counters = make_service(backend, clock), store(backend)
    service.check("demo", write())
    seen = counters.get("demo#s1")
    counters.raise_limit("demo#s1", "write", 40, clock(), IDLE_MS, CATS, seen)
    with pytest.raises(SessionChanged):
        counters.raise_limit("demo#s1", "write", 30, clock(), IDLE_MS, CATS, seen)


def test_raise_on_an_idle_session_starts_fresh_counters(
    backend: Backend, clock: FixedClock
) -> None:
    service, counters = make_service(backend, clock), store(backend)
    for _ in range(20):
        service.check("demo", write())
    clock.advance(IDLE + 5)
    seen = counters.get("demo#s1")
    after = counters.raise_limit("demo#s1", "write", 30, clock(), IDLE_MS, CATS, seen)
    assert after.counts == {} and after.raised == {"write": 30} and after.refused == {}
    assert service.check("demo", write()).used == 1


def test_raise_ahead_of_an_unseen_session(backend: Backend, clock: FixedClock) -> None:
    service, counters = make_service(backend, clock), store(backend)
    counters.raise_limit("demo#later", "write", 25, clock(), IDLE_MS, CATS, None)
    answers = [service.check("demo", write("later")) for _ in range(26)]
    assert [a.allowed for a in answers].count(True) == 25 and answers[-1].limit == 25


def test_suspend_resume_reset(backend: Backend, clock: FixedClock) -> None:
    service, counters = make_service(backend, clock), store(backend)
    for _ in range(15):
        service.check("demo", write())
    suspended = counters.suspend("demo#s1", "looping", clock())
    assert suspended.suspended and suspended.suspended_reason == "looping"
    assert service.check("demo", write()).reason == "session_suspended"
    resumed = counters.resume("demo#s1", counters.get("demo#s1"), IDLE_MS)  # type: ignore[arg-type]
    assert not resumed.suspended
    seen = counters.get("demo#s1")
    assert seen is not None
    reset = counters.reset("demo#s1", seen, clock(), IDLE_MS, CATS)
    assert reset.counts == {} and reset.calls  # the evidence stays
    assert service.check("demo", write()).used == 1
    with pytest.raises(SessionChanged):
        counters.reset("demo#nobody", seen, clock(), IDLE_MS, CATS)


def test_suspended_ahead_of_any_check_is_refused_not_an_error(
    backend: Backend, clock: FixedClock
) -> None:
    service, counters = make_service(backend, clock), store(backend)
    assert counters.suspend("demo#ahead", "pre-emptive", clock()).suspended
    refused = service.check("demo", read("ahead"))
    assert not refused.allowed and refused.reason == "session_suspended"
    counters.raise_limit("demo#raised", "write", 20, clock(), IDLE_MS, CATS, None)
    assert service.check("demo", write("raised")).allowed


def test_resetting_a_suspended_session_keeps_it_without_a_ttl(
    backend: Backend, clock: FixedClock
) -> None:
    service, counters = make_service(backend, clock), store(backend)
    for _ in range(3):
        service.check("demo", write())
    counters.suspend("demo#s1", "looping", clock())
    seen = counters.get("demo#s1")
    assert seen is not None
    counters.reset("demo#s1", seen, clock(), IDLE_MS, CATS)
    stored = item(backend, "demo#s1")
    assert "suspended" in stored and "expires_at" not in stored
    assert service.check("demo", write()).reason == "session_suspended"
    assert "expires_at" not in item(backend, "demo#s1")


def test_resume_keeps_the_idle_clock_so_stale_counters_start_again(
    backend: Backend, clock: FixedClock
) -> None:
    service, counters = make_service(backend, clock), store(backend)
    for _ in range(16):
        service.check("demo", write())
    counters.suspend("demo#s1", "looping", clock())
    clock.advance(IDLE + 10)
    seen = counters.get("demo#s1")
    assert seen is not None
    counters.resume("demo#s1", seen, IDLE_MS)
    assert service.check("demo", write()).used == 1


def test_a_reset_between_refusal_and_its_record_keeps_the_next_email(
    backend: Backend, clock: FixedClock
) -> None:
    counters = store(backend)
    service = make_service(backend, clock)
    for _ in range(15):
        service.check("demo", write())
    original = service._store.record_block

    def reset_first(*args: object, **kwargs: object) -> bool | None:
        seen = counters.get("demo#s1")
        assert seen is not None
        counters.reset("demo#s1", seen, clock(), IDLE_MS, CATS)
        service._store.record_block = original  # type: ignore[method-assign]
        return original(*args, **kwargs)  # type: ignore[arg-type]

    service._store.record_block = reset_first  # type: ignore[method-assign]
    assert service.check("demo", write()).allowed  # evaluated again after the reset
    answers = [service.check("demo", write()) for _ in range(15)]
    assert answers[-1].first_exhaustion and not answers[-1].allowed


def test_a_reused_call_id_is_replayed_a_few_times_then_counted(
    backend: Backend, clock: FixedClock
) -> None:
    service = make_service(backend, clock)
    answers = [service.check("demo", write(call_id="turn-1")) for _ in range(60)]
    assert [a.duplicate for a in answers[:5]] == [False, True, True, True, False]
    assert sum(a.duplicate for a in answers) == 3  # however long the loop runs
    assert [a.allowed for a in answers] == [True] * 18 + [False] * 42
    assert answers[17].used == 15
    clock.advance(61)
    late = service.check("demo", write("s2", call_id="x"))
    clock.advance(61)
    assert not service.check("demo", write("s2", call_id="x")).duplicate
    assert late.used == 1


def test_audit_pages_in_time_order(backend: Backend, clock: FixedClock) -> None:
    audit = AuditStore(backend.client, backend.settings.audit_table)
    for i in range(5):
        clock.advance(1)
        audit.put(
            AuditEvent(
                clock(),
                "session_reset",
                "demo",
                "s1",
                "me",
                reason=f"r{i}",
                before={"used": {"write": i}},
            )
        )
    first = audit.page("demo", "s1", limit=3)
    assert [e.reason for e in first.events] == ["r0", "r1", "r2"] and first.next_token
    rest = audit.page("demo", "s1", limit=3, next_token=first.next_token)
    assert [e.reason for e in rest.events] == ["r3", "r4"]
    assert rest.events[0].before == {"used": {"write": 3}}
    since = audit.page("demo", "s1", since_ms=clock() - 1000)
    assert [e.reason for e in since.events] == ["r3", "r4"]
    assert audit.page("other", "s1").events == []


def test_grants_round_trip(backend: Backend, clock: FixedClock) -> None:
    grants = GrantStore(backend.client, backend.settings.grants_table)
    grant = Grant("g-1", "demo", "bot", "write", 50, clock(), clock() + 1000, "why", "me", clock())
    grants.put(grant)
    assert grants.list("demo") == [grant] and grants.list("other") == []
    assert grants.delete("demo", "g-1") == grant
    with pytest.raises(NotFound):
        grants.delete("demo", "g-1")
