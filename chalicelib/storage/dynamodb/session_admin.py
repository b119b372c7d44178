"""The session counters port on DynamoDB, the administrator's writes: raise, lower,
suspend, resume, reset."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from chalicelib.quota.core import (
    SessionKey,
    SessionSnapshot,
)
from chalicelib.quota.facts import SessionExists
from chalicelib.quota.rules import (
    counters_reset,
    idle_restart,
    reset_start,
    session_raise,
    session_unseen,
)
from chalicelib.storage.dynamodb.codec import (
    key_of,
    snapshot_from_item,
    ttl,
)
from chalicelib.storage.dynamodb.conditions import with_rule
from chalicelib.storage.dynamodb.expressions import (
    ADMIN_ROUNDS,
    LOWER_UPDATE,
    RAISE_ACTIVE_UPDATE,
    RAISE_FRESH_SET,
    RAISE_FRESH_SUSPENDED_SET,
    RESET_COUNTERS_SET,
    RESET_SUSPENDED_SET,
    RESUME_UPDATE,
    SUSPEND_UPDATE,
    counter_names,
    remove_clause,
    with_expiry,
)
from chalicelib.storage.dynamodb.layout import (
    COUNT_PREFIX,
    LEASED_PREFIX,
    NOTIFIED_PREFIX,
    RAISED_PREFIX,
    RAISED_UNTIL_PREFIX,
    REFUSED_PREFIX,
)
from chalicelib.storage.dynamodb.session_item import SessionItems
from chalicelib.storage.dynamodb.updates import ConditionFailed as _ConditionFailed
from chalicelib.storage.dynamodb.updates import n as _n
from chalicelib.storage.dynamodb.updates import s as _s
from chalicelib.storage.ports import (
    LimitChange,
    RecordChanged,
    RecordNotFound,
)

if TYPE_CHECKING:
    pass


_log = logging.getLogger(__name__)


class AdminWrites(SessionItems):
    """The administrator's writes to a session (`ports.SessionAdmin`). None of them
    compares the idle clock or the counters, which every check rewrites: a session that
    agents keep calling can always be acted on."""

    def raise_limit(
        self, session: SessionKey, change: LimitChange, seen: SessionSnapshot | None
    ) -> SessionSnapshot:
        """Set a session's raised limit for a category, as read in `seen`.

        Raises:
            RecordChanged: the session changed since `seen` was read; read and retry.
            StorageError: the store failed.
        """
        now_ms, idle_ms = change.now_ms, change.idle_ms
        names = {
            "#r": RAISED_PREFIX + change.category,
            "#rx": RAISED_UNTIL_PREFIX + change.category,
        }
        values = {
            ":until": _n(change.until_ms or 0),
            ":new": _n(change.new_limit),
            ":now": _n(now_ms),
            ":exp": _n(ttl(now_ms + idle_ms)),
        }
        if seen is None:
            update = RAISE_FRESH_SET
            condition, names, values = with_rule(session_unseen(), names, values)
        elif seen.is_idle(now_ms, idle_ms):
            # Idle expiry holds while suspended too: the raise applies to the counters
            # that start now (a suspended session stays suspended, and keeps no TTL).
            removed = counter_names(
                (COUNT_PREFIX, NOTIFIED_PREFIX, REFUSED_PREFIX, LEASED_PREFIX), self._categories
            )
            removed += [
                prefix + c
                for prefix in (RAISED_PREFIX, RAISED_UNTIL_PREFIX)
                for c in self._categories
                if c != change.category
            ]
            clause, extra = remove_clause(removed)
            fresh = RAISE_FRESH_SUSPENDED_SET if seen.suspended else RAISE_FRESH_SET
            rule = idle_restart(seen.last_seen_ms, seen.suspended)
            condition, names, values = with_rule(rule, {**names, **extra}, values)
            update = fresh + clause
        else:
            update = RAISE_ACTIVE_UPDATE
            rule = session_raise(change.category, change.new_limit, now_ms, now_ms - idle_ms)
            condition, names, values = with_rule(rule, names, values)
        update = with_expiry(update, change.until_ms is not None)
        doing = "raising a limit"
        try:
            return self._admin_update(session, update, condition, names, values, doing)
        except _ConditionFailed as exc:
            raise RecordChanged(doing) from exc

    def lower(self, session: SessionKey, category: str) -> SessionSnapshot:
        """Drop a category's raise and its expiry: the limit is the base again.

        Raises:
            RecordNotFound: the session does not exist.
            StorageError: the store failed.
        """
        names = {"#r": RAISED_PREFIX + category, "#rx": RAISED_UNTIL_PREFIX + category}
        doing = "lowering a limit"
        try:
            exists, names, _ = with_rule(SessionExists(), names, {})
            return self._admin_update(session, LOWER_UPDATE, exists, names, {}, doing)
        except _ConditionFailed as exc:
            raise RecordNotFound(doing) from exc

    def suspend(self, session: SessionKey, reason: str, now_ms: int) -> SessionSnapshot:
        """Suspend a session (creating it if unseen): every check is refused until resumed.

        Raises:
            StorageError: the store failed.
        """
        values = {":why": _s(reason), ":now": _n(now_ms)}
        return self._admin_update(session, SUSPEND_UPDATE, "", {}, values, "suspending a session")

    def resume(self, session: SessionKey, now_ms: int, idle_ms: int) -> SessionSnapshot:
        """Lift a suspension; the idle clock stays where the last attempt left it.

        Raises:
            RecordNotFound: the session does not exist.
            StorageError: the store failed.
        """
        doing = "resuming a session"
        values = {":exp": _n(ttl(now_ms + idle_ms))}
        try:
            exists, names, _ = with_rule(SessionExists(), {}, {})
            return self._admin_update(session, RESUME_UPDATE, exists, names, values, doing)
        except _ConditionFailed as exc:
            raise RecordNotFound(doing) from exc

    def reset(self, session: SessionKey, now_ms: int, idle_ms: int) -> SessionSnapshot:
        """Zero every counter of a session; raises, suspension and last calls stay.
        A suspended session keeps no TTL, so that its suspension outlives any idle time.
        Only a concurrent suspend or resume (never a check) makes it try again.

        Raises:
            RecordNotFound: the session does not exist.
            RecordChanged: admins kept suspending and resuming it meanwhile.
            StorageError: the store failed.
        """
        removed = counter_names(
            (COUNT_PREFIX, NOTIFIED_PREFIX, REFUSED_PREFIX, LEASED_PREFIX), self._categories
        )
        clause, names = remove_clause(removed)
        doing = "resetting a session"
        key = key_of(session)
        suspended = False
        for round_ in range(ADMIN_ROUNDS):
            values = {":now": _n(now_ms), ":exp": _n(ttl(now_ms + idle_ms))}
            update = (RESET_SUSPENDED_SET if suspended else RESET_COUNTERS_SET) + clause
            condition, all_names, values = with_rule(
                counters_reset(now_ms, suspended, round_ == 0), names, values
            )
            try:
                return self._admin_update(session, update, condition, all_names, values, doing)
            except _ConditionFailed as failed:
                old = self._old(failed, key, doing)
            if old is None:
                raise RecordNotFound(doing)
            seen = snapshot_from_item(old)
            suspended = seen.suspended
            now_ms = reset_start(seen, now_ms)
        raise RecordChanged(doing)
