"""The admission rules, written once, as data.

A rule is a condition over a stored record: facts about the domain (the session exists,
is not suspended, was seen since the idle cutoff, a category's count plus the calls asked
fits its limit, a call id is not in the record, a budget counts this window, ...)
combined with `And`, `Or` and `Not`. `Named` tags a clause with the `Verdict` its failure
means. The same object is

- evaluated on a snapshot (`holds`): the memory backend applies a change only when it
  holds, under its lock;
- explained (`explain`): the first named clause that fails says why the store refused;
- rendered by the DynamoDB adapter into a ConditionExpression, one renderer per fact.

A fact evaluated on a missing record (`None`) answers what DynamoDB answers for a
condition on an item that does not exist: comparisons are false, `attribute_not_exists`
and `NOT contains` are true.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from chalicelib.quota.core import (
    Attempt,
    BudgetSnapshot,
    CallRecord,
    LeaseId,
    SessionSnapshot,
    Spend,
    Verdict,
)

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
            return self.units <= self.base_limit
        used = record.counts.get(self.category, 0)
        return used + self.units <= record.limit_for(self.category, self.base_limit, self.now_ms)

    def remaining(self, record: SessionSnapshot) -> int:
        """How many of the units still fit (0: none)."""
        used = record.counts.get(self.category, 0)
        limit = record.limit_for(self.category, self.base_limit, self.now_ms)
        return max(0, min(self.units, limit - used))


@dataclass(frozen=True)
class CheckNotCounted:
    """The check with this service id has not been counted (a store's own retry of a
    write that went through fails this)."""

    check_id: str

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is None or not record.counted(self.check_id)


@dataclass(frozen=True)
class CallIdFree:
    """No call (other than a replay) in the session's record carries this client call
    id. When it fails, the record says why: the id names another call (a conflict), a
    retry to answer from its original, or an id reused too late or too often."""

    call_id: str
    tool: str
    category: str
    units: int
    now_ms: int

    def holds(self, record: SessionSnapshot | None) -> bool:
        return record is None or not record.holds_call_id(self.call_id)

    def why(self, record: SessionSnapshot) -> Verdict:
        """A conflict, a duplicate or a reused id."""
        if not record.binds(self.call_id, self.tool, self.category, self.units):
            return Verdict.CALL_ID_CONFLICT
        if record.find_call(self.call_id) and record.replayable(self.call_id, self.now_ms):
            return Verdict.DUPLICATE
        # Counted and taken back (a wider budget refused it), or replayed too often.
        return Verdict.REUSED_CALL_ID


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
            return self.units <= self.limit
        used = record.used(self.category, self.window_start_ms)
        return used + self.units <= record.limit_for(self.category, self.limit)


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
    """The principal was last refused before `ms` (never refused: false)."""

    ms: int

    def holds(self, record: BudgetSnapshot | None) -> bool:
        last = None if record is None else record.last_refusal_ms
        return last is not None and last < self.ms


@dataclass(frozen=True)
class RefusedBy:
    """The principal was last refused at or before `ms` (never refused: false)."""

    ms: int

    def holds(self, record: BudgetSnapshot | None) -> bool:
        last = None if record is None else record.last_refusal_ms
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


def _windows(record: BudgetSnapshot, category: str) -> list[int]:
    return [start for start, counts in record.counts.items() if category in counts]


# -- the rules ---------------------------------------------------------------------------


def session_consume(attempt: Attempt) -> Condition:
    """When a check counts a call in its session: a session never seen, or one whose
    counters started by the check's time, that has not counted this very check, is not
    suspended, is not idle-expired, has not counted the client's call id, and has room
    for the calls asked. The clauses are listed in the order a refusal is explained."""
    call_id = attempt.dedupe_call_id
    unseen: Condition = (
        Named(
            None, CallIdFree(call_id, attempt.tool, attempt.category, attempt.asked, attempt.now_ms)
        )
        if call_id is not None
        else Named(Verdict.ALREADY_COUNTED, CheckNotCounted(attempt.check_id))
    )
    clauses: list[Condition] = [Named(Verdict.CLOCK_BEHIND, StartedBy(attempt.now_ms))]
    if call_id is None:
        clauses.append(unseen)
    clauses += [
        Named(Verdict.SUSPENDED, Not(SessionSuspended())),
        Named(Verdict.EXPIRED, SeenSince(attempt.cutoff_ms)),
    ]
    if call_id is not None:
        clauses.append(unseen)
    clauses.append(
        Named(
            Verdict.OVER_LIMIT,
            Fits(attempt.category, attempt.units, attempt.base_limit, attempt.now_ms),
        )
    )
    return any_of(Not(SessionExists()), And(tuple(clauses)))


def budget_take(spend: Spend) -> Condition:
    """When a budget above the session counts `spend.units` calls: it is not suspended,
    counts this window (or none later, and starts it again), and the calls fit."""
    return all_of(
        Named(Verdict.SUSPENDED, Not(BudgetSuspended())),
        any_of(
            CountsWindow(spend.category, spend.window_start_ms),
            CountsNoLaterWindow(spend.category, spend.window_start_ms),
        ),
        Named(
            Verdict.OVER_LIMIT,
            BudgetFits(spend.category, spend.window_start_ms, spend.units, spend.limit),
        ),
    )


def idle_restart(old_last_seen_ms: int, suspended: bool) -> Condition:
    """When idle-expired counters start again: no attempt came since the session was read
    idle (a suspended one restarts too, and stays suspended)."""
    state: Condition = SessionSuspended() if suspended else Not(SessionSuspended())
    return all_of(LastSeenAt(old_last_seen_ms), state)


def refusal_record(entry: CallRecord, started_ms: int) -> Condition:
    """When a refused (or replayed) call is recorded: on the counters it was decided on,
    not suspended meanwhile, once."""
    return all_of(
        SessionExists(),
        SameCounters(started_ms),
        Not(SessionSuspended()),
        Not(Recorded(entry)),
    )


def refusal_noted(entry: CallRecord, started_ms: int, limit: int, first: bool) -> Condition:
    """A refusal recorded as the first at `limit` of these counters (or as a later one):
    exactly one writer finds the first refusal at a limit unrecorded."""
    at = FirstRefusalAt(entry.category, limit)
    return all_of(refusal_record(entry, started_ms), Not(at) if first else at)


def suspended_refusal(entry: CallRecord) -> Condition:
    """When a refusal of a suspended session is recorded: still suspended, once."""
    return all_of(SessionSuspended(), Not(Recorded(entry)))


def still_spent(attempt: Attempt, limit: int) -> Condition:
    """A refusal the check expected (it saw the session spent): the session is still
    active and spent at `limit`, with no raise in force above it."""
    return all_of(
        SeenSince(attempt.cutoff_ms), Not(Fits(attempt.category, 1, limit, attempt.now_ms))
    )


def take_back(attempt: Attempt, started_ms: int) -> Condition:
    """When a counted call comes off the count (a wider budget refused it): the counters
    are still the generation that counted it, and hold it."""
    return all_of(SameCounters(started_ms), CountAtLeast(attempt.category, attempt.units))


def lease_return(lease: LeaseId, unused: int, cutoff_ms: int) -> Condition:
    """When unspent calls of a lease come back: to the generation that granted it, not
    idle-expired, never more than the leases counted, only for the category's last lease
    exactly as granted, once."""
    return all_of(
        SameCounters(lease.started_ms),
        SeenSince(cutoff_ms),
        CountAtLeast(lease.category, unused, leased=True),
        CountAtLeast(lease.category, unused),
        LastGrantIs(lease.category, lease.grant),
    )


def budget_give_back(spend: Spend) -> Condition:
    """When calls go back to a budget: its window is still the one they were taken in,
    and counts them."""
    return all_of(
        CountsWindow(spend.category, spend.window_start_ms),
        BudgetCountAtLeast(spend.category, spend.window_start_ms, spend.units),
    )


def streak_goes_on(allowed_since_ms: int) -> Condition:
    """A refusal adds to the principal's streak unless the principal was last refused
    before an allowed call of the refused session (`allowed_since_ms`)."""
    return Not(RefusedBefore(allowed_since_ms))


def streak_ends(now_ms: int) -> Condition:
    """A call allowed at every scope at `now_ms` ends the streak, unless a refusal was
    recorded after it."""
    return RefusedBy(now_ms)


def counters_reset(start_ms: int, suspended: bool, first_try: bool = True) -> Condition:
    """When an administrator's reset starts new counters at `start_ms`: after the current
    ones started and (on a first try) after the session's last attempt, so that no call
    recorded before the reset is taken for one of the new counters' (a check in the same
    millisecond after it runs at their start: `Verdict.CLOCK_BEHIND`). A try after a read
    starts them past what it read, and only admins can defeat it: checks never do. A
    suspended session is reset as one (it keeps no TTL)."""
    state: Condition = SessionSuspended() if suspended else Not(SessionSuspended())
    after = [SeenBefore(start_ms)] if first_try else []
    return all_of(SessionExists(), state, StartedBefore(start_ms), *after)


def reset_start(record: SessionSnapshot, now_ms: int) -> int:
    """When a reset read `record` may start the new counters: now, or just after the
    current counters' start and the last attempt, whichever is later."""
    return max(now_ms, record.started_ms + 1, record.last_seen_ms + 1)


