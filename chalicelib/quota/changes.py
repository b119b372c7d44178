"""What each write does to a session's or a budget's record, written once, as a value.

A write is a precondition (`quota.rules`) and a `Change`. The memory backend applies the
change under its lock (`storage/memory/`); the DynamoDB adapter renders it into an
UpdateExpression (`storage/dynamodb/changes.py`). Neither says what a write changes on
its own, so the two backends cannot drift apart on it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from chalicelib.quota.calls import CallLife, call_id_key

if TYPE_CHECKING:
    from collections.abc import Iterable

    from chalicelib.quota.core import Attempt, CallRecord, LeaseId, SessionSnapshot, Spend
    from chalicelib.quota.writes import WriteId


class Slot(StrEnum):
    """A map of a record, keyed by category (by call key for `REPEATS`)."""

    COUNTS = "counts"  # calls counted in this generation
    LEASED = "leased"  # of those, calls counted by leases
    GRANTS = "grants"  # the category's last lease, as granted
    REFUSED = "refused"  # refusals recorded in this generation, held ones included
    HELD = "held"  # of those, refusals the MCP side held and the service vouched for
    FIRST_REFUSALS = "first_refusals"  # (limit, check id) of the first refusal at a limit
    RAISED = "raised"  # an administrator's raised limit
    RAISED_UNTIL = "raised_until"  # when that raise lapses
    REPEATS = "repeats"  # the loop breaker's counts, by call key and window
    LIVES = "lives"  # the lives of calls counted under a client's call id, by kept id
    WINDOWS = "windows"  # a budget's: the window its count is of (its start, epoch ms)
    MARKS = "marks"  # a budget's: (window, limit) of the first refusal seen there
    STREAKS = "streaks"  # a principal's refusals in a row in the category
    LAST_REFUSALS = "last_refusals"  # when the principal was last refused in the category
    # A session's: when its last allowed call in the category was, once its last calls
    # started again (the principal's streak there reads it: an allowed call in the
    # category ends a run of refusals in it).
    ALLOWED_BEFORE = "allowed_before"
    WRITES = "writes"  # a budget's: each writer's last write (`quota.writes`), by writer


class Field(StrEnum):
    """A single value of a record (a budget has `SUSPENDED` and `EXPIRES`)."""

    LAST_SEEN = "last_seen"  # the last attempt: the idle clock
    STARTED = "started"  # when this generation of counters started
    EXPIRES = "expires"  # when the store may delete the record (absent: never)
    SUSPENDED = "suspended"  # why it is suspended (absent: it is not)
    PRINCIPAL = "principal"
    SERVER = "server"
    CLIENT = "client"


class Calls(StrEnum):
    """What happens to the session's last calls."""

    KEEP = "keep"  # nothing recorded
    APPEND = "append"  # the record joins the list (a repeated refusal folds into the last)
    RESTART = "restart"  # the list starts again with the record
    REPLACE = "replace"  # the record takes the place of this call's counted record


# What a new generation of counters starts without, and what idle expiry also drops.
GENERATION = frozenset(
    {Slot.COUNTS, Slot.LEASED, Slot.GRANTS, Slot.REFUSED, Slot.HELD, Slot.FIRST_REFUSALS}
)
RAISES = frozenset({Slot.RAISED, Slot.RAISED_UNTIL})
# The maps whose entries are counts, added to (the others are put).
COUNTING = frozenset(
    {Slot.COUNTS, Slot.LEASED, Slot.REFUSED, Slot.HELD, Slot.REPEATS, Slot.STREAKS}
)

DAY_MS = 86_400_000
# A budget is kept a day past its window (clean-up only: the window is in its condition).
BUDGET_KEPT_MS = DAY_MS

# A value as the record keeps it: a number, a string, a (limit, check id) mark, a client.
Value = object


