"""The session counters port on DynamoDB: one conditional UpdateItem per allowed check.

Item layout (one item per tenant + session; every attribute aliased in expressions):
    pk           "<tenant>#<session_id>"
    ls           last attempt, epoch ms (the idle clock)
    started      when the current counters started, epoch ms
    expires_at   TTL, epoch s: clean-up only; expiry is enforced by the `ls` condition
    n_<cat>      calls counted in a category
    r_<cat>      a per-session raised limit (admin)
    rx_<cat>     when that raise lapses, epoch ms (absent: it lasts as long as the counters)
    z_<cat>      "<limit>|<check id>": the refusal that first met that limit (one event)
    b_<cat>      refused attempts since the counters started
    l_<cat>      calls counted through leases (granted at once, spent by the client locally)
    g_<cat>      the category's last lease granted, "<check id>|<ms>|<calls>": a return
                 must name exactly it, once (the id a client sends back is not trusted)
    lr           (before leases were kept in g_: the check id of the lease last given back)
                 own retry of a timed-out write included) applies once. One id, not a set,
                 so the item stays small; an older return sent again is still capped by l_
    suspended    present while an administrator has suspended the session (its reason)
    principal    who the agent acts for, when the caller says
    srv          the MCP server's name, when the caller says
    calls, cids  the last calls (compact strings) and their ids: `keep` entries

Every entry of `cids` names the check that wrote it, so that botocore's own retry of a
timed-out write fails its condition instead of counting or recording the call twice.

The last calls cost no extra request. Each write returns the item, so the container
remembers each session's lists (`_Tails`); once a list holds `keep` entries, a check
writes the whole list, shifted by one, on condition that its tail is still the one
remembered. A refusal that repeats the last one (same tool, still refused) replaces it
with a count, so a runaway loop neither grows the item nor pushes the other calls out.
Only when the container has not seen the list, or another writer changed it first, does
a check append instead; the list then grows, and is trimmed in batches.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from chalicelib.quota.core import (
    Attempt,
    CallRecord,
    LeaseId,
    SessionKey,
    SessionSnapshot,
    call_id_key,
    fold_repeats,
)
from chalicelib.storage.dynamodb import updates
from chalicelib.storage.dynamodb.updates import ConditionFailed as _ConditionFailed
from chalicelib.storage.dynamodb.updates import n as _n
from chalicelib.storage.dynamodb.updates import s as _s
from chalicelib.storage.ports import (
    Consumed,
    LimitChange,
    NotConsumed,
    RecordChanged,
    RecordNotFound,
    StorageError,
)

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
SERVER = "srv"
SUSPENDED = "suspended"
COUNT_PREFIX = "n_"
RAISED_PREFIX = "r_"
RAISED_UNTIL_PREFIX = "rx_"
NOTIFIED_PREFIX = "z_"
REFUSED_PREFIX = "b_"
LEASED_PREFIX = "l_"
GRANT_PREFIX = "g_"
# Kinds of `cids` entries. A counted call with a client call id is "c:<id>" exactly, so
# that the condition can test it with `contains`; every other entry ends in "|<check id>".
COUNTED_CALL_ID = "c:"  # counted, under the client's call id: what a retry is matched on
COUNTED_CHECK = "s:"  # counted, no client call id: "s:<check id>"
BLOCKED = "b:"  # refused: "b:<call id or empty>|<check id>"
REPLAYED = "d:"  # a client's retry answered from the original: "d:<call id>|<check id>"
UNCOUNTED = "u:"  # a counted call taken back (a wider budget refused it): as BLOCKED
_SEP = "|"
_DIGITS36 = "0123456789abcdefghijklmnopqrstuvwxyz"

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
# category and base limit. `#n < #r` lets a per-session raise lift the limit in place,
# until the raise lapses (`#rx`, absent for a raise without an expiry).
_NEW_SESSION = "attribute_not_exists(#pk)"
_EXISTS = "attribute_exists(#pk)"
_ACTIVE = "#ls >= :cutoff"
_NOT_SUSPENDED = "attribute_not_exists(#sus)"
_IS_SUSPENDED = "attribute_exists(#sus)"
# A comparison with a missing attribute is false, so `NOT #rx <= :now` also holds for a
# raise without an expiry. (The same test spelt `attribute_not_exists(#rx) OR #rx > :now`
# made dynalite 2.7x slower on every check; DynamoDB evaluates both alike.)
_RAISE_IN_FORCE = "NOT #rx <= :now"
# Likewise `NOT #n >= :limit` holds for a category not counted yet. Every clause is kept
# flat: nested ORs made dynalite spend up to 6x the CPU on parsing the condition.
_UNDER_BASE = "NOT #n >= :limit"
_UNDER_RAISED = f"(NOT #n >= :limit OR (#n < #r AND {_RAISE_IN_FORCE}))"
_NOT_SEEN = "NOT contains(#ids, :cid)"


@lru_cache(maxsize=8)
def consume_condition(known: bool, raised: bool) -> str:
    """The check's condition. `known`: the session existed when this container last saw
    it, so only an active one is counted (a deleted one fails, and is counted as new on
    the next round). `raised`: it had a per-session raise for this category; without
    one, a session the policy's limit refuses is read back, and counted against its
    raise on the next round if one was added since."""
    under = _UNDER_RAISED if raised else _UNDER_BASE
    counts = f"{_ACTIVE} AND {_NOT_SUSPENDED} AND {under} AND {_NOT_SEEN}"
    return counts if known else f"{_NEW_SESSION} OR ({counts})"


CONSUME_CONDITION = consume_condition(known=False, raised=True)
# A lease counts several calls at once: `:limit` is then `limit - units + 1`, so that
# `NOT #n >= :limit` means n + units <= limit. A condition allows no arithmetic, so a raise
# in force is met by a second try tied to that raise's value (`:rlimit` = raise - units + 1).
_UNDER_RAISE = f"#r = :r AND #n < :rlimit AND {_RAISE_IN_FORCE}"
CONSUME_RAISED_CONDITION = (
    f"{_EXISTS} AND {_ACTIVE} AND {_NOT_SUSPENDED} AND {_UNDER_RAISE} AND {_NOT_SEEN}"
)
ADD_LEASED = " ADD #l :units"
SET_GRANT = ", #g = :grant"

_TOUCH = "#ls = :now, #exp = :exp"
_APPEND_CALL = (
    "#calls = list_append(if_not_exists(#calls, :empty), :rec), "
    "#ids = list_append(if_not_exists(#ids, :empty), :cidl)"
)
# Once the list is full: the whole list, shifted by one, if its tail is the one we know.
_REWRITE_CALLS = "#calls = :calls, #ids = :ids"
_SAME_TAIL = "size(#ids) = :len AND #ids[{last}] = :tail"
_COUNT = "#n = if_not_exists(#n, :zero) + :units, #started = if_not_exists(#started, :now)"
CONSUME_UPDATE = f"SET {_COUNT}, {_TOUCH}, {_APPEND_CALL}"
CONSUME_UPDATE_WITH_PRINCIPAL = f"{CONSUME_UPDATE}, #pr = :pr"
CONSUME_SERVER = ", #srv = :srv"

# After idle expiry: start the counters again, exactly as if TTL had deleted the item.
RESET_CONDITION = f"#ls = :old_ls AND {_NOT_SUSPENDED}"
# A suspended session's first attempt after idle expiry: its counters start again with
# the refusal as their first record; it stays suspended, and keeps no TTL.
RESTART_SUSPENDED_CONDITION = f"#ls = :old_ls AND {_IS_SUSPENDED}"
RESTART_SUSPENDED_SET = "SET #started = :now, #ls = :now, #calls = :rec, #ids = :cidl"
_RESET_SET = "#n = :units, #started = :now, #ls = :now, #exp = :exp, #calls = :rec, #ids = :cidl"

# A refused attempt still refreshes the idle clock and is recorded. z_<cat> names the
# refusal that first met the current limit ("<limit>|<check id>"): only the writer whose
# condition finds another limit there sets it, so exactly one writer learns that the
# exhaustion is new, and a retry of that very write can tell it was the one. The
# condition ties the write to the counters the refusal was based on: after an admin reset
# or suspension it fails, and the check is evaluated again.
_SAME_COUNTERS = "#started = :started"
_NOT_RECORDED = "NOT contains(#ids, :own)"
BLOCK_CONDITION = f"{_EXISTS} AND {_SAME_COUNTERS} AND {_NOT_SUSPENDED} AND {_NOT_RECORDED}"
_AT_THIS_LIMIT = "begins_with(#z, :zlimit)"
BLOCK_AGAIN_CONDITION = f"{BLOCK_CONDITION} AND {_AT_THIS_LIMIT}"
BLOCK_AGAIN_UPDATE = f"SET {_TOUCH}, {_APPEND_CALL} ADD #b :one"
BLOCK_FIRST_CONDITION = f"{BLOCK_CONDITION} AND NOT {_AT_THIS_LIMIT}"  # holds if no #z
# A refusal the container expects (it saw the session spent): recorded in one write, if the
# session is still active and spent, with no raise above the limit it was refused at.
_STILL_SPENT = f"{_ACTIVE} AND #n >= :limit AND (NOT #r > :limit OR #rx <= :now)"
BLOCK_EXPECTED_CONDITION = f"{BLOCK_AGAIN_CONDITION} AND {_STILL_SPENT}"
BLOCK_FIRST_UPDATE = f"SET {_TOUCH}, {_APPEND_CALL}, #z = :first ADD #b :one"
# A suspended item has no TTL (it must outlive any idle timeout), so none is set here.
BLOCK_SUSPENDED_CONDITION = f"{_IS_SUSPENDED} AND {_NOT_RECORDED}"
BLOCK_UPDATE_SUSPENDED = f"SET #ls = :now, {_APPEND_CALL}"
# A replayed call id (a client's retry) is recorded too, and refreshes the idle clock.
REPLAY_CONDITION = BLOCK_CONDITION
REPLAY_UPDATE = f"SET {_TOUCH}, {_APPEND_CALL}"

TRIM_CONDITION = "size(#calls) >= :min AND size(#ids) >= :min"
# Taking back a counted call that a wider budget refused; after a reset there is nothing
# to take back from the count, and the call still shows as refused.
UNCOUNT_CONDITION = f"{_SAME_COUNTERS} AND #n >= :units"
UNCOUNT_UPDATE = f"SET #n = #n - :units, {_APPEND_CALL}"
UNCOUNT_LEASED = " ADD #l :minus REMOVE #g"
# Unspent calls of a lease come back to the generation that granted them, never more than
# the leases counted, only for the lease last granted in the category, exactly as it was
# granted (`#g`), and once (`#g` goes).
RETURN_CONDITION = (
    f"{_SAME_COUNTERS} AND {_ACTIVE} AND #l >= :unused AND #n >= :unused AND #g = :grant"
)
RETURN_UPDATE = "SET #n = #n - :unused, #l = #l - :unused REMOVE #g"
UNCOUNT_RECORD_ONLY = f"SET {_APPEND_CALL}"

# Administrator actions. None of them compares the idle clock or the counters, which
# every check rewrites: a session that agents keep calling can always be acted on.
# A raise may only lift a limit, so concurrent raises never lower one; on an idle
# session it starts the counters again, as the next check would.
_LIVE = f"{_EXISTS} AND ({_ACTIVE} OR {_IS_SUSPENDED})"
# A lapsed raise no longer counts, so a smaller raise may replace it.
_LAPSED = "(attribute_exists(#rx) AND #rx <= :now)"
RAISE_ACTIVE_CONDITION = f"{_LIVE} AND (attribute_not_exists(#r) OR #r <= :new OR {_LAPSED})"
RAISE_ACTIVE_UPDATE = "SET #r = :new"
LOWER_CONDITION = _EXISTS
LOWER_UPDATE = "REMOVE #r, #rx"
RAISE_NEW_CONDITION = _NEW_SESSION
RAISE_IDLE_CONDITION = RESET_CONDITION
_START = "#started = :now, #ls = :now, #exp = :exp"
RAISE_FRESH_SET = f"SET #r = :new, {_START}"
SUSPEND_UPDATE = (
    "SET #sus = :why, #ls = if_not_exists(#ls, :now), #started = if_not_exists(#started, :now)"
    " REMOVE #exp"
)
# Resuming leaves the idle clock where the last attempt left it, so counters that went
# idle while suspended start again at the next check. The TTL is only clean-up: it is set
# from now, which is never earlier than the idle clock says.
RESUME_CONDITION = _EXISTS
RESUME_UPDATE = "SET #exp = :exp REMOVE #sus"
# `started` names the counters' generation (block records are tied to it), so a reset
# must move it forward; a suspended session keeps no TTL.
_NEWER = "#started < :now"
RESET_COUNTERS_SET = f"SET {_START}"
RESET_COUNTERS_CONDITION = f"{_EXISTS} AND {_NOT_SUSPENDED} AND {_NEWER}"
RESET_SUSPENDED_SET = "SET #started = :now, #ls = :now"
RESET_SUSPENDED_CONDITION = f"{_IS_SUSPENDED} AND {_NEWER}"
ADMIN_ROUNDS = 4


def _key(session: SessionKey) -> str:
    return f"{session.tenant}#{session.session_id}"


def _ttl(until_ms: int) -> int:
    """The TTL attribute for an item that may be cleaned up after `until_ms`."""
    return until_ms // 1000 + 1


def _base36(value: int) -> str:
    out = ""
    while True:
        value, digit = divmod(value, 36)
        out = _DIGITS36[digit] + out
        if value == 0:
            return out


def encode_call(record: CallRecord) -> str:
    """A call as kept in `calls`, about 30 bytes: time in base 36, category, tool, allowed,
    and how many refusals in a row it stands for, if more than one. Its ids are kept in
    `cids`; the principal is the session's, stored once."""
    allowed = "1" if record.allowed else "0"
    fields = [_base36(record.at_ms), record.category, record.tool, allowed]
    if record.repeats > 1:
        fields.append(str(record.repeats))
    if record.units > 1:
        fields.append(f"x{record.units}")
    return _SEP.join(fields)


