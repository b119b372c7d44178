"""The core's rules (`quota.rules`) as DynamoDB ConditionExpressions: one rendering per
fact, every attribute and value aliased. This translates; it decides nothing.

Each fact renders the same fixed fragment with fixed placeholders (`#ls >= :cutoff`), so
the expressions stay few and the same from call to call: most facts are one row of
`_FRAGMENTS`; `CountAtLeast`, `Fits` and `BudgetFits` are functions. Where DynamoDB
cannot say a fact in one form (a condition allows no arithmetic), the adapter passes a
`Form`: which case of an `Or` this request covers (the other case is another request),
and the value a raise was read at. A rendered condition always implies the rule it
renders: at worst it fails where the rule holds (the record changed since it was read),
and the adapter tries again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar

from chalicelib.quota.core import BudgetSnapshot, SessionSnapshot, call_id_key
from chalicelib.quota.facts import (
    And,
    BudgetCountAtLeast,
    BudgetExists,
    BudgetFits,
    BudgetRaisedAbove,
    BudgetSuspended,
    CallCountedBy,
    CallIdFree,
    CallLifeIs,
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
    NotWrittenBy,
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
    TakenBack,
    WrittenBy,
    facts,
)
from chalicelib.storage.dynamodb import layout
from chalicelib.storage.dynamodb.codec import (
    SEP,
    encode_life,
    life_prefix,
    stored_id,
    taken_back_id,
)
from chalicelib.storage.dynamodb.updates import n, s

F = TypeVar("F")

# A comparison with a missing attribute is false, so `NOT #rx <= :now` also holds for a
# raise without an expiry. (The same test spelt `attribute_not_exists(#rx) OR #rx > :now`
# made dynalite 2.7x slower on every check; DynamoDB evaluates both alike.)
RAISE_IN_FORCE = "NOT #rx <= :now"
# Likewise `NOT #n >= :limit` holds for a category not counted yet. Every clause is kept
# flat: nested ORs made dynalite spend up to 6x the CPU on parsing the condition. A lease
# counts several calls at once: `:limit` is `limit - units + 1`, so that `NOT #n >= :limit`
# means n + units <= limit.
UNDER_BASE = "NOT #n >= :limit"
# More calls at once than the limit never fit (`:limit` < 1): false, counted or not.
OVER_BASE = "#n < :limit"
# `#n < #r` lets a per-session raise lift the limit in place (one call at a time).
UNDER_RAISED = f"(NOT #n >= :limit OR (#n < #r AND {RAISE_IN_FORCE}))"
# A lease under a raise: tied to the raise's value as read (`:rlimit` = raise - units + 1).
UNDER_RAISE_AS_READ = f"#r = :r AND NOT #n >= :rlimit AND {RAISE_IN_FORCE}"
OVER_RAISE_AS_READ = f"#r = :r AND #n < :rlimit AND {RAISE_IN_FORCE}"
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
    """An expression (a ConditionExpression, or an UpdateExpression: `changes`) with its
    names and values."""

    expression: str
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)


def raise_form(rule: Condition, form: Form, seen: object) -> Form | None:
    """The form of a second try of a rule that failed on `seen` where it asks several
    calls at once under a raise in force above the limit (a condition cannot subtract):
    tied to the raise as read. None: no second try would hold where the first failed."""
    if seen is None or form.raise_as_read is not None:
        return None
    for fact in facts(rule):
        if isinstance(fact, Fits) and fact.units > 1 and isinstance(seen, SessionSnapshot):
            raise_ = seen.raise_for(fact.category, fact.now_ms)
            if raise_ is not None and raise_ > fact.base_limit:
                return replace(form, raise_as_read=raise_)
        if isinstance(fact, BudgetFits) and isinstance(seen, BudgetSnapshot):
            raised = seen.raised.get(fact.category, 0)
            if fact.units > 1 and raised > fact.limit and CountsWindow not in form.without:
                return replace(form, raise_as_read=raised)
    return None


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
    negated = _NEGATED.get(type(part))
    if negated is not None:
        return negated(part, form, out)
    inner = _render(part, form, out)
    return f"NOT {inner}" if " AND " not in inner and " OR " not in inner else f"NOT ({inner})"


def _fact(fact: Condition, form: Form, out: Rendered) -> str:
    renderer = _RENDERERS.get(type(fact))
    if renderer is None:
        raise TypeError(f"no DynamoDB rendering for {fact!r}")
    return renderer(fact, form, out)


@dataclass(frozen=True)
class _Fragment(Generic[F]):
    """A fact said the same way in every form: a fixed fragment, its names (each a fixed
    attribute, or a prefix completed by the fact's `suffix`) and the values it reads."""

    expression: str
    names: Mapping[str, str]
    values: Callable[[F], dict[str, Any]] = lambda fact: {}
    suffix: Callable[[F], str] = lambda fact: ""

    def __call__(self, fact: F, form: Form, out: Rendered) -> str:
        suffix = self.suffix(fact)
        out.names.update({alias: name + suffix for alias, name in self.names.items()})
        out.values.update(self.values(fact))
        return self.expression


class _OfCategory(Protocol):
    @property
    def category(self) -> str: ...


def _category(fact: _OfCategory) -> str:
    return fact.category


# Names a fixed attribute under the one alias it has in every expression.
_LAST_SEEN = {"#ls": layout.LAST_SEEN}
_STARTED = {"#started": layout.STARTED}
_CALL_IDS = {"#ids": layout.CALL_IDS}
_LAST_REFUSAL = {"#rl": layout.LAST_REFUSAL_PREFIX}

_EXISTS = _Fragment[object]("attribute_exists(#pk)", {"#pk": layout.PK})
_SUSPENDED = _Fragment[object]("attribute_exists(#sus)", {"#sus": layout.SUSPENDED})
# The two window facts differ only in their fragment.
_COUNTS_AT = _Fragment[CountsWindow | CountsNoLaterWindow](
    "", {"#w": layout.BUDGET_WINDOW_PREFIX}, lambda f: {":ws": n(f.window_start_ms)}, _category
)
_COUNTED_AT_LEAST = _Fragment[CountAtLeast](
    "#n >= :least", {"#n": layout.COUNT_PREFIX}, lambda f: {":least": n(f.least)}, _category
)
_LEASED_AT_LEAST = _Fragment[CountAtLeast](
    "#l >= :lleast", {"#l": layout.LEASED_PREFIX}, lambda f: {":lleast": n(f.least)}, _category
)


_FRAGMENTS: dict[type, _Fragment[Any]] = {
    SessionExists: _EXISTS,
    BudgetExists: _EXISTS,
    SessionSuspended: _SUSPENDED,
    BudgetSuspended: _SUSPENDED,
    SeenSince: _Fragment[SeenSince](
        "#ls >= :cutoff", _LAST_SEEN, lambda f: {":cutoff": n(f.cutoff_ms)}
    ),
    LastSeenAt: _Fragment[LastSeenAt](
        "#ls = :old_ls", _LAST_SEEN, lambda f: {":old_ls": n(f.at_ms)}
    ),
    SeenBefore: _Fragment[SeenBefore]("#ls < :now", _LAST_SEEN, lambda f: {":now": n(f.ms)}),
    SameCounters: _Fragment[SameCounters](
        "#started = :started", _STARTED, lambda f: {":started": n(f.started_ms)}
    ),
    StartedBy: _Fragment[StartedBy]("#started <= :now", _STARTED, lambda f: {":now": n(f.now_ms)}),
    StartedBefore: _Fragment[StartedBefore](
        "#started < :now", _STARTED, lambda f: {":now": n(f.ms)}
    ),
    RaisedAbove: _Fragment[RaisedAbove](
        f"#r > :new AND {RAISE_IN_FORCE}",
        {"#r": layout.RAISED_PREFIX, "#rx": layout.RAISED_UNTIL_PREFIX},
        lambda f: {":new": n(f.limit), ":now": n(f.now_ms)},
        _category,
    ),
    BudgetRaisedAbove: _Fragment[BudgetRaisedAbove](
        "#r > :new", {"#r": layout.RAISED_PREFIX}, lambda f: {":new": n(f.limit)}, _category
    ),
    CheckNotCounted: _Fragment[CheckNotCounted](
        NOT_SEEN, _CALL_IDS, lambda f: {":cid": s(layout.COUNTED_CHECK + f.check_id)}
    ),
    Recorded: _Fragment[Recorded](
        "contains(#ids, :own)", _CALL_IDS, lambda f: {":own": s(stored_id(f.record))}
    ),
    TakenBack: _Fragment[TakenBack](
        "contains(#ids, :tb)", _CALL_IDS, lambda f: {":tb": s(taken_back_id(f.record))}
    ),
    RepeatsUnder: _Fragment[RepeatsUnder](
        REPEATS_UNDER,
        {"#q": layout.REPEAT_PREFIX},
        lambda f: {":qlimit": n(f.limit)},
        lambda f: f.key,
    ),
    FirstRefusalAt: _Fragment[FirstRefusalAt](
        "begins_with(#z, :zlimit)",
        {"#z": layout.NOTIFIED_PREFIX},
        lambda f: {":zlimit": s(f"{f.limit}{SEP}")},
        _category,
    ),
    LastGrantIs: _Fragment[LastGrantIs](
        "#g = :grant", {"#g": layout.GRANT_PREFIX}, lambda f: {":grant": s(f.grant)}, _category
    ),
    CountsWindow: replace(_COUNTS_AT, expression=BUDGET_THIS_WINDOW),
    CountsNoLaterWindow: replace(_COUNTS_AT, expression=BUDGET_NO_LATER_WINDOW),
    # `#w` goes unused (requests send only the names they use); kept as it always was.
    BudgetCountAtLeast: _Fragment[BudgetCountAtLeast](
        "#n >= :least",
        {"#n": layout.BUDGET_COUNT_PREFIX, "#w": layout.BUDGET_WINDOW_PREFIX},
        lambda f: {":least": n(f.least)},
        _category,
    ),
    RefusedBefore: _Fragment[RefusedBefore](
        "#rl < :since", _LAST_REFUSAL, lambda f: {":since": n(f.ms)}, _category
    ),
    RefusedBy: _Fragment[RefusedBy](
        "#rl <= :now", _LAST_REFUSAL, lambda f: {":now": n(f.ms)}, _category
    ),
}


# DynamoDB's own negations, rather than `NOT attribute_exists(...)`.
_NOT_EXISTS = replace(_EXISTS, expression="attribute_not_exists(#pk)")
_NOT_SUSPENDED = replace(_SUSPENDED, expression="attribute_not_exists(#sus)")
_NEGATED: dict[type, _Fragment[object]] = {
    SessionExists: _NOT_EXISTS,
    BudgetExists: _NOT_EXISTS,
    SessionSuspended: _NOT_SUSPENDED,
    BudgetSuspended: _NOT_SUSPENDED,
}


def _count_at_least(fact: CountAtLeast, form: Form, out: Rendered) -> str:
    return (_LEASED_AT_LEAST if fact.leased else _COUNTED_AT_LEAST)(fact, form, out)


def _fits(fact: Fits, form: Form, out: Rendered) -> str:
    out.names["#n"] = layout.COUNT_PREFIX + fact.category
    if form.raise_as_read is not None:
        out.names.update(_raise_names(fact.category))
        out.values.update(
            {
                ":r": n(form.raise_as_read),
                ":rlimit": n(form.raise_as_read - fact.units + 1),
                ":now": n(fact.now_ms),
            }
        )
        return UNDER_RAISE_AS_READ if fact.units <= form.raise_as_read else OVER_RAISE_AS_READ
    out.values[":limit"] = n(fact.base_limit - fact.units + 1)
    if form.raised and fact.units == 1:
        out.names.update(_raise_names(fact.category))
        out.values[":now"] = n(fact.now_ms)
        return UNDER_RAISED
    return UNDER_BASE if fact.units <= fact.base_limit else OVER_BASE


def _raise_names(category: str) -> dict[str, str]:
    return {"#r": layout.RAISED_PREFIX + category, "#rx": layout.RAISED_UNTIL_PREFIX + category}


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


def _call_counted_by(fact: CallCountedBy, form: Form, out: Rendered) -> str:
    out.names["#v"] = layout.LIFE_PREFIX + fact.key
    out.values[":vchk"] = s(life_prefix(fact.check_id))
    return "begins_with(#v, :vchk)"


def _call_id_free(fact: CallIdFree, form: Form, out: Rendered) -> str:
    """Not counted in the last calls, and no life (one in progress may have left them)."""
    key = call_id_key(fact.call_id)
    out.names.update({**_CALL_IDS, "#vf": layout.LIFE_PREFIX + key})
    out.values[":cid"] = s(layout.COUNTED_CALL_ID + key)
    return f"({NOT_SEEN} AND attribute_not_exists(#vf))"


def _call_life_is(fact: CallLifeIs, form: Form, out: Rendered) -> str:
    out.names["#v"] = layout.LIFE_PREFIX + fact.key
    if fact.life is None:
        return "attribute_not_exists(#v)"
    out.values[":life"] = s(encode_life(fact.life))
    return "#v = :life"


def _not_written_by(fact: NotWrittenBy, form: Form, out: Rendered) -> str:
    out.names["#wq"] = layout.WRITER_PREFIX + fact.write.writer
    out.values[":wseq"] = n(fact.write.seq)
    return "(attribute_not_exists(#wq) OR #wq < :wseq)"


def _written_by(fact: WrittenBy, form: Form, out: Rendered) -> str:
    out.names["#wq"] = layout.WRITER_PREFIX + fact.write.writer
    out.values[":wseq"] = n(fact.write.seq)
    return "#wq = :wseq"


_RENDERERS: dict[type, Callable[[Any, Form, Rendered], str]] = {
    **_FRAGMENTS,
    CallLifeIs: _call_life_is,
    CallIdFree: _call_id_free,
    CallCountedBy: _call_counted_by,
    CountAtLeast: _count_at_least,
    Fits: _fits,
    BudgetFits: _budget_fits,
    NotWrittenBy: _not_written_by,
    WrittenBy: _written_by,
}
