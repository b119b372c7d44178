"""A call counted in its session and in the budgets above it at once: one round trip
where the check used to make two.

The session's count and the wider budgets' takes are sent together. The takes stand only
if the session counted this very attempt, whole: when the session refused it, answered it
as a copy of an admitted call, counted fewer units, or failed, what the takes took is given
back before the check answers (over a throttle too, or owed to the session's next check),
exactly as the check gives back a session count that a wider budget refused. Every write
is the conditional write it was one after the other, so no budget is ever over its limit;
what a refused attempt took for the moment can only refuse another call in that moment
(under-admission, never over), and a take's resend by the store applies once
(`quota.writes`).

Taken at once only when it pays and the session is not at stake: the call has wider
budgets, is not a lease (whose units the session may cut), no budget is known to be
refusing in this container (a loop against a spent budget then counts one scope at a
time and touches nothing else), and the session's last count here left it room for two
more calls (`SessionRoom`; a session not counted here yet has room for its first check
alone: a host may open a session per call). A call near its session's limit, or one of a
burst on a session new here, counts its session first, so that attempts its session
refuses do not hold the wider budgets' last calls while many sessions race for them.
When a wider budget refuses a call taken at once, what the others took goes back and
the wider budgets are asked once more after the session's count, one after the other, as
before: a refusal is never answered from a moment when another attempt held what it then
gave back. A runaway session is refused before any of this, from what the container saw
(`check/runaway.py`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TypeVar, cast

from chalicelib.check import deadline
from chalicelib.check.parallel import settled
from chalicelib.check.repairs import Repairs
from chalicelib.check.steps import Outcome, Step, WiderBudgets, compensate
from chalicelib.quota.answers import Allowed, Refused
from chalicelib.quota.core import Attempt, BudgetKey, SessionKey, SessionSnapshot
from chalicelib.quota.policy import Category
from chalicelib.storage.ports import StorageError

# What counting the session gave: the allowance, the session as counted, the attempt as
# counted; or its refusal.
_Counted = TypeVar("_Counted", bound="tuple[Allowed, SessionSnapshot, Attempt] | Refused")


@dataclass(frozen=True)
class Went:
    """What the wider takes sent with the session's count did (None: not sent with it,
    the caller takes them now), and how the holds on their budgets here stood when the
    check began (`Holds.seen`)."""

    outcome: Outcome | StorageError | None
    since: dict[BudgetKey, int]


class AtOnce:
    """Counts a call in its session, and in the wider budgets at once when it pays."""

    def __init__(self, wider: WiderBudgets | None, repairs: Repairs) -> None:
        self._wider = wider
        self._repairs = repairs
        self._room = SessionRoom()
        self._holds = Holds()

    def count(
        self, count: Callable[[], _Counted], attempt: Attempt, category: Category
    ) -> tuple[_Counted, list[Step], Went]:
        """The session's count (`count`), the wider steps of the attempt as counted, and
        what they did if they went with it (None: the caller takes them now,
        `outcome_of`).

        Raises:
            Whatever the session's count raised (what went with it given back first).
        """
        wider, room = self._wider, self._room
        steps = wider.steps(attempt, category) if wider else []
        since = self._holds.seen(steps)
        went: Outcome | StorageError | None = None
        with room.going(attempt) as ample:
            if ample and wider is not None and goes_at_once(wider, attempt, steps):
                with self._holds.holding(steps):
                    counted, went = count_at_once(count, wider, attempt, steps, self._repairs)
            else:
                counted = count()
            if not isinstance(counted, Refused):
                room.note(counted[2], counted[0], counted[1])  # before it is not going
            else:
                room.refused(attempt)  # no room: its next check counts its session first
        if isinstance(counted, Refused):
            return counted, [], Went(None, since)
        if wider is not None and went is None:
            steps = wider.steps(counted[2], category)  # a lease may have fewer units
        return counted, steps, Went(went, since)

    def outcome(self, attempt: Attempt, steps: list[Step], sent: Went) -> Outcome:
        """What the wider budgets did with a call its session counted: as they went with
        the session's count, or taken now. A refusal met while takes sent at once by
        other checks here were under way (any since this check began) is asked once more
        when they have settled: what one of them held for a moment and gave back refuses
        nobody.

        Raises:
            StorageError: a step failed (what the others took was given back).
        """
        wider, went = self._wider, sent.outcome
        assert wider is not None
        if isinstance(went, StorageError):
            raise went
        if went is None:
            deadline.ensure("counting a call above its session")
            went = wider.take_all(attempt, steps)
        taken, refusal = went
        if refusal is None or not self._holds.settle(refusal[0].budget.key, sent.since):
            return went
        if taken:
            compensate(wider.giving_back(taken), attempt, self._repairs)
        deadline.ensure("counting a call above its session")
        return wider.take_all(attempt, steps)


class Holds:
    """The wider budgets that takes sent at once are holding in this container, until
    each stands or is given back; and how often a hold on each began or ended here."""

    def __init__(self) -> None:
        self._settled = threading.Condition()
        self._held: dict[BudgetKey, int] = {}
        self._moves: dict[BudgetKey, int] = {}  # holds begun or ended, per budget

    def seen(self, steps: list[Step]) -> dict[BudgetKey, int]:
        """How the holds on these steps' budgets stand now (for `settle`)."""
        with self._settled:
            return {step.key: self._moves.get(step.key, 0) for step in steps}

    def _move(self, keys: list[BudgetKey], by: int) -> None:
        if len(self._moves) > HOLD_HINTS:
            self._moves.clear()  # every refusal then counts as met during a hold: asked again
        for key in keys:
            self._held[key] = self._held.get(key, 0) + by
            if not self._held[key]:
                del self._held[key]
            self._moves[key] = self._moves.get(key, 0) + 1

    @contextmanager
    def holding(self, steps: list[Step]) -> Iterator[None]:
        keys = [step.key for step in steps]
        with self._settled:
            self._move(keys, 1)
        try:
            yield
        finally:
            with self._settled:
                self._move(keys, -1)
                self._settled.notify_all()

    def settle(self, key: BudgetKey, since: dict[BudgetKey, int]) -> bool:
        """Whether a take sent at once here held `key` at any moment since `since`
        (`seen`): then wait (while the check's deadline allows one more request after)
        until none holds it."""
        with self._settled:
            if key not in self._held and self._moves.get(key, 0) == since.get(key, 0):
                return False
            while key in self._held and deadline.allows_step():
                self._settled.wait(SETTLE_POLL_S)
            return True


