"""Issue 22, item 3 over HTTP: the loop breaker refuses the 4th same write in 10 minutes
(`repeated_call`, 429), counts nothing for it, records and audits it, and its refusals
count toward escalation. On the memory backend and moto."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import Api, body, running_api
from tests.support import FixedClock

DIGEST = "9f" * 32
MESSAGE = (
    "The tool 'delete_tag' was NOT run: it was already called with the same arguments 3 "
    "times in this 10-minute window, which ends at 12:10 UTC. Repeating it will not help: "
    "stop and tell the user."
)


@pytest.fixture(params=["memory", "dynamodb"])
def both(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[Api]:
    with running_api(clock, request.param) as api:
        yield api


def delete(api: Api, session: str = "loop", **kw: Any) -> Any:
    return api.check(session_id=session, tool="delete_tag", args_digest=DIGEST, **kw)


def test_the_fourth_same_write_is_refused_as_a_repeat(both: Api, clock: FixedClock) -> None:
    for used in (1, 2, 3):
        answer = delete(both)
        assert answer.status_code == 200 and body(answer)["used"] == used
        clock.advance(1)
    refused = delete(both)
    assert refused.status_code == 429
    data = body(refused)
    error = data["error"]
    assert {k: error[k] for k in ("code", "scope", "message")} == {
        "code": "repeated_call",
        "scope": "session",
        "message": MESSAGE,
    }
    assert f"The tool 'delete_tag' was NOT run: {error['why']}" == MESSAGE
    assert data["used"] == 3 and data["remaining"] == 12  # nothing counted for it
    assert 0 < int(refused.headers["Retry-After"]) <= 600
    # Other arguments still run; the refused call shows in the session's last calls.
    other = both.check(session_id="loop", tool="delete_tag", args_digest="a" * 64)
    assert other.status_code == 200 and body(other)["used"] == 4
    session = body(both.get("/v1/sessions/loop"))
    calls = session["last_calls"]
    assert any(c["tool"] == "delete_tag" and c["allowed"] is False for c in calls)
    events = body(both.get("/v1/audit?type=repeated_call"))["events"]
    assert len(events) == 1 and events[0]["session_id"] == "loop"
    # Ten minutes on, the same call runs again.
    clock.advance(600)
    assert delete(both).status_code == 200


def test_a_repeat_without_a_digest_is_not_told(api: Api) -> None:
    for _ in range(5):
        assert api.check(session_id="nodigest", tool="delete_tag").status_code == 200


def test_repeated_calls_count_toward_escalation(api: Api) -> None:
    for _ in range(3):
        assert delete(api, principal="bot").status_code == 200
    codes = [body(delete(api, principal="bot"))["error"]["code"] for _ in range(50)]
    assert set(codes) == {"repeated_call"}
    principal = body(api.get("/v1/principals/bot"))
    assert principal["state"] == "suspended"
    assert body(delete(api, principal="bot"))["error"]["code"] == "principal_suspended"
