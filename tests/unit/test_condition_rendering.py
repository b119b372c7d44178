"""Today's DynamoDB rendering of every fact, every Form case and the rules, pinned: the
adapter's conditions may be written differently, never say something else."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from chalicelib.quota import call_facts, facts, rules
from chalicelib.quota.core import Attempt, CallLife, CallRecord, CallState, SessionKey, Spend
from chalicelib.quota.leases import LeaseId
from chalicelib.quota.writes import WriteId
from chalicelib.storage.dynamodb.conditions import Form, render
from tests.support import T0

HOUR = 3_600_000
# The forms the adapters pass (counters.py, budgets.py).
KNOWN = frozenset({facts.SessionExists})
THIS_WINDOW = frozenset({facts.CountsNoLaterWindow})
NEW_WINDOW = frozenset({facts.CountsWindow})
ENTRY = CallRecord(T0, "write", "delete_tag", False, call_id="c1", check_id="chk1")
SPEND = Spend("write", 4, 60_000, 120_000, T0, 3)


def attempt(call_id: str | None = None, units: int = 1, repeat_key: str | None = None) -> Attempt:
    return Attempt(
        SessionKey("demo", "s1"),
        "delete_tag",
        "write",
        3,
        T0,
        HOUR,
        "chk1",
        None,
        call_id,
        units=units,
        asked=units,
        leased=units > 1,
        repeat_key=repeat_key,
        repeat_limit=4,
    )


CASES = [
    pytest.param(
        facts.SessionExists(),
        None,
        "attribute_exists(#pk)",
        {"#pk": "pk"},
        {},
        id="session-exists",
    ),
    pytest.param(
        facts.SessionSuspended(),
        None,
        "attribute_exists(#sus)",
        {"#sus": "suspended"},
        {},
        id="session-suspended",
    ),
    pytest.param(
        facts.SeenSince(T0 - HOUR),
        None,
        "#ls >= :cutoff",
        {"#ls": "ls"},
        {":cutoff": {"N": "1796209200000"}},
        id="seen-since",
    ),
    pytest.param(
        facts.LastSeenAt(T0 - 5),
        None,
        "#ls = :old_ls",
        {"#ls": "ls"},
        {":old_ls": {"N": "1796212799995"}},
        id="last-seen-at",
    ),
    pytest.param(
        facts.SameCounters(T0 - 7),
        None,
        "#started = :started",
        {"#started": "started"},
        {":started": {"N": "1796212799993"}},
        id="same-counters",
    ),
    pytest.param(
        facts.StartedBy(T0),
        None,
        "#started <= :now",
        {"#started": "started"},
        {":now": {"N": "1796212800000"}},
        id="started-by",
    ),
    pytest.param(
        facts.StartedBefore(T0 + 1),
        None,
        "#started < :now",
        {"#started": "started"},
        {":now": {"N": "1796212800001"}},
        id="started-before",
    ),
    pytest.param(
        facts.SeenBefore(T0 + 2),
        None,
        "#ls < :now",
        {"#ls": "ls"},
        {":now": {"N": "1796212800002"}},
        id="seen-before",
    ),
    pytest.param(
        facts.RepeatsUnder("delete_tag|ab12|17", 4),
        None,
        "NOT #q >= :qlimit",
        {"#q": "q_delete_tag|ab12|17"},
        {":qlimit": {"N": "4"}},
        id="repeats-under",
    ),
    pytest.param(
        facts.CheckNotCounted("chk1"),
        None,
        "NOT contains(#ids, :cid)",
        {"#ids": "cids"},
        {":cid": {"S": "s:chk1"}},
        id="check-not-counted",
    ),
    pytest.param(
        facts.CallIdFree("c1", "chk1", "b1nd", "delete_tag", "write", 2, T0),
        None,
        "(NOT contains(#ids, :cid) AND attribute_not_exists(#vf))",
        {"#ids": "cids", "#vf": "v_c1"},
        {":cid": {"S": "c:c1"}},
        id="call-id-free",
    ),
    pytest.param(
        facts.CallLifeIs("c1", CallLife(CallState.IN_PROGRESS, "chk1", "b1nd", T0 + 9)),
        None,
        "#v = :life",
        {"#v": "v_c1"},
        {":life": {"S": "chk1|p|0|1796212800009|b1nd"}},
        id="call-life-is",
    ),
    pytest.param(
        facts.CallCountedBy("c1", "chk1"),
        None,
        "begins_with(#v, :vchk)",
        {"#v": "v_c1"},
        {":vchk": {"S": "chk1|"}},
        id="call-counted-by",
    ),
    pytest.param(
        facts.TakenBack(ENTRY),
        None,
        "contains(#ids, :tb)",
        {"#ids": "cids"},
        {":tb": {"S": "u:c1|chk1"}},
        id="taken-back",
    ),
    pytest.param(
        facts.Recorded(ENTRY),
        None,
        "contains(#ids, :own)",
        {"#ids": "cids"},
        {":own": {"S": "b:c1|chk1"}},
        id="recorded",
    ),
    pytest.param(
        facts.FirstRefusalAt("write", 3),
        None,
        "begins_with(#z, :zlimit)",
        {"#z": "z_write"},
        {":zlimit": {"S": "3|"}},
        id="first-refusal-at",
    ),
    pytest.param(
        facts.CountAtLeast("write", 2),
        None,
        "#n >= :least",
        {"#n": "n_write"},
        {":least": {"N": "2"}},
        id="count-at-least",
    ),
    pytest.param(
        facts.CountAtLeast("read", 5, leased=True),
        None,
        "#l >= :lleast",
        {"#l": "l_read"},
        {":lleast": {"N": "5"}},
        id="count-at-least-leased",
    ),
    pytest.param(
        facts.LastGrantIs("read", "g-chk-3"),
        None,
        "#g = :grant",
        {"#g": "g_read"},
        {":grant": {"S": "g-chk-3"}},
        id="last-grant-is",
    ),
    pytest.param(
        facts.RaisedAbove("write", 9, T0),
        None,
        "#r > :new AND NOT #rx <= :now",
        {"#r": "r_write", "#rx": "rx_write"},
        {":new": {"N": "9"}, ":now": {"N": "1796212800000"}},
        id="raised-above",
    ),
    pytest.param(
        facts.BudgetSuspended(),
        None,
        "attribute_exists(#sus)",
        {"#sus": "suspended"},
        {},
        id="budget-suspended",
    ),
    pytest.param(
        facts.CountsWindow("write", 60_000),
        None,
        "#w = :ws",
        {"#w": "w_write"},
        {":ws": {"N": "60000"}},
        id="counts-window",
    ),
    pytest.param(
        facts.CountsNoLaterWindow("write", 60_000),
        None,
        "(attribute_not_exists(#w) OR #w < :ws)",
        {"#w": "w_write"},
        {":ws": {"N": "60000"}},
        id="counts-no-later-window",
    ),
    pytest.param(
        facts.BudgetCountAtLeast("write", 60_000, 2),
        None,
        "#n >= :least",
        {"#n": "c_write", "#w": "w_write"},
        {":least": {"N": "2"}},
        id="budget-count-at-least",
    ),
    pytest.param(
        facts.RefusedBefore("write", T0 - 9),
        None,
        "#rl < :since",
        {"#rl": "rl_write"},
        {":since": {"N": "1796212799991"}},
        id="refused-before",
    ),
    pytest.param(
        facts.RefusedBy("read", T0),
        None,
        "#rl <= :now",
        {"#rl": "rl_read"},
        {":now": {"N": "1796212800000"}},
        id="refused-by",
    ),
    pytest.param(
        facts.NotWrittenBy(WriteId("w1", 7)),
        None,
        "(attribute_not_exists(#wq) OR #wq < :wseq)",
        {"#wq": "wq_w1"},
        {":wseq": {"N": "7"}},
        id="not-written-by",
    ),
    pytest.param(
        facts.WrittenBy(WriteId("w1", 7)),
        None,
        "#wq = :wseq",
        {"#wq": "wq_w1"},
        {":wseq": {"N": "7"}},
        id="written-by",
    ),
    pytest.param(
        facts.BudgetExists(),
        None,
        "attribute_exists(#pk)",
        {"#pk": "pk"},
        {},
        id="budget-exists",
    ),
    pytest.param(
        facts.BudgetRaisedAbove("write", 12),
        None,
        "#r > :new",
        {"#r": "r_write"},
        {":new": {"N": "12"}},
        id="budget-raised-above",
    ),
    pytest.param(
        facts.Fits("write", 1, 3, T0),
        None,
        "NOT #n >= :limit",
        {"#n": "n_write"},
        {":limit": {"N": "3"}},
        id="fits",
    ),
    pytest.param(
        facts.Fits("write", 2, 3, T0),
        None,
        "NOT #n >= :limit",
        {"#n": "n_write"},
        {":limit": {"N": "2"}},
        id="fits-units",
    ),
    pytest.param(
        facts.Fits("write", 1, 3, T0),
        Form(raised=True),
        "(NOT #n >= :limit OR (#n < #r AND NOT #rx <= :now))",
        {"#n": "n_write", "#r": "r_write", "#rx": "rx_write"},
        {":limit": {"N": "3"}, ":now": {"N": "1796212800000"}},
        id="fits-raised",
    ),
    pytest.param(
        facts.Fits("write", 2, 3, T0),
        Form(raised=True),
        "NOT #n >= :limit",
        {"#n": "n_write"},
        {":limit": {"N": "2"}},
        id="fits-units-raised",
    ),
    pytest.param(
        facts.Fits("write", 2, 3, T0),
        Form(raise_as_read=8),
        "#r = :r AND NOT #n >= :rlimit AND NOT #rx <= :now",
        {"#n": "n_write", "#r": "r_write", "#rx": "rx_write"},
        {":r": {"N": "8"}, ":rlimit": {"N": "7"}, ":now": {"N": "1796212800000"}},
        id="fits-raise-as-read",
    ),
    pytest.param(
        facts.Fits("write", 1, 3, T0),
        Form(raised=True, raise_as_read=8),
        "#r = :r AND NOT #n >= :rlimit AND NOT #rx <= :now",
        {"#n": "n_write", "#r": "r_write", "#rx": "rx_write"},
        {":r": {"N": "8"}, ":rlimit": {"N": "8"}, ":now": {"N": "1796212800000"}},
        id="fits-raise-as-read-raised",
    ),
    pytest.param(
        facts.BudgetFits("write", 60_000, 1, 4),
        None,
        "(#n < :limit OR #n < #r)",
        {"#n": "c_write", "#r": "r_write"},
        {":limit": {"N": "4"}},
        id="budget-fits",
    ),
    pytest.param(
        facts.BudgetFits("write", 60_000, 3, 4),
        None,
        "#n < :limit",
        {"#n": "c_write", "#r": "r_write"},
        {":limit": {"N": "2"}},
        id="budget-fits-units",
    ),
    pytest.param(
        facts.BudgetFits("write", 60_000, 3, 4),
        Form(THIS_WINDOW, raise_as_read=7),
        "#r = :r AND #n < :rlimit",
        {"#n": "c_write", "#r": "r_write"},
        {":r": {"N": "7"}, ":rlimit": {"N": "5"}},
        id="budget-fits-raise-as-read",
    ),
    pytest.param(
        facts.BudgetFits("write", 60_000, 3, 4),
        Form(NEW_WINDOW),
        "",
        {"#n": "c_write", "#r": "r_write"},
        {},
        id="budget-fits-new-window",
    ),
    pytest.param(
        facts.BudgetFits("write", 60_000, 5, 4),
        Form(NEW_WINDOW),
        "#r >= :units",
        {"#n": "c_write", "#r": "r_write"},
        {":units": {"N": "5"}},
        id="budget-fits-new-window-too-big",
    ),
    pytest.param(
        facts.BudgetFits("write", 60_000, 5, 4),
        Form(NEW_WINDOW, raise_as_read=7),
        "#r >= :units",
        {"#n": "c_write", "#r": "r_write"},
        {":units": {"N": "5"}},
        id="budget-fits-new-window-as-read",
    ),
    pytest.param(
        facts.Not(facts.SessionExists()),
        None,
        "attribute_not_exists(#pk)",
        {"#pk": "pk"},
        {},
        id="not-session-exists",
    ),
    pytest.param(
        facts.Not(facts.BudgetExists()),
        None,
        "attribute_not_exists(#pk)",
        {"#pk": "pk"},
        {},
        id="not-budget-exists",
    ),
    pytest.param(
        facts.Not(facts.SessionSuspended()),
        None,
        "attribute_not_exists(#sus)",
        {"#sus": "suspended"},
        {},
        id="not-session-suspended",
    ),
    pytest.param(
        facts.Not(facts.BudgetSuspended()),
        None,
        "attribute_not_exists(#sus)",
        {"#sus": "suspended"},
        {},
        id="not-budget-suspended",
    ),
    pytest.param(
        facts.Not(facts.Fits("write", 1, 3, T0)),
        None,
        "#n >= :limit AND (NOT #r > :limit OR #rx <= :now)",
        {"#n": "n_write", "#r": "r_write", "#rx": "rx_write"},
        {":limit": {"N": "3"}, ":now": {"N": "1796212800000"}},
        id="not-fits-one",
    ),
    pytest.param(
        facts.Not(facts.Fits("write", 2, 3, T0)),
        None,
        "NOT NOT #n >= :limit",
        {"#n": "n_write"},
        {":limit": {"N": "2"}},
        id="not-fits-units",
    ),
    pytest.param(
        facts.Not(facts.Recorded(ENTRY)),
        None,
        "NOT contains(#ids, :own)",
        {"#ids": "cids"},
        {":own": {"S": "b:c1|chk1"}},
        id="not-recorded",
    ),
    pytest.param(
        facts.Not(facts.RaisedAbove("write", 9, T0)),
        None,
        "NOT (#r > :new AND NOT #rx <= :now)",
        {"#r": "r_write", "#rx": "rx_write"},
        {":new": {"N": "9"}, ":now": {"N": "1796212800000"}},
        id="not-raised-above",
    ),
    pytest.param(
        facts.Not(facts.RefusedBefore("write", T0 - 9)),
        None,
        "NOT #rl < :since",
        {"#rl": "rl_write"},
        {":since": {"N": "1796212799991"}},
        id="not-refused-before",
    ),
    pytest.param(
        rules.session_consume(attempt()),
        None,
        (
            "(attribute_not_exists(#pk) OR (#started <= :now AND "
            "NOT contains(#ids, :cid) AND attribute_not_exists(#sus) AND "
            "#ls >= :cutoff AND NOT #n >= :limit))"
        ),
        {
            "#pk": "pk",
            "#started": "started",
            "#ids": "cids",
            "#sus": "suspended",
            "#ls": "ls",
            "#n": "n_write",
        },
        {
            ":now": {"N": "1796212800000"},
            ":cid": {"S": "s:chk1"},
            ":cutoff": {"N": "1796209200000"},
            ":limit": {"N": "3"},
        },
        id="session-consume",
    ),
    pytest.param(
        rules.session_consume(attempt(call_id="c1")),
        None,
        (
            "(attribute_not_exists(#pk) OR (#started <= :now AND "
            "attribute_not_exists(#sus) AND #ls >= :cutoff AND "
            "(NOT contains(#ids, :cid) AND attribute_not_exists(#vf)) AND NOT #n >= :limit))"
        ),
        {
            "#pk": "pk",
            "#started": "started",
            "#sus": "suspended",
            "#ls": "ls",
            "#ids": "cids",
            "#vf": "v_c1",
            "#n": "n_write",
        },
        {
            ":now": {"N": "1796212800000"},
            ":cutoff": {"N": "1796209200000"},
            ":cid": {"S": "c:c1"},
            ":limit": {"N": "3"},
        },
        id="session-consume-call-id",
    ),
    pytest.param(
        rules.session_consume(attempt()),
        Form(KNOWN, raised=True),
        (
            "#started <= :now AND NOT contains(#ids, :cid) AND "
            "attribute_not_exists(#sus) AND #ls >= :cutoff AND "
            "(NOT #n >= :limit OR (#n < #r AND NOT #rx <= :now))"
        ),
        {
            "#started": "started",
            "#ids": "cids",
            "#sus": "suspended",
            "#ls": "ls",
            "#n": "n_write",
            "#r": "r_write",
            "#rx": "rx_write",
        },
        {
            ":now": {"N": "1796212800000"},
            ":cid": {"S": "s:chk1"},
            ":cutoff": {"N": "1796209200000"},
            ":limit": {"N": "3"},
        },
        id="session-consume-known-raised",
    ),
    pytest.param(
        rules.session_consume(attempt(units=3)),
        Form(KNOWN, raise_as_read=8),
        (
            "#started <= :now AND NOT contains(#ids, :cid) AND "
            "attribute_not_exists(#sus) AND #ls >= :cutoff AND #r = :r AND "
            "NOT #n >= :rlimit AND NOT #rx <= :now"
        ),
        {
            "#started": "started",
            "#ids": "cids",
            "#sus": "suspended",
            "#ls": "ls",
            "#n": "n_write",
            "#r": "r_write",
            "#rx": "rx_write",
        },
        {
            ":now": {"N": "1796212800000"},
            ":cid": {"S": "s:chk1"},
            ":cutoff": {"N": "1796209200000"},
            ":r": {"N": "8"},
            ":rlimit": {"N": "6"},
        },
        id="session-consume-lease-as-read",
    ),
    pytest.param(
        rules.session_consume(attempt(repeat_key="delete_tag|ab12|17")),
        Form(KNOWN),
        (
            "#started <= :now AND NOT contains(#ids, :cid) AND "
            "attribute_not_exists(#sus) AND #ls >= :cutoff AND "
            "NOT #q >= :qlimit AND NOT #n >= :limit"
        ),
        {
            "#started": "started",
            "#ids": "cids",
            "#sus": "suspended",
            "#ls": "ls",
            "#q": "q_delete_tag|ab12|17",
            "#n": "n_write",
        },
        {
            ":now": {"N": "1796212800000"},
            ":cid": {"S": "s:chk1"},
            ":cutoff": {"N": "1796209200000"},
            ":qlimit": {"N": "4"},
            ":limit": {"N": "3"},
        },
        id="session-consume-repeat",
    ),
    pytest.param(
        rules.budget_take(SPEND),
        Form(THIS_WINDOW),
        "attribute_not_exists(#sus) AND #w = :ws AND #n < :limit",
        {"#sus": "suspended", "#w": "w_write", "#n": "c_write", "#r": "r_write"},
        {":ws": {"N": "60000"}, ":limit": {"N": "2"}},
        id="budget-take-this-window",
    ),
    pytest.param(
        rules.budget_take(SPEND),
        Form(NEW_WINDOW),
        "attribute_not_exists(#sus) AND (attribute_not_exists(#w) OR #w < :ws)",
        {"#sus": "suspended", "#w": "w_write", "#n": "c_write", "#r": "r_write"},
        {":ws": {"N": "60000"}},
        id="budget-take-new-window",
    ),
    pytest.param(
        rules.budget_take(SPEND),
        Form(THIS_WINDOW, raise_as_read=7),
        "attribute_not_exists(#sus) AND #w = :ws AND #r = :r AND #n < :rlimit",
        {"#sus": "suspended", "#w": "w_write", "#n": "c_write", "#r": "r_write"},
        {":ws": {"N": "60000"}, ":r": {"N": "7"}, ":rlimit": {"N": "5"}},
        id="budget-take-as-read",
    ),
    pytest.param(
        rules.idle_restart(T0 - 5, suspended=False),
        None,
        "#ls = :old_ls AND attribute_not_exists(#sus)",
        {"#ls": "ls", "#sus": "suspended"},
        {":old_ls": {"N": "1796212799995"}},
        id="idle-restart",
    ),
    pytest.param(
        rules.refusal_noted(ENTRY, T0 - 7, 3, first=True),
        None,
        (
            "attribute_exists(#pk) AND #started = :started AND "
            "attribute_not_exists(#sus) AND NOT contains(#ids, :own) AND "
            "NOT begins_with(#z, :zlimit)"
        ),
        {"#pk": "pk", "#started": "started", "#sus": "suspended", "#ids": "cids", "#z": "z_write"},
        {":started": {"N": "1796212799993"}, ":own": {"S": "b:c1|chk1"}, ":zlimit": {"S": "3|"}},
        id="refusal-noted-first",
    ),
    pytest.param(
        rules.suspended_refusal(ENTRY),
        None,
        "attribute_exists(#sus) AND NOT contains(#ids, :own)",
        {"#sus": "suspended", "#ids": "cids"},
        {":own": {"S": "b:c1|chk1"}},
        id="suspended-refusal",
    ),
    pytest.param(
        rules.still_spent(attempt(), 3),
        None,
        "#ls >= :cutoff AND #n >= :limit AND (NOT #r > :limit OR #rx <= :now)",
        {"#ls": "ls", "#n": "n_write", "#r": "r_write", "#rx": "rx_write"},
        {":cutoff": {"N": "1796209200000"}, ":limit": {"N": "3"}, ":now": {"N": "1796212800000"}},
        id="still-spent",
    ),
    pytest.param(
        rules.take_back(attempt(), T0 - 7),
        None,
        "#started = :started AND #n >= :least AND NOT contains(#ids, :tb)",
        {"#started": "started", "#n": "n_write", "#ids": "cids"},
        {
            ":started": {"N": "1796212799993"},
            ":least": {"N": "1"},
            ":tb": {"S": "u:|" + attempt().check_id},
        },
        id="take-back",
    ),
    pytest.param(
        rules.lease_return(LeaseId("read", "chk", 3, T0, T0 - 7), 2, T0 - HOUR),
        None,
        (
            "#started = :started AND #ls >= :cutoff AND #l >= :lleast AND "
            "#n >= :least AND #g = :grant"
        ),
        {"#started": "started", "#ls": "ls", "#l": "l_read", "#n": "n_read", "#g": "g_read"},
        {
            ":started": {"N": "1796212799993"},
            ":cutoff": {"N": "1796209200000"},
            ":lleast": {"N": "2"},
            ":least": {"N": "2"},
            ":grant": {"S": "chk|1796212800000|3"},
        },
        id="lease-return",
    ),
    pytest.param(
        rules.budget_give_back(SPEND),
        None,
        "#w = :ws AND #n >= :least",
        {"#w": "w_write", "#n": "c_write"},
        {":ws": {"N": "60000"}, ":least": {"N": "3"}},
        id="budget-give-back",
    ),
    pytest.param(
        rules.streak_goes_on("write", T0 - 9),
        None,
        "NOT #rl < :since",
        {"#rl": "rl_write"},
        {":since": {"N": "1796212799991"}},
        id="streak-goes-on",
    ),
    pytest.param(
        rules.counters_reset(T0 + 1, suspended=True),
        None,
        ("attribute_exists(#pk) AND attribute_exists(#sus) AND #started < :now AND #ls < :now"),
        {"#pk": "pk", "#sus": "suspended", "#started": "started", "#ls": "ls"},
        {":now": {"N": "1796212800001"}},
        id="counters-reset",
    ),
    pytest.param(
        rules.session_raise("write", 9, T0, T0 - HOUR),
        None,
        (
            "attribute_exists(#pk) AND (#ls >= :cutoff OR "
            "attribute_exists(#sus)) AND NOT (#r > :new AND NOT #rx <= :now)"
        ),
        {"#pk": "pk", "#ls": "ls", "#sus": "suspended", "#r": "r_write", "#rx": "rx_write"},
        {":cutoff": {"N": "1796209200000"}, ":new": {"N": "9"}, ":now": {"N": "1796212800000"}},
        id="session-raise",
    ),
    pytest.param(
        rules.budget_raise("write", 12),
        None,
        "NOT #r > :new",
        {"#r": "r_write"},
        {":new": {"N": "12"}},
        id="budget-raise",
    ),
]


@pytest.mark.parametrize(("condition", "form", "expression", "names", "values"), CASES)
def test_a_condition_renders_as_it_always_has(
    condition: facts.Condition,
    form: Form | None,
    expression: str,
    names: dict[str, str],
    values: dict[str, Any],
) -> None:
    rendered = render(condition, form)
    assert rendered.expression == expression
    # In order too: the same request, byte for byte.
    assert list(rendered.names.items()) == list(names.items())
    assert list(rendered.values.items()) == list(values.items())


def test_every_fact_of_the_core_is_pinned_on_its_own() -> None:
    every = {
        cls
        for _, cls in inspect.getmembers(facts, inspect.isclass)
        if cls.__module__ in (facts.__name__, call_facts.__name__)
        and hasattr(cls, "holds")
        and cls not in (facts.And, facts.Or, facts.Not, facts.Named, facts.Condition)
    }
    alone = {type(case.values[0]) for case in CASES}
    assert every <= alone
