"""The sessions a container last saw spent: a runaway loop's next call is refused in one
guarded write instead of a failed count and a refusal record, and a repeat within a
second of a refusal the store gave here is refused with no request at all.

A hint, never a decision the store did not make: the guarded write holds only while the
session is still spent as remembered, and an answer from the container is given only
within `REFUSAL_CACHE_MS` of the store's own refusal, at the same base limit, with no
administrator's change to a session or budget made here since (`AdminChanges`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from chalicelib.check import deadline
from chalicelib.check.shaping import session_refusal
from chalicelib.observability import logger
from chalicelib.quota.answers import Refused
from chalicelib.quota.core import (
    Attempt,
    RefusalReason,
    SessionKey,
    SessionSnapshot,
    Verdict,
    with_call,
)
from chalicelib.quota.rules import explain_refusal
from chalicelib.storage.ports import StorageError

if TYPE_CHECKING:
    from chalicelib.check.escalation import Escalation
    from chalicelib.check.hooks import DecisionListener
    from chalicelib.storage.ports import SessionChecks

LOOP_AFTER = 2  # refusals in a row from the store that make a loop
SPENT_SESSIONS = 4096  # spent sessions a container remembers (least recently used go)
# How long a refusal the store gave answers repeats from the container: a raise or reset
# made in another container is seen after at most this long (one made here, at once).
REFUSAL_CACHE_MS = 1000
# ... and, once the store refused a session twice in a row here (a loop), this long: a
# loop of one call a second then costs a request every other call.
LOOP_CACHE_MS = 2 * REFUSAL_CACHE_MS


class AdminChanges:
    """A count of the administrators' writes to sessions and budgets made in this
    container: a refusal remembered before one of them is never answered from memory."""

    def __init__(self) -> None:
        self._epoch = 0
        self._lock = threading.Lock()

    @property
    def epoch(self) -> int:
        return self._epoch

    def bump(self) -> None:
        with self._lock:
            self._epoch += 1

    def watching(self, store: Any, writes: frozenset[str]) -> Any:
        """`store`, counting a change here after each of its `writes` (failed ones too:
        a timeout may have applied)."""
        return _Watched(store, writes, self)


class _Watched:
    """A store whose named writes bump `AdminChanges` once they return or raise."""

    def __init__(self, store: Any, writes: frozenset[str], changes: AdminChanges) -> None:
        self._store = store
        self._writes = writes
        self._changes = changes

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if name not in self._writes:
            return found

        def write(*args: Any, **kwargs: Any) -> Any:
            try:
                return found(*args, **kwargs)
            finally:
                self._changes.bump()

        return write


@dataclass(frozen=True)
class Spent:
    """A session seen spent in a category: as it stood after its last refusal there, and
    when and under what the store last refused it."""

    category: str
    seen: SessionSnapshot
    refused_ms: int  # the container's clock when the store last refused it
    base_limit: int
    epoch: int  # `AdminChanges.epoch` read before that store request
    answered: int = 0  # repeats refused from memory since, recorded with the next sent
    last: Attempt | None = None  # the last of them (a flush records them as it)
    refusal: Attempt | None = None  # the store's last refusal (a flush counts its streak)
    in_a_row: int = 1  # refusals the store gave here in a row (a loop from the second)


class SpentSessions:
    """Per session: the category it was spent in, the session after its last refusal
    there, and whether a repeat may be refused from memory."""

    def __init__(
        self, keep_calls: int, changes: AdminChanges | None = None, cache_ms: int = 0
    ) -> None:
        self._keep = keep_calls
        # 0: every repeat goes to the store, and every refusal with its streak.
        self._cache_ms = cache_ms
        self.changes = changes or AdminChanges()
        self._spent: OrderedDict[SessionKey, Spent] = OrderedDict()
        self._due: dict[SessionKey, int] = {}  # when a session's answered repeats are due
        # Entries dropped (the session changed, or the cache was full) with repeats
        # answered from memory: recorded by the next flush, never lost with the entry.
        self._unsent: dict[SessionKey, list[Spent]] = {}
        self._lock = threading.Lock()

    def get(self, session: SessionKey) -> Spent | None:
        return self._spent.get(session)

    def forget(self, session: SessionKey) -> None:
        """Drop the session's entry (it counted a call, or changed elsewhere); what it held
        back is still recorded when due, or with its next refusal sent."""
        with self._lock:
            self._drop(session, self._spent.pop(session, None))

    def _drop(self, session: SessionKey, spent: Spent | None) -> None:
        """(Under the lock.) An entry gone: the repeats it answered stay, due as they were
        (or at once, if a flush took the session meanwhile). Its principal's deferred
        streak stays in `Escalation`, sent with the next refusal or flush."""
        if spent is not None and spent.answered and spent.last is not None:
            self._unsent.setdefault(session, []).append(spent)
            self._due.setdefault(session, 0)

    def _answered(self, session: SessionKey, spent: Spent, attempt: Attempt) -> bool:
        """One more repeat refused from memory, to record with the next refusal sent;
        whether it is the first since the store's refusal (a flush is then due)."""
        with self._lock:
            if self._spent.get(session) is spent:
                self._spent[session] = replace(spent, answered=spent.answered + 1, last=attempt)
                return spent.answered == 0
        return False

    def _take_answered(self, session: SessionKey) -> Spent | None:
        """The session's repeats answered from memory and not yet recorded, those of
        entries dropped since included, taken out to be recorded now (None: none): the
        entry they were answered from, with their number."""
        with self._lock:
            dropped = self._unsent.pop(session, [])
            held = [d for d in dropped if d.answered and d.last is not None]
            base = self._spent.get(session)
            if base is not None and base.answered and base.last is not None:
                self._spent[session] = replace(base, answered=0, last=None)
            elif held:
                base = held.pop()
            else:
                return None
            # Those of the session's counters before a reset or expiry count no more.
            started = base.seen.started_ms
            more = sum(d.answered for d in held if d.seen.started_ms == started)
            return replace(base, answered=base.answered + more)

    def _put_back(self, session: SessionKey, taken: Spent) -> None:
        """Repeats a failed flush did not record: counted with the next refusal sent, or
        by the next flush if the entry went meanwhile."""
        with self._lock:
            spent = self._spent.get(session)
            if spent is not None and spent.refused_ms == taken.refused_ms:
                answered = spent.answered + taken.answered
                self._spent[session] = replace(spent, answered=answered, last=taken.last)
            else:
                self._unsent.setdefault(session, []).append(taken)
                self._due.setdefault(session, 0)

    def window_ms(self, spent: Spent) -> int:
        """How long after the store's refusal a repeat may be refused from memory:
        `REFUSAL_CACHE_MS`, or `LOOP_CACHE_MS` once the store refused the session twice
        in a row here (none with the cache off)."""
        if not self._cache_ms or spent.in_a_row < LOOP_AFTER:
            return self._cache_ms
        return max(self._cache_ms, LOOP_CACHE_MS)

    def fresh(self, spent: Spent, attempt: Attempt) -> bool:
        """Whether a repeat may be refused from memory: within the window (`window_ms`)
        of the store's refusal, at the same base limit, with no administrator's change
        here since, reporting no refusals the client held."""
        age = attempt.real_ms - spent.refused_ms
        return (
            attempt.held == 0  # refusals a client held are folded into the record
            and 0 <= age < self.window_ms(spent)
            and spent.base_limit == attempt.base_limit
            and spent.epoch == self.changes.epoch
        )

    def remember(self, attempt: Attempt, seen: SessionSnapshot, epoch: int) -> None:
        """Keep the session as it stands after this refusal, which the store just gave
        (`epoch`: `AdminChanges.epoch` read before asking it)."""
        key = attempt.session
        refused = dict(seen.refused)
        refused[attempt.category] = refused.get(attempt.category, 0) + 1
        calls = with_call(seen.calls, attempt.record(allowed=False))[-self._keep :]
        after = replace(seen, calls=calls, refused=refused, last_seen_ms=attempt.now_ms)
        spent = Spent(attempt.category, after, attempt.real_ms, attempt.base_limit, epoch)
        with self._lock:
            before = self._spent.get(key)
            in_a_row = 1
            if before is not None and before.category == attempt.category:
                in_a_row = before.in_a_row + 1  # the session stayed spent between them
            spent = replace(spent, refusal=attempt, in_a_row=in_a_row)
            self._spent[key] = spent
            self._spent.move_to_end(key)
            if len(self._spent) > SPENT_SESSIONS:
                self._drop(*self._spent.popitem(last=False))