@dataclass(frozen=True)
class Change:
    """A write to one record. Applied in this order: `clear`, `drop`, `add`, `put`,
    `bump`, `set`, `unset`, `start`, then the call's record (sessions only)."""

    # Every entry of these maps goes, except the entries this change puts or drops; a
    # change never adds to a map it clears.
    clear: frozenset[Slot] = frozenset()
    drop: tuple[tuple[Slot, str], ...] = ()
    # Numbers added to map entries and to fields (a missing one counts 0).
    add: tuple[tuple[Slot, str, int], ...] = ()
    bump: tuple[tuple[Field, int], ...] = ()
    put: tuple[tuple[Slot, str, Value], ...] = ()
    set: tuple[tuple[Field, Value], ...] = ()
    unset: frozenset[Field] = frozenset()
    # `STARTED` and `LAST_SEEN` take this value where the record has none (a new
    # session), unless `set` sets them.
    start: int | None = None
    record: CallRecord | None = None
    calls: Calls = Calls.KEEP
    # A counted call's write also drops what the record no longer needs, as the store
    # knows it (`tidied`): the loop breaker's counts of windows ended by this time, and
    # the lives of call ids its last calls no longer hold.
    tidy_at: int | None = None

    def __post_init__(self) -> None:
        assert all(slot in COUNTING for slot, _, _ in self.add), "add to a map of no counts"
        assert not any(slot in self.clear for slot, _, _ in self.add), "add to a cleared map"

    def kept(self, slot: Slot) -> frozenset[str]:
        """The keys of `slot` a `clear` leaves to this change: those it puts or drops."""
        keys = {key for s, key, _ in self.put if s is slot}
        keys |= {key for s, key in self.drop if s is slot}
        return frozenset(keys)

    def tidied(self, ended: Iterable[str], gone: Iterable[str]) -> Change:
        """This change with ended repeat windows and gone lives dropped as well (never
        an entry it writes itself): what a store makes of `tidy_at`."""
        written = {(s, key) for s, key, _ in (*self.add, *self.put)} | set(self.drop)
        if self.record is not None and self.record.call_id is not None:
            written.add((Slot.LIVES, self.record.call_id))  # the call's own id
        drops = [(Slot.REPEATS, key) for key in ended] + [(Slot.LIVES, key) for key in gone]
        more = tuple(entry for entry in drops if entry not in written)
        return replace(self, drop=(*self.drop, *more), tidy_at=None)


def _seen(attempt: Attempt) -> tuple[tuple[Field, Value], ...]:
    """An attempt refreshes the idle clock and the expiry, and names who made it."""
    fields: list[tuple[Field, Value]] = [
        (Field.LAST_SEEN, attempt.now_ms),
        (Field.EXPIRES, attempt.resets_at_ms),
    ]
    if attempt.principal is not None:
        fields.append((Field.PRINCIPAL, attempt.principal))
    if attempt.server is not None:
        fields.append((Field.SERVER, attempt.server))
    if attempt.client is not None:
        fields.append((Field.CLIENT, attempt.client))
    return tuple(fields)


def _held(attempt: Attempt) -> list[tuple[Slot, str, int]]:
    """The refusals the MCP side held in the attempt's category (vouched for): counted
    as the session's refusals too (one refused count), and apart, to say how many."""
    if attempt.held < 1:
        return []
    return [(Slot.HELD, attempt.category, attempt.held)]


def _counting(attempt: Attempt) -> tuple[tuple[Slot, str, int], ...]:
    """The numbers a counted call adds: its units, its lease, its loop-breaker key, and
    the refusals held before it (a hold ends in an allowed call after a raise)."""
    category = attempt.category
    adds = [(Slot.COUNTS, category, attempt.units), *_held(attempt)]
    if attempt.held > 0:
        adds.append((Slot.REFUSED, category, attempt.held))
    if attempt.leased:
        adds.append((Slot.LEASED, category, attempt.units))
    if attempt.repeat_key is not None:
        adds.append((Slot.REPEATS, attempt.repeat_key, 1))
    return tuple(adds)


def _grant(attempt: Attempt) -> tuple[tuple[Slot, str, Value], ...]:
    return ((Slot.GRANTS, attempt.category, attempt.lease_grant),) if attempt.leased else ()


