"""In-memory session counters: the check's and the admin's writes under one lock."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from chalicelib.quota.changes import (
    Calls,
    Change,
    Field,
    Slot,
    admitted,
    counted,
    lease_returned,
    lowered,
    raised,
    refused,
    refused_suspended,
    replayed,
    reset,
    restarted,
    restarted_suspended,
    resumed,
    suspended,
    taken_back,
)
from chalicelib.quota.core import (
    Attempt,
    CallLife,
    CallRecord,
    ClientInfo,
    LeaseId,
    SessionKey,
    SessionSnapshot,
    call_id_key,
    ended_repeats,
    fold_repeats,
    with_call,
)
from chalicelib.quota.facts import Recorded
from chalicelib.quota.rules import (
    admits,
    call_admitted,
    idle_restart,
    lease_return,
    not_taken_back,
    refusal_noted,
    refusal_record,
    replay_record,
    reset_start,
    session_raise,
    session_unseen,
    still_spent,
    suspended_refusal,
    take_back,
    take_back_recorded,
)
from chalicelib.storage.memory.changes import apply
from chalicelib.storage.ports import (
    Consumed,
    LimitChange,
    NotConsumed,
    RecordChanged,
    RecordNotFound,
)

_SWEEP_EVERY = 1024  # writes between sweeps of expired sessions (DynamoDB's TTL, here)


def _gone_lives(seen: SessionSnapshot | None) -> tuple[str, ...]:
    """The call ids whose lives the session keeps though its last calls no longer hold
    them: the next count drops them (as on DynamoDB, where its write knows the lists)."""
    if seen is None:
        return ()
    held = {r.call_id for r in seen.calls if not r.replay} | seen.held_call_ids
    return tuple(sorted(key for key in seen.lives if key not in held))


_MAPS = {
    Slot.COUNTS: "counts",
    Slot.LEASED: "leased",
    Slot.GRANTS: "grants",
    Slot.REFUSED: "refused",
    Slot.HELD: "held",
    Slot.FIRST_REFUSALS: "notified",
    Slot.RAISED: "raised",
    Slot.RAISED_UNTIL: "raised_until",
    Slot.REPEATS: "repeats",
    Slot.LIVES: "lives",
    Slot.ALLOWED_BEFORE: "allowed_before",
}
_FIELDS = {
    Field.LAST_SEEN: "last_seen_ms",
    Field.STARTED: "started_ms",
    Field.EXPIRES: "expires_ms",
    Field.SUSPENDED: "suspended_reason",
    Field.PRINCIPAL: "principal",
    Field.SERVER: "server",
    Field.CLIENT: "client",
}


@dataclass
class _Session:
    last_seen_ms: int
    started_ms: int
    expires_ms: int | None
    counts: dict[str, int] = field(default_factory=dict)
    raised: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)  # of the refusals, those held
    notified: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    suspended_reason: str | None = None
    principal: str | None = None
    calls: list[CallRecord] = field(default_factory=list)
    raised_until: dict[str, int] = field(default_factory=dict)
    server: str | None = None
    leased: dict[str, int] = field(default_factory=dict)
    grants: dict[str, str] = field(default_factory=dict)  # each category's last lease
    client: ClientInfo | None = None
    repeats: dict[str, int] = field(default_factory=dict)  # the loop breaker's counts
    allowed_before: dict[str, int] = field(default_factory=dict)
    lives: dict[str, CallLife] = field(default_factory=dict)  # by kept call id

    def snapshot(self) -> SessionSnapshot:
        return SessionSnapshot(
            last_seen_ms=self.last_seen_ms,
            started_ms=self.started_ms,
            counts=dict(self.counts),
            raised=dict(self.raised),
            refused=dict(self.refused),
            refused_held=dict(self.held),
            suspended=self.suspended_reason is not None,
            suspended_reason=self.suspended_reason,
            principal=self.principal,
            calls=fold_repeats([replace(c, principal=self.principal) for c in self.calls]),
            raised_until=dict(self.raised_until),
            server=self.server,
            leased=dict(self.leased),
            grants=dict(self.grants),
            first_refusals={c: mark[0] for c, mark in self.notified.items()},
            client=self.client,
            repeats=dict(self.repeats),
            allowed_before=dict(self.allowed_before),
            lives=dict(self.lives),
        )

    def apply(self, change: Change) -> None:
        """The core's change (the last calls are the store's: see `MemoryCounters`)."""
        apply(self, change, _MAPS, _FIELDS)


class MemoryCounters:
    """The session counters port in a dict, under one lock."""

    def __init__(self, categories: Iterable[str], keep_calls: int = 10) -> None:
        self._categories = tuple(categories)
        self._keep = max(1, keep_calls)
        self._sessions: dict[SessionKey, _Session] = {}
        self._lock = threading.Lock()
        self._writes = 0

    def _append(self, session: _Session, record: CallRecord) -> None:
        # As on DynamoDB: a repeated refusal is folded into the last record, and the
        # record keeps the last `keep` entries.
        session.calls = list(with_call(tuple(session.calls), record)[-self._keep :])

    def _write(self, key: SessionKey, change: Change) -> _Session:
        """Apply the core's change to the session (created if absent), under the lock."""
        session = self._sessions.get(key)
        if session is None:
            start = change.start if change.start is not None else 0
            session = self._sessions[key] = _Session(start, start, None)
        session.apply(change)
        record = change.record
        if record is not None:
            if change.calls is Calls.RESTART:
                session.calls = []
            elif change.calls is Calls.REPLACE:
                self._drop_counted(session, record)
            self._append(session, record)
        self._written(session.last_seen_ms)
        return session

    @staticmethod
    def _drop_counted(session: _Session, refused: CallRecord) -> None:
        """Drop the counted record of the call that `refused` records as refused."""
        for i in range(len(session.calls) - 1, -1, -1):
            kept = session.calls[i]
            same = (
                kept.call_id == refused.call_id
                if refused.call_id is not None
                else kept.check_id == refused.check_id
            )
            if same and kept.allowed and not kept.replay:
                del session.calls[i]
                return

    def _written(self, now_ms: int) -> None:
        self._writes += 1
        if self._writes % _SWEEP_EVERY == 0:
            expired = [
                key
                for key, s in self._sessions.items()
                if s.expires_ms is not None and s.expires_ms < now_ms
            ]
            for key in expired:
                del self._sessions[key]

    def _snapshot(self, key: SessionKey) -> SessionSnapshot | None:
        session = self._sessions.get(key)
        return session.snapshot() if session is not None else None

    def consume(self, attempt: Attempt) -> Consumed | NotConsumed:
        """Count one call if `quota.admits` the session as stored."""
        with self._lock:
            seen = self._snapshot(attempt.session)
            if not admits(seen, attempt):
                return NotConsumed(seen)
            ended = ended_repeats(seen.repeats if seen else {}, attempt.now_ms)
            gone = _gone_lives(seen)
            write = counted(attempt, ended, gone)
            return Consumed(self._write(attempt.session, write).snapshot())

    def reset_expired(self, attempt: Attempt, seen: SessionSnapshot) -> Consumed | None:
        """Start idle-expired counters again with this call counted."""
        with self._lock:
            now = self._snapshot(attempt.session)
            if now is None or not idle_restart(seen.last_seen_ms, False).holds(now):
                return None
            return Consumed(self._write(attempt.session, restarted(attempt, seen)).snapshot())

    def restart_suspended(self, attempt: Attempt, seen: SessionSnapshot) -> SessionSnapshot | None:
        """A suspended session's first attempt after idle expiry: counters start again."""
        with self._lock:
            now = self._snapshot(attempt.session)
            if now is None or not idle_restart(seen.last_seen_ms, True).holds(now):
                return None
            return self._write(attempt.session, restarted_suspended(attempt, seen)).snapshot()

    def record_block(
        self,
        attempt: Attempt,
        seen: SessionSnapshot,
        limit: int,
        suspended: bool,
        expected: bool = False,
        marks: bool = True,
    ) -> bool | None:
        """`SessionChecks.record_block`, under the lock."""
        record = attempt.record(allowed=False)
        with self._lock:
            session = self._sessions.get(attempt.session)
            if session is None:
                return None
            now = session.snapshot()
            if Recorded(record).holds(now):  # a retry of this very write
                first = session.notified.get(attempt.category) == (limit, attempt.check_id)
                return not suspended and first
            if suspended:
                if not suspended_refusal(record).holds(now):
                    return None
                self._write(attempt.session, refused_suspended(attempt))
                return False
            started = seen.started_ms
            first = marks and refusal_noted(record, started, limit, True).holds(now)
            if not marks and not refusal_record(record, started).holds(now):
                return None
            if marks and not first and not refusal_noted(record, started, limit, False).holds(now):
                return None
            if expected and (first or not still_spent(attempt, limit).holds(now)):
                return None  # no longer spent at that limit: checked the usual way
            # Later refusals at this limit keep the first one's check id.
            self._write(attempt.session, refused(attempt, limit if first else None))
            return first

    def record_replay(self, attempt: Attempt, seen: SessionSnapshot) -> bool:
        """Record a replayed call id; False if the session changed since `seen`."""
        record = attempt.record(allowed=True, replay=True)
        key = call_id_key(attempt.call_id or "")
        life = seen.lives.get(key)
        with self._lock:
            now = self._snapshot(attempt.session)
            if now is None:
                return False
            if Recorded(record).holds(now):
                return True
            rule = (
                refusal_record(record, seen.started_ms)
                if life is None
                else replay_record(record, seen.started_ms, key, life)
            )
            if not rule.holds(now):
                return False
            self._write(attempt.session, replayed(attempt, life))
            return True

    def admit(self, attempt: Attempt, life: CallLife) -> bool:
        """Admit a call its check counted at every scope; False if its life changed."""
        key = call_id_key(attempt.call_id or "")
        with self._lock:
            now = self._snapshot(attempt.session)
            if not call_admitted(key, life).holds(now):
                # This very write, sent again (the store's retry), finds it admitted.
                return now is not None and now.lives.get(key) == life.admitted()
            self._write(attempt.session, admitted(key, life))
            return True

    def uncount(self, attempt: Attempt, started_ms: int | None) -> None:
        """Take back a counted call that a wider budget refused (`started_ms` None: only
        if the session records it)."""
        with self._lock:
            now = self._snapshot(attempt.session)
            if now is None:
                return
            if started_ms is None:
                if take_back_recorded(attempt).holds(now):
                    self._write(attempt.session, taken_back(attempt))
                return
            if not not_taken_back(attempt).holds(now):
                return  # taken back already: the store's own retry of that write
            counts = take_back(attempt, started_ms).holds(now)
            self._write(attempt.session, taken_back(attempt, counts))

    def return_lease(
        self, session: SessionKey, lease: LeaseId, unused: int, cutoff_ms: int
    ) -> SessionSnapshot | None:
        """Give back unspent leased calls of the category's last lease, exactly as it was
        granted, once."""
        with self._lock:
            now = self._snapshot(session)
            if now is None or not lease_return(lease, unused, cutoff_ms).holds(now):
                return None
            return self._write(session, lease_returned(lease, unused)).snapshot()

    def get(self, session: SessionKey) -> SessionSnapshot | None:
        """The session as stored, or None."""
        with self._lock:
            found = self._sessions.get(session)
            return found.snapshot() if found else None

    def raise_limit(
        self, session: SessionKey, change: LimitChange, seen: SessionSnapshot | None
    ) -> SessionSnapshot:
        """Set a raised limit as read in `seen`.

        Raises:
            RecordChanged: the session changed since `seen`.
        """
        now_ms, idle_ms = change.now_ms, change.idle_ms
        category, new_limit, until_ms = change.category, change.new_limit, change.until_ms
        with self._lock:
            now = self._snapshot(session)
            if seen is None or seen.is_idle(now_ms, idle_ms):
                # Idle expiry holds while suspended too: the raise applies to the counters
                # that start now (a suspended session stays suspended, with no expiry).
                rule = (
                    session_unseen()
                    if seen is None
                    else idle_restart(seen.last_seen_ms, seen.suspended)
                )
                if not rule.holds(now):
                    raise RecordChanged("raising a limit")
                expires = None if now is not None and now.suspended else now_ms + idle_ms
                write = raised(category, new_limit, until_ms, now_ms, expires)
            else:
                rule = session_raise(category, new_limit, now_ms, now_ms - idle_ms)
                if not rule.holds(now):
                    raise RecordChanged("raising a limit")
                write = raised(category, new_limit, until_ms)
            return self._write(session, write).snapshot()

    def lower(self, session: SessionKey, category: str) -> SessionSnapshot:
        """Drop a category's raise and its expiry.

        Raises:
            RecordNotFound: the session does not exist.
        """
        with self._lock:
            if session not in self._sessions:
                raise RecordNotFound("lowering a limit")
            return self._write(session, lowered(category)).snapshot()

    def suspend(self, session: SessionKey, reason: str, now_ms: int) -> SessionSnapshot:
        """Suspend a session, creating it if unseen."""
        with self._lock:
            return self._write(session, suspended(reason, now_ms)).snapshot()

    def resume(self, session: SessionKey, now_ms: int, idle_ms: int) -> SessionSnapshot:
        """Lift a suspension.

        Raises:
            RecordNotFound: the session does not exist.
        """
        with self._lock:
            if session not in self._sessions:
                raise RecordNotFound("resuming a session")
            return self._write(session, resumed(now_ms + idle_ms)).snapshot()

    def reset(self, session: SessionKey, now_ms: int, idle_ms: int) -> SessionSnapshot:
        """Zero every counter; raises, suspension and last calls stay.

        Raises:
            RecordNotFound: the session does not exist.
        """
        with self._lock:
            now = self._snapshot(session)
            if now is None:
                raise RecordNotFound("resetting a session")
            start = reset_start(now, now_ms)
            write = reset(start, None if now.suspended else start + idle_ms)
            return self._write(session, write).snapshot()
