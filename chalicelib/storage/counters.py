"""The session counter item in DynamoDB: one conditional UpdateItem per allowed check.

Item layout (one item per tenant + session; every attribute aliased in expressions):
    pk           "<tenant>#<session_id>"
    ls           last attempt, epoch ms (the idle clock)
    started      when the current counters started, epoch ms
    expires_at   TTL, epoch s: clean-up only; expiry is enforced by the `ls` condition
    n_<cat>      calls counted in a category
    r_<cat>      a per-session raised limit (admin)
    z_<cat>      the limit at which the category was last exhausted (one event each)
    b_<cat>      refused attempts since the counters started
    suspended    present while an administrator has suspended the session (its reason)
    principal    who the agent acts for, when the caller says
    calls, cids  the last calls (compact strings) and their call ids, trimmed in batches
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.errors import QuotaServiceError
from chalicelib.quota import Attempt, CallRecord, SessionSnapshot, call_id_key
from chalicelib.storage.faults import error_code, translate

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_log = logging.getLogger(__name__)

PK = "pk"
LAST_SEEN = "ls"
STARTED = "started"
EXPIRES = "expires_at"
CALLS = "calls"
CALL_IDS = "cids"
PRINCIPAL = "principal"
SUSPENDED = "suspended"
COUNT_PREFIX = "n_"
RAISED_PREFIX = "r_"
NOTIFIED_PREFIX = "z_"
REFUSED_PREFIX = "b_"
NO_CALL_ID = "-"  # stored call ids are prefixed, so this never equals one
CALL_ID_PREFIX = "c:"  # an allowed call: its id is what a retry is deduplicated on
BLOCKED_CALL_ID_PREFIX = "b:"  # a refused call: recorded, never a duplicate
REPLAYED_CALL_ID_PREFIX = "d:"  # a retry answered from the original: recorded, not counted

_BASE_NAMES = {
    "#pk": PK,
    "#ls": LAST_SEEN,
    "#started": STARTED,
    "#exp": EXPIRES,
    "#calls": CALLS,
    "#ids": CALL_IDS,
    "#sus": SUSPENDED,
}

# Named parts of the check's condition. The store only counts; the policy decided the
# category and base limit. `#n < #r` lets a per-session raise lift the limit in place.
_NEW_SESSION = "attribute_not_exists(#pk)"
_ACTIVE = "#ls >= :cutoff"
_NOT_SUSPENDED = "attribute_not_exists(#sus)"
_UNDER_LIMIT = "(attribute_not_exists(#n) OR #n < :limit OR #n < #r)"
_NOT_SEEN = "NOT contains(#ids, :cid)"
CONSUME_CONDITION = f"{_NEW_SESSION} OR ({_ACTIVE} AND {_NOT_SUSPENDED} AND {_UNDER_LIMIT})"
CONSUME_CONDITION_WITH_CALL_ID = (
    f"{_NEW_SESSION} OR ({_ACTIVE} AND {_NOT_SUSPENDED} AND {_UNDER_LIMIT} AND {_NOT_SEEN})"
)

_TOUCH = "#ls = :now, #exp = :exp"
_APPEND_CALL = (
    "#calls = list_append(if_not_exists(#calls, :empty), :rec), "
    "#ids = list_append(if_not_exists(#ids, :empty), :cidl)"
)
_COUNT = "#n = if_not_exists(#n, :zero) + :one, #started = if_not_exists(#started, :now)"
CONSUME_UPDATE = f"SET {_COUNT}, {_TOUCH}, {_APPEND_CALL}"
CONSUME_UPDATE_WITH_PRINCIPAL = f"{CONSUME_UPDATE}, #pr = :pr"

# After idle expiry: start the counters again, exactly as if TTL had deleted the item.
RESET_CONDITION = f"#ls = :old_ls AND {_NOT_SUSPENDED}"
_RESET_SET = "#n = :one, #started = :now, #ls = :now, #exp = :exp, #calls = :rec, #ids = :cidl"

# A refused attempt still refreshes the idle clock and is recorded. The swap of z_<cat>
# with ReturnValues=ALL_OLD tells exactly one writer that the exhaustion is new. The
# condition ties the write to the counters the refusal was based on: after an admin reset
# or suspension it fails, and the check is evaluated again.
_SAME_COUNTERS = "#started = :started"
BLOCK_CONDITION = f"attribute_exists(#pk) AND {_SAME_COUNTERS} AND {_NOT_SUSPENDED}"
BLOCK_UPDATE = f"SET {_TOUCH}, {_APPEND_CALL}, #z = :limit ADD #b :one"
# A suspended item has no TTL (it must outlive any idle timeout), so none is set here.
BLOCK_SUSPENDED_CONDITION = "attribute_exists(#sus)"
BLOCK_UPDATE_SUSPENDED = f"SET #ls = :now, {_APPEND_CALL}"
# A replayed call id (a client's retry) is recorded too, and refreshes the idle clock.
REPLAY_CONDITION = f"attribute_exists(#pk) AND {_SAME_COUNTERS} AND {_NOT_SUSPENDED}"
REPLAY_UPDATE = f"SET {_TOUCH}, {_APPEND_CALL}"

TRIM_CONDITION = "size(#calls) >= :min AND size(#ids) >= :min"

# Administrator actions. A raise may only lift a limit, so concurrent raises never lower
# one; on an idle session it starts the counters again, as the next check would.
_LIVE = f"attribute_exists(#pk) AND ({_ACTIVE} OR attribute_exists(#sus))"
RAISE_ACTIVE_CONDITION = f"{_LIVE} AND (attribute_not_exists(#r) OR #r <= :new)"
RAISE_ACTIVE_UPDATE = "SET #r = :new"
RAISE_NEW_CONDITION = _NEW_SESSION
RAISE_IDLE_CONDITION = RESET_CONDITION
_START = "#started = :now, #ls = :now, #exp = :exp"
RAISE_FRESH_SET = f"SET #r = :new, {_START}"
SUSPEND_UPDATE = (
    "SET #sus = :why, #ls = if_not_exists(#ls, :now), #started = if_not_exists(#started, :now)"
    " REMOVE #exp"
)
# Resuming keeps the idle clock where the last attempt left it, so counters that went idle
# while suspended start again at the next check; the TTL follows that clock.
RESUME_CONDITION = "#ls = :old_ls"
RESUME_UPDATE = "SET #exp = :exp REMOVE #sus"
RESET_COUNTERS_SET = f"SET {_START}"
RESET_COUNTERS_CONDITION = f"attribute_exists(#pk) AND {_NOT_SUSPENDED}"
RESET_SUSPENDED_SET = "SET #started = :now, #ls = :now"
RESET_SUSPENDED_CONDITION = "attribute_exists(#sus)"


@dataclass(frozen=True)
class Consumed:
    """The call was counted; the item as it is now."""

    snapshot: SessionSnapshot


@dataclass(frozen=True)
class Refused:
    """The condition failed; the item as it was (None if it vanished meanwhile)."""

    snapshot: SessionSnapshot | None


def _s(value: str) -> dict[str, Any]:
    return {"S": value}


def _n(value: int) -> dict[str, Any]:
    return {"N": str(value)}


def _stored_call_id(call_id: str | None, allowed: bool = True, replay: bool = False) -> str:
    if call_id is None:
        return NO_CALL_ID
    if replay:
        return REPLAYED_CALL_ID_PREFIX + call_id_key(call_id)
    return (CALL_ID_PREFIX if allowed else BLOCKED_CALL_ID_PREFIX) + call_id_key(call_id)


def _call_id_of(stored: str) -> tuple[str | None, bool]:
    """The call id of a stored entry, and whether the entry is a replay."""
    for prefix in (CALL_ID_PREFIX, BLOCKED_CALL_ID_PREFIX, REPLAYED_CALL_ID_PREFIX):
        if stored.startswith(prefix):
            return stored[len(prefix) :], prefix == REPLAYED_CALL_ID_PREFIX
    return None, False


def snapshot_from_item(item: Mapping[str, Any]) -> SessionSnapshot:
    """Decode a counter item into the decision core's view of it."""
    counts: dict[str, int] = {}
    raised: dict[str, int] = {}
    refused: dict[str, int] = {}
    for name, value in item.items():
        for prefix, target in (
            (COUNT_PREFIX, counts),
            (RAISED_PREFIX, raised),
            (REFUSED_PREFIX, refused),
        ):
            if name.startswith(prefix) and "N" in value:
                target[name[len(prefix) :]] = int(value["N"])
    suspended = item.get(SUSPENDED)
    principal = item.get(PRINCIPAL, {}).get("S")
    texts = [v["S"] for v in item.get(CALLS, {}).get("L", [])]
    ids = [v["S"] for v in item.get(CALL_IDS, {}).get("L", [])]
    calls = tuple(
        CallRecord.decode(text, *_call_id_of(cid), principal)
        for text, cid in zip(texts, ids, strict=False)
    )
    return SessionSnapshot(
        last_seen_ms=int(item.get(LAST_SEEN, {"N": "0"})["N"]),
        started_ms=int(item.get(STARTED, {"N": "0"})["N"]),
        counts=counts,
        raised=raised,
        refused=refused,
        suspended=suspended is not None,
        suspended_reason=suspended.get("S") if suspended else None,
        principal=principal,
        calls=calls,
    )


