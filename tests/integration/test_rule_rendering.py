"""A rule (`quota.rules`) and its DynamoDB rendering (`storage/dynamodb/conditions.py`)
admit the same records. Generated records (written on dynalite by the core's own changes,
through the adapter) and generated rules: whatever the rendered condition admits on
dynalite (a conditional UpdateItem goes through), `rule.holds` admits on the record as
read back; and, where the rendering is meant to be exact, the other way round too.

A rendering may be stricter than its rule only where DynamoDB cannot say it in one form
(calls asked several at once under a raise: the adapter's second try is tied to the raise
as read); the test knows those cases, and asserts only the one direction there."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from chalicelib.quota import changes, rules
from chalicelib.quota.core import (
    Attempt,
    BudgetKey,
    BudgetSnapshot,
    CallLife,
    LeaseId,
    Scope,
    SessionKey,
    SessionSnapshot,
    Spend,
    call_id_key,
)
from chalicelib.quota.facts import BudgetFits, Condition, Fits, facts
from chalicelib.quota.writes import WriteId
from chalicelib.storage.dynamodb import updates
from chalicelib.storage.dynamodb.budget_items import item_key
from chalicelib.storage.dynamodb.budgets import NEW_WINDOW, BudgetItems
from chalicelib.storage.dynamodb.codec import key_of
from chalicelib.storage.dynamodb.conditions import Form, render
from chalicelib.storage.dynamodb.counters import SessionTable
from chalicelib.storage.dynamodb.layout import PK
from chalicelib.storage.dynamodb.updates import ConditionFailed
from tests.support import Backend, client_for, fresh_settings, provisioned

T0 = 1_700_000_000_000
SECOND, HOUR, MINUTE = 1_000, 3_600_000, 60_000
CATEGORIES = ("read", "write")
TIMES = st.sampled_from([T0 + k * SECOND for k in range(4)])
LIMITS = st.integers(1, 4)
Draw = Callable[..., Any]  # a strategy's draw, or `st.data()`'s


@pytest.fixture
def dynalite(dynalite_endpoint: str) -> Iterator[Backend]:
    client = client_for(dynalite_endpoint)
    yield Backend(
        "dynalite", client, provisioned(client, fresh_settings(f"r{uuid.uuid4().hex[:9]}"))
    )


# A check is one attempt: its id names its call (tool, category, call id, units, time)
# and what becomes of it: counted (and maybe admitted, or taken back), refused, or a
# replay of a counted call. Several checks share a call id (a client's retry, a copy).
COUNTED = {
    "c1": ("delete_tag", "write", "k1", 1, T0),
    "c2": ("delete_tag", "write", None, 1, T0 + SECOND),
    "c3": ("read_page", "read", "k2", 2, T0 + 2 * SECOND),
    "c4": ("delete_tag", "write", "k1", 1, T0 + 3 * SECOND),
}
REFUSED = {
    "b1": ("delete_tag", "write", "k1", 1, T0 + SECOND),
    "b2": ("read_page", "read", None, 1, T0 + 2 * SECOND),
    "b3": ("read_page", "read", "k3", 1, T0 + 3 * SECOND),
}
REPLAYS = {
    "p1": ("delete_tag", "write", "k1", 1, T0 + 2 * SECOND),
    "p2": ("read_page", "read", "k2", 2, T0 + 3 * SECOND),
}


@st.composite
def attempts(draw: st.DrawFn, session: SessionKey, checks: dict[str, Any]) -> Attempt:
    check = draw(st.sampled_from(sorted(checks)))
    tool, category, call_id, units, now = checks[check]
    return Attempt(
        session,
        tool,
        category,
        draw(LIMITS),
        now,
        HOUR,
        check,
        "alice",
        call_id,
        units=units,
        leased=units > 1,
        asked=units,
        wider=draw(st.booleans()),
    )


def _lives(draw: Draw, attempt: Attempt) -> CallLife | None:
    life = attempt.life()
    if life is None or draw(st.booleans()):
        return None
    return life.admitted() if draw(st.booleans()) else life


def session_change(draw: Draw, session: SessionKey) -> changes.Change:
    """One of the writes a check or an administrator makes to a session."""
    counted = draw(attempts(session, COUNTED))
    kind = draw(st.sampled_from(["count", "count", "refuse", "replay", "back", "admit", "admin"]))
    if kind == "count":
        return changes.counted(counted)
    if kind == "refuse":
        refused = draw(attempts(session, REFUSED))
        return changes.refused(refused, draw(st.sampled_from([None, refused.base_limit])))
    if kind == "replay":
        replay = draw(attempts(session, REPLAYS))
        return changes.replayed(replay, _lives(draw, replay))
    if kind == "back":
        return changes.taken_back(counted, draw(st.booleans()))
    life = counted.life()
    if kind == "admit" and life is not None:
        return changes.admitted(call_id_key(counted.call_id or ""), life)
    at = draw(TIMES)
    admin: changes.Change = draw(
        st.sampled_from(
            [
                changes.suspended("look", at),
                changes.resumed(at + HOUR),
                changes.raised(
                    counted.category, draw(st.integers(2, 6)), draw(st.sampled_from([None, at]))
                ),
                changes.lowered(counted.category),
                changes.reset(at, at + HOUR),
            ]
        )
    )
    return admin


def session_rule(draw: Draw, session: SessionKey) -> Condition:
    """One of the rules a session's write holds on, with parameters near the record's."""
    counted = draw(attempts(session, COUNTED))
    replay = draw(attempts(session, REPLAYS))
    if draw(st.booleans()):
        record = replay.record(allowed=True, replay=True)
    else:
        record = draw(attempts(session, REFUSED)).record(allowed=False)
    started, at, limit = draw(TIMES), draw(TIMES), draw(LIMITS)
    key = call_id_key(replay.call_id or "k1")
    lease = LeaseId(counted.category, counted.check_id, counted.units, at, started, "alice")
    life = _lives(draw, counted)
    replayed = replay.life()
    assert replayed is not None  # a replay is of a call id
    builders: list[Callable[[], Condition]] = [
        lambda: rules.session_consume(counted),
        lambda: rules.idle_restart(at, draw(st.booleans())),
        lambda: rules.refusal_record(record, started),
        lambda: rules.refusal_noted(record, started, limit, draw(st.booleans())),
        lambda: rules.replay_record(record, started, key, _lives(draw, replay) or replayed),
        lambda: rules.call_admitted(call_id_key(counted.call_id or ""), life),  # type: ignore[arg-type]
        lambda: rules.suspended_refusal(record),
        lambda: rules.still_spent(counted, limit),
        lambda: rules.not_taken_back(counted),
        lambda: rules.take_back(counted, started),
        lambda: rules.take_back_recorded(counted),
        lambda: rules.lease_return(lease, draw(st.integers(1, 3)), at - HOUR),
        lambda: rules.counters_reset(at, draw(st.booleans()), draw(st.booleans())),
        lambda: rules.session_raise(counted.category, limit + 1, at, at - HOUR),
        rules.session_unseen,
    ]
    rule: Callable[[], Condition] = draw(st.sampled_from(builders))
    return rule()


def spends(draw: Draw) -> Spend:
    start = T0 + draw(st.integers(0, 2)) * MINUTE
    units = draw(st.integers(1, 3))
    return Spend(
        draw(st.sampled_from(CATEGORIES)), draw(LIMITS), start, start + MINUTE, start, units
    )


WRITES = st.builds(WriteId, st.sampled_from(["w1", "w2"]), st.integers(1, 4))


def budget_change(draw: Draw) -> changes.Change:
    """One of the writes a check or an administrator makes to a budget."""
    spend = spends(draw)
    category, at = spend.category, spend.now_ms
    change = draw(
        st.sampled_from(
            [
                changes.budget_taken(spend, fresh=True),
                changes.budget_taken(spend, fresh=False),
                changes.budget_given_back(spend),
                changes.budget_marked(spend),
                changes.streak_noted(category, at, 1, draw(st.booleans()), None),
                changes.streak_ended(category),
                changes.budget_raised(category, draw(st.integers(2, 6))),
                changes.budget_suspended("look"),
                changes.BUDGET_RESUMED,
            ]
        )
    )
    return changes.written(change, draw(WRITES)) if draw(st.booleans()) else change


def budget_rule(draw: Draw) -> tuple[Condition, Form]:
    """One of the rules a budget's write holds on, in the form the adapter sends it."""
    spend, write = spends(draw), draw(st.one_of(st.none(), WRITES))
    fresh = draw(st.booleans())
    builders: list[Callable[[], tuple[Condition, Form]]] = [
        lambda: (
            rules.budget_take(spend, write, fresh),
            Form(NEW_WINDOW if fresh else frozenset()),
        ),
        lambda: (rules.budget_give_back(spend, write), Form()),
        lambda: (rules.budget_give_back_taken(spend, write or WriteId("w1", 2)), Form()),
        lambda: (rules.streak_goes_on(spend.category, draw(TIMES), write), Form()),
        lambda: (rules.streak_ends(spend.category, draw(TIMES)), Form()),
        lambda: (rules.budget_raise(spend.category, draw(st.integers(1, 6))), Form()),
    ]
    chosen: Callable[[], tuple[Condition, Form]] = draw(st.sampled_from(builders))
    return chosen()


