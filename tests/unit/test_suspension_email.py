"""The email that says a principal was suspended for ignoring refusals: it names the
suspension, not the budget of the last refusal, and suggests only commands that work for
the policy in force."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from chalicelib.check.alerts import exhaustion_email
from chalicelib.quota.answers import Refused
from chalicelib.quota.core import Attempt, Scope, SessionKey
from chalicelib.quota.policy import POLICY_DIR, Policy, parse_policy
from tests.support import T0, spent_write

HOUR = 3_600_000


def policy(principal_budget: bool) -> Policy:
    document: dict[str, Any] = json.loads((POLICY_DIR / "default.json").read_text())
    document["suspend_after_refusals"] = 6
    if not principal_budget:
        del document["categories"]["write"]["principal"]
    return parse_policy(document)


def attempt() -> Attempt:
    return Attempt(SessionKey("demo", "run-1"), "delete_tag", "write", 15, T0, HOUR, "chk1", "bot")


def suspension() -> Refused:
    """The refusal that suspended the principal: its session's spent write budget."""
    return spent_write("run-1", scope=Scope.SESSION, principal="bot", escalated=True)


def commands(body: str) -> list[str]:
    after = body.split("What you can do", 1)[1]
    return [line.split()[0] for line in after.splitlines()[1:] if line.startswith("    ")]


def test_a_principal_suspension_is_named_as_such_not_as_the_session_budget() -> None:
    body = exhaustion_email("demo", attempt(), suspension(), policy(True)).body
    assert "(the budget that refused the call)" not in body
    assert (
        "suspended:  principal 'bot': its refused calls in a row reached suspend_after_refusals (6)"
    ) in body
    assert "refused by: the session's 'write' budget (the last of those calls)" in body


def test_a_principal_suspension_suggests_resume_first() -> None:
    body = exhaustion_email("demo", attempt(), suspension(), policy(True)).body
    assert commands(body)[0] == "resume:"
    assert "mcp-quota principal resume 'bot' --reason" in body
    assert "mcp-quota principal raise 'bot' --category write --add 50" in body


def test_no_principal_raise_where_the_category_has_no_principal_budget() -> None:
    body = exhaustion_email("demo", attempt(), suspension(), policy(False)).body
    assert commands(body)[0] == "resume:"
    assert "principal raise" not in body
    assert "mcp-quota principal show 'bot'" in body


def test_a_principal_budget_refusal_suggests_raise_not_resume() -> None:
    spent = replace(suspension(), scope=Scope.PRINCIPAL, escalated=False, limit=100, used=100)
    body = exhaustion_email("demo", attempt(), spent, policy(True)).body
    assert "scope:      principal (the budget that refused the call)" in body
    assert "mcp-quota principal raise 'bot' --category write --add 50" in body
    assert "principal resume" not in body  # it is not suspended