class RunawayLoops(SpentSessions):
    """Refuses a runaway loop's next call without counting it first."""

    def refuse(
        self,
        attempt: Attempt,
        store: SessionChecks,
        escalation: Escalation,
        listener: DecisionListener,
    ) -> Refused | None:
        """A runaway loop's next call. Within `REFUSAL_CACHE_MS` of the store's refusal
        here (`fresh`), and short of the streak that suspends, it is refused from memory,
        its streak counted with the next refusal sent. Otherwise it is refused in one
        write that holds only while the session is still spent, plus the principal's
        streak. None: not expected, or it changed; the check goes the usual way.

        Raises:
            StorageError: the store failed.
        """
        spent = self.get(attempt.session)
        if spent is None or spent.category != attempt.category or attempt.units != 1:
            return None
        known = spent.seen
        if explain_refusal(known, attempt) is not Verdict.OVER_LIMIT:
            return None
        limit = known.limit_for(attempt.category, attempt.base_limit, attempt.now_ms)
        reason = RefusalReason.QUOTA_EXCEEDED
        if self.fresh(spent, attempt) and escalation.defer(attempt):
            decision = session_refusal(attempt, known, limit, reason, self._keep)
            if self._answered(attempt.session, spent, attempt):
                self._due_by(attempt.session, spent.refused_ms + self.window_ms(spent))
            listener.on_block(attempt.tenant, attempt, decision)
            return decision
        epoch = self.changes.epoch
        # The repeats answered from memory are recorded with this refusal.
        taken = self._take_answered(attempt.session)
        attempt = replace(attempt, answered=taken.answered if taken else 0)
        try:
            recorded = store.record_block(attempt, known, limit, False, expected=True)
        except StorageError:
            if taken is not None:
                self._put_back(attempt.session, taken)
            raise
        if recorded is None:
            if taken is not None:  # not recorded: the session changed (a raise, a reset)
                self._put_back(attempt.session, taken)
            self.forget(attempt.session)
            return None
        decision = session_refusal(attempt, known, limit, reason, self._keep)
        self.remember(attempt, known, epoch)
        with self._lock:
            self._due.pop(attempt.session, None)  # the repeats answered went with it
        if self._cache_ms and escalation.defer(attempt):
            # Its streak waits too, sent with a later one by `escalation.due` at the latest.
            self._due_by(attempt.session, escalation.due(attempt))
        else:
            since = known.last_allowed_ms(category=attempt.category)
            decision = escalation.after(attempt, since, decision)
        listener.on_block(attempt.tenant, attempt, decision)
        return decision

    def _due_by(self, session: SessionKey, at: int | None) -> None:
        """What the session holds back is to be recorded by `at` at the latest."""
        if at is not None:
            with self._lock:
                self._due[session] = min(at, self._due.get(session, at))

    def flush_due(
        self,
        attempt: Attempt,
        store: SessionChecks,
        escalation: Escalation,
        later: Callable[[Callable[[], None]], None],
    ) -> None:
        """Record what runaway loops held back (repeats answered from memory, streaks)
        that fell due by the attempt's time and that no refusal sent since carried:
        looked for at the start of each check here and recorded after its answer
        (`later`), never on its way (a check paid for other sessions' records, one round
        trip each), so the views lag by at most the loop's window (two, for a session
        that keeps checking) and the streaks by `STREAK_BATCH_MS` while the container
        serves (on Lambda a frozen container does so at its next request). The attempt's
        own session is left one more window to its own refusal, which carries them at no
        extra request."""
        now_ms, own = attempt.real_ms, attempt.session
        with self._lock:
            due = [
                k
                for k, at in self._due.items()
                if at <= now_ms and not (k == own and now_ms < at + LOOP_CACHE_MS)
            ]
            for key in due:
                del self._due[key]
        if due:
            later(partial(self._flush_all, due, store, escalation))

    def flush_held(self, store: SessionChecks, escalation: Escalation) -> None:
        """Record now what every session here holds back, due or not."""
        with self._lock:
            held, self._due = list(self._due), {}
        self._flush_all(held, store, escalation)

    def _flush_all(
        self, due: list[SessionKey], store: SessionChecks, escalation: Escalation
    ) -> None:
        """Flush each due session while the check's deadline allows one more request
        (the Lambda hold waits for this); what is left is due again at the next check."""
        for at, key in enumerate(due):
            if not deadline.allows_step():
                with self._lock:
                    for rest in due[at:]:
                        self._due[rest] = 0  # due at once
                return
            self.flush(key, store, escalation)

    def flush(self, session: SessionKey, store: SessionChecks, escalation: Escalation) -> None:
        """Record the session's repeats answered from memory and not yet recorded, as its
        last one with the others folded in (`Attempt.answered`), and the streak its
        principal holds back here, of its entry and of those dropped before it; never
        raises (what fails is counted with the next refusal sent, or the next flush)."""
        taken = self._take_answered(session)
        spent = taken or self.get(session)
        last = taken.last if taken is not None else spent.refusal if spent else None
        if spent is None or last is None:
            return
        known = spent.seen
        try:
            if taken is not None:
                last = replace(last, answered=taken.answered - 1)
                limit = known.limit_for(last.category, last.base_limit, last.now_ms)
                if store.record_block(last, known, limit, False, expected=True) is None:
                    # No longer spent at that limit (raised since): refused all the same.
                    store.record_block(last, known, limit, False, marks=False)
                taken = None
            escalation.flush_deferred(last, known.last_allowed_ms(category=last.category))
        except StorageError:
            if taken is not None:
                self._put_back(session, taken)
            self._due_by(session, last.real_ms)  # the next check here tries again
            logger.warning("refusals held back not recorded yet", exc_info=True)
