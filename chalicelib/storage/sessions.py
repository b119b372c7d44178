"""The session counters port (`ports.SessionCounters`), written once on any backend's
narrow pair (`record_port.RecordStore`): which rule (`quota.rules`) and which change
(`quota.changes`) each write uses, and what a failed condition means (an answer, or a
try again on the record it failed on). A backend only reads a session and applies one
change under one condition.
"""

from __future__ import annotations

from typing import TypeAlias

from chalicelib.quota.changes import (
    Change,
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
    LeaseId,
    SessionKey,
    SessionSnapshot,
    call_id_key,
)
from chalicelib.quota.facts import Condition, Recorded, SessionExists, all_of
from chalicelib.quota.rules import (
    call_admitted,
    counters_reset,
    idle_restart,
    lease_return,
    not_taken_back,
    refusal_noted,
    refusal_record,
    replay_record,
    reset_start,
    session_consume,
    session_raise,
    session_unseen,
    still_spent,
    suspended_refusal,
    take_back,
    take_back_recorded,
)
from chalicelib.storage.errors import RecordChanged, RecordNotFound
from chalicelib.storage.record_port import Applied, Failed, RecordStore, after, found
from chalicelib.storage.records import Consumed, LimitChange, NotConsumed

SessionRecords: TypeAlias = RecordStore[SessionKey, SessionSnapshot]
# Tries of a write that others keep defeating (a refusal's mark, an administrator's reset).
ROUNDS = 4


