"""The core's changes (`quota.changes`) as DynamoDB UpdateExpressions. This translates;
it decides nothing.

Each map entry and field renders one fixed fragment with a fixed placeholder (`#n` for
the call's category count, as in the conditions), so that an update and its condition
share names, and the expressions stay few and the same from call to call. The last calls
are the adapter's: it passes the list's fragment (`APPEND_CALL`, `REWRITE_CALLS`,
`RESTART_CALLS`) and its values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib.quota.changes import Change, Field, Slot
from chalicelib.quota.core import CallLife, ClientInfo
from chalicelib.storage.dynamodb import layout
from chalicelib.storage.dynamodb.codec import SEP, encode_client, encode_life, ttl
from chalicelib.storage.dynamodb.conditions import Rendered
from chalicelib.storage.dynamodb.updates import n, s


@dataclass(frozen=True)
class Layout:
    """Where a kind of record keeps each map and field: an attribute prefix per map (and
    the fixed placeholder of its first entry), and an attribute per field."""

    prefixes: Mapping[Slot, tuple[str, str]]  # slot -> (placeholder, attribute prefix)
    fields: Mapping[Field, tuple[str, str]]  # field -> (placeholder, attribute)


SESSION = Layout(
    prefixes={
        Slot.COUNTS: ("#n", layout.COUNT_PREFIX),
        Slot.LEASED: ("#l", layout.LEASED_PREFIX),
        Slot.GRANTS: ("#g", layout.GRANT_PREFIX),
        Slot.REFUSED: ("#b", layout.REFUSED_PREFIX),
        Slot.HELD: ("#hb", layout.HELD_PREFIX),
        Slot.FIRST_REFUSALS: ("#z", layout.NOTIFIED_PREFIX),
        Slot.RAISED: ("#r", layout.RAISED_PREFIX),
        Slot.RAISED_UNTIL: ("#rx", layout.RAISED_UNTIL_PREFIX),
        Slot.REPEATS: ("#q", layout.REPEAT_PREFIX),
        Slot.LIVES: ("#v", layout.LIFE_PREFIX),
        Slot.ALLOWED_BEFORE: ("#ab", layout.ALLOWED_BEFORE_PREFIX),
    },
    fields={
        Field.LAST_SEEN: ("#ls", layout.LAST_SEEN),
        Field.STARTED: ("#started", layout.STARTED),
        Field.EXPIRES: ("#exp", layout.EXPIRES),
        Field.SUSPENDED: ("#sus", layout.SUSPENDED),
        Field.PRINCIPAL: ("#pr", layout.PRINCIPAL),
        Field.SERVER: ("#srv", layout.SERVER),
        Field.CLIENT: ("#cli", layout.CLIENT),
    },
)
# The last calls: appended to, rewritten whole (shifted by one), or started again.
APPEND_CALL = (
    "#calls = list_append(if_not_exists(#calls, :empty), :rec), "
    "#ids = list_append(if_not_exists(#ids, :empty), :cidl)"
)
REWRITE_CALLS = "#calls = :calls, #ids = :ids"
RESTART_CALLS = "#calls = :rec, #ids = :cidl"
CALL_NAMES = {"#calls": layout.CALLS, "#ids": layout.CALL_IDS}


def render_change(
    change: Change,
    categories: Iterable[str],
    calls: str | None = None,
    kind: Layout = SESSION,
    removing: Iterable[str] = (),
) -> Rendered:
    """The change as one UpdateExpression on a record of `kind`; `calls`: the last calls'
    SET fragment, if the change records a call. `categories`: those whose entries a
    `clear` drops; `removing`: attributes the adapter drops too (old layouts)."""
    out = Rendered("")
    sets: list[str] = []
    adds: list[str] = []
    removes: list[str] = []
    entry = _Entries(out, kind)
    for slot, key, number in change.add:
        name = entry.name(slot, key)
        adds.append(f"{name} {entry.value(name, n(number))}")
    for slot, key, value in change.put:
        name = entry.name(slot, key)
        sets.append(f"{name} = {entry.value(name, _slot_value(slot, value))}")
    removes += [entry.name(slot, key) for slot, key in change.drop]
    _fields(change, entry, sets, adds, removes)
    for slot in sorted(change.clear):
        assert slot is not Slot.REPEATS, "the loop breaker's keys are not per category"
        kept = change.kept(slot)
        prefix = kind.prefixes[slot][1]
        removes += [entry.cleared(prefix + c) for c in categories if c not in kept]
    removes += [entry.cleared(attribute) for attribute in removing]
    if calls is not None:
        out.names.update(CALL_NAMES)
        sets.append(calls)
    clauses = [
        f"{verb} {', '.join(parts)}"
        for verb, parts in (("SET", sets), ("ADD", adds), ("REMOVE", removes))
        if parts
    ]
    out.expression = " ".join(clauses)
    return out


def _fields(
    change: Change, entry: _Entries, sets: list[str], adds: list[str], removes: list[str]
) -> None:
    """The fields a change adds to, sets, removes, or starts where the record has none."""
    for name, number in change.bump:
        placeholder = entry.field(name)
        adds.append(f"{placeholder} {entry.value(placeholder, n(number))}")
    for name, value in change.set:
        placeholder = entry.field(name)
        sets.append(f"{placeholder} = {entry.value(placeholder, _field_value(name, value))}")
    removes += [entry.field(name) for name in sorted(change.unset)]
    if change.start is not None:
        entry.out.values[":vstart"] = n(change.start)
        set_fields = {name for name, _ in change.set}
        for name in (Field.STARTED, Field.LAST_SEEN):
            if name not in set_fields:
                placeholder = entry.field(name)
                sets.append(f"{placeholder} = if_not_exists({placeholder}, :vstart)")


def merged(*parts: Mapping[str, Any]) -> dict[str, Any]:
    """Names or values of an update and its condition, which must agree where they meet."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            assert out.setdefault(key, value) == value, f"{key} means two things"
    return out