HOLD_HINTS = 10_000  # budgets a container counts hold moves for (then starts again)
SETTLE_POLL_S = 0.05  # how often a wait for held budgets looks at the deadline again


ROOM_HINTS = 10_000  # sessions a container keeps room hints for (then starts again)


class SessionRoom:
    """What each session's last count in this container left it, less its checks still
    under way here: a hint that decides only whether the wider budgets go with the
    session's count, never an answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._left: dict[tuple[SessionKey, str], tuple[int, int]] = {}  # (started, left)
        self._going: dict[tuple[SessionKey, str], int] = {}

    def note(self, attempt: Attempt, allowed: Allowed, snapshot: SessionSnapshot) -> None:
        """A count's answer: the room it left, unless a later count of the same counters
        noted less (answers of concurrent checks come back in any order)."""
        key = (attempt.session, attempt.category)
        with self._lock:
            if len(self._left) > ROOM_HINTS:
                self._left.clear()
            started, left = self._left.get(key, (-1, 0))
            if snapshot.started_ms == started:
                left = min(left, allowed.remaining)
            elif snapshot.started_ms > started:
                left = allowed.remaining
            self._left[key] = (max(started, snapshot.started_ms), left)

    def refused(self, attempt: Attempt) -> None:
        """The session refused a call here: it has no room until a count says otherwise."""
        key = (attempt.session, attempt.category)
        with self._lock:
            started = self._left.get(key, (-1, 0))[0]
            self._left[key] = (started, 0)

    @contextmanager
    def going(self, attempt: Attempt) -> Iterator[bool]:
        """While a check of the session is under way here: whether the session had room,
        at its last count, for this call, every other under way here, and one more (one
        not counted here yet: whether this is its only check under way)."""
        key = (attempt.session, attempt.category)
        with self._lock:
            going = self._going[key] = self._going.get(key, 0) + 1
            left = self._left.get(key)
            # A session not counted here yet: its first check alone (a session is new far
            # more often than spent elsewhere, and a host may open one per call).
            ample = going == 1 if left is None else left[1] - going >= 1
        try:
            yield ample
        finally:
            with self._lock:
                self._going[key] -= 1
                if not self._going[key]:
                    del self._going[key]


def goes_at_once(wider: WiderBudgets, attempt: Attempt, steps: list[Step]) -> bool:
    """Whether the wider budgets may be taken together with the session's count (and
    the session has room: `SessionRoom`)."""
    return (
        bool(steps)
        and not attempt.leased
        and attempt.units == 1
        and not wider.known_refusing(steps)
        and deadline.allows_step()
    )


def count_at_once(
    count: Callable[[], _Counted],
    wider: WiderBudgets,
    attempt: Attempt,
    steps: list[Step],
    repairs: Repairs,
) -> tuple[_Counted, Outcome | StorageError | None]:
    """The session's count (`count`) and the wider takes, sent at once: the count, and
    what the takes did when they stand (None when they were given back: the session's
    count did not stand for them; a StorageError when one failed, what the others took
    given back, the session's count left to the caller to undo).

    Raises:
        Whatever the session's count raised, once what the takes took was given back.
    """
    calls: list[Callable[[], object]] = [count, partial(wider.take_all, attempt, steps)]
    session, went = cast("tuple[_Counted | BaseException, Outcome | BaseException]", settled(calls))
    if not isinstance(session, BaseException) and _stands(session, attempt):
        if isinstance(went, BaseException) and not isinstance(went, StorageError):
            raise went
        if isinstance(went, BaseException) or went[1] is None:
            return session, went
        # A wider budget refused: asked again after the session's count (`AtOnce.outcome`).
    if isinstance(went, tuple):
        taken, _ = went
        if taken:
            compensate(wider.giving_back(taken), attempt, repairs)
    if isinstance(session, BaseException):
        raise session
    return session, None


def _stands(session: tuple[Allowed, SessionSnapshot, Attempt] | Refused, asked: Attempt) -> bool:
    """Whether the session counted this very attempt, whole, as a new call."""
    if isinstance(session, Refused):
        return False
    allowed, _, counted = session
    return not allowed.duplicate and counted.units == asked.units