class Sessions:
    """A session's counters, state and last calls, as the check and the administrator
    write them (`ports.SessionCounters`), on one backend's records."""

    def __init__(self, records: SessionRecords) -> None:
        self._records = records

    def _write(
        self, session: SessionKey, change: Change, rule: Condition | None, doing: str
    ) -> Applied[SessionSnapshot] | Failed[SessionSnapshot]:
        return self._records.write(session, change, rule, doing)

    def get(self, session: SessionKey) -> SessionSnapshot | None:
        """The session as stored (strongly consistent), or None.

        Raises:
            StorageError: the store failed.
        """
        return self._records.read(session)

    # -- the check's writes ----------------------------------------------------------

    def consume(self, attempt: Attempt) -> Consumed | NotConsumed:
        """Count the call if `rules.session_consume` holds on the session as stored.

        Raises:
            StorageError: the store failed.
        """
        rule = session_consume(attempt)
        out = self._write(attempt.session, counted(attempt), rule, "counting a call")
        return Consumed(after(out)) if isinstance(out, Applied) else NotConsumed(out.old)

    def reset_expired(self, attempt: Attempt, seen: SessionSnapshot) -> Consumed | None:
        """Start idle-expired counters again with this call counted; None if another
        attempt touched the session since `seen` was read.

        Raises:
            StorageError: the store failed.
        """
        rule = idle_restart(seen.last_seen_ms, False)
        change = restarted(attempt, seen)
        out = self._write(attempt.session, change, rule, "resetting idle counters")
        return Consumed(after(out)) if isinstance(out, Applied) else None

    def restart_suspended(self, attempt: Attempt, seen: SessionSnapshot) -> SessionSnapshot | None:
        """Refuse a suspended session's first attempt after idle expiry: its counters
        start again with this refusal as their first record; it stays suspended. None if
        another attempt touched it since `seen` was read.

        Raises:
            StorageError: the store failed.
        """
        rule = idle_restart(seen.last_seen_ms, True)
        change = restarted_suspended(attempt, seen)
        doing = "restarting a suspended session's counters"
        out = self._write(attempt.session, change, rule, doing)
        return after(out) if isinstance(out, Applied) else None

    def record_block(
        self,
        attempt: Attempt,
        seen: SessionSnapshot,
        limit: int,
        suspended: bool,
        *,
        expected: bool = False,
        marks: bool = True,
    ) -> bool | None:
        """`SessionChecks.record_block`: the refusal written as a later one at `limit`
        first (most are), as the first if the old record says it is; a retry of this very
        write answers what the first one did.

        Raises:
            StorageError: the store failed.
        """
        record = attempt.record(allowed=False)
        started, doing = seen.started_ms, "recording a refused call"
        rule: Condition
        if expected:
            rule = all_of(
                refusal_noted(record, started, limit, first=False), still_spent(attempt, limit)
            )
            out = self._write(attempt.session, refused(attempt), rule, doing)
            if isinstance(out, Applied) or Recorded(record).holds(out.old):
                return False
            return None  # no longer spent at that limit: checked the usual way
        first = False
        for _ in range(ROUNDS):
            change: Change
            if suspended:
                change, rule = refused_suspended(attempt), suspended_refusal(record)
            elif not marks:
                change, rule = refused(attempt), refusal_record(record, started)
            else:
                # Later refusals at this limit keep the first one's check id.
                change = refused(attempt, limit if first else None)
                rule = refusal_noted(record, started, limit, first)
            out = self._write(attempt.session, change, rule, doing)
            if isinstance(out, Applied):
                return first and not suspended
            old = out.old
            if old is not None and Recorded(record).holds(old):
                # Our own earlier try went through: it was first if the mark names us.
                return not suspended and _first_by(old, attempt, limit)
            if suspended or old is None or old.suspended or old.started_ms != started:
                return None
            mark = old.first_refusals.get(attempt.category)
            # A mark of the old numeric form (no check id) is rewritten, as a first, once.
            by = old.first_refused_by.get(attempt.category)
            first = marks and (mark is None or mark != limit or by is None)
        return None

    def record_replay(self, attempt: Attempt, seen: SessionSnapshot) -> bool:
        """Record a replayed call id, refresh the idle clock; False if `seen` changed
        (or, for a call with a life, if another duplicate moved it on first).

        Raises:
            StorageError: the store failed.
        """
        record = attempt.record(allowed=True, replay=True)
        key = call_id_key(attempt.call_id or "")
        life = seen.lives.get(key)
        rule = (
            refusal_record(record, seen.started_ms)
            if life is None
            else replay_record(record, seen.started_ms, key, life)
        )
        change = replayed(attempt, life)
        out = self._write(attempt.session, change, rule, "recording a replayed call")
        return isinstance(out, Applied) or Recorded(record).holds(out.old)

    def admit(self, attempt: Attempt, life: CallLife) -> bool:
        """Admit a call that every wider budget counted: its call id's life goes from in
        progress to admitted if it is still `life`; False if not.

        Raises:
            StorageError: the store failed.
        """
        key = call_id_key(attempt.call_id or "")
        change, rule = admitted(key, life), call_admitted(key, life)
        out = self._write(attempt.session, change, rule, "admitting a counted call")
        if isinstance(out, Applied):
            return True
        # This very write, sent again by the store's client, finds it admitted.
        return out.old is not None and out.old.lives.get(key) == life.admitted()

    def uncount(self, attempt: Attempt, started_ms: int | None) -> None:
        """Take back a call `consume` counted (a wider budget refused it); `started_ms`
        None: only if the session records it as this check's (`rules.take_back_recorded`).

        Raises:
            StorageError: the store failed.
        """
        doing = "taking back a counted call"
        if started_ms is None:
            self._write(attempt.session, taken_back(attempt), take_back_recorded(attempt), doing)
            return
        rule = take_back(attempt, started_ms)
        if isinstance(self._write(attempt.session, taken_back(attempt), rule, doing), Applied):
            return
        # Reset meanwhile: nothing to take back, the call still shows as refused; only if
        # not taken back already (the store's own retry of that write).
        exists = all_of(SessionExists(), not_taken_back(attempt))
        self._write(attempt.session, taken_back(attempt, counts=False), exists, doing)

    def return_lease(
        self, session: SessionKey, lease: LeaseId, unused: int, cutoff_ms: int
    ) -> SessionSnapshot | None:
        """Give back `unused` calls of the category's last lease, exactly as granted, once;
        the session after, or None if nothing was given back.

        Raises:
            StorageError: the store failed.
        """
        change, rule = lease_returned(lease, unused), lease_return(lease, unused, cutoff_ms)
        out = self._write(session, change, rule, "returning the unspent calls of a lease")
        return after(out) if isinstance(out, Applied) else None

    # -- the administrator's writes: none compares the idle clock or the counters -----

    def raise_limit(
        self, session: SessionKey, change: LimitChange, seen: SessionSnapshot | None
    ) -> SessionSnapshot:
        """Set a raised limit as read in `seen`, never below a raise set meanwhile; on an
        idle (or unseen) session the counters start again, as the next check would.

        Raises:
            RecordChanged: the session changed since `seen`; read and retry.
            StorageError: the store failed.
        """
        now_ms, idle_ms = change.now_ms, change.idle_ms
        category, new_limit, until_ms = change.category, change.new_limit, change.until_ms
        rule: Condition
        if seen is None or seen.is_idle(now_ms, idle_ms):
            # Idle expiry holds while suspended too: the raise applies to the counters
            # that start now (a suspended session stays suspended, with no expiry).
            is_suspended = seen is not None and seen.suspended
            rule = (
                session_unseen() if seen is None else idle_restart(seen.last_seen_ms, is_suspended)
            )
            expires = None if is_suspended else now_ms + idle_ms
            write = raised(category, new_limit, until_ms, now_ms, expires)
        else:
            rule = session_raise(category, new_limit, now_ms, now_ms - idle_ms)
            write = raised(category, new_limit, until_ms)
        out = self._write(session, write, rule, "raising a limit")
        if isinstance(out, Failed):
            raise RecordChanged("raising a limit")
        return after(out)

    def lower(self, session: SessionKey, category: str) -> SessionSnapshot:
        """Drop a category's raise and its expiry: the limit is the base again.

        Raises:
            RecordNotFound: the session does not exist.
            StorageError: the store failed.
        """
        doing = "lowering a limit"
        return found(self._write(session, lowered(category), SessionExists(), doing), doing)

    def suspend(self, session: SessionKey, reason: str, now_ms: int) -> SessionSnapshot:
        """Suspend a session, creating it if unseen; concurrent checks never defeat it.

        Raises:
            StorageError: the store failed.
        """
        out = self._write(session, suspended(reason, now_ms), None, "suspending a session")
        assert isinstance(out, Applied), "a write on no condition applies"
        return after(out)

    def resume(self, session: SessionKey, now_ms: int, idle_ms: int) -> SessionSnapshot:
        """Lift a suspension; the idle clock stays where the last attempt left it.

        Raises:
            RecordNotFound: the session does not exist.
            StorageError: the store failed.
        """
        doing, change = "resuming a session", resumed(now_ms + idle_ms)
        return found(self._write(session, change, SessionExists(), doing), doing)

    def reset(self, session: SessionKey, now_ms: int, idle_ms: int) -> SessionSnapshot:
        """Zero every counter (raises, suspension, last calls stay), after the counters'
        start and the last attempt; a suspended session keeps no expiry. Only a concurrent
        suspend or resume (never a check) makes it try again.

        Raises:
            RecordNotFound: the session does not exist.
            RecordChanged: admins kept suspending and resuming it meanwhile.
            StorageError: the store failed.
        """
        doing, is_suspended = "resetting a session", False
        for round_ in range(ROUNDS):
            write = reset(now_ms, None if is_suspended else now_ms + idle_ms)
            rule = counters_reset(now_ms, is_suspended, round_ == 0)
            out = self._write(session, write, rule, doing)
            if isinstance(out, Applied):
                return after(out)
            if out.old is None:
                raise RecordNotFound(doing)
            is_suspended = out.old.suspended
            now_ms = reset_start(out.old, now_ms)
        raise RecordChanged(doing)


def _first_by(record: SessionSnapshot, attempt: Attempt, limit: int) -> bool:
    """Whether the record's first refusal at `limit` is this attempt's."""
    category = attempt.category
    at, by = record.first_refusals.get(category), record.first_refused_by.get(category)
    return at == limit and by == attempt.check_id