def _life(attempt: Attempt) -> tuple[tuple[Slot, str, Value], ...]:
    """The life a counted call starts for its call id (none without one)."""
    life = attempt.life()
    if life is None or attempt.call_id is None:
        return ()
    return ((Slot.LIVES, call_id_key(attempt.call_id), life),)


def counted(attempt: Attempt) -> Change:
    """A call counted in its session (`rules.session_consume`). The loop breaker's counts
    of windows that have ended, and the lives of call ids no longer in the last calls, go
    in the same write (`tidy_at`), as the store knows them."""
    return Change(
        add=_counting(attempt),
        put=(*_grant(attempt), *_life(attempt)),
        set=_seen(attempt),
        start=attempt.now_ms,
        record=attempt.record(allowed=True),
        calls=Calls.APPEND,
        tidy_at=attempt.now_ms,
    )


def _allowed_before(seen: SessionSnapshot) -> tuple[tuple[Slot, str, Value], ...]:
    """The last calls start again: when the last allowed call of each category in them
    was stays known (a category not in them keeps what it had)."""
    shown = sorted({r.category for r in seen.calls if r.allowed and not r.replay})
    return tuple((Slot.ALLOWED_BEFORE, c, seen.last_allowed_ms(category=c)) for c in shown)


def restarted(attempt: Attempt, seen: SessionSnapshot) -> Change:
    """Idle-expired counters start again with this call counted (`rules.idle_restart`):
    as if the store had deleted the record, but for a suspension and for when the last
    allowed call was (`seen`: the session as read)."""
    category = attempt.category
    put: list[tuple[Slot, str, Value]] = [(Slot.COUNTS, category, attempt.units)]
    if attempt.leased:
        put += [(Slot.LEASED, category, attempt.units), *_grant(attempt)]
    repeat = () if attempt.repeat_key is None else ((Slot.REPEATS, attempt.repeat_key, 1),)
    life = _life(attempt)
    kept = {key for _, key, _ in life}
    return Change(
        clear=GENERATION | RAISES,
        drop=tuple((Slot.LIVES, key) for key in sorted(seen.lives) if key not in kept),
        add=repeat,
        put=(*put, *life, *_allowed_before(seen)),
        set=((Field.STARTED, attempt.now_ms), *_seen(attempt)),
        record=attempt.record(allowed=True),
        calls=Calls.RESTART,
    )


def restarted_suspended(attempt: Attempt, seen: SessionSnapshot) -> Change:
    """A suspended session's first attempt after idle expiry, refused: its counters start
    again with the refusal as their first record; it stays suspended, with no expiry."""
    started = ((Field.STARTED, attempt.now_ms), (Field.LAST_SEEN, attempt.now_ms))
    return Change(
        clear=GENERATION | RAISES,
        drop=tuple((Slot.LIVES, key) for key in sorted(seen.lives)),
        put=_allowed_before(seen),
        set=started,
        record=attempt.record(allowed=False),
        calls=Calls.RESTART,
    )


def refused(attempt: Attempt, first_at: int | None = None) -> Change:
    """A refusal recorded (`rules.refusal_record`, `rules.refusal_noted`): counted as a
    refusal, the first at `first_at` if given."""
    put: tuple[tuple[Slot, str, Value], ...] = ()
    if first_at is not None:
        put = ((Slot.FIRST_REFUSALS, attempt.category, (first_at, attempt.check_id)),)
    return Change(
        add=(
            (Slot.REFUSED, attempt.category, 1 + attempt.answered + attempt.held),
            *_held(attempt),
        ),
        put=put,
        set=_seen(attempt),
        record=attempt.record(allowed=False),
        calls=Calls.APPEND,
    )


def refused_suspended(attempt: Attempt) -> Change:
    """A refusal of a suspended session recorded (`rules.suspended_refusal`): the idle
    clock moves; it keeps no expiry."""
    return Change(
        set=((Field.LAST_SEEN, attempt.now_ms),),
        record=attempt.record(allowed=False),
        calls=Calls.APPEND,
    )


