"""The session counters port on DynamoDB, the administrator's writes: raise, lower,
suspend, resume, reset."""

from __future__ import annotations

from chalicelib.quota.changes import (
    Change,
    lowered,
    raised,
    reset,
    resumed,
    suspended,
)
from chalicelib.quota.core import (
    SessionKey,
    SessionSnapshot,
)
from chalicelib.quota.facts import Condition, SessionExists
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
)
from chalicelib.storage.dynamodb.conditions import Rendered, render
from chalicelib.storage.dynamodb.expressions import ADMIN_ROUNDS
from chalicelib.storage.dynamodb.session_item import SessionItems
from chalicelib.storage.dynamodb.updates import ConditionFailed as _ConditionFailed
from chalicelib.storage.ports import (
    LimitChange,
    RecordChanged,
    RecordNotFound,
)


class AdminWrites(SessionItems):
    """The administrator's writes to a session (`ports.SessionAdmin`). None of them
    compares the idle clock or the counters, which every check rewrites: a session that
    agents keep calling can always be acted on."""

    def _act(
        self, session: SessionKey, change: Change, rule: Condition | None, doing: str
    ) -> SessionSnapshot:
        """One administrator's write; the session as it is after it.

        Raises:
            _ConditionFailed: `rule` failed.
            StorageError: the store failed.
        """
        rendered = render(rule) if rule is not None else Rendered("")
        return self._admin_update(session, self._change(change, None), rendered, doing)

    def raise_limit(
        self, session: SessionKey, change: LimitChange, seen: SessionSnapshot | None
    ) -> SessionSnapshot:
        """Set a session's raised limit for a category, as read in `seen`.

        Raises:
            RecordChanged: the session changed since `seen` was read; read and retry.
            StorageError: the store failed.
        """
        now_ms, idle_ms = change.now_ms, change.idle_ms
        category, new_limit, until_ms = change.category, change.new_limit, change.until_ms
        rule: Condition
        if seen is None or seen.is_idle(now_ms, idle_ms):
            # Idle expiry holds while suspended too: the raise applies to the counters
            # that start now (a suspended session stays suspended, and keeps no TTL).
            if seen is None:
                rule, suspended = session_unseen(), False
            else:
                rule, suspended = idle_restart(seen.last_seen_ms, seen.suspended), seen.suspended
            expires = None if suspended else now_ms + idle_ms
            write = raised(category, new_limit, until_ms, now_ms, expires)
        else:
            rule = session_raise(category, new_limit, now_ms, now_ms - idle_ms)
            write = raised(category, new_limit, until_ms)
        doing = "raising a limit"
        try:
            return self._act(session, write, rule, doing)
        except _ConditionFailed as exc:
            raise RecordChanged(doing) from exc

    def lower(self, session: SessionKey, category: str) -> SessionSnapshot:
        """Drop a category's raise and its expiry: the limit is the base again.

        Raises:
            RecordNotFound: the session does not exist.
            StorageError: the store failed.
        """
        doing = "lowering a limit"
        try:
            return self._act(session, lowered(category), SessionExists(), doing)
        except _ConditionFailed as exc:
            raise RecordNotFound(doing) from exc

    def suspend(self, session: SessionKey, reason: str, now_ms: int) -> SessionSnapshot:
        """Suspend a session (creating it if unseen): every check is refused until resumed.

        Raises:
            StorageError: the store failed.
        """
        return self._act(session, suspended(reason, now_ms), None, "suspending a session")

    def resume(self, session: SessionKey, now_ms: int, idle_ms: int) -> SessionSnapshot:
        """Lift a suspension; the idle clock stays where the last attempt left it.

        Raises:
            RecordNotFound: the session does not exist.
            StorageError: the store failed.
        """
        doing = "resuming a session"
        try:
            return self._act(session, resumed(now_ms + idle_ms), SessionExists(), doing)
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
        doing = "resetting a session"
        key = key_of(session)
        is_suspended = False
        for round_ in range(ADMIN_ROUNDS):
            write = reset(now_ms, None if is_suspended else now_ms + idle_ms)
            rule = counters_reset(now_ms, is_suspended, round_ == 0)
            try:
                return self._act(session, write, rule, doing)
            except _ConditionFailed as failed:
                old = self._old(failed, key, doing)
            if old is None:
                raise RecordNotFound(doing)
            seen = snapshot_from_item(old)
            is_suspended = seen.suspended
            now_ms = reset_start(seen, now_ms)
        raise RecordChanged(doing)
