"""A call id names one call: a retry of it is answered once counted, never a free pass."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import Api, body, running_api
from tests.support import FixedClock


@pytest.fixture(params=["memory", "dynamodb"])
def any_api(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[Api]:
    with running_api(clock, request.param) as api:
        yield api


def used(api: Api, session_id: str, category: str) -> int:
    view = body(api.get(f"/v1/sessions/{session_id}"))
    return int(view["categories"][category]["used"])


def test_a_read_call_id_sent_with_write_tools_is_a_409_never_a_pass(any_api: Api) -> None:
    read = any_api.check(session_id="s", tool="search_articles", call_id="c-1")
    assert read.status_code == 200 and body(read)["allowed"] is True
    for tool in ("delete_tag", "delete_post", "delete_user"):
        answer = any_api.check(session_id="s", tool=tool, call_id="c-1")
        assert answer.status_code == 409, answer.body
        error = body(answer)["error"]
        assert error["code"] == "call_id_conflict"
        assert f"'{tool}' was NOT run" in error["message"] and "search_articles" in error["message"]
    assert used(any_api, "s", "write") == 0 and used(any_api, "s", "read") == 1


def test_a_loop_on_one_call_id_runs_once_then_gets_409(any_api: Api) -> None:
    """Issue 28, class 2: one id is one call, counted once, with at most three duplicates;
    every later use of it is a 409 that counts nothing."""
    answers = [
        any_api.check(session_id="loop", tool="delete_tag", call_id="same") for _ in range(40)
    ]
    allowed = [a for a in answers if a.status_code == 200]
    duplicates = [a for a in allowed if body(a).get("duplicate")]
    assert len(allowed) - len(duplicates) == used(any_api, "loop", "write") == 1
    assert len(duplicates) == 3
    assert {a.status_code for a in answers[4:]} == {409}
    assert body(answers[-1])["error"]["code"] == "call_id_conflict"


def test_an_exact_retry_is_answered_as_the_original_and_counted_once(any_api: Api) -> None:
    first = any_api.check(session_id="r", tool="delete_tag", call_id="x-9")
    retry = any_api.check(session_id="r", tool="delete_tag", call_id="x-9")
    assert first.status_code == retry.status_code == 200
    assert body(retry)["duplicate"] is True and used(any_api, "r", "write") == 1


def test_a_call_id_is_bound_to_the_calls_it_asked_for(any_api: Api) -> None:
    read = {"session_id": "l", "tool": "search_articles", "call_id": "c-2"}
    leased = any_api.check(**read, lease=2)
    assert leased.status_code == 200 and body(leased)["lease"]["granted"] == 2
    alone = any_api.check(**read)  # the same id, asking for one call: another call
    assert alone.status_code == 409 and body(alone)["error"]["code"] == "call_id_conflict"
    again = any_api.check(**read, lease=2)  # the same call exactly: its retry
    assert again.status_code == 200 and body(again)["duplicate"] is True
    assert used(any_api, "l", "read") == 2