def stored_id(record: CallRecord) -> str:
    """The `cids` entry of a call."""
    call_id = record.call_id or ""
    if record.replay:
        return f"{REPLAYED}{call_id}{_SEP}{record.check_id}"
    if not record.allowed:
        return f"{BLOCKED}{call_id}{_SEP}{record.check_id}"
    if record.call_id is not None:
        return COUNTED_CALL_ID + record.call_id
    return f"{COUNTED_CHECK}{record.check_id}"


def decode_call(text: str, stored: str, principal: str | None) -> CallRecord:
    """Rebuild a call from its `calls` and `cids` entries."""
    at, category, tool, allowed, *more = text.split(_SEP)
    call_id: str | None = None
    check_id: str | None = None
    if stored.startswith(COUNTED_CALL_ID):
        call_id = stored[len(COUNTED_CALL_ID) :]
    elif stored.startswith(COUNTED_CHECK):
        check_id = stored[len(COUNTED_CHECK) :]
    elif stored.startswith((BLOCKED, REPLAYED, UNCOUNTED)) and _SEP in stored:
        call_id, check_id = stored[2:].rsplit(_SEP, 1)
    replay = stored.startswith(REPLAYED)
    repeats = next((int(f) for f in more if f.isdigit()), 1)
    units = next((int(f[1:]) for f in more if f.startswith("x")), 1)
    return CallRecord(
        int(at, 36),
        category,
        tool,
        allowed == "1",
        principal,
        call_id or None,
        replay,
        check_id,
        repeats,
        units,
    )


