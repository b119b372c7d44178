"""The admission rules, written once: each is a condition (`quota.facts`) composed here
and nowhere else. Memory evaluates it under its lock, `explain_refusal` names its first
failing clause, and the DynamoDB adapter renders it into a ConditionExpression.
"""

from __future__ import annotations

from chalicelib.quota.core import (
    Attempt,
    CallLife,
    CallRecord,
    LeaseId,
    SessionSnapshot,
    Spend,
    Verdict,
    call_id_key,
)
from chalicelib.quota.facts import (
    And,
    BudgetCountAtLeast,
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
    all_of,
    any_of,
    explain,
)
from chalicelib.quota.writes import WriteId


def session_consume(attempt: Attempt) -> Condition:
    """When a check counts a call in its session: a session never seen, or one whose
    counters started by the check's time, that has not counted this very check, is not
    suspended, is not idle-expired, has not counted the client's call id, has not made
    this very call (tool and arguments) too often in the loop breaker's window, and has
    room for the calls asked. The clauses are listed in the order a refusal is explained."""
    call_id = attempt.dedupe_call_id
    unseen: Condition = (
        Named(
            None,
            CallIdFree(
                call_id,
                attempt.check_id,
                attempt.binding,
                attempt.tool,
                attempt.category,
                attempt.asked,
                attempt.now_ms,
            ),
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
    elif attempt.call_id is not None:
        # A freed id is counted anew on its life as read: of copies sent at once, one.
        freed = CallLifeIs(call_id_key(attempt.call_id), attempt.freed_life)
        clauses.append(Named(Verdict.CALL_ID_TAKEN, freed))
    if attempt.repeat_key is not None:
        # After the call-id clause: a client's retry of a counted call is no repeat.
        clauses.append(
            Named(Verdict.REPEATED, RepeatsUnder(attempt.repeat_key, attempt.repeat_limit))
        )
    clauses.append(
        Named(
            Verdict.OVER_LIMIT,
            Fits(attempt.category, attempt.units, attempt.base_limit, attempt.now_ms),
        )
    )
    return any_of(Not(SessionExists()), And(tuple(clauses)))


def unwritten(write: WriteId | None) -> tuple[Condition, ...]:
    """A budget write's first clause, when it names itself: it was not applied already
    (the store's own retry of it fails here, and is known as applied)."""
    return () if write is None else (Named(Verdict.ALREADY_COUNTED, NotWrittenBy(write)),)


def budget_take(spend: Spend, write: WriteId | None = None, fresh: bool | None = None) -> Condition:
    """When a budget above the session counts `spend.units` calls: it is not suspended,
    counts this window (or none later, and starts it again), and the calls fit. `fresh`:
    only the case of a later window (True) or of this one (False), each its own change."""
    this = CountsWindow(spend.category, spend.window_start_ms)
    later = CountsNoLaterWindow(spend.category, spend.window_start_ms)
    return all_of(
        *unwritten(write),
        Named(Verdict.SUSPENDED, Not(BudgetSuspended())),
        any_of(this, later) if fresh is None else (later if fresh else this),
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


def replay_record(entry: CallRecord, started_ms: int, key: str, life: CallLife) -> Condition:
    """When a duplicate is answered from its admitted original and recorded: as a
    refusal is, and only on the call's life as read, so that concurrent copies take
    turns and no more than `MAX_REPLAYS` are answered."""
    return all_of(refusal_record(entry, started_ms), CallLifeIs(key, life))


def call_admitted(key: str, life: CallLife) -> Condition:
    """When a call counted in its session is admitted (every wider budget counted it):
    its life is still the one its check started."""
    return CallLifeIs(key, life)


def suspended_refusal(entry: CallRecord) -> Condition:
    """When a refusal of a suspended session is recorded: still suspended, once."""
    return all_of(SessionSuspended(), Not(Recorded(entry)))


def still_spent(attempt: Attempt, limit: int) -> Condition:
    """A refusal the check expected (it saw the session spent): the session is still
    active and spent at `limit`, with no raise in force above it."""
    return all_of(
        SeenSince(attempt.cutoff_ms), Not(Fits(attempt.category, 1, limit, attempt.now_ms))
    )


def not_taken_back(attempt: Attempt) -> Condition:
    """This check's count has not been taken back already (the store's own retry of a
    take-back that went through fails this): its call id's life still names it, or, for
    a call without an id, no record shows it taken back."""
    if attempt.call_id is not None:
        return CallCountedBy(call_id_key(attempt.call_id), attempt.check_id)
    return Not(TakenBack(attempt.record(allowed=False)))


def take_back(attempt: Attempt, started_ms: int) -> Condition:
    """When a counted call comes off the count (a wider budget refused it): the counters
    are still the generation that counted it, hold it, and have not taken it back yet."""
    return all_of(
        SameCounters(started_ms),
        CountAtLeast(attempt.category, attempt.units),
        not_taken_back(attempt),
    )


def take_back_recorded(attempt: Attempt) -> Condition:
    """When a call whose count may or may not have been applied (the store timed out) is
    taken back later: only if the session records this very check's count, in counters
    that started by its time (an administrator's reset since starts them later)."""
    counted: Condition = all_of(
        Recorded(attempt.record(allowed=True)), Not(TakenBack(attempt.record(allowed=False)))
    )
    life = attempt.life()
    if attempt.call_id is not None and life is not None:
        counted = CallLifeIs(call_id_key(attempt.call_id), life)
    return all_of(StartedBy(attempt.now_ms), CountAtLeast(attempt.category, attempt.units), counted)


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


def budget_give_back(spend: Spend, write: WriteId | None = None) -> Condition:
    """When calls go back to a budget: its window is still the one they were taken in,
    and counts them."""
    return all_of(
        *unwritten(write),
        CountsWindow(spend.category, spend.window_start_ms),
        BudgetCountAtLeast(spend.category, spend.window_start_ms, spend.units),
    )


def budget_give_back_taken(spend: Spend, write: WriteId) -> Condition:
    """When calls of a take whose answer never came go back: the budget applied that
    very take (its writer wrote nothing since), and `budget_give_back` holds."""
    return all_of(
        WrittenBy(write),
        CountsWindow(spend.category, spend.window_start_ms),
        BudgetCountAtLeast(spend.category, spend.window_start_ms, spend.units),
    )


def streak_goes_on(category: str, allowed_since_ms: int, write: WriteId | None = None) -> Condition:
    """A refusal in a category adds to the principal's streak there unless the principal
    was last refused there before an allowed call in that category of the refused
    session (`allowed_since_ms`). Only what the principal does in the refused category
    counts: an allowed call in another never ends the streak."""
    return all_of(*unwritten(write), Not(RefusedBefore(category, allowed_since_ms)))


def streak_restarts(category: str, allowed_since_ms: int, write: WriteId) -> Condition:
    """A refusal starts the principal's streak in a category again only while
    `streak_goes_on` fails: its last refusal there still came before the allowed call (a
    refusal recorded meanwhile has started it already, and this one adds to it)."""
    return all_of(*unwritten(write), RefusedBefore(category, allowed_since_ms))


def streak_ends(category: str, now_ms: int) -> Condition:
    """A call in a category allowed at every scope at `now_ms` ends the principal's
    streak there, unless a refusal there was recorded after it."""
    return RefusedBy(category, now_ms)


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
    the limit (0: none, the call is refused). Weighed calls (`units`) are never cut."""
    if not attempt.leased:
        return 0
    fits = Fits(attempt.category, attempt.units - 1, attempt.base_limit, attempt.now_ms)
    return fits.remaining(snapshot)
