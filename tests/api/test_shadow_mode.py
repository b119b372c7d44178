"""Issue 22, item 1: shadow mode. Under `"enforce": false` a call over a limit runs (200,
`shadow` says what the refusal would have been), counting goes on, the audit trail has a
`shadow_refusal`, and nobody is emailed or escalated. On the memory backend and moto."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chalicelib.errors import ConfigurationError
from chalicelib.quota.policy import parse_policy
from tests.api.conftest import Api, body, running_api
from tests.api.test_scopes import POLICY
from tests.support import FixedClock

N = int(str(POLICY["suspend_after_refusals"]))  # 6


def shadow_policy(top: bool | None, write: bool | None) -> dict[str, Any]:
    policy = copy.deepcopy(POLICY)
    if top is not None:
        policy["enforce"] = top
    if write is not None:
        policy["categories"]["write"]["enforce"] = write  # type: ignore[index]
    return policy


@pytest.fixture(params=["memory", "dynamodb"])
def shadowed(request: pytest.FixtureRequest, tmp_path: Path, clock: FixedClock) -> Iterator[Api]:
    """The scoped policy with writes in shadow mode."""
    path = tmp_path / "shadow.json"
    path.write_text(json.dumps(shadow_policy(None, False)))
    with running_api(clock, request.param, policy=str(path)) as api:
        yield api


def write(api: Api, session: str, principal: str = "bot", units: int = 1) -> Any:
    return api.check(
        session_id=session, tool="delete_tag", principal=principal, server="articles", units=units
    )


def shadow_events(api: Api) -> list[dict[str, Any]]:
    events = body(api.get("/v1/audit?limit=500"))["events"]
    return [e for e in events if e["type"] == "shadow_refusal"]


def test_a_call_over_the_limit_runs_and_says_what_would_have_refused_it(shadowed: Api) -> None:
    answers = [write(shadowed, "s") for _ in range(4)]
    assert [a.status_code for a in answers] == [200] * 4
    assert all("shadow" not in body(a) for a in answers[:3])
    data = body(answers[3])
    assert data["allowed"] is True and data["used"] == 4 and data["limit"] == 3
    assert data["remaining"] == 0
    shadow = data["shadow"]
    assert shadow["code"] == "quota_exceeded" and shadow["scope"] == "session"
    assert shadow["message"].startswith("Shadow mode: the tool ran.")
    assert "would NOT have run" in shadow["message"] and "(3/3 calls)" in shadow["message"]
    [event] = shadow_events(shadowed)
    assert event["detail"]["session_id"] == "s"
    assert event["detail"]["tool"] == "delete_tag" and event["detail"]["server"] == "articles"
    assert event["detail"]["principal"] == "bot" and event["detail"]["scope"] == "session"


def test_shadow_refusals_never_email_nor_escalate(shadowed: Api) -> None:
    for _ in range(3 + 2 * N):
        assert write(shadowed, "loop").status_code == 200
    assert shadowed.sent() == []
    principal = body(shadowed.get("/v1/principals/bot"))
    assert principal["state"] == "active"
    assert len(shadow_events(shadowed)) == 2 * N


def test_a_wider_scope_is_judged_too(shadowed: Api) -> None:
    for i in range(5):  # the principal's 5, one per session
        assert "shadow" not in body(write(shadowed, f"p{i}"))
    data = body(write(shadowed, "p5"))
    assert data["shadow"]["scope"] == "principal"
    assert data["scopes"]["principal"]["used"] == 6
    assert data["scopes"]["principal"]["limit"] == 5


def test_units_over_the_limit_are_shadowed_whole(shadowed: Api) -> None:
    data = body(write(shadowed, "u", units=4))
    assert data["allowed"] is True and data["used"] == 4
    assert "asks for 4 'write' units" in data["shadow"]["message"]


def test_an_administrator_suspension_still_refuses(shadowed: Api) -> None:
    assert write(shadowed, "k").status_code == 200
    suspended = shadowed.admin("/v1/sessions/k/suspend", {"reason": "incident"})
    assert suspended.status_code == 200
    assert body(write(shadowed, "k"))["error"]["code"] == "session_suspended"


def test_enforce_is_inherited_and_overridden_per_category() -> None:
    assert not parse_policy(shadow_policy(False, None)).categories["write"].enforce
    assert not parse_policy(shadow_policy(False, None)).categories["read"].enforce
    mixed = parse_policy(shadow_policy(False, True))
    assert mixed.categories["write"].enforce and not mixed.categories["read"].enforce
    assert parse_policy(POLICY).categories["write"].enforce
    with pytest.raises(ConfigurationError, match="enforce must be true or false"):
        parse_policy({**POLICY, "enforce": "no"})


def test_the_would_have_refused_view_groups_by_server_principal_and_tool(
    shadowed: Api,
) -> None:
    for _ in range(5):
        write(shadowed, "a", principal="bot")
    for _ in range(4):
        write(shadowed, "b", principal="other")
    view = shadowed.get("/v1/shadow")
    assert view.status_code == 200
    data = body(view)
    assert data["truncated"] is False
    assert [(g["principal"], g["refusals"], g["sessions"]) for g in data["groups"]] == [
        ("bot", 2, 1),
        ("other", 1, 1),
    ]
    top = data["groups"][0]
    assert (top["server"], top["tool"], top["categories"], top["scopes"]) == (
        "articles",
        "delete_tag",
        ["write"],
        ["session"],
    )
    later = body(shadowed.get("/v1/shadow?since=2030-01-01T00:00:00Z"))
    assert later["groups"] == []
    server = {"Authorization": "Bearer dev-server-token"}
    assert shadowed.get("/v1/shadow", server).status_code == 403


def test_each_shadow_refusal_is_counted_per_category(
    shadowed: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    for _ in range(3):
        write(shadowed, "m")
    capsys.readouterr()
    write(shadowed, "m")
    out = capsys.readouterr().out
    assert '"ShadowRefusals":[1.0]' in out and '"category":"write"' in out
    assert "ChecksBlocked" not in out
