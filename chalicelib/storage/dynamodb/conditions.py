"""The core's rules (`quota.rules`) as DynamoDB ConditionExpressions: one renderer per
fact, every attribute and value aliased. This translates; it decides nothing.

Each fact renders the same fixed fragment with fixed placeholders (`#ls >= :cutoff`), so
the expressions stay few and the same from call to call. Where DynamoDB cannot say a fact
in one form (a condition allows no arithmetic), the adapter passes a `Form`: which case
of an `Or` this request covers (the other case is another request), and the value a raise
was read at. A rendered condition always implies the rule it renders: at worst it fails
where the rule holds (the record changed since it was read), and the adapter tries again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chalicelib.quota.core import call_id_key
from chalicelib.quota.facts import (
    And,
    BudgetCountAtLeast,
    BudgetExists,
    BudgetFits,
    BudgetRaisedAbove,
    BudgetSuspended,
    CallIdFree,
    CheckNotCounted,
    Condition,
    CountAtLeast,
    CountsNoLaterWindow,
    CountsWindow,
    FirstRefusalAt,
    Fits,
    LastGrantIs,
    LastSeenAt,
    Named,
    Not,
    Or,
    RaisedAbove,
    Recorded,
    RefusedBefore,
    RefusedBy,
    RepeatsUnder,
    SameCounters,
    SeenBefore,
    SeenSince,
    SessionExists,
    SessionSuspended,
    StartedBefore,
    StartedBy,
    facts,
)
from chalicelib.storage.dynamodb import layout
from chalicelib.storage.dynamodb.codec import SEP, stored_id
from chalicelib.storage.dynamodb.updates import n, s

# A comparison with a missing attribute is false, so `NOT #rx <= :now` also holds for a
# raise without an expiry. (The same test spelt `attribute_not_exists(#rx) OR #rx > :now`
# made dynalite 2.7x slower on every check; DynamoDB evaluates both alike.)
RAISE_IN_FORCE = "NOT #rx <= :now"
# Likewise `NOT #n >= :limit` holds for a category not counted yet. Every clause is kept
# flat: nested ORs made dynalite spend up to 6x the CPU on parsing the condition. A lease
# counts several calls at once: `:limit` is `limit - units + 1`, so that `NOT #n >= :limit`
# means n + units <= limit.
UNDER_BASE = "NOT #n >= :limit"
# `#n < #r` lets a per-session raise lift the limit in place (one call at a time).
UNDER_RAISED = f"(NOT #n >= :limit OR (#n < #r AND {RAISE_IN_FORCE}))"
# A lease under a raise: tied to the raise's value as read (`:rlimit` = raise - units + 1).
UNDER_RAISE_AS_READ = f"#r = :r AND #n < :rlimit AND {RAISE_IN_FORCE}"
NOT_SEEN = "NOT contains(#ids, :cid)"
# The loop breaker's count for this call's key (absent: none yet, and the NOT holds).
REPEATS_UNDER = "NOT #q >= :qlimit"
# A check that saw the session spent: still spent, with no raise in force above the limit
# (stricter than "the call does not fit": a spent raise fails it, and the check is made).
STILL_SPENT = "#n >= :limit AND (NOT #r > :limit OR #rx <= :now)"
BUDGET_THIS_WINDOW = "#w = :ws"
BUDGET_NO_LATER_WINDOW = "(attribute_not_exists(#w) OR #w < :ws)"
BUDGET_UNDER_LIMIT = "(#n < :limit OR #n < #r)"
BUDGET_UNITS_UNDER_LIMIT = "#n < :limit"
BUDGET_UNDER_RAISE_AS_READ = "#r = :r AND #n < :rlimit"
BUDGET_RAISE_HOLDS_UNITS = "#r >= :units"  # a new window: only a raise can hold a big lease


@dataclass(frozen=True)
class Form:
    """How to say a rule in one request: the cases of an `Or` left to other requests
    (their facts' types), whether a session's raise is known to exist (the cheaper
    condition without one), and the raise as read, for calls asked several at once."""

    without: frozenset[type] = frozenset()
    raised: bool = False
    raise_as_read: int | None = None


@dataclass
class Rendered:
    """A ConditionExpression with its names and values."""

    expression: str
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)


def with_rule(
    rule: Condition,
    names: Mapping[str, str],
    values: Mapping[str, Any],
    form: Form | None = None,
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The rule rendered, with the update's names and values and its own."""
    rendered = render(rule, form)
    return rendered.expression, {**names, **rendered.names}, {**values, **rendered.values}


def render(condition: Condition, form: Form | None = None) -> Rendered:
    """The condition as DynamoDB says it (session or budget facts, never both)."""
    out = Rendered("")
    out.expression = _render(condition, form or Form(), out)
    return out


def _render(condition: Condition, form: Form, out: Rendered) -> str:
    if isinstance(condition, Named):
        return _render(condition.part, form, out)
    if isinstance(condition, And):
        parts = [_render(p, form, out) for p in condition.parts]
        return " AND ".join(p for p in parts if p)
    if isinstance(condition, Or):
        kept = [p for p in condition.parts if not _left_out(p, form)]
        parts = [_render(p, form, out) for p in kept]
        if len(parts) == 1:
            return parts[0]
        return "(" + " OR ".join(f"({p})" if " AND " in p else p for p in parts) + ")"
    if isinstance(condition, Not):
        return _render_not(condition.part, form, out)
    return _fact(condition, form, out)


def _left_out(part: Condition, form: Form) -> bool:
    return any(type(f) in form.without for f in facts(part))


def _render_not(part: Condition, form: Form, out: Rendered) -> str:
    if isinstance(part, Fits) and part.units == 1:
        _fits(part, Form(raised=True), out)
        return STILL_SPENT
    if isinstance(part, SessionExists | BudgetExists):
        out.names["#pk"] = layout.PK
        return "attribute_not_exists(#pk)"
    if isinstance(part, SessionSuspended | BudgetSuspended):
        out.names["#sus"] = layout.SUSPENDED
        return "attribute_not_exists(#sus)"
    inner = _render(part, form, out)
    return f"NOT {inner}" if " AND " not in inner and " OR " not in inner else f"NOT ({inner})"


def _fact(fact: Condition, form: Form, out: Rendered) -> str:
    renderer = _RENDERERS.get(type(fact))
    if renderer is None:
        raise TypeError(f"no DynamoDB rendering for {fact!r}")
    return renderer(fact, form, out)


def _r_sessionexists(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#pk"] = layout.PK
    return "attribute_exists(#pk)"


def _r_sessionsuspended(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#sus"] = layout.SUSPENDED
    return "attribute_exists(#sus)"


def _r_seensince(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#ls"] = layout.LAST_SEEN
    out.values[":cutoff"] = n(fact.cutoff_ms)
    return "#ls >= :cutoff"


def _r_lastseenat(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#ls"] = layout.LAST_SEEN
    out.values[":old_ls"] = n(fact.at_ms)
    return "#ls = :old_ls"


def _r_samecounters(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#started"] = layout.STARTED
    out.values[":started"] = n(fact.started_ms)
    return "#started = :started"


def _r_fits(fact: Any, form: Form, out: Rendered) -> str:
    return _fits(fact, form, out)


def _r_startedby(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#started"] = layout.STARTED
    out.values[":now"] = n(fact.now_ms)
    return "#started <= :now"


def _r_startedbefore(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#started"] = layout.STARTED
    out.values[":now"] = n(fact.ms)
    return "#started < :now"


def _r_seenbefore(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#ls"] = layout.LAST_SEEN
    out.values[":now"] = n(fact.ms)
    return "#ls < :now"


def _r_raisedabove(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#r"] = layout.RAISED_PREFIX + fact.category
    out.names["#rx"] = layout.RAISED_UNTIL_PREFIX + fact.category
    out.values[":new"] = n(fact.limit)
    out.values[":now"] = n(fact.now_ms)
    return f"#r > :new AND {RAISE_IN_FORCE}"


def _r_budgetraisedabove(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#r"] = layout.RAISED_PREFIX + fact.category
    out.values[":new"] = n(fact.limit)
    return "#r > :new"


def _r_checknotcounted(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#ids"] = layout.CALL_IDS
    out.values[":cid"] = s(layout.COUNTED_CHECK + fact.check_id)
    return NOT_SEEN


def _r_callidfree(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#ids"] = layout.CALL_IDS
    out.values[":cid"] = s(layout.COUNTED_CALL_ID + call_id_key(fact.call_id))
    return NOT_SEEN


def _r_repeatsunder(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#q"] = layout.REPEAT_PREFIX + fact.key
    out.values[":qlimit"] = n(fact.limit)
    return REPEATS_UNDER


def _r_recorded(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#ids"] = layout.CALL_IDS
    out.values[":own"] = s(stored_id(fact.record))
    return "contains(#ids, :own)"


def _r_firstrefusalat(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#z"] = layout.NOTIFIED_PREFIX + fact.category
    out.values[":zlimit"] = s(f"{fact.limit}{SEP}")
    return "begins_with(#z, :zlimit)"


def _r_countatleast(fact: Any, form: Form, out: Rendered) -> str:
    if fact.leased:
        out.names["#l"] = layout.LEASED_PREFIX + fact.category
        out.values[":lleast"] = n(fact.least)
        return "#l >= :lleast"
    out.names["#n"] = layout.COUNT_PREFIX + fact.category
    out.values[":least"] = n(fact.least)
    return "#n >= :least"


def _r_lastgrantis(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#g"] = layout.GRANT_PREFIX + fact.category
    out.values[":grant"] = s(fact.grant)
    return "#g = :grant"


def _r_budgetcountatleast(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#n"] = layout.BUDGET_COUNT_PREFIX + fact.category
    out.names["#w"] = layout.BUDGET_WINDOW_PREFIX + fact.category
    out.values[":least"] = n(fact.least)
    return "#n >= :least"


def _r_refusedbefore(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#rl"] = layout.LAST_REFUSAL
    out.values[":since"] = n(fact.ms)
    return "#rl < :since"


def _r_refusedby(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#rl"] = layout.LAST_REFUSAL
    out.values[":now"] = n(fact.ms)
    return "#rl <= :now"


def _r_countswindow(fact: Any, form: Form, out: Rendered) -> str:
    out.names["#w"] = layout.BUDGET_WINDOW_PREFIX + fact.category
    out.values[":ws"] = n(fact.window_start_ms)
    return BUDGET_THIS_WINDOW if isinstance(fact, CountsWindow) else BUDGET_NO_LATER_WINDOW


def _r_budgetfits(fact: Any, form: Form, out: Rendered) -> str:
    return _budget_fits(fact, form, out)


_RENDERERS: dict[type, Callable[[Any, Form, Rendered], str]] = {
    SessionExists: _r_sessionexists,
    SessionSuspended: _r_sessionsuspended,
    BudgetSuspended: _r_sessionsuspended,
    SeenSince: _r_seensince,
    LastSeenAt: _r_lastseenat,
    SameCounters: _r_samecounters,
    Fits: _r_fits,
    StartedBy: _r_startedby,
    RaisedAbove: _r_raisedabove,
    BudgetRaisedAbove: _r_budgetraisedabove,
    BudgetExists: _r_sessionexists,
    StartedBefore: _r_startedbefore,
    SeenBefore: _r_seenbefore,
    CheckNotCounted: _r_checknotcounted,
    CallIdFree: _r_callidfree,
    Recorded: _r_recorded,
    RepeatsUnder: _r_repeatsunder,
    FirstRefusalAt: _r_firstrefusalat,
    CountAtLeast: _r_countatleast,
    LastGrantIs: _r_lastgrantis,
    BudgetCountAtLeast: _r_budgetcountatleast,
    RefusedBefore: _r_refusedbefore,
    RefusedBy: _r_refusedby,
    CountsWindow: _r_countswindow,
    CountsNoLaterWindow: _r_countswindow,
    BudgetFits: _r_budgetfits,
}


def _fits(fact: Fits, form: Form, out: Rendered) -> str:
    out.names["#n"] = layout.COUNT_PREFIX + fact.category
    if form.raise_as_read is not None:
        out.names.update({"#r": layout.RAISED_PREFIX + fact.category})
        out.names["#rx"] = layout.RAISED_UNTIL_PREFIX + fact.category
        out.values.update(
            {
                ":r": n(form.raise_as_read),
                ":rlimit": n(form.raise_as_read - fact.units + 1),
                ":now": n(fact.now_ms),
            }
        )
        return UNDER_RAISE_AS_READ
    out.values[":limit"] = n(fact.base_limit - fact.units + 1)
    if form.raised and fact.units == 1:
        out.names["#r"] = layout.RAISED_PREFIX + fact.category
        out.names["#rx"] = layout.RAISED_UNTIL_PREFIX + fact.category
        out.values[":now"] = n(fact.now_ms)
        return UNDER_RAISED
    return UNDER_BASE


def _budget_fits(fact: BudgetFits, form: Form, out: Rendered) -> str:
    out.names["#n"] = layout.BUDGET_COUNT_PREFIX + fact.category
    out.names["#r"] = layout.RAISED_PREFIX + fact.category
    if CountsWindow in form.without:
        # A window not counted yet: nothing is counted in it, only the units must fit.
        if fact.units <= fact.limit:
            return ""
        out.values[":units"] = n(fact.units)
        return BUDGET_RAISE_HOLDS_UNITS
    if form.raise_as_read is not None:
        out.values[":r"] = n(form.raise_as_read)
        out.values[":rlimit"] = n(form.raise_as_read - fact.units + 1)
        return BUDGET_UNDER_RAISE_AS_READ
    out.values[":limit"] = n(fact.limit - fact.units + 1)
    return BUDGET_UNDER_LIMIT if fact.units == 1 else BUDGET_UNITS_UNDER_LIMIT
