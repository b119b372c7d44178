"""The session item codec: a session's item into the core's snapshot and back, and the
compact forms its last calls are kept in (`calls` texts, `cids` entries)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.quota.calls import without_counted
from chalicelib.quota.core import (
    CallLife,
    CallRecord,
    CallState,
    ClientInfo,
    SessionKey,
    SessionSnapshot,
    fold_repeats,
)
from chalicelib.quota.leases import base36
from chalicelib.storage.dynamodb.layout import (
    ALLOWED_BEFORE_PREFIX,
    BLOCKED,
    CALL_IDS,
    CALLS,
    CLIENT,
    COUNT_PREFIX,
    COUNTED_CALL_ID,
    COUNTED_CHECK,
    GRANT_PREFIX,
    HELD_PREFIX,
    LAST_SEEN,
    LEASED_PREFIX,
    LIFE_PREFIX,
    NOTIFIED_PREFIX,
    PRINCIPAL,
    RAISED_PREFIX,
    RAISED_UNTIL_PREFIX,
    REFUSED_PREFIX,
    REPEAT_PREFIX,
    REPLAYED,
    SERVER,
    STARTED,
    SUSPENDED,
    UNCOUNTED,
)

SEP = "|"


def key_of(session: SessionKey) -> str:
    return f"{session.tenant}#{session.session_id}"


def ttl(until_ms: int) -> int:
    """The TTL attribute for an item that may be cleaned up after `until_ms`."""
    return until_ms // 1000 + 1


def encode_call(record: CallRecord) -> str:
    """A call as kept in `calls`, about 30 bytes: time in base 36, category, tool, allowed,
    how many refusals in a row it stands for (if more than one) and how many of them the
    MCP side held, then the legacy transport session it came over, if any. Its ids are
    kept in `cids`; the principal is the session's, stored once."""
    allowed = "1" if record.allowed else "0"
    fields = [base36(record.at_ms), record.category, record.tool, allowed]
    if record.repeats > 1:
        fields.append(str(record.repeats))
    if record.units > 1:
        fields.append(f"x{record.units}")
    if record.held:
        fields.append(f"h{record.held}")
    if record.transport_session is not None:
        fields.append(f"m{record.transport_session}")  # last: it may hold the separator
    return SEP.join(fields)


def stored_id(record: CallRecord) -> str:
    """The `cids` entry of a call."""
    call_id = record.call_id or ""
    if record.replay:
        return f"{REPLAYED}{call_id}{SEP}{record.check_id}"
    if not record.allowed:
        return f"{BLOCKED}{call_id}{SEP}{record.check_id}"
    if record.call_id is not None:
        return COUNTED_CALL_ID + record.call_id
    return f"{COUNTED_CHECK}{record.check_id}"


_STATES = {CallState.IN_PROGRESS: "p", CallState.ADMITTED: "a"}
_STATE_OF = {code: state for state, code in _STATES.items()}


def life_prefix(check_id: str) -> str:
    """What every life counted by this check begins with, whatever its state."""
    return f"{check_id}{SEP}"


def encode_life(life: CallLife) -> str:
    """A call's life as its `v_<call id>` attribute keeps it: the check that counted it
    first (a condition tests it with `begins_with`)."""
    parts = (_STATES[life.state], life.replays, life.until_ms, life.binding)
    return life_prefix(life.check_id) + SEP.join(str(part) for part in parts)


def decode_life(text: str) -> CallLife | None:
    """The life a `v_<call id>` attribute keeps (None: not one this code wrote)."""
    parts = text.split(SEP)
    if len(parts) != 5 or parts[1] not in _STATE_OF:
        return None
    check_id, state, replays, until, binding = parts
    return CallLife(_STATE_OF[state], check_id, binding, int(until), int(replays))


def taken_back_id(record: CallRecord) -> str:
    """The `cids` entry of a counted call taken back (a wider budget refused it)."""
    return f"{UNCOUNTED}{record.call_id or ''}{SEP}{record.check_id}"


def decode_call(text: str, stored: str, principal: str | None) -> CallRecord:
    """Rebuild a call from its `calls` and `cids` entries."""
    at, category, tool, allowed, *more = text.split(SEP)
    transport: str | None = None
    for index, part in enumerate(more):
        if part.startswith("m"):
            transport, more = SEP.join(more[index:])[1:], more[:index]
            break
    call_id: str | None = None
    check_id: str | None = None
    if stored.startswith(COUNTED_CALL_ID):
        call_id = stored[len(COUNTED_CALL_ID) :]
    elif stored.startswith(COUNTED_CHECK):
        check_id = stored[len(COUNTED_CHECK) :]
    elif stored.startswith((BLOCKED, REPLAYED, UNCOUNTED)) and SEP in stored:
        call_id, check_id = stored[2:].rsplit(SEP, 1)
    replay = stored.startswith(REPLAYED)
    repeats = next((int(f) for f in more if f.isdigit()), 1)
    units = next((int(f[1:]) for f in more if f.startswith("x")), 1)
    held = next((int(f[1:]) for f in more if f.startswith("h")), 0)
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
        held,
        transport,
    )


