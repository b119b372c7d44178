"""One refused count (issue 31): the session views count every refusal of the agent,
those the MCP server answered itself during a refusal's hold (reported with a hold
ticket, vouched for) included, and say how many of them those were. An agent refused 25
times shows 25, not "3" beside a record "refused x23 in a row". Memory and moto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Api, body, running_api
from tests.support import FixedClock

POLICY = {
    "version": 1,
    "categories": {"read": {"limit": 10}, "write": {"limit": 3}},
    "suspend_after_refusals": 100,
    "rules": [{"pattern": "delete_*", "category": "write"}],
}


@pytest.fixture(params=["memory", "dynamodb"])
def held_api(request: pytest.FixtureRequest, tmp_path: Path, clock: FixedClock) -> Iterator[Api]:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    with running_api(clock, str(request.param), policy=str(policy), link_secret="k" * 40) as api:
        yield api


def write(api: Api, report: dict[str, Any] | None = None) -> Any:
    extra = {} if report is None else {"refused_locally": {"write": report}}
    return api.check(session_id="looping", tool="delete_tag", principal="bot", **extra)


def test_the_views_count_the_refusals_the_mcp_server_held_and_say_so(held_api: Api) -> None:
    """Defect class: two counts of one thing (the session's refused count left out the
    refusals the client held, which only the last call's record showed)."""
    for _ in range(3):
        assert write(held_api).status_code == 200
    ticket = body(write(held_api))["hold_ticket"]  # refused by the service: 1
    for _ in range(2):  # each report: 11 held by the MCP server, and the refused check
        answer = write(held_api, {"count": 11, "ticket": ticket})
        assert answer.status_code == 429
        ticket = body(answer)["hold_ticket"]

    view = body(held_api.get("/v1/sessions/looping"))
    write_view = view["categories"]["write"]
    assert (write_view["refused"], write_view["refused_held"]) == (25, 22)
    last = view["last_calls"][-1]
    assert (last["allowed"], last["repeats"], last["held"]) == (False, 25, 22)
    [listed] = body(held_api.get("/v1/sessions"))["sessions"]
    assert listed["session_id"] == "looping"


def test_a_session_with_no_held_refusal_shows_none_held(held_api: Api) -> None:
    for _ in range(4):
        write(held_api)
    view = body(held_api.get("/v1/sessions/looping"))
    assert view["categories"]["write"]["refused"] == 1
    assert view["categories"]["write"]["refused_held"] == 0
    assert "held" not in view["last_calls"][-1]
