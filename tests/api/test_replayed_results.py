"""Exactly-once writes (issue 32 part 5): an allowed call's result is kept under its call
id, and a duplicate in a replaying category is answered with it instead of a second run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from chalicelib.quota.core import SessionKey
from tests.api.conftest import ADMIN, SERVER, Api, body, running_api
from tests.support import FixedClock

RESULT = {"content": [{"type": "text", "text": "deleted tag 7"}], "isError": False}


@pytest.fixture(params=["memory", "dynamodb"])
def any_api(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[Api]:
    with running_api(clock, request.param) as api:
        yield api


def put(api: Api, call_id: str, headers: dict[str, str] | None = None, **fields: Any) -> Any:
    payload = {"session_id": "s", "tool": "delete_tag", "result": RESULT, **fields}
    return api.client.http.put(
        f"/v1/results/{call_id}", headers=headers or SERVER, body=json.dumps(payload)
    )


def test_a_stored_result_is_what_a_duplicate_gets(any_api: Api) -> None:
    """Defect class: a retry of a write runs the tool again (no result kept)."""
    assert any_api.check(session_id="s", tool="delete_tag", call_id="c1").status_code == 200
    running = body(any_api.check(session_id="s", tool="delete_tag", call_id="c1"))
    assert running["duplicate"] is True and running["replay"] == {"state": "running"}
    stored = put(any_api, "c1")
    assert stored.status_code == 201, stored.body
    assert body(stored)["stored"] == "stored" and body(stored)["truncated"] is False
    again = body(any_api.check(session_id="s", tool="delete_tag", call_id="c1"))
    assert again["replay"] == {"state": "stored", "result": RESULT}


def test_only_an_allowed_counted_call_of_this_session_and_tool_can_store(any_api: Api) -> None:
    """Defect class: a token plants a result for a call it did not make."""
    assert any_api.check(session_id="s", tool="delete_tag", call_id="c2").status_code == 200
    assert put(any_api, "never-checked").status_code == 403
    assert put(any_api, "c2", session_id="other").status_code == 403
    assert put(any_api, "c2", tool="delete_post").status_code == 403
    assert put(any_api, "c2", ADMIN).status_code == 403  # server token only
    _, foreign = any_api.token("other-tenant", "server")
    assert put(any_api, "c2", foreign).status_code == 403
    assert body(put(any_api, "c2", ADMIN))["error"]["code"] == "forbidden"
    assert body(put(any_api, "never-checked"))["error"]["code"] == "call_not_allowed"


def test_a_refused_call_cannot_store(any_api: Api) -> None:
    """Defect class: a result kept for a call that never ran (refused, not counted)."""
    for i in range(15):  # the default policy's writes per session
        any_api.check(session_id="s", tool="delete_tag", call_id=f"ok-{i}")
    refused = any_api.check(session_id="s", tool="delete_tag", call_id="over")
    assert refused.status_code == 429
    assert body(put(any_api, "over"))["error"]["code"] == "call_not_allowed"


def test_the_first_store_wins_and_the_same_result_again_is_idempotent(any_api: Api) -> None:
    """Defect class: a second store overwrites the result a retry was promised."""
    any_api.check(session_id="s", tool="delete_tag", call_id="c3")
    assert put(any_api, "c3").status_code == 201
    same = put(any_api, "c3")
    assert same.status_code == 200 and body(same)["stored"] == "same"
    other = put(any_api, "c3", result={"content": [], "isError": True})
    assert other.status_code == 409 and body(other)["error"]["code"] == "result_conflict"
    again = body(any_api.check(session_id="s", tool="delete_tag", call_id="c3"))
    assert again["replay"]["result"] == RESULT


def test_of_eight_concurrent_different_stores_exactly_one_wins(api: Api) -> None:
    """Defect class: check-then-write lets two stores both win."""
    api.check(session_id="s", tool="delete_tag", call_id="c8")
    results = [{"content": [{"type": "text", "text": str(i)}]} for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda r: put(api, "c8", result=r).status_code, results))
    assert sorted(answers) == [201] + [409] * 7


def test_a_result_over_64_kib_keeps_only_its_digest(any_api: Api) -> None:
    """Defect class: a large result fills the table, or a replay hands back a cut one."""
    any_api.check(session_id="s", tool="delete_tag", call_id="big")
    big = {"content": [{"type": "text", "text": "x" * (70 * 1024)}]}
    stored = body(put(any_api, "big", result=big))
    assert stored["truncated"] is True and stored["size"] > 64 * 1024
    replay = body(any_api.check(session_id="s", tool="delete_tag", call_id="big"))["replay"]
    assert replay["state"] == "not_kept" and replay["digest"] == stored["digest"]
    assert "NOT run again" in replay["message"] and "result" not in replay


def test_reads_are_untouched(any_api: Api) -> None:
    """Defect class: a read's duplicate is answered with a stale stored result."""
    any_api.check(session_id="s", tool="search_articles", call_id="r1")
    again = body(any_api.check(session_id="s", tool="search_articles", call_id="r1"))
    assert again["duplicate"] is True and "replay" not in again