def replayed(attempt: Attempt, life: CallLife | None = None) -> Change:
    """A replayed call id recorded: not counted; it refreshes the idle clock, and counts
    the duplicate in the call's life (`rules.replay_record`)."""
    put: tuple[tuple[Slot, str, Value], ...] = ()
    if life is not None and attempt.call_id is not None:
        put = ((Slot.LIVES, call_id_key(attempt.call_id), replace(life, replays=life.replays + 1)),)
    return Change(
        put=put,
        set=_seen(attempt),
        record=attempt.record(allowed=True, replay=True),
        calls=Calls.APPEND,
    )


def taken_back(attempt: Attempt, counts: bool = True) -> Change:
    """A counted call that a wider budget refused comes off the count (`rules.take_back`;
    `counts=False` after a reset: only its record changes) and shows as refused; its call
    id's life ends (the id is free again)."""
    category = attempt.category
    add: list[tuple[Slot, str, int]] = []
    drop: tuple[tuple[Slot, str], ...] = ()
    if attempt.call_id is not None:
        drop = ((Slot.LIVES, call_id_key(attempt.call_id)),)
    if counts:
        add.append((Slot.COUNTS, category, -attempt.units))
        if attempt.leased:
            add.append((Slot.LEASED, category, -attempt.units))
            drop = (*drop, (Slot.GRANTS, category))
    return Change(
        drop=drop,
        add=tuple(add),
        record=attempt.record(allowed=False),
        calls=Calls.REPLACE,
    )


def admitted(key: str, life: CallLife) -> Change:
    """A call counted in its session and then by every wider budget: admitted, so that a
    copy of it is a duplicate (`rules.call_admitted`)."""
    return Change(put=((Slot.LIVES, key, life.admitted()),))


def lease_returned(lease: LeaseId, unused: int) -> Change:
    """Unspent calls of a lease come back, once: its grant goes (`rules.lease_return`)."""
    category = lease.category
    return Change(
        drop=((Slot.GRANTS, category),),
        add=((Slot.COUNTS, category, -unused), (Slot.LEASED, category, -unused)),
    )


def raised(
    category: str,
    new_limit: int,
    until_ms: int | None,
    fresh_at: int | None = None,
    expires_ms: int | None = None,
) -> Change:
    """An administrator's raise (`rules.session_raise`). `fresh_at`: the session was
    unseen or idle-expired, so its counters start then, with only this raise; a fresh
    session expires at `expires_ms` (None: it is suspended and keeps no expiry)."""
    until: tuple[tuple[Slot, str, Value], ...] = ()
    if until_ms is not None:
        until = ((Slot.RAISED_UNTIL, category, until_ms),)
    drop = () if until_ms is not None else ((Slot.RAISED_UNTIL, category),)
    if fresh_at is None:
        return Change(drop=drop, put=((Slot.RAISED, category, new_limit), *until))
    fields: list[tuple[Field, Value]] = [
        (Field.STARTED, fresh_at),
        (Field.LAST_SEEN, fresh_at),
    ]
    if expires_ms is not None:
        fields.append((Field.EXPIRES, expires_ms))
    return Change(
        clear=GENERATION | RAISES,
        drop=drop,
        put=((Slot.RAISED, category, new_limit), *until),
        set=tuple(fields),
    )


def lowered(category: str) -> Change:
    """An administrator's lower: the category's raise and its expiry go."""
    return Change(drop=((Slot.RAISED, category), (Slot.RAISED_UNTIL, category)))


def suspended(reason: str, now_ms: int) -> Change:
    """A suspension (of a session seen or not): it keeps no expiry."""
    return Change(set=((Field.SUSPENDED, reason),), unset=frozenset({Field.EXPIRES}), start=now_ms)


def resumed(expires_ms: int) -> Change:
    """A suspension lifted. The idle clock stays where the last attempt left it; the
    expiry (only clean-up) is set from now, never earlier than the idle clock says."""
    return Change(set=((Field.EXPIRES, expires_ms),), unset=frozenset({Field.SUSPENDED}))