def _notified(value: Mapping[str, Any] | None) -> tuple[int, str | None] | None:
    """The limit (and check id) a `z_<cat>` attribute records, in either stored form."""
    if value is None:
        return None
    if "N" in value:
        return int(value["N"]), None
    limit, _, check_id = str(value["S"]).partition(_SEP)
    return int(limit), check_id


def snapshot_from_item(item: Mapping[str, Any]) -> SessionSnapshot:
    """Decode a counter item into the decision core's view of it."""
    counts: dict[str, int] = {}
    raised: dict[str, int] = {}
    raised_until: dict[str, int] = {}
    refused: dict[str, int] = {}
    leased: dict[str, int] = {}
    for name, value in item.items():
        for prefix, target in (
            (COUNT_PREFIX, counts),
            (RAISED_PREFIX, raised),
            (RAISED_UNTIL_PREFIX, raised_until),
            (REFUSED_PREFIX, refused),
            (LEASED_PREFIX, leased),
        ):
            if name.startswith(prefix) and "N" in value:
                target[name[len(prefix) :]] = int(value["N"])
    suspended = item.get(SUSPENDED)
    principal = item.get(PRINCIPAL, {}).get("S")
    texts = [v["S"] for v in item.get(CALLS, {}).get("L", [])]
    ids = [v["S"] for v in item.get(CALL_IDS, {}).get("L", [])]
    pairs = zip(texts, ids, strict=False)
    calls = _settle([(decode_call(text, cid, principal), cid) for text, cid in pairs])
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
        raised_until=raised_until,
        server=item.get(SERVER, {}).get("S"),
        leased=leased,
    )


