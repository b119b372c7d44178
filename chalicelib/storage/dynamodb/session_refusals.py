"""The session counters port on DynamoDB, the check's writes that count nothing: a
refusal recorded (first at a limit or again, expected or not, in a suspended session)
and a replay recorded, each refreshing the idle clock, each once per check."""

from __future__ import annotations

from chalicelib.quota.changes import Change, refused, refused_suspended, replayed
from chalicelib.quota.core import (
    Attempt,
    CallRecord,
    SessionSnapshot,
    call_id_key,
)
from chalicelib.quota.facts import all_of
from chalicelib.quota.rules import (
    refusal_noted,
    refusal_record,
    replay_record,
    still_spent,
    suspended_refusal,
)
from chalicelib.storage.dynamodb.changes import APPEND_CALL, REWRITE_CALLS
from chalicelib.storage.dynamodb.codec import (
    holds_entry,
    key_of,
    notified,
    same_counters,
    stored_id,
)
from chalicelib.storage.dynamodb.conditions import render
from chalicelib.storage.dynamodb.expressions import ADMIN_ROUNDS
from chalicelib.storage.dynamodb.layout import (
    CALLS,
    NOTIFIED_PREFIX,
    SUSPENDED,
)
from chalicelib.storage.dynamodb.session_admin import AdminWrites
from chalicelib.storage.dynamodb.updates import ConditionFailed as _ConditionFailed


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
        """`SessionChecks.record_block`: the refusal folded into the lists this container
        knows, or appended; a retry of this very write returns what the first one did.

        Raises:
            StorageError: the store failed.
        """
        record = attempt.record(allowed=False)
        own = stored_id(record)
        key = key_of(attempt.session)
        doing = "recording a refused call"
        first_mark = NOTIFIED_PREFIX + attempt.category
        if expected:
            return self._record_expected(attempt, seen, key, record, limit)
        first = False  # most refusals follow the first one at their limit
        for round_ in range(ADMIN_ROUNDS):
            change: Change
            if suspended:
                change, rule = refused_suspended(attempt), suspended_refusal(record)
            elif not marks:
                change, rule = refused(attempt), refusal_record(record, seen.started_ms)
            else:
                change = refused(attempt, limit if first else None)
                rule = refusal_noted(record, seen.started_ms, limit, first)
            rendered = render(rule)
            also = ""
            # The failed check just read the lists: write them with this refusal folded
            # in. Late rounds (other writers kept changing them) append instead.
            tail = self._tails.get(key) if round_ < ADMIN_ROUNDS // 2 else None
            new = tail.adding(record, self._keep) if tail is not None else None
            if tail is not None and new is not None:
                update = self._change(change, REWRITE_CALLS, tail.values(new))
                also = tail.condition()
            else:
                update = self._change(change, APPEND_CALL)
            try:
                old = self._write(
                    key,
                    update,
                    rendered,
                    doing,
                    "ALL_OLD",
                    old_on_failure=True,
                    also=also,
                )
            except _ConditionFailed as failed:
                now = self._old(failed, key, doing)
                if holds_entry(now, own):
                    # Our own earlier try went through: it was first if z names this check.
                    assert now is not None
                    mark = notified(now.get(first_mark))
                    return not suspended and mark == (limit, attempt.check_id)
                if suspended and now is not None and SUSPENDED in now and new is not None:
                    continue  # still suspended: another refusal changed the lists first
                if suspended or now is None or not same_counters(now, seen.started_ms):
                    return None
                mark = notified(now.get(first_mark))
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
        rendered = render(
            all_of(
                refusal_noted(record, seen.started_ms, limit, first=False),
                still_spent(attempt, limit),
            )
        )
        update = self._change(refused(attempt), REWRITE_CALLS, tail.values(new))
        try:
            self._write(
                key,
                update,
                rendered,
                "recording a refused call",
                "NONE",
                also=tail.condition(),
            )
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
        call = call_id_key(attempt.call_id or "")
        life = seen.lives.get(call)
        rule = (
            refusal_record(record, seen.started_ms)
            if life is None
            else replay_record(record, seen.started_ms, call, life)
        )
        rendered = render(rule)
        update = self._change(replayed(attempt, life), APPEND_CALL)
        key = key_of(attempt.session)
        doing = "recording a replayed call"
        try:
            old = self._write(key, update, rendered, doing, "ALL_OLD", old_on_failure=True)
        except _ConditionFailed as failed:
            return holds_entry(self._old(failed, key, doing), own)
        self._tails.put(key, None)
        self._maybe_trim(key, len(old.get(CALLS, {}).get("L", [])) + 1)
        return True