def reset(start_ms: int, expires_ms: int | None) -> Change:
    """An administrator's reset: a new generation of counters starts at `start_ms`;
    raises, a suspension and the last calls stay (`rules.counters_reset`). A suspended
    session keeps no expiry (`expires_ms` None)."""
    fields: list[tuple[Field, Value]] = [(Field.STARTED, start_ms), (Field.LAST_SEEN, start_ms)]
    if expires_ms is not None:
        fields.append((Field.EXPIRES, expires_ms))
    return Change(clear=GENERATION, set=tuple(fields))


# -- a budget's record (a principal's, the tenant's) -------------------------------------


def budget_taken(spend: Spend, fresh: bool) -> Change:
    """Calls counted in a budget (`rules.budget_take`): in the window it counts, or, the
    first take of a later window (`fresh`), starting its count again."""
    category, kept = spend.category, ((Field.EXPIRES, spend.window_end_ms + BUDGET_KEPT_MS),)
    if not fresh:
        return Change(add=((Slot.COUNTS, category, spend.units),), set=kept)
    return Change(
        put=((Slot.COUNTS, category, spend.units), (Slot.WINDOWS, category, spend.window_start_ms)),
        set=kept,
    )


def written(change: Change, write: WriteId, dropped: tuple[str, ...] = ()) -> Change:
    """A budget's `change` as the write `write` makes it (`rules.unwritten`): the writer's
    number kept, and writers not seen lately (`writes.stale`) dropped."""
    put = (*change.put, (Slot.WRITES, write.writer, write.seq))
    return replace(change, put=put, drop=(*change.drop, *((Slot.WRITES, w) for w in dropped)))


def budget_given_back(spend: Spend) -> Change:
    """Calls a wider refusal undid go back to their window (`rules.budget_give_back`)."""
    return Change(add=((Slot.COUNTS, spend.category, -spend.units),))


def budget_mark(spend: Spend) -> tuple[int, int]:
    """What a budget keeps of its first refusal at a window and limit."""
    return (spend.window_start_ms, spend.limit)


def first_at(previous: tuple[int, int] | None, spend: Spend) -> bool:
    """Whether a refusal is the first at its window and limit: the budget's mark, before
    this refusal set it, named another (or none)."""
    return previous != budget_mark(spend)


def budget_marked(spend: Spend) -> Change:
    """A refusal at this window and limit seen: later ones there are not the first."""
    return Change(put=((Slot.MARKS, spend.category, budget_mark(spend)),))


def streak_noted(
    category: str, now_ms: int, refusals: int, goes_on: bool, spend: Spend | None
) -> Change:
    """Refusals in a category counted in the principal's streak there: added to it
    (`rules.streak_goes_on`) or starting it again; its own refusal marked too if `spend`."""
    mark = budget_marked(spend).put if spend is not None else ()
    last = (Slot.LAST_REFUSALS, category, now_ms)
    if goes_on:
        return Change(put=(*mark, last), add=((Slot.STREAKS, category, refusals),))
    return Change(put=(*mark, last, (Slot.STREAKS, category, refusals)))


def streak_ended(category: str) -> Change:
    """A call in the category allowed at every scope (`rules.streak_ends`): the
    principal's streak there ends; its other categories' streaks stand."""
    return Change(drop=((Slot.STREAKS, category),))


def budget_raised(category: str, new_limit: int) -> Change:
    """An administrator's raise of a budget (`rules.budget_raise`); the category's
    streak ends."""
    return Change(put=((Slot.RAISED, category, new_limit),), drop=((Slot.STREAKS, category),))


def budget_suspended(reason: str) -> Change:
    """A principal suspended (by an administrator or escalation): it keeps no expiry."""
    return Change(set=((Field.SUSPENDED, reason),), unset=frozenset({Field.EXPIRES}))


# An administrator's resume: the suspension goes, and every category's streak.
BUDGET_RESUMED = Change(clear=frozenset({Slot.STREAKS}), unset=frozenset({Field.SUSPENDED}))
# An administrator's reset: every window's count goes, and every streak; raises stay.
BUDGET_RESET = Change(clear=frozenset({Slot.COUNTS, Slot.WINDOWS, Slot.STREAKS}))
