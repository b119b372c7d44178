"""Issue 22, item 4: refusals a client answered itself during a refusal's hold, reported
with its next check (`refused_locally`), count for escalation and in the session's last
calls. On the memory backend and moto."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Api, body
from tests.api.test_escalation import escalation_emails, principal_state
from tests.api.test_scopes import POLICY, scoped

__all__ = ["scoped"]  # the fixture, used by name
N = int(str(POLICY["suspend_after_refusals"]))  # 6


def write(api: Api, session: str, held: int | None = None) -> Any:
    payload: dict[str, Any] = {"session_id": session, "tool": "delete_tag", "principal": "bot"}
    if held is not None:
        payload["refused_locally"] = {"write": held}
    return api.check(**payload)


def test_held_refusals_count_toward_escalation(scoped: Api) -> None:
    assert [write(scoped, "s").status_code for _ in range(4)] == [200] * 3 + [429]
    assert principal_state(scoped, "bot") == "active"  # a streak of 1
    # The client held N - 1 more; with them the streak reaches N: suspended at once.
    answer = body(write(scoped, "s", held=N - 1))
    assert answer["error"]["code"] == "principal_suspended"
    assert principal_state(scoped, "bot") == "suspended"
    assert escalation_emails(scoped) == 1


def test_fewer_held_refusals_do_not_escalate(scoped: Api) -> None:
    for _ in range(4):
        write(scoped, "s")
    assert body(write(scoped, "s", held=N - 3))["error"]["code"] == "quota_exceeded"
    assert principal_state(scoped, "bot") == "active"  # streak 1 + (N - 3) + 1 = N - 1
    assert write(scoped, "s").status_code == 429  # the Nth refusal in a row
    assert principal_state(scoped, "bot") == "suspended"


def test_held_refusals_are_folded_into_the_refusal_record(scoped: Api) -> None:
    for _ in range(4):
        write(scoped, "f")
    assert write(scoped, "f", held=3).status_code == 429
    calls = body(scoped.get("/v1/sessions/f"))["last_calls"]
    # The first refusal, the 3 the client held and the check that reported them.
    assert calls[-1]["allowed"] is False and calls[-1]["repeats"] == 5, calls


@pytest.mark.parametrize("held", [{"nope": 1}, {"write": -1}, {"write": "3"}, [1]])
def test_a_malformed_report_is_rejected(scoped: Api, held: Any) -> None:
    response = scoped.check(session_id="m", tool="delete_tag", refused_locally=held)
    assert response.status_code == 400
    assert body(response)["error"]["field"].startswith("refused_locally")


def test_held_refusals_reach_the_metrics(scoped: Api, capsys: pytest.CaptureFixture[str]) -> None:
    for _ in range(4):
        write(scoped, "metrics")
    capsys.readouterr()
    write(scoped, "metrics", held=3)
    metrics = [line for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert any('"RefusedLocally":[3.0]' in line for line in metrics), metrics
    assert any('"ChecksBlocked":[3.0]' in line for line in metrics), metrics
