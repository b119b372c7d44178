"""The facts the admission rules are made of, and the algebra that combines them.

A condition is a frozen value over a stored record (a session or a budget snapshot, None
if absent): facts about the domain (the session exists, is not suspended, was seen since
the idle cutoff, a category's count plus the calls asked fits its limit, a call id is not
in the record, a budget counts this window, ...) combined with `And`, `Or` and `Not`.
`Named` tags a clause with the `Verdict` its failure means. The same value is evaluated
on a snapshot (`holds`: the memory backend), explained (`explain`: the first named clause
that fails) and rendered (the DynamoDB adapter, one fragment per fact).

A fact evaluated on a missing record (`None`) answers what DynamoDB answers for a
condition on an item that does not exist: comparisons are false, `attribute_not_exists`
and `NOT contains` are true.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from chalicelib.quota import call_facts
from chalicelib.quota.core import (
    BudgetSnapshot,
    CallRecord,
    SessionSnapshot,
    Verdict,
)
from chalicelib.quota.derived import left
from chalicelib.quota.writes import WriteId, applied

# The facts about a call id's life, named here with every other fact.
CallIdFree = call_facts.CallIdFree
CallCountedBy = call_facts.CallCountedBy
TakenBack = call_facts.TakenBack
CallLifeIs = call_facts.CallLifeIs

if TYPE_CHECKING:
    from collections.abc import Iterator


class Condition(Protocol):
    """A precondition on a stored record (a session or a budget snapshot, None if absent)."""

    def holds(self, record: Any) -> bool:
        """Whether the condition holds on the record as stored."""
        ...


@dataclass(frozen=True)
class And:
    """Every part holds."""

    parts: tuple[Condition, ...]

    def holds(self, record: Any) -> bool:
        return all(part.holds(record) for part in self.parts)


@dataclass(frozen=True)
class Or:
    """Some part holds."""

    parts: tuple[Condition, ...]

    def holds(self, record: Any) -> bool:
        return any(part.holds(record) for part in self.parts)


@dataclass(frozen=True)
class Not:
    """The part does not hold."""

    part: Condition

    def holds(self, record: Any) -> bool:
        return not self.part.holds(record)


@dataclass(frozen=True)
class Named:
    """A clause whose failure is the answer `verdict` (or, for a fact that can tell
    several failures apart, the fact's own `why`)."""

    verdict: Verdict | None
    part: Condition

    def holds(self, record: Any) -> bool:
        return self.part.holds(record)

    def why(self, record: Any) -> Verdict:
        """What the failure of this clause means for the record."""
        if self.verdict is not None:
            return self.verdict
        why = getattr(self.part, "why", None)
        assert why is not None, "a clause named without a verdict explains itself"
        verdict: Verdict = why(record)
        return verdict


def all_of(*parts: Condition) -> And:
    """`And` of the parts."""
    return And(tuple(parts))


def any_of(*parts: Condition) -> Or:
    """`Or` of the parts."""
    return Or(tuple(parts))


def explain(condition: Condition, record: Any) -> Verdict | None:
    """Why the condition fails on the record: the verdict of the first named clause that
    fails, in the order the rule lists them; None if it holds or no named clause failed."""
    if condition.holds(record):
        return None
    return _first_failure(condition, record)


def _first_failure(condition: Condition, record: Any) -> Verdict | None:
    if isinstance(condition, Named):
        if condition.holds(record):
            return None
        inner = _first_failure(condition.part, record)
        return inner if inner is not None else condition.why(record)
    if isinstance(condition, And | Or):
        for part in condition.parts:
            if not part.holds(record):
                found = _first_failure(part, record)
                if found is not None:
                    return found
    return None


def facts(condition: Condition) -> Iterator[Condition]:
    """Every fact of a condition, depth first (for renderers and tests)."""
    if isinstance(condition, And | Or):
        for part in condition.parts:
            yield from facts(part)
    elif isinstance(condition, Not | Named):
        yield from facts(condition.part)
    else:
        yield condition


def within(used: int, units: int, limit: int) -> bool:
    """The one arithmetic of every limit: `units` more calls on `used` stay within `limit`
    (the facts below, and shadow mode's judgement of a call that ran, use it)."""
    return used + units <= limit


# -- facts about a session ---------------------------------------------------------------


@dataclass(frozen=True)
class SessionExists:
    """The session has a record."""

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is not None


@dataclass(frozen=True)
class SessionSuspended:
    """An administrator (or a link) suspended the session."""

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is not None and record.suspended


@dataclass(frozen=True)
class SeenSince:
    """The session's last attempt was at or after `cutoff_ms`: not idle-expired."""

    cutoff_ms: int

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is not None and record.last_seen_ms >= self.cutoff_ms


@dataclass(frozen=True)
class LastSeenAt:
    """The session's last attempt was at exactly `at_ms`: no attempt came since a read."""

    at_ms: int

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is not None and record.last_seen_ms == self.at_ms


@dataclass(frozen=True)
class SameCounters:
    """The session's counters are the generation that started at `started_ms`."""

    started_ms: int

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is not None and record.started_ms == self.started_ms


@dataclass(frozen=True)
class StartedBy:
    """The session's counters started at or before `now_ms`."""

    now_ms: int

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is not None and record.started_ms <= self.now_ms


@dataclass(frozen=True)
class StartedBefore:
    """The session's counters started before `ms`."""

    ms: int

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is not None and record.started_ms < self.ms


@dataclass(frozen=True)
class SeenBefore:
    """The session's last attempt was before `ms`."""

    ms: int

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is not None and record.last_seen_ms < self.ms


@dataclass(frozen=True)
class Fits:
    """The category's count plus `units` stays within its limit: the base limit, or a
    per-session raise still in force at `now_ms`, if higher."""

    category: str
    units: int
    base_limit: int
    now_ms: int

    def holds(self, record: SessionSnapshot | None) -> bool:
        if record is None:
            return within(0, self.units, self.base_limit)
        used = record.counts.get(self.category, 0)
        return within(
            used, self.units, record.limit_for(self.category, self.base_limit, self.now_ms)
        )

    def remaining(self, record: SessionSnapshot) -> int:
        """How many of the units still fit (0: none)."""
        used = record.counts.get(self.category, 0)
        limit = record.limit_for(self.category, self.base_limit, self.now_ms)
        return min(self.units, left(used, limit))


@dataclass(frozen=True)
class RepeatsUnder:
    """The session has counted fewer than `limit` calls under the loop breaker's `key`
    (one tool, the same arguments, one window)."""

    key: str
    limit: int

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is None or record.repeats.get(self.key, 0) < self.limit


@dataclass(frozen=True)
class CheckNotCounted:
    """The check with this service id has not been counted (a store's own retry of a
    write that went through fails this)."""

    check_id: str

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is None or not record.counted(self.check_id)


@dataclass(frozen=True)
class Recorded:
    """The session's record holds this very entry (the same check, refused or replayed):
    a store's own retry of the write that recorded it finds it there."""

    record: CallRecord

    def holds(self, record: SessionSnapshot | None) -> bool:
        own = self.record
        return record is not None and any(
            c.check_id == own.check_id and (c.allowed, c.replay) == (own.allowed, own.replay)
            for c in record.calls
        )


@dataclass(frozen=True)
class FirstRefusalAt:
    """The category's first refusal at `limit` has been recorded (one event per limit)."""

    category: str
    limit: int

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is not None and record.first_refusals.get(self.category) == self.limit


@dataclass(frozen=True)
class CountAtLeast:
    """The category has at least `least` calls counted (`leased`: through leases)."""

    category: str
    least: int
    leased: bool = False

    def holds(self, record: SessionSnapshot | None) -> bool:
        if record is None:
            return False
        counts = record.leased if self.leased else record.counts
        return self.category in counts and counts[self.category] >= self.least


@dataclass(frozen=True)
class LastGrantIs:
    """The category's last lease is exactly this grant, not yet given back."""

    category: str
    grant: str

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is not None and record.grants.get(self.category) == self.grant


@dataclass(frozen=True)
class RaisedAbove:
    """A per-session raise of the category above `limit` is in force at `now_ms`."""

    category: str
    limit: int
    now_ms: int

    def holds(self, record: SessionSnapshot | None) -> bool:
        if record is None:
            return False
        raised = record.raise_for(self.category, self.now_ms)
        return raised is not None and raised > self.limit


# -- facts about a budget above the session ----------------------------------------------


@dataclass(frozen=True)
class BudgetSuspended:
    """The principal is suspended (by an administrator or by escalation)."""

    def holds(self, record: BudgetSnapshot | None) -> bool:
        return record is not None and record.suspended


@dataclass(frozen=True)
class CountsWindow:
    """The budget counts the category in the window starting at `window_start_ms`."""

    category: str
    window_start_ms: int

    def holds(self, record: BudgetSnapshot | None) -> bool:
        return record is not None and self.window_start_ms in _windows(record, self.category)


@dataclass(frozen=True)
class CountsNoLaterWindow:
    """The budget counts the category in no window, or in one before `window_start_ms`:
    a take starts its count again."""

    category: str
    window_start_ms: int

    def holds(self, record: BudgetSnapshot | None) -> bool:
        windows = _windows(record, self.category) if record is not None else []
        return all(start < self.window_start_ms for start in windows)


@dataclass(frozen=True)
class BudgetFits:
    """The calls counted in the window plus `units` stay within the limit, or a raise."""

    category: str
    window_start_ms: int
    units: int
    limit: int

    def holds(self, record: BudgetSnapshot | None) -> bool:
        if record is None:
            return within(0, self.units, self.limit)
        used = record.used(self.category, self.window_start_ms)
        return within(used, self.units, record.limit_for(self.category, self.limit))


@dataclass(frozen=True)
class BudgetCountAtLeast:
    """The window counts at least `least` calls of the category."""

    category: str
    window_start_ms: int
    least: int

    def holds(self, record: BudgetSnapshot | None) -> bool:
        if record is None or self.category not in record.counts.get(self.window_start_ms, {}):
            return False
        return record.used(self.category, self.window_start_ms) >= self.least


@dataclass(frozen=True)
class RefusedBefore:
    """The principal was last refused in the category before `ms` (never: false)."""

    category: str
    ms: int

    def holds(self, record: BudgetSnapshot | None) -> bool:
        last = None if record is None else record.last_refusals.get(self.category)
        return last is not None and last < self.ms


@dataclass(frozen=True)
class RefusedBy:
    """The principal was last refused in the category at or before `ms` (never: false)."""

    category: str
    ms: int

    def holds(self, record: BudgetSnapshot | None) -> bool:
        last = None if record is None else record.last_refusals.get(self.category)
        return last is not None and last <= self.ms


@dataclass(frozen=True)
class BudgetExists:
    """The budget has a record."""

    def holds(self, record: BudgetSnapshot | None) -> bool:
        return record is not None


@dataclass(frozen=True)
class BudgetRaisedAbove:
    """The budget's category is raised above `limit`."""

    category: str
    limit: int

    def holds(self, record: BudgetSnapshot | None) -> bool:
        return record is not None and record.raised.get(self.category, 0) > self.limit


@dataclass(frozen=True)
class NotWrittenBy:
    """The budget has not applied this write (`quota.writes`): its writer's last number
    on the record is lower, or the writer has none there."""

    write: WriteId

    def holds(self, record: BudgetSnapshot | None) -> bool:
        return record is None or not applied(record.writes, self.write)


@dataclass(frozen=True)
class WrittenBy:
    """This write is the last its writer made to the budget (`quota.writes`): its
    writer's number on the record is exactly the write's."""

    write: WriteId

    def holds(self, record: BudgetSnapshot | None) -> bool:
        return record is not None and record.writes.get(self.write.writer) == self.write.seq


def _windows(record: BudgetSnapshot, category: str) -> list[int]:
    return [start for start, counts in record.counts.items() if category in counts]