def notified(value: Mapping[str, Any] | None) -> tuple[int, str | None] | None:
    """The limit (and check id) a `z_<cat>` attribute records, in either stored form."""
    if value is None:
        return None
    if "N" in value:
        return int(value["N"]), None
    limit, _, check_id = str(value["S"]).partition(SEP)
    return int(limit), check_id


def snapshot_from_item(item: Mapping[str, Any]) -> SessionSnapshot:
    """Decode a counter item into the decision core's view of it."""
    counts: dict[str, int] = {}
    raised: dict[str, int] = {}
    raised_until: dict[str, int] = {}
    refused: dict[str, int] = {}
    held: dict[str, int] = {}
    leased: dict[str, int] = {}
    repeats: dict[str, int] = {}
    allowed_before: dict[str, int] = {}
    for name, value in item.items():
        for prefix, target in (
            (COUNT_PREFIX, counts),
            (RAISED_PREFIX, raised),
            (RAISED_UNTIL_PREFIX, raised_until),
            (REFUSED_PREFIX, refused),
            (HELD_PREFIX, held),
            (LEASED_PREFIX, leased),
            (REPEAT_PREFIX, repeats),
            (ALLOWED_BEFORE_PREFIX, allowed_before),
        ):
            if name.startswith(prefix) and "N" in value:
                target[name[len(prefix) :]] = int(value["N"])
    grants = {
        name[len(GRANT_PREFIX) :]: str(value["S"])
        for name, value in item.items()
        if name.startswith(GRANT_PREFIX) and "S" in value
    }
    marks = {
        name[len(NOTIFIED_PREFIX) :]: mark
        for name, value in item.items()
        if name.startswith(NOTIFIED_PREFIX) and (mark := notified(value)) is not None
    }
    suspended = item.get(SUSPENDED)
    principal = item.get(PRINCIPAL, {}).get("S")
    texts = [v["S"] for v in item.get(CALLS, {}).get("L", [])]
    ids = [v["S"] for v in item.get(CALL_IDS, {}).get("L", [])]
    lives = {
        name[len(LIFE_PREFIX) :]: life
        for name, value in item.items()
        if name.startswith(LIFE_PREFIX)
        and "S" in value
        and (life := decode_life(str(value["S"]))) is not None
    }
    pairs = zip(texts, ids, strict=False)
    calls = _settle([(decode_call(text, cid, principal), cid) for text, cid in pairs])
    return SessionSnapshot(
        last_seen_ms=int(item.get(LAST_SEEN, {"N": "0"})["N"]),
        started_ms=int(item.get(STARTED, {"N": "0"})["N"]),
        counts=counts,
        raised=raised,
        refused=refused,
        refused_held=held,
        suspended=suspended is not None,
        suspended_reason=suspended.get("S") if suspended else None,
        principal=principal,
        calls=calls,
        raised_until=raised_until,
        server=item.get(SERVER, {}).get("S"),
        leased=leased,
        grants=grants,
        first_refusals={category: mark[0] for category, mark in marks.items()},
        first_refused_by={category: mark[1] for category, mark in marks.items()},
        client=decode_client(item.get(CLIENT)),
        repeats=repeats,
        allowed_before=allowed_before,
        lives=lives,
        held_call_ids=frozenset(
            cid[len(COUNTED_CALL_ID) :] for cid in ids if cid.startswith(COUNTED_CALL_ID)
        ),
    )


_CLIENT_PARTS = (("n", "name"), ("v", "version"), ("o", "oauth_client_id"))


def encode_client(client: ClientInfo) -> dict[str, Any]:
    """The `cli` attribute: a map holding the parts that are known."""
    parts = {short: getattr(client, long) for short, long in _CLIENT_PARTS}
    return {"M": {short: {"S": value} for short, value in parts.items() if value is not None}}


def decode_client(value: Mapping[str, Any] | None) -> ClientInfo | None:
    """The client a `cli` attribute names, or None when absent."""
    if value is None or "M" not in value:
        return None
    parts = value["M"]
    return ClientInfo(**{long: parts.get(short, {}).get("S") for short, long in _CLIENT_PARTS})


def _settle(entries: list[tuple[CallRecord, str]]) -> tuple[CallRecord, ...]:
    """The last calls with every taken-back call shown once, as refused, and repeated
    refusals folded into one record."""
    calls: list[CallRecord] = []
    for record, stored in entries:
        if stored.startswith(UNCOUNTED):
            calls = without_counted(calls, record)
        calls.append(record)
    return fold_repeats(calls)
