"""The session counters port on DynamoDB, the check's writes that count nothing: a
refusal recorded (first at a limit or again, expected or not, in a suspended session)
and a replay recorded, each refreshing the idle clock, each once per check."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from chalicelib.quota.core import (
    Attempt,
    CallRecord,
    SessionSnapshot,
)
from chalicelib.quota.facts import all_of
from chalicelib.quota.rules import (
    refusal_noted,
    refusal_record,
    still_spent,
    suspended_refusal,
)
from chalicelib.storage.dynamodb.codec import (
    SEP,
    holds_entry,
    key_of,
    notified,
    same_counters,
    stored_id,
)
from chalicelib.storage.dynamodb.conditions import with_rule
from chalicelib.storage.dynamodb.expressions import (
    ADMIN_ROUNDS,
    APPEND_CALL,
    BLOCK_AGAIN_UPDATE,
    BLOCK_FIRST_UPDATE,
    BLOCK_UPDATE_SUSPENDED,
    REPLAY_UPDATE,
    REWRITE_CALLS,
)
from chalicelib.storage.dynamodb.layout import (
    CALLS,
    NOTIFIED_PREFIX,
    REFUSED_PREFIX,
    SUSPENDED,
)
from chalicelib.storage.dynamodb.session_admin import AdminWrites
from chalicelib.storage.dynamodb.updates import ConditionFailed as _ConditionFailed
from chalicelib.storage.dynamodb.updates import n as _n
from chalicelib.storage.dynamodb.updates import s as _s

if TYPE_CHECKING:
    pass


_log = logging.getLogger(__name__)


class RefusalWrites(AdminWrites):
    """Refusals and replays, recorded on the session's item."""

    def record_block(
        self,
        attempt: Attempt,
        seen: SessionSnapshot,
        limit: int,
        suspended: bool,
        expected: bool = False,
        marks: bool = True,
    ) -> bool | None:
        """Record a refused attempt and refresh the idle clock.

        Returns whether this is the first refusal at `limit` since the counters started
        (always False while suspended), or None if the session changed since `seen` was
        read (reset, suspended, resumed, deleted): the caller evaluates the check again.
        A retry of this very write (same check id) returns what the first one did.
        `expected`: no check was made first (the session was seen spent); the write holds
        only while the session is still spent at `limit`, else None at once.

        Raises:
            StorageError: the store failed.
        """
        record = attempt.record(allowed=False)
        names = self._names(attempt)
        names["#z"] = NOTIFIED_PREFIX + attempt.category
        names["#b"] = REFUSED_PREFIX + attempt.category
        values = self._call_values(attempt, record)
        own = stored_id(record)
        values.update({":first": _s(f"{limit}{SEP}{attempt.check_id}"), ":one": _n(1)})
        key = key_of(attempt.session)
        doing = "recording a refused call"
        if expected:
            return self._record_expected(attempt, seen, key, names, values, record, limit)
        first = False  # most refusals follow the first one at their limit
        for round_ in range(ADMIN_ROUNDS):
            if suspended:
                update, rule = BLOCK_UPDATE_SUSPENDED, suspended_refusal(record)
            elif not marks:
                update, rule = BLOCK_AGAIN_UPDATE, refusal_record(record, seen.started_ms)
            else:
                update = BLOCK_FIRST_UPDATE if first else BLOCK_AGAIN_UPDATE
                rule = refusal_noted(record, seen.started_ms, limit, first)
            condition, names, values = with_rule(rule, names, values)
            # The failed check just read the lists: write them with this refusal folded
            # in. Late rounds (other writers kept changing them) append instead.
            tail = self._tails.get(key) if round_ < ADMIN_ROUNDS // 2 else None
            new = tail.adding(record, self._keep) if tail is not None else None
            written = values
            if tail is not None and new is not None:
                update = update.replace(APPEND_CALL, REWRITE_CALLS)
                condition = f"{condition} AND {tail.condition()}"
                written = {**values, **tail.values(new)}
            try:
                old = self._update(
                    key, update, condition, names, written, doing, "ALL_OLD", old_on_failure=True
                )
            except _ConditionFailed as failed:
                now = self._old(failed, key, doing)
                if holds_entry(now, own):
                    # Our own earlier try went through: it was first if z names this check.
                    assert now is not None
                    mark = notified(now.get(names["#z"]))
                    return not suspended and mark == (limit, attempt.check_id)
                if suspended and now is not None and SUSPENDED in now and new is not None:
                    continue  # still suspended: another refusal changed the lists first
                if suspended or now is None or not same_counters(now, seen.started_ms):
                    return None
                mark = notified(now.get(names["#z"]))
                # A z_ in the old numeric form is rewritten, as a first refusal, once.
                first = marks and (mark is None or mark[0] != limit or mark[1] is None)
                continue
            self._tails.put(key, new)
            if new is None:
                self._maybe_trim(key, len(old.get(CALLS, {}).get("L", [])) + 1)
            return first and not suspended
        return None

    def _record_expected(
        self,
        attempt: Attempt,
        seen: SessionSnapshot,
        key: str,
        names: dict[str, str],
        values: dict[str, Any],
        record: CallRecord,
        limit: int,
    ) -> bool | None:
        """One write: the refusal folded into the lists this container knows, while the
        session is still spent; None (nothing written) if anything changed.

        Raises:
            StorageError: the store failed.
        """
        tail = self._tails.get(key)
        if tail is None:
            return None
        new = tail.adding(record, self._keep)
        rule = all_of(
            refusal_noted(record, seen.started_ms, limit, first=False), still_spent(attempt, limit)
        )
        condition, names, values = with_rule(rule, names, {**values, **tail.values(new)})
        update = BLOCK_AGAIN_UPDATE.replace(APPEND_CALL, REWRITE_CALLS)
        condition = f"{condition} AND {tail.condition()}"
        try:
            self._update(key, update, condition, names, values, "recording a refused call", "NONE")
        except _ConditionFailed:
            self._tails.put(key, None)
            return None
        self._tails.put(key, new)
        return False

    def record_replay(self, attempt: Attempt, seen: SessionSnapshot) -> bool:
        """Record a replayed call id (answered with the original decision, not counted)
        and refresh the idle clock; False if the session changed since `seen`.

        Raises:
            StorageError: the store failed.
        """
        record = attempt.record(allowed=True, replay=True)
        own = stored_id(record)
        rule = refusal_record(record, seen.started_ms)
        condition, names, values = with_rule(
            rule, self._names(attempt), self._call_values(attempt, record)
        )
        key = key_of(attempt.session)
        doing = "recording a replayed call"
        try:
            old = self._update(
                key,
                REPLAY_UPDATE,
                condition,
                names,
                values,
                doing,
                "ALL_OLD",
                old_on_failure=True,
            )
        except _ConditionFailed as failed:
            return holds_entry(self._old(failed, key, doing), own)
        self._tails.put(key, None)
        self._maybe_trim(key, len(old.get(CALLS, {}).get("L", [])) + 1)
        return True
