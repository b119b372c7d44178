"""In-memory session counters: the check's and the admin's writes under one lock."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from chalicelib.quota.core import (
    Attempt,
    CallRecord,
    ClientInfo,
    LeaseId,
    SessionKey,
    SessionSnapshot,
    fold_repeats,
    repeat_window_end,
    with_call,
)
from chalicelib.quota.facts import Recorded
from chalicelib.quota.rules import (
    admits,
    idle_restart,
    lease_return,
    refusal_noted,
    refusal_record,
    reset_start,
    session_raise,
    still_spent,
    suspended_refusal,
    take_back,
)
from chalicelib.storage.ports import (
    Consumed,
    LimitChange,
    NotConsumed,
    RecordChanged,
    RecordNotFound,
)

_SWEEP_EVERY = 1024  # writes between sweeps of expired sessions (DynamoDB's TTL, here)


@dataclass
class _Session:
    last_seen_ms: int
    started_ms: int
    expires_ms: int | None
    counts: dict[str, int] = field(default_factory=dict)
    raised: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
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

    def snapshot(self) -> SessionSnapshot:
        return SessionSnapshot(
            last_seen_ms=self.last_seen_ms,
            started_ms=self.started_ms,
            counts=dict(self.counts),
            raised=dict(self.raised),
            refused=dict(self.refused),
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
        )

    def zero(self) -> None:
        self.counts.clear()
        self.notified.clear()
        self.refused.clear()
        self.leased.clear()
        self.grants.clear()

    def count(self, attempt: Attempt) -> None:
        category = attempt.category
        self.counts[category] = self.counts.get(category, 0) + attempt.units
        if attempt.leased:
            self.leased[category] = self.leased.get(category, 0) + attempt.units
            self.grants[category] = attempt.lease_grant

    def count_repeat(self, attempt: Attempt) -> None:
        if attempt.repeat_key is not None:
            # As on DynamoDB: counted with the call; windows that have ended are dropped.
            self.repeats = {
                key: count
                for key, count in self.repeats.items()
                if repeat_window_end(key) > attempt.now_ms
            }
            self.repeats[attempt.repeat_key] = self.repeats.get(attempt.repeat_key, 0) + 1


class MemoryCounters:
    """The session counters port in a dict, under one lock."""

    def __init__(self, categories: Iterable[str], keep_calls: int = 10) -> None:
        self._categories = tuple(categories)
        self._keep = max(1, keep_calls)
        self._sessions: dict[SessionKey, _Session] = {}
        self._lock = threading.Lock()
        self._writes = 0

    def _append(self, session: _Session, record: CallRecord) -> None:
        if record.allowed and not record.replay and record.call_id is not None:
            record = replace(record, check_id=None)  # kept by call id alone, as in DynamoDB
        # As on DynamoDB: a repeated refusal is folded into the last record, and the
        # record keeps the last `keep` entries.
        session.calls = list(with_call(tuple(session.calls), record)[-self._keep :])

    def _touch(self, session: _Session, attempt: Attempt) -> None:
        session.last_seen_ms = attempt.now_ms
        session.expires_ms = attempt.resets_at_ms
        if attempt.principal is not None:
            session.principal = attempt.principal
        if attempt.server is not None:
            session.server = attempt.server
        if attempt.client is not None:
            session.client = attempt.client

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

    def consume(self, attempt: Attempt) -> Consumed | NotConsumed:
        """Count one call if `quota.admits` the session as stored."""
        with self._lock:
            session = self._sessions.get(attempt.session)
            if not admits(session.snapshot() if session else None, attempt):
                return NotConsumed(session.snapshot() if session else None)
            if session is None:
                session = _Session(attempt.now_ms, attempt.now_ms, None)
                self._sessions[attempt.session] = session
            session.count(attempt)
            session.count_repeat(attempt)
            self._touch(session, attempt)
            self._append(session, attempt.record(allowed=True))
            self._written(attempt.now_ms)
            return Consumed(session.snapshot())

    def reset_expired(self, attempt: Attempt, old_last_seen_ms: int) -> Consumed | None:
        """Start idle-expired counters again with this call counted."""
        with self._lock:
            session = self._sessions.get(attempt.session)
            if session is None or not idle_restart(old_last_seen_ms, False).holds(
                session.snapshot()
            ):
                return None
            session.zero()
            session.raised.clear()
            session.raised_until.clear()
            session.count(attempt)
            session.started_ms = attempt.now_ms
            session.calls = []
            self._append(session, attempt.record(allowed=True))
            self._touch(session, attempt)
            return Consumed(session.snapshot())

    def restart_suspended(self, attempt: Attempt, old_last_seen_ms: int) -> SessionSnapshot | None:
        """A suspended session's first attempt after idle expiry: counters start again."""
        with self._lock:
            session = self._sessions.get(attempt.session)
            if session is None or not idle_restart(old_last_seen_ms, True).holds(
                session.snapshot()
            ):
                return None
            session.zero()
            session.raised.clear()
            session.raised_until.clear()
            session.started_ms = session.last_seen_ms = attempt.now_ms
            session.calls = []
            self._append(session, attempt.record(allowed=False))
            return session.snapshot()

    def record_block(
        self,
        attempt: Attempt,
        seen: SessionSnapshot,
        limit: int,
        suspended: bool,
        expected: bool = False,
        marks: bool = True,
    ) -> bool | None:
        """Record a refused attempt; whether it is the first at `limit`, or None."""
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
                session.last_seen_ms = attempt.now_ms
                self._append(session, record)
                return False
            started = seen.started_ms
            first = marks and refusal_noted(record, started, limit, True).holds(now)
            if not marks and not refusal_record(record, started).holds(now):
                return None
            if marks and not first and not refusal_noted(record, started, limit, False).holds(now):
                return None
            if expected and (first or not still_spent(attempt, limit).holds(now)):
                return None  # no longer spent at that limit: checked the usual way
            if first:  # later refusals at this limit keep the first one's check id
                session.notified[attempt.category] = (limit, attempt.check_id)
            session.refused[attempt.category] = session.refused.get(attempt.category, 0) + 1
            self._touch(session, attempt)
            self._append(session, record)
            return first

    def record_replay(self, attempt: Attempt, seen: SessionSnapshot) -> bool:
        """Record a replayed call id; False if the session changed since `seen`."""
        record = attempt.record(allowed=True, replay=True)
        with self._lock:
            session = self._sessions.get(attempt.session)
            if session is None:
                return False
            now = session.snapshot()
            if Recorded(record).holds(now):
                return True
            if not refusal_record(record, seen.started_ms).holds(now):
                return False
            self._touch(session, attempt)
            self._append(session, record)
            return True

    def uncount(self, attempt: Attempt, started_ms: int) -> None:
        """Take back a counted call that a wider budget refused."""
        with self._lock:
            session = self._sessions.get(attempt.session)
            if session is None:
                return
            counted = attempt.record(allowed=True)
            for i in range(len(session.calls) - 1, -1, -1):
                kept = session.calls[i]
                same = (
                    kept.call_id == counted.call_id
                    if counted.call_id is not None
                    else kept.check_id == counted.check_id
                )
                if same and kept.allowed and not kept.replay:
                    del session.calls[i]
                    break
            category, units = attempt.category, attempt.units
            if take_back(attempt, started_ms).holds(session.snapshot()):
                session.counts[category] -= units
                if attempt.leased:
                    session.leased[category] = session.leased.get(category, 0) - units
                    session.grants.pop(category, None)
            self._append(session, attempt.record(allowed=False))

    def return_lease(
        self, session: SessionKey, lease: LeaseId, unused: int, cutoff_ms: int
    ) -> SessionSnapshot | None:
        """Give back unspent leased calls of the category's last lease, exactly as it was
        granted, once."""
        with self._lock:
            found = self._sessions.get(session)
            category = lease.category
            if found is None or not lease_return(lease, unused, cutoff_ms).holds(found.snapshot()):
                return None
            del found.grants[category]
            found.counts[category] -= unused
            found.leased[category] -= unused
            return found.snapshot()

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
        with self._lock:
            found = self._sessions.get(session)
            if seen is None or seen.is_idle(now_ms, idle_ms):
                # Idle expiry holds while suspended too: the raise applies to the counters
                # that start now (a suspended session stays suspended, with no expiry).
                fresh_ok = (
                    found is None
                    if seen is None
                    else found is not None
                    and idle_restart(seen.last_seen_ms, seen.suspended).holds(found.snapshot())
                )
                if not fresh_ok:
                    raise RecordChanged("raising a limit")
                if found is None:
                    found = _Session(now_ms, now_ms, None)
                    self._sessions[session] = found
                found.zero()
                found.raised = {}
                found.raised_until = {}
                found.started_ms = found.last_seen_ms = now_ms
                suspended = found.suspended_reason is not None
                found.expires_ms = None if suspended else now_ms + idle_ms
            else:
                rule = session_raise(change.category, change.new_limit, now_ms, now_ms - idle_ms)
                if found is None or not rule.holds(found.snapshot()):
                    raise RecordChanged("raising a limit")
            found.raised[change.category] = change.new_limit
            if change.until_ms is None:
                found.raised_until.pop(change.category, None)
            else:
                found.raised_until[change.category] = change.until_ms
            return found.snapshot()

    def lower(self, session: SessionKey, category: str) -> SessionSnapshot:
        """Drop a category's raise and its expiry.

        Raises:
            RecordNotFound: the session does not exist.
        """
        with self._lock:
            found = self._sessions.get(session)
            if found is None:
                raise RecordNotFound("lowering a limit")
            found.raised.pop(category, None)
            found.raised_until.pop(category, None)
            return found.snapshot()

    def suspend(self, session: SessionKey, reason: str, now_ms: int) -> SessionSnapshot:
        """Suspend a session, creating it if unseen."""
        with self._lock:
            found = self._sessions.setdefault(session, _Session(now_ms, now_ms, None))
            found.suspended_reason = reason
            found.expires_ms = None
            return found.snapshot()

    def resume(self, session: SessionKey, now_ms: int, idle_ms: int) -> SessionSnapshot:
        """Lift a suspension.

        Raises:
            RecordNotFound: the session does not exist.
        """
        with self._lock:
            found = self._sessions.get(session)
            if found is None:
                raise RecordNotFound("resuming a session")
            found.suspended_reason = None
            found.expires_ms = now_ms + idle_ms
            return found.snapshot()

    def reset(self, session: SessionKey, now_ms: int, idle_ms: int) -> SessionSnapshot:
        """Zero every counter; raises, suspension and last calls stay.

        Raises:
            RecordNotFound: the session does not exist.
        """
        with self._lock:
            found = self._sessions.get(session)
            if found is None:
                raise RecordNotFound("resetting a session")
            found.zero()
            found.started_ms = found.last_seen_ms = reset_start(found.snapshot(), now_ms)
            if found.suspended_reason is None:
                found.expires_ms = found.started_ms + idle_ms
            return found.snapshot()
