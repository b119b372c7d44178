"""The session counters port on DynamoDB, the check's writes: one conditional UpdateItem
per allowed check (the admission rule rendered from `quota.rules`, the change from
`quota.changes`).

Every entry of `cids` names the check that wrote it, so that botocore's own retry of a
timed-out write fails its condition instead of counting or recording the call twice.

The last calls cost no extra request. Each write returns the item, so the container
remembers each session's lists (`Tails`); once a list holds `keep` entries, a check
writes the whole list, shifted by one, on condition that its tail is still the one
remembered. A refusal that repeats the last one (same tool, still refused) replaces it
with a count, so a runaway loop neither grows the item nor pushes the other calls out.
Only when the container has not seen the list, or another writer changed it first, does
a check append instead; the list then grows, and is trimmed in batches. The loop
breaker's counts of ended windows go the same way: the next count drops those the
container saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from chalicelib.quota.changes import (
    Change,
    admitted,
    counted,
    lease_returned,
    restarted,
    restarted_suspended,
    taken_back,
)
from chalicelib.quota.core import (
    Attempt,
    CallLife,
    LeaseId,
    SessionKey,
    SessionSnapshot,
    call_id_key,
    ended_repeats,
)
from chalicelib.quota.facts import Condition, SessionExists, all_of
from chalicelib.quota.rules import (
    call_admitted,
    idle_restart,
    lease_return,
    not_taken_back,
    session_consume,
    take_back,
    take_back_recorded,
)
from chalicelib.storage.dynamodb.changes import (
    APPEND_CALL,
    RESTART_CALLS,
    REWRITE_CALLS,
)
from chalicelib.storage.dynamodb.codec import (
    encode_call,
    key_of,
    snapshot_from_item,
    stored_id,
    taken_back_id,
)
from chalicelib.storage.dynamodb.conditions import Form, Rendered, render
from chalicelib.storage.dynamodb.layout import RAISED_PREFIX
from chalicelib.storage.dynamodb.session_refusals import RefusalWrites
from chalicelib.storage.dynamodb.tails import Tail
from chalicelib.storage.dynamodb.updates import ConditionFailed as _ConditionFailed
from chalicelib.storage.dynamodb.updates import s as _s
from chalicelib.storage.ports import (
    Consumed,
    NotConsumed,
)

# The case of the consume rule a known session's check leaves out: a new session.
KNOWN = frozenset({SessionExists})


class CounterStore(RefusalWrites):
    """A session's counters on DynamoDB: the check's writes (`ports.SessionChecks`) here
    and, for its refusals and replays, in `session_refusals`; the administrator's
    (`ports.SessionAdmin`) in `session_admin`. What each write changes is the core's
    (`quota.changes`), rendered by `changes`."""

    def consume(self, attempt: Attempt) -> Consumed | NotConsumed:
        """Count one call if the session is active, not suspended, under its limit and has
        not counted this call (by client call id, or by this check's own id).

        Raises:
            StorageError: the store failed (throttled, unreachable, misconfigured).
        """
        key = key_of(attempt.session)
        doing = "counting a call"
        tail = self._tails.get(key)
        ended = ended_repeats(tail.repeats, attempt.now_ms) if tail is not None else ()
        change = counted(attempt, ended)
        # `#n < #r` counts one call under a raise; a lease under a raise takes a second try.
        raised = tail is not None and attempt.category in tail.raised and attempt.units == 1
        rule = session_consume(attempt)
        if tail is not None and len(tail.ids) >= self._keep:
            # The list is full: shift it in this same write, if nobody changed it since.
            new = tail.adding(attempt.record(allowed=True), self._keep)
            shifted = counted(attempt, ended, replace(new, lives=tail.lives).gone_lives())
            update = self._change(shifted, REWRITE_CALLS, tail.values(new))
            rendered = render(rule, Form(KNOWN, raised))
            try:
                item = self._write(
                    key,
                    update,
                    rendered,
                    doing,
                    old_on_failure=True,
                    also=tail.condition(),
                )
            except _ConditionFailed as failed:
                old = self._old(failed, key, doing)
                if old is None or tail.same_lists(Tail.of(old)):
                    return self._under_raise(attempt, rule, old, change)
                # Another writer changed the list first: append instead, once.
                raised = RAISED_PREFIX + attempt.category in old and attempt.units == 1
            else:
                self._tails.learn(key, item)
                return Consumed(snapshot_from_item(item))
        # A session this container saw is counted only while it exists: a deleted one
        # fails, and is counted as new on the next round.
        rendered = render(rule, Form(KNOWN if tail is not None else frozenset(), raised))
        try:
            return self._count_appended(key, change, rendered, doing)
        except _ConditionFailed as failed:
            return self._under_raise(attempt, rule, self._old(failed, key, doing), change)

    def _count_appended(self, key: str, change: Change, rule: Rendered, doing: str) -> Consumed:
        """The call counted by `change`, its record appended to the last calls, on `rule`.

        Raises:
            _ConditionFailed: the rule failed.
            StorageError: the store failed.
        """
        item = self._write(key, self._change(change, APPEND_CALL), rule, doing, old_on_failure=True)
        self._appended(key, item)
        return Consumed(snapshot_from_item(item))

    def admit(self, attempt: Attempt, life: CallLife) -> bool:
        """Admit a call its check counted at every scope: its life moves from in progress
        to admitted, if it is still the one this check started; False if not (a copy
        found it past `IN_PROGRESS_MS` and counted the call anew).

        Raises:
            StorageError: the store failed.
        """
        key = key_of(attempt.session)
        call = call_id_key(attempt.call_id or "")
        doing = "admitting a counted call"
        try:
            self._write(
                key,
                self._change(admitted(call, life), None),
                render(call_admitted(call, life)),
                doing,
                "NONE",
                old_on_failure=True,
            )
        except _ConditionFailed as failed:
            # The store's own retry of our write that went through finds it admitted.
            old = self._old(failed, key, doing)
            now = snapshot_from_item(old).lives.get(call) if old else None
            return now == life.admitted()
        return True

    def _under_raise(
        self,
        attempt: Attempt,
        rule: Condition,
        old: Mapping[str, Any] | None,
        change: Change,
    ) -> Consumed | NotConsumed:
        """After a failed check: a lease under a raise in force is tried once more, tied
        to that raise (a condition cannot subtract); anything else was not counted.

        Raises:
            StorageError: the store failed.
        """
        seen = snapshot_from_item(old) if old else None
        raise_ = seen.raise_for(attempt.category, attempt.now_ms) if seen else None
        if attempt.units == 1 or raise_ is None or raise_ <= attempt.base_limit:
            return NotConsumed(seen)
        key, doing = key_of(attempt.session), "counting a lease under a raise"
        rendered = render(rule, Form(KNOWN, raise_as_read=raise_))
        try:
            return self._count_appended(key, change, rendered, doing)
        except _ConditionFailed as again:
            old = self._old(again, key, doing)
            return NotConsumed(snapshot_from_item(old) if old else None)

    def _restart(self, attempt: Attempt, change: Change, rule: Condition, doing: str) -> Any:
        """Idle-expired counters started again by `change`; None if `rule` failed.

        Raises:
            StorageError: the store failed.
        """
        key = key_of(attempt.session)
        update = self._change(change, RESTART_CALLS)
        rendered = render(rule)
        try:
            item = self._write(key, update, rendered, doing)
        except _ConditionFailed:
            return None
        self._tails.learn(key, item)
        return item

    def reset_expired(self, attempt: Attempt, seen: SessionSnapshot) -> Consumed | None:
        """Start idle-expired counters again with this call counted; None if another
        attempt touched the session first (the caller then simply tries again).

        Raises:
            StorageError: the store failed.
        """
        rule = idle_restart(seen.last_seen_ms, False)
        item = self._restart(attempt, restarted(attempt, seen), rule, "resetting idle counters")
        return Consumed(snapshot_from_item(item)) if item is not None else None

    def restart_suspended(self, attempt: Attempt, seen: SessionSnapshot) -> SessionSnapshot | None:
        """A suspended session's first attempt after idle expiry, refused: its counters
        start again, this refusal their first record. None if another attempt came first.

        Raises:
            StorageError: the store failed.
        """
        rule = idle_restart(seen.last_seen_ms, True)
        doing = "restarting a suspended session's counters"
        item = self._restart(attempt, restarted_suspended(attempt, seen), rule, doing)
        return snapshot_from_item(item) if item is not None else None

    def uncount(self, attempt: Attempt, started_ms: int | None) -> None:
        """Take back a counted call that a wider budget refused.

        Where this check's own record still ends the list, it becomes the refusal in place
        (one write, the list no longer): an agent refused by its principal or tenant, call
        after call, never grows the item. Otherwise the refusal is appended, and a list a
        batch past `keep` is trimmed.

        Raises:
            StorageError: the store failed.
        """
        record = attempt.record(allowed=False)
        # The record marks the call as taken back, so that its call id is free again.
        entry = taken_back_id(record)
        key = key_of(attempt.session)
        doing = "taking back a counted call"
        unknown = started_ms is None
        rule = take_back_recorded(attempt) if started_ms is None else take_back(attempt, started_ms)
        rendered = render(rule)
        change = taken_back(attempt)
        tail = self._tails.get(key)
        counted_id = stored_id(attempt.record(allowed=True))
        if tail is not None and tail.ids and tail.ids[-1] == counted_id:
            new = tail.replacing_last(encode_call(record), entry)
            update = self._change(change, REWRITE_CALLS, tail.values(new))
            try:
                self._write(key, update, rendered, doing, "NONE", also=tail.condition())
            except _ConditionFailed:
                pass  # another writer came between, or the session was reset: append
            else:
                self._tails.put(key, new)
                return
        self._tails.put(key, None)
        update = self._change(change, APPEND_CALL, {":cidl": {"L": [_s(entry)]}})
        try:
            item = self._write(key, update, rendered, doing)
        except _ConditionFailed:
            if unknown:
                return  # this check's count never landed: nothing to take back
            # Reset meanwhile: nothing to take back; the call still shows as refused.
            update = self._change(
                taken_back(attempt, counts=False), APPEND_CALL, {":cidl": {"L": [_s(entry)]}}
            )
            # Only if not taken back already (the store's own retry of that write).
            exists = render(all_of(SessionExists(), not_taken_back(attempt)))
            try:
                item = self._write(key, update, exists, doing)
            except _ConditionFailed:
                return
        self._appended(key, item)

    def return_lease(
        self, session: SessionKey, lease: LeaseId, unused: int, cutoff_ms: int
    ) -> SessionSnapshot | None:
        """Give back unspent leased calls to the counters that granted them; None if
        nothing was given back (another generation, just returned, not leased).

        Raises:
            StorageError: the store failed.
        """
        update = self._change(lease_returned(lease, unused), None)
        rendered = render(lease_return(lease, unused, cutoff_ms))
        try:
            item = self._write(
                key_of(session),
                update,
                rendered,
                "returning the unspent calls of a lease",
            )
        except _ConditionFailed:
            return None
        return snapshot_from_item(item)

    def get(self, session: SessionKey) -> SessionSnapshot | None:
        """Read a session (strongly consistent), or None.

        Raises:
            StorageError: the store failed.
        """
        key = key_of(session)
        item = self._item(key, "reading a session")
        self._tails.learn(key, item)
        return snapshot_from_item(item) if item else None