def _settle(entries: list[tuple[CallRecord, str]]) -> tuple[CallRecord, ...]:
    """The last calls with every taken-back call shown once, as refused, and repeated
    refusals folded into one record."""
    calls: list[CallRecord] = []
    for record, stored in entries:
        if stored.startswith(UNCOUNTED):
            for i in range(len(calls) - 1, -1, -1):
                kept = calls[i]
                same = (
                    kept.call_id == record.call_id
                    if record.call_id is not None
                    else kept.check_id == record.check_id
                )
                if same and kept.allowed and not kept.replay:
                    del calls[i]
                    break
        calls.append(record)
    return fold_repeats(calls)


def _remove_clause(removed: list[str]) -> tuple[str, dict[str, str]]:
    """` REMOVE #x0, #x1...` and its names, for a list of attribute names."""
    if not removed:
        return "", {}
    names = {f"#x{i}": name for i, name in enumerate(removed)}
    return " REMOVE " + ", ".join(names), names


def _counter_names(prefixes: Iterable[str], categories: Iterable[str]) -> list[str]:
    return [prefix + c for prefix in prefixes for c in categories]


@lru_cache(maxsize=64)
def _reset_expression(
    category: str, all_categories: tuple[str, ...], leased: bool = False
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """SET/REMOVE for an idle reset, and its extra names: clears every other counter."""
    removed = [COUNT_PREFIX + c for c in all_categories if c != category]
    removed += [LEASED_PREFIX + c for c in all_categories if c != category or not leased]
    removed += [GRANT_PREFIX + c for c in all_categories if c != category or not leased]
    removed += _counter_names(
        (RAISED_PREFIX, RAISED_UNTIL_PREFIX, NOTIFIED_PREFIX, REFUSED_PREFIX), all_categories
    )
    clause, names = _remove_clause(removed)
    leased_set = ", #l = :units, #g = :grant" if leased else ""
    return f"SET {_RESET_SET}{leased_set}{clause}", tuple(names.items())


def _same_counters(item: Mapping[str, Any], started_ms: int) -> bool:
    """Whether an item holds the unsuspended counters that started at `started_ms`."""
    started = item.get(STARTED, {}).get("N")
    return SUSPENDED not in item and started is not None and int(started) == started_ms


def _with_expiry(update: str, expires: bool) -> str:
    """A raise's update, setting when it lapses or removing a previous expiry. The REMOVE
    of the idle-start form comes last, so the expiry joins the SET or the REMOVE."""
    if expires:
        return update.replace("SET #r = :new", "SET #r = :new, #rx = :until", 1)
    if " REMOVE " in update:
        return update.replace(" REMOVE ", " REMOVE #rx, ", 1)
    return f"{update} REMOVE #rx"


def _holds(item: Mapping[str, Any] | None, entry: str) -> bool:
    return item is not None and any(
        v.get("S") == entry for v in item.get(CALL_IDS, {}).get("L", [])
    )


@dataclass(frozen=True)
class _Tail:
    """A session's last-calls lists as stored: `calls` texts and `cids` entries."""

    texts: tuple[str, ...]
    ids: tuple[str, ...]
    raised: frozenset[str] = frozenset()  # categories with a per-session raise

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> _Tail | None:
        texts = tuple(v["S"] for v in item.get(CALLS, {}).get("L", []))
        ids = tuple(v["S"] for v in item.get(CALL_IDS, {}).get("L", []))
        raised = frozenset(
            name[len(RAISED_PREFIX) :] for name in item if name.startswith(RAISED_PREFIX)
        )
        return cls(texts, ids, raised) if len(texts) == len(ids) else None

    def same_lists(self, other: _Tail | None) -> bool:
        return other is not None and (self.texts, self.ids) == (other.texts, other.ids)

    def adding(self, record: CallRecord, keep: int) -> _Tail:
        """The lists with `record` added: folded into the last entry when it repeats a
        refusal, else appended; then the last `keep` entries."""
        text, entry = encode_call(record), stored_id(record)
        if self.ids and self.ids[-1].startswith(BLOCKED):
            last = decode_call(self.texts[-1], self.ids[-1], None)
            if record.repeats_of(last):
                folded = encode_call(replace(record, repeats=last.repeats + 1))
                return _Tail((*self.texts[:-1], folded), (*self.ids[:-1], entry), self.raised)
        return _Tail((*self.texts, text)[-keep:], (*self.ids, entry)[-keep:], self.raised)

    def replacing_last(self, text: str, entry: str) -> _Tail:
        """The lists with their last entry replaced (a call taken back, shown refused)."""
        return _Tail((*self.texts[:-1], text), (*self.ids[:-1], entry), self.raised)

    def condition(self) -> str:
        """That the stored lists still end as these do (no other writer came between)."""
        if not self.ids:
            return "(attribute_not_exists(#ids) OR size(#ids) = :len)"
        return _SAME_TAIL.format(last=len(self.ids) - 1)

    def values(self, new: _Tail) -> dict[str, Any]:
        """This tail's condition values, and the lists to write."""
        values: dict[str, Any] = {
            ":len": _n(len(self.ids)),
            ":calls": {"L": [_s(t) for t in new.texts]},
            ":ids": {"L": [_s(i) for i in new.ids]},
        }
        if self.ids:
            values[":tail"] = _s(self.ids[-1])
        return values


class _Tails:
    """The last-calls lists this container last saw, per session (least recently used
    dropped first). A stale entry costs one failed condition, never a wrong record."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._tails: OrderedDict[str, _Tail] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> _Tail | None:
        with self._lock:
            return self._tails.get(key)

    def learn(self, key: str, item: Mapping[str, Any] | None) -> None:
        """Remember the lists of an item as just read or written (None: it is gone)."""
        tail = _Tail.of(item) if item else None
        self.put(key, tail)

    def put(self, key: str, tail: _Tail | None) -> None:
        with self._lock:
            if tail is None:
                self._tails.pop(key, None)
                return
            self._tails[key] = tail
            self._tails.move_to_end(key)
            if len(self._tails) > self._size:
                self._tails.popitem(last=False)


class CounterStore:
    """Counts checks on the session counter item; decides nothing about policy."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        categories: Iterable[str],
        keep_calls: int = 10,
    ) -> None:
        self._client = client
        self._table = table_name
        self._categories = tuple(categories)
        self._keep = max(1, keep_calls)
        self._batch = max(1, keep_calls // 2)
        self._tails = _Tails()

    def _update(
        self,
        key: str,
        update: str,
        condition: str,
        names: Mapping[str, str],
        values: Mapping[str, Any],
        doing: str,
        returns: str = "ALL_NEW",
        old_on_failure: bool = False,
    ) -> dict[str, Any]:
        """One UpdateItem on a session's item.

        Raises:
            _ConditionFailed: the condition failed.
            StorageError: the store failed.
        """
        return updates.update(
            self._client,
            self._table,
            {PK: _s(key)},
            update,
            condition,
            names,
            values,
            doing,
            returns,
            old_on_failure,
        )

    def _item(self, key: str, doing: str) -> dict[str, Any] | None:
        """Read an item (strongly consistent), or None.

        Raises:
            StorageError: the store failed.
        """
        return updates.get(self._client, self._table, {PK: _s(key)}, doing)

    def _old(self, failed: _ConditionFailed, key: str, doing: str) -> dict[str, Any] | None:
        """The item a failed condition saw: returned with the failure, or read (dynalite
        ignores ReturnValuesOnConditionCheckFailure)."""
        old = dict(failed.old_item) if failed.old_item else self._item(key, doing)
        self._tails.learn(key, old)
        return old

    def _names(self, attempt: Attempt) -> dict[str, str]:
        names = dict(_BASE_NAMES)
        names["#n"] = COUNT_PREFIX + attempt.category
        if attempt.principal is not None:
            names["#pr"] = PRINCIPAL
        if attempt.server is not None:
            names["#srv"] = SERVER
        return names

    def _call_values(self, attempt: Attempt, record: CallRecord) -> dict[str, Any]:
        values = {
            ":now": _n(attempt.now_ms),
            ":exp": _n(_ttl(attempt.resets_at_ms)),
            ":rec": {"L": [_s(encode_call(record))]},
            ":cidl": {"L": [_s(stored_id(record))]},
            ":empty": {"L": []},
        }
        if attempt.principal is not None:
            values[":pr"] = _s(attempt.principal)
        if attempt.server is not None:
            values[":srv"] = _s(attempt.server)
        return values

    def consume(self, attempt: Attempt) -> Consumed | NotConsumed:
        """Count one call if the session is active, not suspended, under its limit and has
        not counted this call (by client call id, or by this check's own id).

        Raises:
            StorageError: the store failed (throttled, unreachable, misconfigured).
        """
        record = attempt.record(allowed=True)
        names = self._names(attempt)
        names["#r"] = RAISED_PREFIX + attempt.category
        names["#rx"] = RAISED_UNTIL_PREFIX + attempt.category
        values = self._call_values(attempt, record)
        call_id = attempt.dedupe_call_id
        seen_as = (
            COUNTED_CHECK + attempt.check_id
            if call_id is None
            else COUNTED_CALL_ID + call_id_key(call_id)
        )
        values.update(
            {
                ":cutoff": _n(attempt.cutoff_ms),
                ":limit": _n(attempt.base_limit - attempt.units + 1),
                ":zero": _n(0),
                ":units": _n(attempt.units),
                ":cid": _s(seen_as),
            }
        )
        update = CONSUME_UPDATE if attempt.principal is None else CONSUME_UPDATE_WITH_PRINCIPAL
        if attempt.server is not None:
            update += CONSUME_SERVER
        if attempt.leased:
            names["#l"] = LEASED_PREFIX + attempt.category
            names["#g"] = GRANT_PREFIX + attempt.category
            values[":grant"] = _s(attempt.lease_grant)
            update = update.replace(CONSUME_UPDATE, CONSUME_UPDATE + SET_GRANT, 1) + ADD_LEASED
        key = _key(attempt.session)
        doing = "counting a call"
        tail = self._tails.get(key)
        # `#n < #r` counts one call under a raise; a lease under a raise takes a second try.
        raised = tail is not None and attempt.category in tail.raised and attempt.units == 1
        if tail is not None and len(tail.ids) >= self._keep:
            # The list is full: shift it in this same write, if nobody changed it since.
            new = tail.adding(record, self._keep)
            try:
                item = self._update(
                    key,
                    update.replace(_APPEND_CALL, _REWRITE_CALLS),
                    f"{consume_condition(True, raised)} AND {tail.condition()}",
                    names,
                    {**values, **tail.values(new)},
                    doing,
                    old_on_failure=True,
                )
            except _ConditionFailed as failed:
                old = self._old(failed, key, doing)
                if old is None or tail.same_lists(_Tail.of(old)):
                    return self._under_raise(attempt, old, update, names, values)
                # Another writer changed the list first: append instead, once.
                raised = RAISED_PREFIX + attempt.category in old and attempt.units == 1
            else:
                self._tails.put(key, new)
                return Consumed(snapshot_from_item(item))
        condition = consume_condition(tail is not None, raised)
        try:
            item = self._update(key, update, condition, names, values, doing, old_on_failure=True)
        except _ConditionFailed as failed:
            old = self._old(failed, key, doing)
            return self._under_raise(attempt, old, update, names, values)
        self._tails.learn(key, item)
        self._maybe_trim(key, len(item.get(CALL_IDS, {}).get("L", [])))
        return Consumed(snapshot_from_item(item))

    def _under_raise(
        self,
        attempt: Attempt,
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
        key, doing = _key(attempt.session), "counting a lease under a raise"
        values = {**values, ":r": _n(raise_), ":rlimit": _n(raise_ - attempt.units + 1)}
        try:
            item = self._update(
                key, update, CONSUME_RAISED_CONDITION, names, values, doing, old_on_failure=True
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
        update, removed = _reset_expression(attempt.category, self._categories, attempt.leased)
        if attempt.principal is not None:
            update = update.replace("SET ", "SET #pr = :pr, ", 1)
        if attempt.server is not None:
            update = update.replace("SET ", "SET #srv = :srv, ", 1)
        names = {**self._names(attempt), **dict(removed)}
        values = self._call_values(attempt, attempt.record(allowed=True))
        if attempt.leased:
            names["#l"] = LEASED_PREFIX + attempt.category
            names["#g"] = GRANT_PREFIX + attempt.category
            values[":grant"] = _s(attempt.lease_grant)
        values.update({":units": _n(attempt.units), ":old_ls": _n(old_last_seen_ms)})
        try:
            item = self._update(
                _key(attempt.session),
                update,
                RESET_CONDITION,
                names,
                values,
                "resetting idle counters",
            )
        except _ConditionFailed:
            return None
        self._tails.learn(_key(attempt.session), item)
        return Consumed(snapshot_from_item(item))

    def restart_suspended(self, attempt: Attempt, old_last_seen_ms: int) -> SessionSnapshot | None:
        """A suspended session's first attempt after idle expiry, refused: its counters
        start again, this refusal their first record. None if another attempt came first.

        Raises:
            StorageError: the store failed.
        """
        removed = _counter_names(
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
        clause, names = _remove_clause(removed)
        values = self._call_values(attempt, attempt.record(allowed=False))
        values[":old_ls"] = _n(old_last_seen_ms)
        key = _key(attempt.session)
        try:
            item = self._update(
                key,
                RESTART_SUSPENDED_SET + clause,
                RESTART_SUSPENDED_CONDITION,
                {**_BASE_NAMES, **names},
                values,
                "restarting a suspended session's counters",
            )
        except _ConditionFailed:
            return None
        self._tails.learn(key, item)
        return snapshot_from_item(item)

    def record_block(
        self,
        attempt: Attempt,
        seen: SessionSnapshot,
        limit: int,
        suspended: bool,
        expected: bool = False,
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
        values.update(
            {
                ":first": _s(f"{limit}{_SEP}{attempt.check_id}"),
                ":zlimit": _s(f"{limit}{_SEP}"),
                ":one": _n(1),
                ":started": _n(seen.started_ms),
                ":own": _s(own),
            }
        )
        key = _key(attempt.session)
        doing = "recording a refused call"
        if expected:
            return self._record_expected(attempt, key, names, values, record, limit)
        first = False  # most refusals follow the first one at their limit
        for round_ in range(ADMIN_ROUNDS):
            if suspended:
                update, condition = BLOCK_UPDATE_SUSPENDED, BLOCK_SUSPENDED_CONDITION
            elif first:
                update, condition = BLOCK_FIRST_UPDATE, BLOCK_FIRST_CONDITION
            else:
                update, condition = BLOCK_AGAIN_UPDATE, BLOCK_AGAIN_CONDITION
            # The failed check just read the lists: write them with this refusal folded
            # in. Late rounds (other writers kept changing them) append instead.
            tail = self._tails.get(key) if round_ < ADMIN_ROUNDS // 2 else None
            new = tail.adding(record, self._keep) if tail is not None else None
            written = values
            if tail is not None and new is not None:
                update = update.replace(_APPEND_CALL, _REWRITE_CALLS)
                condition = f"{condition} AND {tail.condition()}"
                written = {**values, **tail.values(new)}
            try:
                old = self._update(
                    key, update, condition, names, written, doing, "ALL_OLD", old_on_failure=True
                )
            except _ConditionFailed as failed:
                now = self._old(failed, key, doing)
                if _holds(now, own):
                    # Our own earlier try went through: it was first if z names this check.
                    assert now is not None
                    notified = _notified(now.get(names["#z"]))
                    return not suspended and notified == (limit, attempt.check_id)
                if suspended and now is not None and SUSPENDED in now and new is not None:
                    continue  # still suspended: another refusal changed the lists first
                if suspended or now is None or not _same_counters(now, seen.started_ms):
                    return None
                notified = _notified(now.get(names["#z"]))
                # A z_ in the old numeric form is rewritten, as a first refusal, once.
                first = notified is None or notified[0] != limit or notified[1] is None
                continue
            self._tails.put(key, new)
            if new is None:
                self._maybe_trim(key, len(old.get(CALLS, {}).get("L", [])) + 1)
            return first and not suspended
        return None

    def _record_expected(
        self,
        attempt: Attempt,
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
        names = {
            **names,
            "#r": RAISED_PREFIX + attempt.category,
            "#rx": RAISED_UNTIL_PREFIX + attempt.category,
        }
        values = {
            **values,
            **tail.values(new),
            ":cutoff": _n(attempt.cutoff_ms),
            ":limit": _n(limit),
        }
        update = BLOCK_AGAIN_UPDATE.replace(_APPEND_CALL, _REWRITE_CALLS)
        condition = f"{BLOCK_EXPECTED_CONDITION} AND {tail.condition()}"
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
        values = self._call_values(attempt, record)
        own = stored_id(record)
        values.update({":started": _n(seen.started_ms), ":own": _s(own)})
        key = _key(attempt.session)
        doing = "recording a replayed call"
        try:
            old = self._update(
                key,
                REPLAY_UPDATE,
                REPLAY_CONDITION,
                self._names(attempt),
                values,
                doing,
                "ALL_OLD",
                old_on_failure=True,
            )
        except _ConditionFailed as failed:
            return _holds(self._old(failed, key, doing), own)
        self._tails.put(key, None)
        self._maybe_trim(key, len(old.get(CALLS, {}).get("L", [])) + 1)
        return True

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
        entry = f"{UNCOUNTED}{record.call_id or ''}{_SEP}{attempt.check_id}"
        values[":cidl"] = {"L": [_s(entry)]}
        values.update(
            {":units": _n(attempt.units), ":minus": _n(-attempt.units), ":started": _n(started_ms)}
        )
        key = _key(attempt.session)
        doing = "taking back a counted call"
        names = self._names(attempt)
        update = UNCOUNT_UPDATE
        if attempt.leased:
            names["#l"] = LEASED_PREFIX + attempt.category
            names["#g"] = GRANT_PREFIX + attempt.category
            update += UNCOUNT_LEASED
        tail = self._tails.get(key)
        counted = stored_id(attempt.record(allowed=True))
        if tail is not None and tail.ids and tail.ids[-1] == counted:
            new = tail.replacing_last(encode_call(record), entry)
            try:
                self._update(
                    key,
                    update.replace(_APPEND_CALL, _REWRITE_CALLS),
                    f"{UNCOUNT_CONDITION} AND {tail.condition()}",
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
            item = self._update(key, update, UNCOUNT_CONDITION, names, values, doing)
        except _ConditionFailed:
            try:
                item = self._update(key, UNCOUNT_RECORD_ONLY, _EXISTS, names, values, doing)
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
            "#started": STARTED,
            "#n": COUNT_PREFIX + lease.category,
            "#l": LEASED_PREFIX + lease.category,
            "#g": GRANT_PREFIX + lease.category,
            "#ls": LAST_SEEN,
        }
        values = {
            ":cutoff": _n(cutoff_ms),
            ":started": _n(lease.started_ms),
            ":unused": _n(unused),
            ":grant": _s(lease.grant),
        }
        try:
            item = self._update(
                _key(session),
                RETURN_UPDATE,
                RETURN_CONDITION,
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
        key = _key(session)
        item = self._item(key, "reading a session")
        self._tails.learn(key, item)
        return snapshot_from_item(item) if item else None

    def _maybe_trim(self, key: str, length: int) -> None:
        """Drop the oldest entries of the last calls once the list is a batch or more past
        `keep`, back to `keep`.

        The condition (the list is still at least `length` long) lets one of several
        writers that saw the same or overlapping lengths trim, never below `keep`. A failed
        trim is harmless (the next append past the batch trims again), so it is logged, not
        raised.
        """
        over = length - self._keep
        if over < self._batch:
            return
        positions = range(over)
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
            return  # another writer trimmed first, or the session was reset
        except StorageError as exc:
            _log.warning("last-calls trim failed while %s", exc.doing)
        finally:
            self._tails.put(key, None)

    # -- administrator actions -------------------------------------------------------

    def _admin_update(
        self,
        session: SessionKey,
        update: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
        doing: str,
    ) -> SessionSnapshot:
        """Raises: _ConditionFailed, StorageError."""
        names = {**_BASE_NAMES, **names}
        key = _key(session)
        item = self._update(key, update, condition, names, values, doing, old_on_failure=True)
        self._tails.learn(key, item)
        return snapshot_from_item(item)

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
            ":exp": _n(_ttl(now_ms + idle_ms)),
            ":cutoff": _n(now_ms - idle_ms),
        }
        if seen is None:
            update, condition = RAISE_FRESH_SET, RAISE_NEW_CONDITION
        elif not seen.suspended and seen.is_idle(now_ms, idle_ms):
            removed = _counter_names(
                (COUNT_PREFIX, NOTIFIED_PREFIX, REFUSED_PREFIX, LEASED_PREFIX), self._categories
            )
            removed += [
                prefix + c
                for prefix in (RAISED_PREFIX, RAISED_UNTIL_PREFIX)
                for c in self._categories
                if c != change.category
            ]
            clause, extra = _remove_clause(removed)
            update, condition = RAISE_FRESH_SET + clause, RAISE_IDLE_CONDITION
            names.update(extra)
            values[":old_ls"] = _n(seen.last_seen_ms)
        else:
            update, condition = RAISE_ACTIVE_UPDATE, RAISE_ACTIVE_CONDITION
        update = _with_expiry(update, change.until_ms is not None)
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
            return self._admin_update(session, LOWER_UPDATE, LOWER_CONDITION, names, {}, doing)
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
        values = {":exp": _n(_ttl(now_ms + idle_ms))}
        try:
            return self._admin_update(session, RESUME_UPDATE, RESUME_CONDITION, {}, values, doing)
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
        removed = _counter_names(
            (COUNT_PREFIX, NOTIFIED_PREFIX, REFUSED_PREFIX, LEASED_PREFIX), self._categories
        )
        clause, names = _remove_clause(removed)
        doing = "resetting a session"
        key = _key(session)
        suspended = False
        for _ in range(ADMIN_ROUNDS):
            values = {":now": _n(now_ms), ":exp": _n(_ttl(now_ms + idle_ms))}
            if suspended:
                update, condition = RESET_SUSPENDED_SET + clause, RESET_SUSPENDED_CONDITION
            else:
                update, condition = RESET_COUNTERS_SET + clause, RESET_COUNTERS_CONDITION
            try:
                return self._admin_update(session, update, condition, names, values, doing)
            except _ConditionFailed as failed:
                old = self._old(failed, key, doing)
            if old is None:
                raise RecordNotFound(doing)
            seen = snapshot_from_item(old)
            suspended = seen.suspended
            now_ms = max(now_ms, seen.started_ms + 1)
        raise RecordChanged(doing)