_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")


def _only_used(
    expressions: Iterable[str], names: Mapping[str, str], values: Mapping[str, Any]
) -> dict[str, Any]:
    """Names and values that the expressions use: DynamoDB rejects unused ones."""
    used = set(_PLACEHOLDER.findall(" ".join(expressions)))
    out: dict[str, Any] = {
        "ExpressionAttributeNames": {k: v for k, v in names.items() if k in used}
    }
    kept = {k: v for k, v in values.items() if k in used}
    if kept:
        out["ExpressionAttributeValues"] = kept
    return out


def _remove_clause(removed: list[str]) -> tuple[str, dict[str, str]]:
    """` REMOVE #x0, #x1...` and its names, for a list of attribute names."""
    if not removed:
        return "", {}
    names = {f"#x{i}": name for i, name in enumerate(removed)}
    return " REMOVE " + ", ".join(names), names


class SessionChanged(Exception):
    """An admin update's condition failed: the session changed since it was read."""


class _ConditionFailed(Exception):
    """The update's condition failed; carries the old item when the store returned it."""

    def __init__(self, old_item: Mapping[str, Any] | None) -> None:
        super().__init__("conditional check failed")
        self.old_item = old_item


def _counter_names(prefixes: Iterable[str], categories: Iterable[str]) -> list[str]:
    return [prefix + c for prefix in prefixes for c in categories]