def _admitted(backend: Backend, key: dict[str, Any], rule: Condition, form: Form) -> bool:
    """Whether dynalite lets a write through on the rendered rule."""
    rendered = render(rule, form)
    try:
        updates.update(
            backend.client,
            backend.settings.counters_table,
            key,
            "SET #probe = :probe",
            rendered.expression,
            {**rendered.names, "#probe": "probe"},
            {**rendered.values, ":probe": {"N": "1"}},
            "probing a rule",
        )
    except ConditionFailed:
        return False
    return True


def _stricter(rule: Condition, seen: SessionSnapshot | BudgetSnapshot | None) -> bool:
    """Whether the rendering may fail where the rule holds: calls asked several at once
    under a raise (the adapter's second try, tied to the raise as read, covers it)."""
    for fact in facts(rule):
        if isinstance(fact, Fits) and isinstance(seen, SessionSnapshot):
            raise_ = seen.raise_for(fact.category, fact.now_ms)
            if raise_ is not None and (fact.units > 1 or raise_ > fact.base_limit):
                return True
        if (
            isinstance(fact, BudgetFits)
            and isinstance(seen, BudgetSnapshot)
            and fact.units > 1
            and seen.raised.get(fact.category, 0) > fact.limit
        ):
            return True
    return False


_SETTINGS = settings(
    max_examples=int(os.environ.get("RULE_EXAMPLES", "60")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_SETTINGS
@given(data=st.data())
def test_a_session_rule_admits_what_its_rendering_admits_on_dynalite(
    dynalite: Backend, data: st.DataObject
) -> None:
    session = SessionKey("demo", f"p-{uuid.uuid4().hex[:8]}")
    table = SessionTable(dynalite.client, dynalite.settings.counters_table, CATEGORIES, 4)
    if data.draw(st.booleans()):  # a session is made by its first count (or not at all)
        table.write(
            session, changes.counted(data.draw(attempts(session, COUNTED))), None, "counting"
        )
        for _ in range(data.draw(st.integers(0, 5))):
            table.write(session, session_change(data.draw, session), None, "building a record")
    seen = table.read(session)
    rule = session_rule(data.draw, session)
    admitted = _admitted(dynalite, {PK: {"S": key_of(session)}}, rule, Form())
    event(f"admitted={admitted} stricter={_stricter(rule, seen)}")
    if admitted:
        assert rule.holds(seen), f"{render(rule).expression} admits more than {rule} on {seen}"
    elif not _stricter(rule, seen):
        assert not rule.holds(seen), f"{rule} admits more than {render(rule).expression} on {seen}"


@_SETTINGS
@given(data=st.data())
def test_a_budget_rule_admits_what_its_rendering_admits_on_dynalite(
    dynalite: Backend, data: st.DataObject
) -> None:
    key = BudgetKey("demo", Scope.PRINCIPAL, f"p-{uuid.uuid4().hex[:8]}")
    items = BudgetItems(dynalite.client, dynalite.settings.counters_table)
    for _ in range(data.draw(st.integers(0, 5))):
        items.write(key, budget_change(data.draw), None, "building a record")
    seen = items.read(key)
    rule, form = budget_rule(data.draw)
    admitted = _admitted(dynalite, item_key(key), rule, form)
    event(f"admitted={admitted} stricter={_stricter(rule, seen)}")
    if admitted:
        assert rule.holds(seen), f"rendered {render(rule, form).expression} admits more"
    elif not _stricter(rule, seen):
        assert not rule.holds(seen), (
            f"the rule admits what {render(rule, form).expression} does not"
        )
