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

from chalicelib.quota.errors import ConfigurationError
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


def test_a_shadow_session_over_its_limit_is_never_blocked_in_any_view(shadowed: Api) -> None:
    """Defect class: a shadow category's counts past its limit derived `blocked`, so the
    session view, the `state=blocked` listing (console, CLI) showed a session no check
    refuses. Only enforced categories count toward `blocked`."""
    for _ in range(5):
        assert write(shadowed, "over").status_code == 200
    view = body(shadowed.get("/v1/sessions/over"))
    assert view["state"] == "active"
    assert view["categories"]["write"]["state"] == "active"
    assert view["categories"]["write"]["used"] == 5 and view["categories"]["write"]["limit"] == 3
    assert body(shadowed.get("/v1/sessions?state=blocked"))["sessions"] == []
    active = body(shadowed.get("/v1/sessions?state=active"))["sessions"]
    assert [s["session_id"] for s in active] == ["over"]


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


# -- shadow mode and the loop breaker -------------------------------------------------------

DIGEST = "9f" * 32
REPEAT = 2  # the loop breaker's limit in `shadow_loops`: 2 same writes per 10 minutes
WOULD_REPEAT = (
    "Shadow mode: the tool ran. The tool 'delete_tag' would NOT have run under enforcement: "
    "it was already called with the same arguments 2 times in this 10-minute window, "
    "which ends at 12:10 UTC. Repeating it will not help: stop and tell the user."
)


@pytest.fixture(params=["memory", "dynamodb"])
def shadow_loops(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FixedClock
) -> Iterator[Api]:
    """Writes in shadow mode with a loop breaker and budgets too roomy to refuse first."""
    policy = shadow_policy(None, False)
    policy["categories"]["write"].update(
        {
            "limit": 20,
            "principal": {"limit": 100, "window": "24h"},
            "tenant": {"limit": 200, "window": "1h"},
            "repeat": {"limit": REPEAT, "window": "10m"},
        }
    )
    path = tmp_path / "shadow-loops.json"
    path.write_text(json.dumps(policy))
    with running_api(clock, request.param, policy=str(path)) as api:
        yield api


def same_write(api: Api, session: str = "loop", digest: str = DIGEST) -> Any:
    return api.check(
        session_id=session,
        tool="delete_tag",
        principal="bot",
        server="articles",
        args_digest=digest,
    )


def test_a_repeat_past_the_loop_breaker_runs_and_is_a_shadow_refusal(
    shadow_loops: Api, clock: FixedClock
) -> None:
    answers = []
    for _ in range(REPEAT + 2 * N):  # twice the refusals that would suspend the principal
        answers.append(same_write(shadow_loops))
        clock.advance(1)
    assert [a.status_code for a in answers] == [200] * len(answers)
    assert all("Retry-After" not in a.headers for a in answers)
    data = [body(a) for a in answers]
    assert [d["used"] for d in data] == list(range(1, len(answers) + 1))  # every one counted
    assert all(d["allowed"] is True for d in data)
    assert all("shadow" not in d for d in data[:REPEAT])
    for d in data[REPEAT:]:
        shadow = {k: v for k, v in d["shadow"].items() if k != "why"}
        assert shadow == {"code": "repeated_call", "scope": "session", "message": WOULD_REPEAT}
    events = shadow_events(shadow_loops)
    assert len(events) == 2 * N
    assert {e["detail"]["code"] for e in events} == {"repeated_call"}
    assert {(e["detail"]["tool"], e["detail"]["session_id"]) for e in events} == {
        ("delete_tag", "loop")
    }
    [group] = body(shadow_loops.get("/v1/shadow"))["groups"]
    assert (group["server"], group["principal"], group["tool"]) == ("articles", "bot", "delete_tag")
    assert (group["refusals"], group["sessions"], group["scopes"]) == (2 * N, 1, ["session"])


def test_shadowed_repeats_never_refuse_suspend_nor_escalate(shadow_loops: Api) -> None:
    for _ in range(REPEAT + 2 * N):
        assert same_write(shadow_loops).status_code == 200
    assert body(shadow_loops.get("/v1/principals/bot"))["state"] == "active"
    session = body(shadow_loops.get("/v1/sessions/loop"))
    assert session["state"] == "active"
    assert all(c["allowed"] for c in session["last_calls"])
    assert body(shadow_loops.get("/v1/audit?type=repeated_call"))["events"] == []
    assert shadow_loops.sent() == []
    assert same_write(shadow_loops).status_code == 200  # and the loop still runs


def test_other_arguments_and_a_new_window_are_no_shadow_repeat(
    shadow_loops: Api, clock: FixedClock
) -> None:
    for _ in range(REPEAT + 1):
        same_write(shadow_loops)
    assert "shadow" not in body(same_write(shadow_loops, digest="a" * 64))
    clock.advance(600)  # the next 10-minute window
    assert "shadow" not in body(same_write(shadow_loops))


def test_a_repeat_is_told_before_the_limit_in_shadow_mode_too(shadow_loops: Api) -> None:
    digests = ["00", "00"] + [f"{i:02x}" for i in range(1, 19)]  # 20 calls, none repeated
    data = [body(same_write(shadow_loops, digest=d * 32)) for d in digests]
    assert all("shadow" not in d for d in data)  # up to the limit, and the breaker's
    over = body(same_write(shadow_loops, digest="00" * 32))  # over both: a repeat first
    assert over["used"] == 21 and over["shadow"]["code"] == "repeated_call"
    other = body(same_write(shadow_loops, digest="ff" * 32))  # over the limit only
    assert other["shadow"]["code"] == "quota_exceeded"