@lru_cache(maxsize=64)
def _reset_expression(
    category: str, all_categories: tuple[str, ...]
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """SET/REMOVE for an idle reset, and its extra names: clears every other counter."""
    removed = [COUNT_PREFIX + c for c in all_categories if c != category]
    removed += _counter_names((RAISED_PREFIX, NOTIFIED_PREFIX, REFUSED_PREFIX), all_categories)
    clause, names = _remove_clause(removed)
    return f"SET {_RESET_SET}{clause}", tuple(names.items())


class CounterStore:
    """Counts checks on the session counter item; decides nothing about policy."""

    def __init__(self, client: DynamoDBClient, table_name: str, keep_calls: int = 10) -> None:
        self._client = client
        self._table = table_name
        self._keep = max(1, keep_calls)
        self._batch = max(1, keep_calls // 2)

    def _update(
        self,
        key: str,
        update: str,
        condition: str,
        names: Mapping[str, str],
        values: Mapping[str, Any],
        what: str,
        returns: str = "ALL_NEW",
        old_on_failure: bool = False,
    ) -> dict[str, Any]:
        """One UpdateItem; every other store error is translated here.

        Raises:
            _ConditionFailed: the condition failed.
            QuotaServiceError: the store failed.
        """
        kwargs: dict[str, Any] = _only_used((update, condition), names, values)
        if condition:
            kwargs["ConditionExpression"] = condition
        if old_on_failure:
            kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        try:
            response = self._client.update_item(
                TableName=self._table,
                Key={PK: _s(key)},
                UpdateExpression=update,
                ReturnValues=returns,  # type: ignore[arg-type]
                **kwargs,
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                item: Any = exc.response.get("Item")
                raise _ConditionFailed(item) from exc
            raise translate(exc, what) from exc
        except BotoCoreError as exc:
            raise translate(exc, what) from exc
        return dict(response.get("Attributes", {}))

    def _names(self, attempt: Attempt) -> dict[str, str]:
        names = dict(_BASE_NAMES)
        names["#n"] = COUNT_PREFIX + attempt.category
        if attempt.principal is not None:
            names["#pr"] = PRINCIPAL
        return names

    def _call_values(self, attempt: Attempt, allowed: bool, replay: bool = False) -> dict[str, Any]:
        stored_id = _stored_call_id(attempt.call_id, allowed, replay)
        values = {
            ":now": _n(attempt.now_ms),
            ":exp": _n(attempt.ttl_epoch_seconds),
            ":rec": {"L": [_s(attempt.record(allowed).encode())]},
            ":cidl": {"L": [_s(stored_id)]},
            ":empty": {"L": []},
        }
        if attempt.principal is not None:
            values[":pr"] = _s(attempt.principal)
        return values

    def consume(self, attempt: Attempt) -> Consumed | Refused:
        """Count one call if the session is active, not suspended and under its limit.

        Raises:
            QuotaServiceError: the store failed (throttled, unreachable, misconfigured).
        """
        names = self._names(attempt)
        names["#r"] = RAISED_PREFIX + attempt.category
        values = self._call_values(attempt, allowed=True)
        values.update(
            {
                ":cutoff": _n(attempt.cutoff_ms),
                ":limit": _n(attempt.base_limit),
                ":zero": _n(0),
                ":one": _n(1),
            }
        )
        condition = CONSUME_CONDITION
        if attempt.call_id is not None and attempt.dedupe:
            condition = CONSUME_CONDITION_WITH_CALL_ID
            values[":cid"] = _s(_stored_call_id(attempt.call_id))
        update = CONSUME_UPDATE if attempt.principal is None else CONSUME_UPDATE_WITH_PRINCIPAL
        try:
            item = self._update(
                attempt.key,
                update,
                condition,
                names,
                values,
                "counting a call",
                old_on_failure=True,
            )
        except _ConditionFailed as failed:
            if failed.old_item:
                return Refused(snapshot_from_item(failed.old_item))
            # Stores that ignore ReturnValuesOnConditionCheckFailure (dynalite) need a read.
            return Refused(self.get(attempt.key))
        snapshot = snapshot_from_item(item)
        self._maybe_trim(attempt.key, len(snapshot.calls))
        return Consumed(snapshot)

    def reset_expired(self, attempt: Attempt, old_last_seen_ms: int) -> Consumed | None:
        """Start idle-expired counters again with this call counted; None if another
        attempt touched the session first (the caller then simply tries again).

        Raises:
            QuotaServiceError: the store failed.
        """
        update, removed = _reset_expression(attempt.category, attempt.all_categories)
        if attempt.principal is not None:
            update = update.replace("SET ", "SET #pr = :pr, ", 1)
        names = {**self._names(attempt), **dict(removed)}
        values = self._call_values(attempt, allowed=True)
        values.update({":one": _n(1), ":old_ls": _n(old_last_seen_ms)})
        try:
            item = self._update(
                attempt.key, update, RESET_CONDITION, names, values, "resetting idle counters"
            )
        except _ConditionFailed:
            return None
        return Consumed(snapshot_from_item(item))

    def record_block(
        self, attempt: Attempt, seen: SessionSnapshot, limit: int, suspended: bool
    ) -> bool | None:
        """Record a refused attempt and refresh the idle clock.

        Returns whether this is the first refusal at `limit` since the counters started
        (always False while suspended), or None if the session changed since `seen` was
        read (reset, suspended, resumed, deleted): the caller evaluates the check again.

        Raises:
            QuotaServiceError: the store failed.
        """
        names = self._names(attempt)
        names["#z"] = NOTIFIED_PREFIX + attempt.category
        names["#b"] = REFUSED_PREFIX + attempt.category
        values = self._call_values(attempt, allowed=False)
        values.update({":limit": _n(limit), ":one": _n(1), ":started": _n(seen.started_ms)})
        if suspended:
            update, condition = BLOCK_UPDATE_SUSPENDED, BLOCK_SUSPENDED_CONDITION
        else:
            update, condition = BLOCK_UPDATE, BLOCK_CONDITION
        try:
            old = self._update(
                attempt.key,
                update,
                condition,
                names,
                values,
                "recording a refused call",
                returns="ALL_OLD",
            )
        except _ConditionFailed:
            return None
        self._maybe_trim(attempt.key, len(old.get(CALLS, {}).get("L", [])) + 1)
        if suspended:
            return False
        previous = old.get(NOTIFIED_PREFIX + attempt.category)
        return previous is None or int(previous["N"]) != limit

    def record_replay(self, attempt: Attempt, seen: SessionSnapshot) -> bool:
        """Record a replayed call id (answered with the original decision, not counted)
        and refresh the idle clock; False if the session changed since `seen`.

        Raises:
            QuotaServiceError: the store failed.
        """
        values = self._call_values(attempt, allowed=True, replay=True)
        values[":started"] = _n(seen.started_ms)
        try:
            old = self._update(
                attempt.key,
                REPLAY_UPDATE,
                REPLAY_CONDITION,
                self._names(attempt),
                values,
                "recording a replayed call",
                returns="ALL_OLD",
            )
        except _ConditionFailed:
            return False
        self._maybe_trim(attempt.key, len(old.get(CALLS, {}).get("L", [])) + 1)
        return True

    def get(self, key: str) -> SessionSnapshot | None:
        """Read a session's item (strongly consistent), or None.

        Raises:
            QuotaServiceError: the store failed.
        """
        try:
            response = self._client.get_item(
                TableName=self._table, Key={PK: _s(key)}, ConsistentRead=True
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, "reading a session") from exc
        item = response.get("Item")
        return snapshot_from_item(item) if item else None

    def _maybe_trim(self, key: str, length: int) -> None:
        """Drop the oldest batch of last calls once the list is a batch past `keep`.

        Each append is atomic, so exactly one writer sees each length: one trim per batch.
        A failed trim is harmless (the next batch boundary trims again), so it is logged,
        not raised.
        """
        over = length - self._keep
        if over <= 0 or over % self._batch:
            return
        positions = range(self._batch)
        removals = [f"#calls[{i}]" for i in positions] + [f"#ids[{i}]" for i in positions]
        try:
            self._update(
                key,
                "REMOVE " + ", ".join(removals),
                TRIM_CONDITION,
                _BASE_NAMES,
                {":min": _n(length)},
                "trimming the last calls",
                returns="NONE",
            )
        except _ConditionFailed:
            return  # the session was reset meanwhile: nothing to trim
        except QuotaServiceError as exc:
            _log.warning("last-calls trim failed: %s", exc.message)

    # -- administrator actions -------------------------------------------------------

    def _admin_update(
        self,
        key: str,
        update: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
        what: str,
    ) -> SessionSnapshot:
        try:
            item = self._update(key, update, condition, {**_BASE_NAMES, **names}, values, what)
        except _ConditionFailed as exc:
            raise SessionChanged(what) from exc
        return snapshot_from_item(item)

    def raise_limit(
        self,
        key: str,
        category: str,
        new_limit: int,
        now_ms: int,
        idle_ms: int,
        all_categories: tuple[str, ...],
        seen: SessionSnapshot | None,
    ) -> SessionSnapshot:
        """Set a session's raised limit for a category, as read in `seen`.

        Raises:
            SessionChanged: the session changed since `seen` was read; read and retry.
            QuotaServiceError: the store failed.
        """
        names = {"#r": RAISED_PREFIX + category}
        values = {
            ":new": _n(new_limit),
            ":now": _n(now_ms),
            ":exp": _n((now_ms + idle_ms) // 1000 + 1),
            ":cutoff": _n(now_ms - idle_ms),
        }
        if seen is None:
            update, condition = RAISE_FRESH_SET, RAISE_NEW_CONDITION
        elif not seen.suspended and seen.is_idle(now_ms, idle_ms):
            removed = _counter_names(
                (COUNT_PREFIX, NOTIFIED_PREFIX, REFUSED_PREFIX), all_categories
            )
            removed += [RAISED_PREFIX + c for c in all_categories if c != category]
            clause, extra = _remove_clause(removed)
            update, condition = RAISE_FRESH_SET + clause, RAISE_IDLE_CONDITION
            names.update(extra)
            values[":old_ls"] = _n(seen.last_seen_ms)
        else:
            update, condition = RAISE_ACTIVE_UPDATE, RAISE_ACTIVE_CONDITION
        return self._admin_update(key, update, condition, names, values, "raising a limit")

    def suspend(self, key: str, reason: str, now_ms: int) -> SessionSnapshot:
        """Suspend a session (creating it if unseen): every check is refused until resumed.

        Raises:
            QuotaServiceError: the store failed.
        """
        values = {":why": _s(reason), ":now": _n(now_ms)}
        return self._admin_update(
            key,
            SUSPEND_UPDATE,
            "",
            {},
            values,
            "suspending a session",
        )

    def resume(self, key: str, seen: SessionSnapshot, idle_ms: int) -> SessionSnapshot:
        """Lift a suspension; the idle clock stays where the last attempt left it.

        Raises:
            SessionChanged: the session changed since `seen` was read; read and retry.
            QuotaServiceError: the store failed.
        """
        values = {
            ":old_ls": _n(seen.last_seen_ms),
            ":exp": _n((seen.last_seen_ms + idle_ms) // 1000 + 1),
        }
        return self._admin_update(
            key, RESUME_UPDATE, RESUME_CONDITION, {}, values, "resuming a session"
        )

    def reset(
        self,
        key: str,
        seen: SessionSnapshot,
        now_ms: int,
        idle_ms: int,
        all_categories: tuple[str, ...],
    ) -> SessionSnapshot:
        """Zero every counter of a session; raises, suspension and last calls stay.
        A suspended session keeps no TTL, so that its suspension outlives any idle time.

        Raises:
            SessionChanged: the session is gone, or was suspended or resumed since `seen`.
            QuotaServiceError: the store failed.
        """
        removed = _counter_names((COUNT_PREFIX, NOTIFIED_PREFIX, REFUSED_PREFIX), all_categories)
        clause, names = _remove_clause(removed)
        # `started` names the counters' generation: it must change even within one ms.
        now_ms = max(now_ms, seen.started_ms + 1)
        values = {":now": _n(now_ms), ":exp": _n((now_ms + idle_ms) // 1000 + 1)}
        if seen.suspended:
            update, condition = RESET_SUSPENDED_SET + clause, RESET_SUSPENDED_CONDITION
        else:
            update, condition = RESET_COUNTERS_SET + clause, RESET_COUNTERS_CONDITION
        return self._admin_update(key, update, condition, names, values, "resetting a session")
