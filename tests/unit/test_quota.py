from __future__ import annotations

from chalicelib.clock import iso_utc
from chalicelib.quota import (
    QUOTA_EXCEEDED,
    Attempt,
    CallRecord,
    Decision,
    Refusal,
    SessionSnapshot,
    call_id_key,
    explain_refusal,
)
from tests.support import T0

HOUR = 3_600_000


def attempt(call_id: str | None = None, now: int = T0) -> Attempt:
    return Attempt(
        tenant="demo",
        session_id="s1",
        tool="delete_tag",
        category="write",
        base_limit=15,
        now_ms=now,
        idle_ms=HOUR,
        all_categories=("read", "write"),
        call_id=call_id,
    )


def test_record_round_trips_compactly() -> None:
    record = CallRecord(T0, "write", "delete_tag", False, "a|b|c", "id-1")
    assert record.encode().endswith("|write|delete_tag|0")
    assert len(record.encode()) <= 30
    assert CallRecord.decode(record.encode(), "id-1", principal="a|b|c") == record
    bare = CallRecord(T0, "read", "search", True)
    assert CallRecord.decode(bare.encode(), None) == bare


def test_long_call_ids_are_stored_as_a_short_stable_hash() -> None:
    assert call_id_key("17") == "17"
    long_id = "4f1c2d9e-0b7a-4c55-9e51-8d3f6a2b1c00"
    key = call_id_key(long_id)
    assert key.startswith("~") and len(key) == 16 and key == call_id_key(long_id)
    assert key != call_id_key(long_id[:-1] + "1")


def test_refusal_reasons_mirror_the_condition_in_order() -> None:
    full = SessionSnapshot(last_seen_ms=T0, started_ms=T0, counts={"write": 15})
    assert explain_refusal(full, attempt()) is Refusal.OVER_LIMIT
    idle = SessionSnapshot(last_seen_ms=T0 - HOUR - 1, started_ms=T0, counts={"write": 15})
    assert explain_refusal(idle, attempt()) is Refusal.EXPIRED
    at_edge = SessionSnapshot(last_seen_ms=T0 - HOUR, started_ms=T0, counts={"write": 15})
    assert explain_refusal(at_edge, attempt()) is Refusal.OVER_LIMIT
    suspended = SessionSnapshot(
        last_seen_ms=T0 - 5 * HOUR, started_ms=T0, suspended=True, counts={"write": 1}
    )
    assert explain_refusal(suspended, attempt()) is Refusal.SUSPENDED
    seen = SessionSnapshot(
        last_seen_ms=T0,
        started_ms=T0,
        counts={"write": 3},
        calls=(CallRecord(T0, "write", "delete_tag", True, None, "rpc-7"),),
    )
    assert explain_refusal(seen, attempt("rpc-7")) is Refusal.DUPLICATE
    raised = SessionSnapshot(
        last_seen_ms=T0, started_ms=T0, counts={"write": 15}, raised={"write": 25}
    )
    assert explain_refusal(raised, attempt()) is Refusal.STALE


def test_a_raise_never_lowers_the_effective_limit() -> None:
    snapshot = SessionSnapshot(last_seen_ms=T0, started_ms=T0, raised={"write": 10})
    assert snapshot.limit_for("write", 15) == 15
    assert snapshot.limit_for("write", 5) == 10


def test_blocked_message_says_what_happened_and_what_to_do() -> None:
    decision = Decision(
        allowed=False,
        session_id="agent-42",
        tool="delete_tag",
        category="write",
        used=15,
        limit=15,
        now_ms=T0,
        resets_at_ms=T0 + HOUR,
        reason=QUOTA_EXCEEDED,
    )
    message = decision.message
    for needle in ("'write'", "15/15", "agent-42", "NOT run", "2026-12-02T13:00:00Z"):
        assert needle in message
    assert "administrator" in message and "raise" in message
    assert decision.retry_after_seconds == 3600
    assert decision.remaining == 0


def test_iso_utc_pads_the_year() -> None:
    assert iso_utc(-59_000_000_000_000) == "0100-05-13T15:06:40Z"
    assert iso_utc(T0) == "2026-12-02T12:00:00Z"
