from __future__ import annotations

from chalicelib.check.alerts import exhaustion_email
from chalicelib.clock import iso_utc
from chalicelib.quota.answers import Allowed, Refused
from chalicelib.quota.core import (
    Attempt,
    CallRecord,
    RefusalReason,
    SessionKey,
    SessionSnapshot,
    SessionState,
    Verdict,
    call_id_key,
    fold_repeats,
    with_call,
)
from chalicelib.quota.policy import load_policy
from chalicelib.quota.rules import admits, explain_refusal
from chalicelib.storage.dynamodb.codec import decode_call, encode_call, stored_id
from tests.support import T0, spent_write

HOUR = 3_600_000
POLICY = load_policy("default.json")


def attempt(call_id: str | None = None, now: int = T0) -> Attempt:
    return Attempt(
        session=SessionKey("demo", "s1"),
        tool="delete_tag",
        category="write",
        base_limit=15,
        now_ms=now,
        idle_ms=HOUR,
        check_id="chk001",
        call_id=call_id,
    )


def test_record_round_trips_compactly_in_the_dynamodb_adapter() -> None:
    records = [
        CallRecord(T0, "write", "delete_tag", False, "a|b|c", "id|1", check_id="chk001"),
        CallRecord(T0, "read", "search", True, check_id="chk002"),
        CallRecord(T0, "read", "search", True, call_id="rpc-7"),
        CallRecord(T0, "read", "search", True, call_id="rpc-7", replay=True, check_id="chk3"),
        CallRecord(T0, "write", "delete_tag", False, check_id="chk004"),
    ]
    for record in records:
        text = encode_call(record)
        assert len(text) <= 30
        assert decode_call(text, stored_id(record), record.principal) == record
    assert encode_call(records[0]).endswith("|write|delete_tag|0")


def test_long_call_ids_are_stored_as_a_short_stable_hash() -> None:
    assert call_id_key("17") == "17"
    long_id = "4f1c2d9e-0b7a-4c55-9e51-8d3f6a2b1c00"
    key = call_id_key(long_id)
    assert key.startswith("~") and len(key) == 16 and key == call_id_key(long_id)
    assert key != call_id_key(long_id[:-1] + "1")


def test_refusal_reasons_mirror_the_condition_in_order() -> None:
    full = SessionSnapshot(last_seen_ms=T0, started_ms=T0, counts={"write": 15})
    assert explain_refusal(full, attempt()) is Verdict.OVER_LIMIT
    idle = SessionSnapshot(last_seen_ms=T0 - HOUR - 1, started_ms=T0, counts={"write": 15})
    assert explain_refusal(idle, attempt()) is Verdict.EXPIRED
    at_edge = SessionSnapshot(last_seen_ms=T0 - HOUR, started_ms=T0, counts={"write": 15})
    assert explain_refusal(at_edge, attempt()) is Verdict.OVER_LIMIT
    suspended = SessionSnapshot(
        last_seen_ms=T0 - 5 * HOUR, started_ms=T0, suspended=True, counts={"write": 1}
    )
    assert explain_refusal(suspended, attempt()) is Verdict.SUSPENDED
    seen = SessionSnapshot(
        last_seen_ms=T0,
        started_ms=T0,
        counts={"write": 3},
        calls=(CallRecord(T0, "write", "delete_tag", True, None, "rpc-7"),),
    )
    assert explain_refusal(seen, attempt("rpc-7")) is Verdict.DUPLICATE
    raised = SessionSnapshot(
        last_seen_ms=T0, started_ms=T0, counts={"write": 15}, raised={"write": 25}
    )
    assert explain_refusal(raised, attempt()) is Verdict.STALE


def test_a_raise_never_lowers_the_effective_limit() -> None:
    snapshot = SessionSnapshot(last_seen_ms=T0, started_ms=T0, raised={"write": 10})
    assert snapshot.limit_for("write", 15, T0) == 15
    assert snapshot.limit_for("write", 5, T0) == 10


def test_blocked_message_says_what_happened_and_what_to_do() -> None:
    decision = spent_write("agent-42")
    message = decision.message
    for needle in ("'write'", "15/15", "agent-42", "NOT run", "2026-12-02T13:00:00Z"):
        assert needle in message
    assert "administrator" in message and "raise" in message
    assert decision.retry_after_seconds == 3600
    assert decision.remaining == 0


def test_iso_utc_pads_the_year() -> None:
    assert iso_utc(-59_000_000_000_000) == "0100-05-13T15:06:40Z"
    assert iso_utc(T0) == "2026-12-02T12:00:00Z"


def test_a_decision_is_an_allowance_or_a_refusal_never_both() -> None:
    allowed = Allowed("s1", "search", "read", 3, 200, T0, T0 + HOUR)
    assert allowed.allowed and allowed.remaining == 197
    assert not hasattr(allowed, "reason")
    refused = Refused(
        "s1", "delete_tag", "write", 3, 15, T0, T0 + HOUR, RefusalReason.SESSION_SUSPENDED
    )
    assert not refused.allowed and refused.suspended
    assert refused.remaining == 0  # a suspended session has no headroom to advertise