class _Entries:
    """Placeholders for map entries: the first key of a map takes the map's fixed name
    (`#n`), any other a numbered one (`#n1`); cleared entries `#x0`, `#x1`, ..."""

    def __init__(self, out: Rendered, kind: Layout) -> None:
        self.out = out
        self._kind = kind
        self._by_attribute: dict[str, str] = {}
        self._per_slot: dict[Slot, int] = {}
        self._extra = 0

    def name(self, slot: Slot, key: str) -> str:
        base, prefix = self._kind.prefixes[slot]
        attribute = prefix + key
        found = self._by_attribute.get(attribute)
        if found is not None:
            return found
        taken = self._per_slot.get(slot, 0)
        self._per_slot[slot] = taken + 1
        name = base if taken == 0 else f"{base}{taken}"
        self._by_attribute[attribute] = name
        self.out.names[name] = attribute
        return name

    def field(self, name: Field) -> str:
        placeholder, attribute = self._kind.fields[name]
        self.out.names[placeholder] = attribute
        return placeholder

    def cleared(self, attribute: str) -> str:
        name = f"#x{self._extra}"
        self._extra += 1
        self.out.names[name] = attribute
        return name

    def value(self, name: str, value: Any) -> str:
        placeholder = ":v" + name[1:]
        self.out.values[placeholder] = value
        return placeholder


def _slot_value(slot: Slot, value: object) -> dict[str, Any]:
    if slot is Slot.GRANTS:
        assert isinstance(value, str)
        return s(value)
    if isinstance(value, CallLife):
        return s(encode_life(value))
    if isinstance(value, tuple):  # a refusal's mark: "<limit>|<check id>", "<window>|<limit>"
        return s(SEP.join(str(part) for part in value))
    assert isinstance(value, int)
    return n(value)


def _field_value(name: Field, value: object) -> dict[str, Any]:
    if name is Field.CLIENT:
        assert isinstance(value, ClientInfo)
        return encode_client(value)
    if name is Field.EXPIRES:
        assert isinstance(value, int)
        return n(ttl(value))
    if isinstance(value, int):
        return n(value)
    assert isinstance(value, str)
    return s(value)