def test_only_a_duplicate_reads_the_results_store(api: Api) -> None:
    """Defect class: every allowed check pays an extra store request for replays."""
    reads: list[object] = []
    store = api.container.stores.results
    original = store.get

    def counted(key: object) -> object:
        reads.append(key)
        return original(key)  # type: ignore[arg-type]

    store.get = counted  # type: ignore[assignment,method-assign]
    for i in range(3):
        assert "replay" not in body(api.check(session_id="s", tool="delete_tag", call_id=f"n{i}"))
    api.check(session_id="s", tool="delete_tag")
    assert reads == []
    api.check(session_id="s", tool="delete_tag", call_id="n0")
    assert len(reads) == 1


def test_a_kept_result_has_the_sessions_idle_ttl(dynamo_api: Api, clock: FixedClock) -> None:
    """Defect class: results kept forever (no TTL attribute) or past their session."""
    dynamo_api.check(session_id="s", tool="delete_tag", call_id="t1")
    put(dynamo_api, "t1")
    settings = dynamo_api.container.settings
    items = dynamo_api.container.dynamodb.scan(TableName=settings.counters_table)["Items"]
    kept = [i for i in items if " call-result " in i["pk"]["S"]]
    assert len(kept) == 1
    ttl = int(kept[0]["expires_at"]["N"])
    assert ttl == clock() // 1000 + settings.idle_timeout_seconds + 1


def test_a_copy_past_its_duplicates_gets_the_kept_result_and_writes_nothing(
    any_api: Api, clock: FixedClock
) -> None:
    """Defect class: a retried write past MAX_REPLAYS copies (or the minute) is refused
    or counted anew although its result is kept, so a patient retry is a second run."""
    assert any_api.check(session_id="s", tool="delete_tag", call_id="m1").status_code == 200
    assert put(any_api, "m1").status_code == 201
    for _ in range(3):  # the duplicates a call id has (MAX_REPLAYS)
        assert body(any_api.check(session_id="s", tool="delete_tag", call_id="m1"))["replay"]
    sessions, key = (
        any_api.container.counters,
        SessionKey(any_api.container.settings.dev_tenant, "s"),
    )
    before = sessions.get(key)
    for later in (0, 61):  # past MAX_REPLAYS, then past the minute as well
        clock.advance(later)
        copy = any_api.check(session_id="s", tool="delete_tag", call_id="m1")
        assert copy.status_code == 200, copy.body
        answer = body(copy)
        assert answer["duplicate"] is True and answer["used"] == 1
        assert answer["replay"] == {"state": "stored", "result": RESULT}
    assert sessions.get(key) == before  # nothing written


def test_a_copy_past_its_duplicates_without_a_kept_result_is_still_refused(
    any_api: Api,
) -> None:
    """Defect class: a loop reusing one id runs uncounted once it is past MAX_REPLAYS."""
    any_api.check(session_id="s", tool="delete_tag", call_id="m2")
    for _ in range(3):
        assert body(any_api.check(session_id="s", tool="delete_tag", call_id="m2"))["replay"]
    refused = any_api.check(session_id="s", tool="delete_tag", call_id="m2")
    assert refused.status_code == 409
    # A burst of re-sends must not be told to go on under a new id: a second run.
    assert "do not send it again under a new id" in body(refused)["error"]["message"]
    any_api.check(session_id="s", tool="search_articles", call_id="r2")
    for _ in range(3):
        any_api.check(session_id="s", tool="search_articles", call_id="r2")
    assert any_api.check(session_id="s", tool="search_articles", call_id="r2").status_code == 409