def test_a_check_already_counted_is_recognised_before_anything_else() -> None:
    mine = CallRecord(T0, "write", "delete_tag", True, check_id="chk001")
    snapshot = SessionSnapshot(
        last_seen_ms=T0, started_ms=T0, counts={"write": 15}, suspended=True, calls=(mine,)
    )
    assert explain_refusal(snapshot, attempt()) is Verdict.ALREADY_COUNTED


def test_admits_is_the_condition() -> None:
    assert admits(None, attempt())
    fresh = SessionSnapshot(last_seen_ms=T0, started_ms=T0, counts={"write": 14})
    assert admits(fresh, attempt())
    assert not admits(SessionSnapshot(T0, T0, counts={"write": 15}), attempt())


def test_session_states() -> None:
    active = SessionSnapshot(last_seen_ms=T0, started_ms=T0)
    assert active.state(T0, HOUR) is SessionState.ACTIVE
    assert active.state(T0 + HOUR + 1, HOUR) is SessionState.EXPIRED
    suspended = SessionSnapshot(last_seen_ms=T0, started_ms=T0, suspended=True)
    assert suspended.state(T0 + 5 * HOUR, HOUR) is SessionState.SUSPENDED


def test_a_session_at_its_limit_is_blocked_until_it_expires_or_is_raised() -> None:
    spent = SessionSnapshot(last_seen_ms=T0, started_ms=T0, counts={"write": 15, "read": 3})
    limits = {"read": 200, "write": 15}
    assert spent.state(T0, HOUR, limits) is SessionState.BLOCKED
    assert spent.state(T0 + HOUR + 1, HOUR, limits) is SessionState.EXPIRED
    raised = SessionSnapshot(
        last_seen_ms=T0, started_ms=T0, counts={"write": 15}, raised={"write": 20}
    )
    assert raised.state(T0, HOUR, limits) is SessionState.ACTIVE
    suspended = SessionSnapshot(
        last_seen_ms=T0, started_ms=T0, counts={"write": 15}, suspended=True
    )
    assert suspended.state(T0, HOUR, limits) is SessionState.SUSPENDED


def test_repeated_refusals_fold_into_one_record_with_a_count() -> None:
    def call(tool: str, allowed: bool, at: int) -> CallRecord:
        return CallRecord(T0 + at, "write", tool, allowed, check_id=f"k{at}")

    calls: tuple[CallRecord, ...] = (call("delete_tag", True, 0),)
    for at in range(1, 386):
        calls = with_call(calls, call("delete_tag", False, at))
    assert len(calls) == 2 and calls[-1].repeats == 385 and calls[-1].at_ms == T0 + 385
    assert calls[-1].check_id == "k385"  # the last refusal's, so its retry is recognised
    calls = with_call(calls, call("delete_post", False, 386))  # another tool: a new line
    calls = with_call(calls, call("delete_post", True, 387))  # allowed: never folded
    calls = with_call(calls, call("delete_post", True, 388))
    assert [(c.tool, c.allowed, c.repeats) for c in calls] == [
        ("delete_tag", True, 1),
        ("delete_tag", False, 385),
        ("delete_post", False, 1),
        ("delete_post", True, 1),
        ("delete_post", True, 1),
    ]
    assert fold_repeats(list(calls)) == calls


def test_a_folded_record_survives_its_compact_encoding() -> None:
    record = CallRecord(T0, "write", "delete_tag", False, check_id="k1", repeats=385)
    text = encode_call(record)
    assert text.endswith("|0|385")
    assert decode_call(text, stored_id(record), None) == record
    single = CallRecord(T0, "write", "delete_tag", False, check_id="k1")
    assert decode_call(encode_call(single), stored_id(single), None) == single


def test_the_email_shows_a_runaway_loop_as_one_line() -> None:
    loop = CallRecord(T0, "write", "delete_tag", False, check_id="k1", repeats=385)
    decision = spent_write(last_calls=(CallRecord(T0 - 1000, "write", "delete_tag", True), loop))
    body = exhaustion_email("demo", attempt(), decision, POLICY).body
    assert "delete_tag  write     refused \u00d7385 in a row" in body


def test_the_email_marks_a_replayed_call() -> None:
    first = CallRecord(T0 - 2000, "write", "delete_tag", True, call_id="c1", check_id="k1")
    retry = CallRecord(T0 - 1000, "write", "delete_tag", True, call_id="c1", replay=True)
    decision = spent_write(last_calls=(first, retry))
    body = exhaustion_email("demo", attempt(), decision, POLICY).body
    results = [line.split()[-1] for line in body.splitlines() if "delete_tag  write" in line]
    assert results == ["allowed", "replay"]
