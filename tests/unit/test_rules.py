"""The admission rules as data (quota.rules): one object, evaluated, explained and rendered."""

from __future__ import annotations

import inspect

from chalicelib.quota import facts, rules
from chalicelib.quota.core import (
    Attempt,
    BudgetSnapshot,
    CallRecord,
    LeaseId,
    SessionKey,
    SessionSnapshot,
    Spend,
    Verdict,
)
from chalicelib.storage.dynamodb import conditions
from chalicelib.storage.dynamodb.conditions import Form, render
from tests.support import T0

HOUR = 3_600_000
NEW_WINDOW = frozenset({facts.CountsWindow})


def attempt(now: int = T0, call_id: str | None = None) -> Attempt:
    return Attempt(
        SessionKey("demo", "s1"), "delete_tag", "write", 3, now, HOUR, "chk1", None, call_id
    )


def test_every_fact_of_the_core_has_a_dynamodb_rendering() -> None:
    found = [
        cls
        for _, cls in inspect.getmembers(facts, inspect.isclass)
        if cls.__module__ == facts.__name__
        and hasattr(cls, "holds")
        and cls not in (facts.And, facts.Or, facts.Not, facts.Named, facts.Condition)
    ]
    assert set(found) <= set(conditions._RENDERERS)


def test_a_refusal_is_explained_by_the_first_clause_that_fails() -> None:
    spent = SessionSnapshot(T0, T0, counts={"write": 3})
    assert rules.explain_refusal(spent, attempt()) is Verdict.OVER_LIMIT
    suspended_too = SessionSnapshot(T0, T0, counts={"write": 3}, suspended=True)
    assert rules.explain_refusal(suspended_too, attempt()) is Verdict.SUSPENDED
    later = SessionSnapshot(T0 + 1, T0 + 1, counts={"write": 3})
    assert rules.explain_refusal(later, attempt()) is Verdict.CLOCK_BEHIND
    assert rules.admits(None, attempt()) and not rules.admits(spent, attempt())


def test_a_call_id_clause_tells_a_conflict_a_retry_and_a_reuse_apart() -> None:
    counted = CallRecord(T0, "write", "delete_tag", True, call_id="c1")
    seen = SessionSnapshot(T0, T0, counts={"write": 1}, calls=(counted,))
    assert rules.explain_refusal(seen, attempt(call_id="c1")) is Verdict.DUPLICATE
    other = Attempt(SessionKey("demo", "s1"), "update_page", "write", 3, T0, HOUR, "x", None, "c1")
    assert rules.explain_refusal(seen, other) is Verdict.CALL_ID_CONFLICT
    late = attempt(now=T0 + 61_000, call_id="c1")
    assert rules.explain_refusal(seen, late) is Verdict.CALL_ID_USED


def test_the_rendered_rule_uses_only_aliased_names_and_values() -> None:
    conditions = [
        render(rules.session_consume(attempt(call_id="c1"))),
        render(rules.session_consume(attempt()), Form(frozenset({facts.SessionExists}), True)),
        render(
            rules.budget_take(Spend("write", 4, 0, 60_000, T0, 2)),
            Form(frozenset({facts.CountsWindow})),
        ),
        render(rules.lease_return(LeaseId("read", "chk", 3, T0, T0), 2, T0 - HOUR)),
        render(rules.counters_reset(T0, suspended=False)),
        render(rules.session_raise("write", 9, T0, T0 - HOUR)),
    ]
    for rendered in conditions:
        words = rendered.expression.replace("(", " ").replace(")", " ").replace(",", " ").split()
        names = {w for w in words if w.startswith("#")}
        values = {w for w in words if w.startswith(":")}
        assert names <= set(rendered.names) and values <= set(rendered.values)
        assert not any(
            w.isidentifier()
            and w.islower()
            and "_" in w
            and w not in ("attribute_exists", "attribute_not_exists", "begins_with")
            for w in words
        )


def test_a_budget_take_holds_in_a_later_window_and_not_over_the_limit() -> None:
    spend = Spend("write", 4, 60_000, 120_000, 60_500)
    old_window = BudgetSnapshot(counts={0: {"write": 4}})
    assert rules.budget_take(spend).holds(old_window)
    full = BudgetSnapshot(counts={60_000: {"write": 4}})
    assert not rules.budget_take(spend).holds(full)
    raised = BudgetSnapshot(counts={60_000: {"write": 4}}, raised={"write": 5})
    assert rules.budget_take(spend).holds(raised)
    assert not rules.budget_take(spend).holds(BudgetSnapshot(suspended_reason="look"))
