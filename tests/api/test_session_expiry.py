"""Idle expiry holds for a suspended session too: its next attempt starts its counters
again (it stays suspended), as the next check of a live session would."""

from __future__ import annotations

from tests.api.conftest import ADMIN, Api, body
from tests.api.test_call_ids import any_api

__all__ = ["any_api"]


def test_a_suspended_session_idle_past_the_timeout_starts_its_counters_again(
    any_api: Api,
) -> None:
    for _ in range(3):
        assert any_api.check(session_id="s", tool="delete_tag").status_code == 200
    any_api.clock.advance(3601)
    suspended = any_api.post("/v1/sessions/s/suspend", {"reason": "look first"}, ADMIN)
    assert suspended.status_code == 200
    refused = any_api.check(session_id="s", tool="delete_tag")
    assert refused.status_code == 429
    assert body(refused)["error"]["code"] == "session_suspended"
    view = body(any_api.get("/v1/sessions/s"))
    assert view["state"] == "suspended" and view["categories"]["write"]["used"] == 0
    assert [c["allowed"] for c in view["last_calls"]] == [False]
    resumed = any_api.post("/v1/sessions/s/resume", {"reason": "fine"}, ADMIN)
    assert resumed.status_code == 200
    again = any_api.check(session_id="s", tool="delete_tag")
    assert again.status_code == 200 and body(again)["used"] == 1