def session_raise(category: str, new_limit: int, now_ms: int, cutoff_ms: int) -> Condition:
    """An administrator's raise in place: the session is live (active, or suspended) and
    no raise in force above the new one was set meanwhile (a raise only lifts a limit; a
    lapsed one may be replaced by a smaller one)."""
    return all_of(
        SessionExists(),
        any_of(SeenSince(cutoff_ms), SessionSuspended()),
        Not(RaisedAbove(category, new_limit, now_ms)),
    )


def session_unseen() -> Condition:
    """An administrator's raise ahead of a session's first check: it is still unseen."""
    return Not(SessionExists())


def budget_raise(category: str, new_limit: int) -> Condition:
    """An administrator's raise of a budget only lifts its limit."""
    return Not(BudgetRaisedAbove(category, new_limit))


def admits(snapshot: SessionSnapshot | None, attempt: Attempt) -> bool:
    """Whether the store counts the attempt in the session as stored."""
    return session_consume(attempt).holds(snapshot)


def explain_refusal(snapshot: SessionSnapshot, attempt: Attempt) -> Verdict:
    """Why the store did not count the attempt in this (old) session: the first clause of
    `session_consume` that fails; STALE if it holds now (the session changed)."""
    return explain(session_consume(attempt), snapshot) or Verdict.STALE


def partial_units(snapshot: SessionSnapshot, attempt: Attempt) -> int:
    """How many calls a lease that did not fit may still be granted: what remains under
    the limit (0: none, the call is refused)."""
    fits = Fits(attempt.category, attempt.units - 1, attempt.base_limit, attempt.now_ms)
    return fits.remaining(snapshot)
