"""Issue 28: the 409s a call id can get, as the one error mapping answers them."""

from __future__ import annotations

from chalicelib.api.responses import error_response
from chalicelib.check.verdicts import call_id_fault
from chalicelib.quota.core import (
    Attempt,
    CallLife,
    CallRecord,
    CallState,
    SessionKey,
    SessionSnapshot,
    Verdict,
    call_binding,
)
from chalicelib.quota.rules import explain_refusal
from tests.support import T0

HOUR = 3_600_000


def _attempt(**kw: object) -> Attempt:
    fields: dict[str, object] = {
        "session": SessionKey("demo", "s1"),
        "tool": "delete_tag",
        "category": "write",
        "base_limit": 15,
        "now_ms": T0 + 100,
        "idle_ms": HOUR,
        "check_id": "copy01",
        "principal": "alice",
        "call_id": "c-1",
    }
    return Attempt(**{**fields, **kw})  # type: ignore[arg-type]


def _seen(state: CallState, until_ms: int = T0 + 30_000) -> SessionSnapshot:
    binding = call_binding("delete_tag", "write", 1, None, "alice")
    life = CallLife(state, "orig01", binding, until_ms)
    counted = CallRecord(T0, "write", "delete_tag", True, "alice", "c-1")
    return SessionSnapshot(T0, T0, counts={"write": 1}, calls=(counted,), lives={"c-1": life})


def test_a_copy_of_a_call_in_progress_is_a_409_with_retry_after() -> None:
    attempt = _attempt()
    seen = _seen(CallState.IN_PROGRESS)
    assert explain_refusal(seen, attempt) is Verdict.IN_PROGRESS
    fault = call_id_fault(attempt, seen, Verdict.IN_PROGRESS)
    assert fault is not None
    response = error_response(fault)
    assert response.status_code == 409 and response.headers["Retry-After"] == "1"
    assert response.body["error"]["code"] == "call_in_progress"


def test_a_life_left_in_progress_past_its_time_is_counted_anew() -> None:
    seen = _seen(CallState.IN_PROGRESS, until_ms=T0 + 50)
    assert explain_refusal(seen, _attempt()) is Verdict.REUSED_CALL_ID


def test_the_store_s_own_retry_is_known_by_its_check_id() -> None:
    seen = _seen(CallState.IN_PROGRESS)
    assert explain_refusal(seen, _attempt(check_id="orig01")) is Verdict.ALREADY_COUNTED


def test_an_admitted_call_is_a_duplicate_and_another_principal_a_conflict() -> None:
    seen = _seen(CallState.ADMITTED)
    assert explain_refusal(seen, _attempt()) is Verdict.DUPLICATE
    other = _attempt(principal="bob")
    assert explain_refusal(seen, other) is Verdict.CALL_ID_CONFLICT
    fault = call_id_fault(other, seen, Verdict.CALL_ID_CONFLICT)
    assert fault is not None and error_response(fault).status_code == 409
