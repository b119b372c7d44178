"""The session counters port on DynamoDB, the check's writes: one conditional UpdateItem
per allowed check (the admission rule rendered from `quota.rules`).

Every entry of `cids` names the check that wrote it, so that botocore's own retry of a
timed-out write fails its condition instead of counting or recording the call twice.

The last calls cost no extra request. Each write returns the item, so the container
remembers each session's lists (`Tails`); once a list holds `keep` entries, a check
writes the whole list, shifted by one, on condition that its tail is still the one
remembered. A refusal that repeats the last one (same tool, still refused) replaces it
with a count, so a runaway loop neither grows the item nor pushes the other calls out.
Only when the container has not seen the list, or another writer changed it first, does
a check append instead; the list then grows, and is trimmed in batches.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chalicelib.quota.core import (
    Attempt,
    LeaseId,
    SessionKey,
    SessionSnapshot,
    repeat_window_end,
)
from chalicelib.quota.facts import Condition, SessionExists
from chalicelib.quota.rules import (
    idle_restart,
    lease_return,
    session_consume,
    take_back,
)
from chalicelib.storage.dynamodb.codec import (
    SEP,
    encode_call,
    key_of,
    snapshot_from_item,
    stored_id,
)
from chalicelib.storage.dynamodb.conditions import Form, render, with_rule
from chalicelib.storage.dynamodb.expressions import (
    ADD_LEASED,
    ADD_REPEAT,
    ADD_REPEAT_TOO,
    APPEND_CALL,
    BASE_NAMES,
    CONSUME_CLIENT,
    CONSUME_SERVER,
    CONSUME_UPDATE,
    CONSUME_UPDATE_WITH_PRINCIPAL,
    RESTART_SUSPENDED_SET,
    RETURN_UPDATE,
    REWRITE_CALLS,
    SET_GRANT,
    UNCOUNT_LEASED,
    UNCOUNT_RECORD_ONLY,
    UNCOUNT_UPDATE,
    counter_names,
    remove_clause,
    reset_expression,
)
from chalicelib.storage.dynamodb.layout import (
    CALL_IDS,
    COUNT_PREFIX,
    GRANT_PREFIX,
    LEASED_PREFIX,
    NOTIFIED_PREFIX,
    RAISED_PREFIX,
    RAISED_UNTIL_PREFIX,
    REFUSED_PREFIX,
    REPEAT_PREFIX,
    UNCOUNTED,
)
from chalicelib.storage.dynamodb.session_refusals import RefusalWrites
from chalicelib.storage.dynamodb.tails import Tail
from chalicelib.storage.dynamodb.updates import ConditionFailed as _ConditionFailed
from chalicelib.storage.dynamodb.updates import n as _n
from chalicelib.storage.dynamodb.updates import s as _s
from chalicelib.storage.errors import StorageError
from chalicelib.storage.ports import (
    Consumed,
    NotConsumed,
)

if TYPE_CHECKING:
    pass

# The case of the consume rule a known session's check leaves out: a new session.
KNOWN = frozenset({SessionExists})

_log = logging.getLogger(__name__)


class CounterStore(RefusalWrites):
    """A session's counters on DynamoDB: the check's writes (`ports.SessionChecks`) here
    and, for its refusals and replays, in `session_refusals`; the administrator's
    (`ports.SessionAdmin`) in `session_admin`."""

    def consume(self, attempt: Attempt) -> Consumed | NotConsumed:
        """Count one call if the session is active, not suspended, under its limit and has
        not counted this call (by client call id, or by this check's own id).

        Raises:
            StorageError: the store failed (throttled, unreachable, misconfigured).
        """
        record = attempt.record(allowed=True)
        names = self._names(attempt)
        values = self._call_values(attempt, record)
        values.update({":zero": _n(0), ":units": _n(attempt.units)})
        update = CONSUME_UPDATE if attempt.principal is None else CONSUME_UPDATE_WITH_PRINCIPAL
        if attempt.server is not None:
            update += CONSUME_SERVER
        if attempt.client is not None:
            update += CONSUME_CLIENT
        if attempt.repeat_key is not None:
            names["#q"] = REPEAT_PREFIX + attempt.repeat_key
            values[":one"] = _n(1)
            update += ADD_REPEAT if " ADD " not in update else ADD_REPEAT_TOO
        if attempt.leased:
            names["#l"] = LEASED_PREFIX + attempt.category
            names["#g"] = GRANT_PREFIX + attempt.category
            values[":grant"] = _s(attempt.lease_grant)
            update = update.replace(CONSUME_UPDATE, CONSUME_UPDATE + SET_GRANT, 1) + ADD_LEASED
        key = key_of(attempt.session)
        doing = "counting a call"
        tail = self._tails.get(key)
        # `#n < #r` counts one call under a raise; a lease under a raise takes a second try.
        raised = tail is not None and attempt.category in tail.raised and attempt.units == 1
        rule = session_consume(attempt)
        if tail is not None and len(tail.ids) >= self._keep:
            # The list is full: shift it in this same write, if nobody changed it since.
            new = tail.adding(record, self._keep)
            rendered = render(rule, Form(KNOWN, raised))
            try:
                item = self._update(
                    key,
                    update.replace(APPEND_CALL, REWRITE_CALLS),
                    f"{rendered.expression} AND {tail.condition()}",
                    {**names, **rendered.names},
                    {**values, **rendered.values, **tail.values(new)},
                    doing,
                    old_on_failure=True,
                )
            except _ConditionFailed as failed:
                old = self._old(failed, key, doing)
                if old is None or tail.same_lists(Tail.of(old)):
                    return self._under_raise(attempt, rule, old, update, names, values)
                # Another writer changed the list first: append instead, once.
                raised = RAISED_PREFIX + attempt.category in old and attempt.units == 1
            else:
                self._tails.put(key, new)
                self._forget_repeats(key, item, attempt.now_ms)
                return Consumed(snapshot_from_item(item))
        # A session this container saw is counted only while it exists: a deleted one
        # fails, and is counted as new on the next round.
        rendered = render(rule, Form(KNOWN if tail is not None else frozenset(), raised))
        try:
            item = self._update(
                key,
                update,
                rendered.expression,
                {**names, **rendered.names},
                {**values, **rendered.values},
                doing,
                old_on_failure=True,
            )
        except _ConditionFailed as failed:
            old = self._old(failed, key, doing)
            return self._under_raise(attempt, rule, old, update, names, values)
        self._tails.learn(key, item)
        self._maybe_trim(key, len(item.get(CALL_IDS, {}).get("L", [])))
        self._forget_repeats(key, item, attempt.now_ms)
        return Consumed(snapshot_from_item(item))

    def _forget_repeats(self, key: str, item: Mapping[str, Any], now_ms: int) -> None:
        """Remove the loop breaker's counts of windows that have ended, so the item stays
        small: at most one request per session and window, after an allowed call. Only
        counts no condition can use any more are removed, so no condition is needed; a
        failure is harmless (a later call removes them) and logged, not raised."""
        stale = [
            name
            for name in item
            if name.startswith(REPEAT_PREFIX)
            and repeat_window_end(name[len(REPEAT_PREFIX) :]) <= now_ms
        ]
        if not stale:
            return
        names = {f"#q{i}": name for i, name in enumerate(stale)}
        try:
            self._update(
                key,
                "REMOVE " + ", ".join(names),
                "",
                names,
                {},
                "forgetting past repeats",
                returns="NONE",
            )
        except StorageError as exc:
            _log.warning("forgetting past repeats failed while %s", exc.doing)

    def _under_raise(
        self,
        attempt: Attempt,
        rule: Condition,
        old: Mapping[str, Any] | None,
        update: str,
        names: Mapping[str, str],
        values: Mapping[str, Any],
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
            item = self._update(
                key,
                update,
                rendered.expression,
                {**names, **rendered.names},
                {**values, **rendered.values},
                doing,
                old_on_failure=True,
            )
        except _ConditionFailed as again:
            old = self._old(again, key, doing)
            return NotConsumed(snapshot_from_item(old) if old else None)
        self._tails.learn(key, item)
        self._maybe_trim(key, len(item.get(CALL_IDS, {}).get("L", [])))
        return Consumed(snapshot_from_item(item))

    def reset_expired(self, attempt: Attempt, old_last_seen_ms: int) -> Consumed | None:
        """Start idle-expired counters again with this call counted; None if another
        attempt touched the session first (the caller then simply tries again).

        Raises:
            StorageError: the store failed.
        """
        update, removed = reset_expression(attempt.category, self._categories, attempt.leased)
        if attempt.principal is not None:
            update = update.replace("SET ", "SET #pr = :pr, ", 1)
        if attempt.server is not None:
            update = update.replace("SET ", "SET #srv = :srv, ", 1)
        if attempt.client is not None:
            update = update.replace("SET ", "SET #cli = :cli, ", 1)
        names = {**self._names(attempt), **dict(removed)}
        values = self._call_values(attempt, attempt.record(allowed=True))
        if attempt.leased:
            names["#l"] = LEASED_PREFIX + attempt.category
            names["#g"] = GRANT_PREFIX + attempt.category
            values[":grant"] = _s(attempt.lease_grant)
        values[":units"] = _n(attempt.units)
        condition, names, values = with_rule(idle_restart(old_last_seen_ms, False), names, values)
        try:
            item = self._update(
                key_of(attempt.session),
                update,
                condition,
                names,
                values,
                "resetting idle counters",
            )
        except _ConditionFailed:
            return None
        self._tails.learn(key_of(attempt.session), item)
        return Consumed(snapshot_from_item(item))

    def restart_suspended(self, attempt: Attempt, old_last_seen_ms: int) -> SessionSnapshot | None:
        """A suspended session's first attempt after idle expiry, refused: its counters
        start again, this refusal their first record. None if another attempt came first.

        Raises:
            StorageError: the store failed.
        """
        removed = counter_names(
            (
                COUNT_PREFIX,
                LEASED_PREFIX,
                GRANT_PREFIX,
                RAISED_PREFIX,
                RAISED_UNTIL_PREFIX,
                NOTIFIED_PREFIX,
                REFUSED_PREFIX,
            ),
            self._categories,
        )
        clause, names = remove_clause(removed)
        values = self._call_values(attempt, attempt.record(allowed=False))
        rule = idle_restart(old_last_seen_ms, True)
        condition, names, values = with_rule(rule, {**BASE_NAMES, **names}, values)
        key = key_of(attempt.session)
        try:
            item = self._update(
                key,
                RESTART_SUSPENDED_SET + clause,
                condition,
                names,
                values,
                "restarting a suspended session's counters",
            )
        except _ConditionFailed:
            return None
        self._tails.learn(key, item)
        return snapshot_from_item(item)

    def uncount(self, attempt: Attempt, started_ms: int) -> None:
        """Take back a counted call that a wider budget refused.

        Where this check's own record still ends the list, it becomes the refusal in place
        (one write, the list no longer): an agent refused by its principal or tenant, call
        after call, never grows the item. Otherwise the refusal is appended, and a list a
        batch past `keep` is trimmed.

        Raises:
            StorageError: the store failed.
        """
        record = attempt.record(allowed=False)
        values = self._call_values(attempt, record)
        entry = f"{UNCOUNTED}{record.call_id or ''}{SEP}{attempt.check_id}"
        values[":cidl"] = {"L": [_s(entry)]}
        values.update({":units": _n(attempt.units), ":minus": _n(-attempt.units)})
        key = key_of(attempt.session)
        doing = "taking back a counted call"
        names = self._names(attempt)
        update = UNCOUNT_UPDATE
        if attempt.leased:
            names["#l"] = LEASED_PREFIX + attempt.category
            names["#g"] = GRANT_PREFIX + attempt.category
            update += UNCOUNT_LEASED
        condition, names, values = with_rule(take_back(attempt, started_ms), names, values)
        tail = self._tails.get(key)
        counted = stored_id(attempt.record(allowed=True))
        if tail is not None and tail.ids and tail.ids[-1] == counted:
            new = tail.replacing_last(encode_call(record), entry)
            try:
                self._update(
                    key,
                    update.replace(APPEND_CALL, REWRITE_CALLS),
                    f"{condition} AND {tail.condition()}",
                    names,
                    {**values, **tail.values(new)},
                    doing,
                    "NONE",
                )
            except _ConditionFailed:
                pass  # another writer came between, or the session was reset: append
            else:
                self._tails.put(key, new)
                return
        self._tails.put(key, None)
        try:
            item = self._update(key, update, condition, names, values, doing)
        except _ConditionFailed:
            # Reset meanwhile: nothing to take back; the call still shows as refused.
            exists, names, values = with_rule(SessionExists(), names, values)
            try:
                item = self._update(key, UNCOUNT_RECORD_ONLY, exists, names, values, doing)
            except _ConditionFailed:
                return
        self._tails.learn(key, item)
        self._maybe_trim(key, len(item.get(CALL_IDS, {}).get("L", [])))

    def return_lease(
        self, session: SessionKey, lease: LeaseId, unused: int, cutoff_ms: int
    ) -> SessionSnapshot | None:
        """Give back unspent leased calls to the counters that granted them; None if
        nothing was given back (another generation, just returned, not leased).

        Raises:
            StorageError: the store failed.
        """
        names = {
            "#n": COUNT_PREFIX + lease.category,
            "#l": LEASED_PREFIX + lease.category,
            "#g": GRANT_PREFIX + lease.category,
        }
        rule = lease_return(lease, unused, cutoff_ms)
        condition, names, values = with_rule(rule, names, {":unused": _n(unused)})
        try:
            item = self._update(
                key_of(session),
                RETURN_UPDATE,
                condition,
                names,
                values,
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
